"""NAME_c.h/NAME_c.cc (``--c-api``): an ``extern "C"`` API over the C++ class, for C, Rust and Go callers."""

from __future__ import annotations

from jaxconv.cpp import template
from jaxconv.cpp.model import CppModel, CppTensor

_COMPONENT = {"complex64": "float", "complex128": "double"}


def _scalar(t: CppTensor) -> str:
    return _COMPONENT.get(t.type.dtype, t.type.cpp)


def _run_params(model: CppModel) -> str:
    params = []
    for t in model.inputs:
        params += [f"const {_scalar(t)}* {t.ident}", f"size_t {t.ident}_count"]
    params += [f"int64_t {model.symbol_idents[s]}" for s in model.symbols]
    for t in model.outputs:
        params += [f"{_scalar(t)}* {t.ident}", f"size_t {t.ident}_count"]
    params += ["char* err", "size_t err_size"]
    return ",\n".join(f"    {p}" for p in params)


def _shape_params(model: CppModel) -> str:
    """Parameters of the C ``*_shape`` functions: the symbolic dimensions, then the shape to fill."""
    return ", ".join([f"int64_t {model.symbol_idents[s]}" for s in model.symbols] + ["int64_t* shape"])


def _values(model: CppModel) -> dict[str, str]:
    return {"QUALIFIED": model.qualified, "FUNCTION": model.function, "CLS": model.cls, "MACRO": model.macro,
            "PREFIX": model.c_prefix, "RUN_PARAMS": _run_params(model)}


def render_header(model: CppModel) -> str:
    decls = []
    for t in model.outputs:
        if t.exprs is not None:
            decls.append(f"/* Shape of {t.ident} ({t.doc}): writes {len(t.dims)} sizes to shape; "
                         "returns 0, or 1 when a dimension overflows. */\n"
                         f"{model.macro}_C_API int {model.c_prefix}_{t.ident}_shape({_shape_params(model)});")
    return template.render("c_api.h.in", {
        **_values(model), "SHAPE_DECLS": "\n" + "\n".join(decls) + "\n" if decls else "",
        "CREATE_NULL_DOC": "the embedded model" if model.embed else "not allowed",
    })


def render_source(model: CppModel) -> str:
    q = model.qualified
    if model.embed:
        create = (f"    if (model_path == nullptr) return new {model.c_prefix}_t{{{q}(options)}};\n"
                  f"    return new {model.c_prefix}_t{{{q}(model_path, options)}};")
    else:
        create = (f'    if (model_path == nullptr) throw std::invalid_argument("{q}: model_path is NULL");\n'
                  f"    return new {model.c_prefix}_t{{{q}(model_path, options)}};")
    body = []
    for t in model.inputs:
        body.append(f"    inputs.{t.ident} = in_view<{t.type.cpp}>({t.ident}, {t.ident}_count);")
    body += [f"    inputs.{v} = {v};" for v in model.symbol_idents.values()]
    for t in model.outputs:
        body.append(f"    buffers.{t.ident} = out_view<{t.type.cpp}>({t.ident}, {t.ident}_count);")
    defs = []
    for t in model.outputs:
        if t.exprs is not None:
            args = ", ".join(model.symbol_idents[s] for s in model.symbols)
            defs += [f"int {model.c_prefix}_{t.ident}_shape({_shape_params(model)}) {{",
                     "  try {",
                     f"    auto s = {q}::{t.ident}_shape({args});",
                     "    for (size_t i = 0; i < s.size(); ++i) shape[i] = s[i];",
                     "    return 0;",
                     "  } catch (const std::exception&) {",
                     "    return 1;",
                     "  }",
                     "}", ""]
    values = {k: v for k, v in _values(model).items() if k not in ("FUNCTION", "MACRO")}
    return template.render("c_api.cc.in", {
        **values, "CREATE_BODY": create, "RUN_BODY": "\n".join(body) + "\n",
        "SHAPE_DEFS": "\n" + "\n".join(defs) if defs else "",
    })
