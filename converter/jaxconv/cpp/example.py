"""example.cc: a command-line program that runs the model on .npy files and writes .npy results."""

from __future__ import annotations

from jaxconv.cpp import dims as cdims
from jaxconv.cpp import template
from jaxconv.cpp.model import CppModel, CppTensor
from jaxconv.cpp.names import cpp_string


def _shape_repr(dims: tuple[int | str, ...]) -> str:
    inner = ", ".join(str(d) for d in dims)
    return f"({inner},)" if len(dims) == 1 else f"({inner})"


def usage(model: CppModel) -> str:
    opts = "[--model FILE.onnx] [--threads N] [--provider NAME]"
    opts += " [--dim NAME=SIZE]" if model.symbols else ""
    files = " ".join(f"{t.name}.npy" for t in model.inputs)
    return f"usage: {model.cls}_example {opts} --out DIR {files}".rstrip()


def render(model: CppModel) -> str:
    c = model.cls
    help_lines = [f"Runs {model.qualified} (JAX function {model.function}) with ONNX Runtime on .npy inputs "
                  f"and writes {', '.join(t.name + '.npy' for t in model.outputs)} into DIR.", "inputs:"]
    help_lines += [f"  {t.name}.npy: {t.doc} (npy dtype {t.type.descr})" for t in model.inputs]
    help_lines.append("--model: " + ("load this .onnx instead of the embedded model" if model.embed else
                                     f"the model to load (default: share/{c}/model.onnx of the install, "
                                     "else the generated project's model.onnx)"))
    help_lines.append("--threads N: intra-op threads (0: ONNX Runtime's default); --provider cuda|tensorrt")
    load: list[str] = []
    for i, t in enumerate(model.inputs):
        expected = cpp_string(_shape_repr(t.dims))
        pattern = ", ".join(
            f"{{-1, {cpp_string(str(d).strip())}}}" if cdims.is_symbol(d)
            else (f"{{{d}, nullptr}}" if isinstance(d, int) else "{-1, nullptr}")
            for d in t.dims)
        load.append(f"  jaxconv_npy::Array in{i} = load_input(files[{i}], {cpp_string(t.name)}, "
                    f"{cpp_string(t.type.descr)});")
        if t.dims:
            load.append(f"  const DimPattern pattern{i}[] = {{{pattern}}};")
            load.append(f"  match_shape(in{i}, {cpp_string(t.name)}, files[{i}], {expected}, pattern{i}, "
                        f"{len(t.dims)}, dims);")
        else:
            load.append(f"  match_shape(in{i}, {cpp_string(t.name)}, files[{i}], {expected}, nullptr, 0, "
                        "dims);")
    for s in model.symbols:
        load.append(f"  const int64_t {model.symbol_idents[s]} = dim_value(dims, {cpp_string(s)});")
    for i, t in enumerate(model.inputs):
        for k, d in enumerate(t.dims):
            if isinstance(d, str) and not cdims.is_symbol(d):
                load.append(f"  check_expr(in{i}, {cpp_string(t.name)}, files[{i}], {expected_of(t)}, {k}, "
                            f"{model.dim_expr(d)}, {cpp_string(d)});")
    if model.embed:
        make = (f"  {model.qualified} model = model_path.empty() ? {model.qualified}(options) "
                f": {model.qualified}(model_path, options);")
    else:
        make = (f"  if (model_path.empty()) model_path = default_model_path(argv[0]);\n"
                f"  {model.qualified} model(model_path, options);")
    set_inputs = "".join(f"  inputs.{t.ident} = {{data_of<{t.type.cpp}>(in{i}), "
                         f"count_of<{t.type.cpp}>(in{i})}};\n" for i, t in enumerate(model.inputs))
    set_inputs += "".join(f"  inputs.{v} = {v};\n" for v in model.symbol_idents.values())
    save = "".join(f"  save_output(out_dir, {cpp_string(t.name)}, {cpp_string(t.type.descr)}, "
                   f"result.{t.ident}.data, result.{t.ident}.shape);\n" for t in model.outputs)
    return template.render("example.cc.in", {
        "CLS": c, "QUALIFIED": model.qualified,
        "USAGE": cpp_string(usage(model)), "HELP": cpp_string("\n".join(help_lines) + "\n"),
        "NUM_INPUTS": str(len(model.inputs)),
        "SYMBOLS": ", ".join(cpp_string(s) for s in model.symbols),
        "INPUT_LIST": cpp_string(", ".join(t.name for t in model.inputs) or "none"),
        "LOAD_INPUTS": "\n".join(load) + ("\n" if load else ""),
        "MAKE_MODEL": make, "SET_INPUTS": set_inputs, "SAVE_OUTPUTS": save,
    })


def expected_of(t: CppTensor) -> str:
    return cpp_string(_shape_repr(t.dims))
