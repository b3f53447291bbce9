"""NAME.cc: the model's C++ API implemented on the ONNX Runtime C++ API (with templates/jaxconv_ort.h)."""

from __future__ import annotations

from jaxconv.cpp import template
from jaxconv.cpp.header import namespace_close, namespace_open, run_params
from jaxconv.cpp.model import CppModel, CppTensor
from jaxconv.cpp.names import cpp_string


def data_symbols(model: CppModel) -> tuple[str, str]:
    """Names of the embedded byte array and its size (hidden symbols of the library)."""
    return f"{model.c_prefix}_model_data", f"{model.c_prefix}_model_size"


def _spec(t: CppTensor, array: str) -> str:
    dims = array if t.onnx_dims else "nullptr"
    return (f"{{{cpp_string(t.name)}, {t.type.onnx}, {dims}, {len(t.onnx_dims)}, "
            f"{cpp_string(t.onnx_doc)}}}")


def _spec_block(model: CppModel) -> tuple[str, str, str]:
    arrays, ins, outs = [], [], []
    for kind, tensors, specs in (("In", model.inputs, ins), ("Out", model.outputs, outs)):
        for i, t in enumerate(tensors):
            name = f"k{kind}{i}Dims"
            if t.onnx_dims:
                dims = ", ".join(str(d) if isinstance(d, int) else "-1" for d in t.onnx_dims)
                arrays.append(f"const int64_t {name}[] = {{{dims}}};\n")
            specs.append(_spec(t, name))
    empty = '{nullptr, ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED, nullptr, 0, ""}'
    sep = ",\n    "
    return ("".join(arrays), "\n    " + sep.join(ins or [empty]), "\n    " + sep.join(outs))


def _constructors(model: CppModel) -> str:
    c = model.cls
    out = []
    if model.embed:
        data, size = data_symbols(model)
        out += [f"{c}::{c}() : {c}(Options()) {{}}", "",
                f"{c}::{c}(const Options& options) : impl_(new Impl) {{",
                f'  impl_->load("the embedded model", nullptr, {data}, {size}, options);', "}", ""]
    out += [f"{c}::{c}(const std::string& model_path) : {c}(model_path, Options()) {{}}", "",
            f"{c}::{c}(const std::string& model_path, const Options& options) : impl_(new Impl) {{",
            "  impl_->load(model_path, model_path.c_str(), nullptr, 0, options);", "}", ""]
    return "\n".join(out) + "\n"


def _shape_functions(model: CppModel) -> str:
    out = []
    for t in model.outputs:
        if t.exprs is not None:
            params = ", ".join(f"[[maybe_unused]] int64_t {model.symbol_idents[s]}" for s in model.symbols)
            out += [f"std::array<int64_t, {len(t.dims)}> {model.cls}::{t.ident}_shape({params}) {{",
                    f"  return {{{{{', '.join(t.exprs)}}}}};", "}", ""]
    return "\n".join(out) + ("\n" if out else "")


def _bind(model: CppModel) -> str:
    out = []
    for i, t in enumerate(model.inputs):
        indent = " " * 44
        out += [f"  jc_in.push_back(jaxconv_ort::input_tensor(impl_->memory, kClass, "
                f"{cpp_string('input ' + t.name)}, {cpp_string(t.doc)},",
                f"{indent}inputs.{t.ident}.data(), inputs.{t.ident}.size(), jc_in_shapes[{i}], "
                f"sizeof({t.type.cpp}),",
                f"{indent}{str(t.type.pairs).lower()}, {t.type.onnx}));"]
    for i, t in enumerate(model.outputs):
        if t.exprs is None:
            out.append("  jc_out.emplace_back(nullptr);  // shape known after the run")
            continue
        what = cpp_string("output " + t.name)
        out += [
            "  {",
            f"    size_t n = jaxconv_ort::element_count(kClass, {what}, nullptr, jc_out_shapes[{i}], "
            f"sizeof({t.type.cpp}));",
            f"    {t.type.cpp}* p = nullptr;",
            "    if (buffers != nullptr) {",
            f"      jaxconv_ort::check_size(kClass, {cpp_string('output buffer ' + t.ident)}, "
            f"{cpp_string(t.doc)},\n                              "
            f"jc_out_shapes[{i}], n, buffers->{t.ident}.size(), buffers->{t.ident}.data());",
            f"      p = buffers->{t.ident}.data();",
            "    } else {",
            f"      outputs->{t.ident}.shape = jc_out_shapes[{i}];",
            f"      outputs->{t.ident}.data.resize(n);",
            f"      p = outputs->{t.ident}.data.data();",
            "    }",
            f"    jc_out.push_back(jaxconv_ort::tensor(impl_->memory, p, n, sizeof({t.type.cpp}), "
            f"jaxconv_ort::onnx_shape(jc_out_shapes[{i}], {str(t.type.pairs).lower()}), {t.type.onnx}));",
            "  }",
        ]
    return "\n".join(out) + ("\n" if out else "")


def _fetch(model: CppModel) -> str:
    out = []
    for i, t in enumerate(model.outputs):
        if t.exprs is not None:
            continue
        out += [
            "  {",
            f"    std::vector<int64_t> shape = jaxconv_ort::result_shape(jc_out[{i}], "
            f"{str(t.type.pairs).lower()});",
            f"    size_t n = jaxconv_ort::element_count(kClass, {cpp_string('output ' + t.name)}, nullptr, "
            f"shape, sizeof({t.type.cpp}));",
            f"    {t.type.cpp}* p = nullptr;",
            "    if (buffers != nullptr) {",
            f"      jaxconv_ort::check_size(kClass, {cpp_string('output buffer ' + t.ident)}, "
            f"{cpp_string(t.doc)},\n                              "
            f"shape, n, buffers->{t.ident}.size(), buffers->{t.ident}.data());",
            f"      p = buffers->{t.ident}.data();",
            "    } else {",
            f"      outputs->{t.ident}.shape = shape;",
            f"      outputs->{t.ident}.data.resize(n);",
            f"      p = outputs->{t.ident}.data.data();",
            "    }",
            f"    if (n != 0) std::memcpy(p, jc_out[{i}].GetTensorRawData(), n * sizeof({t.type.cpp}));",
            "  }",
        ]
    return "\n".join(out) + ("\n" if out else "")


def render(model: CppModel) -> str:
    c = model.cls
    data, size = data_symbols(model)
    spec_dims, in_specs, out_specs = _spec_block(model)
    check_dims = ""
    for s in model.symbols:
        v = model.symbol_idents[s]
        check_dims += (f"  const int64_t {v} = inputs.{v};\n  if ({v} < 0)\n"
                       f"    throw std::invalid_argument(kClass + "
                       f"{cpp_string(': dimension ' + s + ' is ')} + "
                       f"std::to_string({v}) + {cpp_string(', not a size (set Inputs::' + v + ')')});\n")
    dims_text = " + \", \" + ".join(f'"{s}=" + std::to_string({model.symbol_idents[s]})'
                                    for s in model.symbols)
    positional = "".join(f"  inputs.{t.ident} = {t.ident};\n" for t in model.inputs)
    positional += "".join(f"  inputs.{i} = {i};\n" for i in model.symbol_idents.values())
    shape_list = ", ".join(f"std::vector<int64_t>{{{', '.join(t.exprs or ())}}}" for t in model.inputs)
    out_shapes = ", ".join(f"std::vector<int64_t>{{{', '.join(t.exprs)}}}" if t.exprs is not None
                           else "std::vector<int64_t>{}" for t in model.outputs)
    return template.render("model.cc.in", {
        "QUALIFIED": model.qualified, "CLS": c,
        "EMBED_DECLS": (f"extern const unsigned char {data}[];\nextern const size_t {size};\n\n"
                        if model.embed else ""),
        "INPUT_NAMES_OR_NULL": ", ".join(cpp_string(t.name) for t in model.inputs) or "nullptr",
        "OUTPUT_NAMES": ", ".join(cpp_string(t.name) for t in model.outputs),
        "SPEC_DIMS": spec_dims, "INPUT_SPECS": in_specs, "OUTPUT_SPECS": out_specs,
        "NUM_INPUTS": str(len(model.inputs)), "NUM_OUTPUTS": str(len(model.outputs)),
        "NS_OPEN": namespace_open(model), "NS_CLOSE": namespace_close(model),
        "CONSTRUCTORS": _constructors(model), "SHAPE_FUNCTIONS": _shape_functions(model),
        "RUN_PARAMS": run_params(model), "POSITIONAL_TO_INPUTS": positional,
        "CHECK_DIMS": check_dims, "IN_SHAPES": shape_list, "OUT_SHAPES": out_shapes,
        "DIMS_TEXT": dims_text or 'std::string("(none)")',
        "BIND": _bind(model), "FETCH": _fetch(model),
    })
