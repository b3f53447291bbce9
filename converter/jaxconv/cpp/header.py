"""NAME.h: the typed C++ API of one model (standard library only; no ONNX Runtime headers)."""

from __future__ import annotations

from jaxconv.cpp import dims as cdims
from jaxconv.cpp import template
from jaxconv.cpp.model import CppModel
from jaxconv.cpp.names import cpp_string


def run_params(model: CppModel) -> str:
    """The positional run() parameters: one ``In<T>`` per input, then the symbolic dimensions."""
    args = [f"In<{t.type.cpp}> {t.ident}" for t in model.inputs]
    args += [f"int64_t {model.symbol_idents[s]}" for s in model.symbols]
    if len(args) <= 2:
        return ", ".join(args)
    return "\n" + ",\n".join(f"      {a}" for a in args)


def shape_params(model: CppModel) -> str:
    """Parameters of the ``*_shape()`` functions: every symbolic dimension."""
    return ", ".join(f"int64_t {model.symbol_idents[s]}" for s in model.symbols)


def namespace_open(model: CppModel) -> str:
    return f"namespace {'::'.join(model.namespaces)} {{\n\n" if model.namespaces else ""


def namespace_close(model: CppModel) -> str:
    return f"\n}}  // namespace {'::'.join(model.namespaces)}\n" if model.namespaces else ""


def _strings(items: list[str]) -> str:
    return ", ".join(cpp_string(i) for i in items)


def _constructors(model: CppModel) -> str:
    c = model.cls
    lines = []
    if model.embed:
        lines += [
            "  /// Loads the model embedded in this library (default Options).",
            f"  {c}();",
            f"  explicit {c}(const Options& options);",
            "  /// Loads another copy of the model from an .onnx file instead.",
        ]
    else:
        lines.append(f"  /// Loads the model from its .onnx file (model.onnx; installed as "
                     f"share/{c}/model.onnx).")
    lines += [f"  explicit {c}(const std::string& model_path);",
              f"  {c}(const std::string& model_path, const Options& options);"]
    return "\n".join(lines) + "\n"


def render(model: CppModel) -> str:
    c = model.cls
    input_doc = "".join(f"///   {t.ident}: {t.doc}   [{t.path}]\n" for t in model.inputs)
    if model.symbols:
        input_doc += ("/// Symbolic dimensions (trailing int64_t arguments of run): "
                      + ", ".join(model.symbol_idents[s] for s in model.symbols) + ".\n")
    members = "".join(f"    In<{t.type.cpp}> {t.ident};  ///< {t.doc}   [{t.path}]\n" for t in model.inputs)
    members += "".join(f"    int64_t {model.symbol_idents[s]} = -1;  ///< symbolic dimension {s} "
                       "(must be set)\n" for s in model.symbols)
    metadata = []
    for t in model.outputs:
        dims = ", ".join(str(d) if isinstance(d, int) else "-1" for d in t.dims)
        metadata.append(f"  /// {t.ident}: {t.doc}   [{t.path}]")
        array = f"std::array<int64_t, {len(t.dims)}>"
        metadata.append(f"  static constexpr {array} {t.ident}_dims = {{{{{dims}}}}};")
        if t.exprs is not None:
            metadata.append(f"  static {array} {t.ident}_shape({shape_params(model)});")
    return template.render("model.h.in", {
        "QUALIFIED": model.qualified, "CLS": c, "FUNCTION": model.function, "MACRO": model.macro,
        "EXTRA_INCLUDES": "#include <complex>\n" if model.complex else "",
        "NS_OPEN": namespace_open(model), "NS_CLOSE": namespace_close(model),
        "NUM_INPUTS": str(len(model.inputs)), "NUM_OUTPUTS": str(len(model.outputs)),
        "INPUT_DOC": input_doc,
        "INPUT_MEMBERS": members,
        "OUTPUT_MEMBERS": "".join(f"    Tensor<{t.type.cpp}> {t.ident};  ///< {t.doc}   [{t.path}]\n"
                                  for t in model.outputs),
        "BUFFER_MEMBERS": "".join(f"    Out<{t.type.cpp}> {t.ident};  ///< {t.doc}\n" for t in model.outputs),
        "INPUT_NAMES": _strings([t.name for t in model.inputs]),
        "OUTPUT_NAMES": _strings([t.name for t in model.outputs]),
        "OUTPUT_SHAPE_TEXT": _strings([cdims.shape_text(t.dims) for t in model.outputs]),
        "OUTPUT_METADATA": "\n".join(metadata) + "\n",
        "CONSTRUCTORS": _constructors(model),
        "RUN_PARAMS": run_params(model),
        "DEFAULT_THREADS": str(model.threads),
        "THREADS_DOC": _threads_doc(model.threads),
        "SPIN_DURING_RUN": "true" if model.spin_during_run else "false",
    })


def _threads_doc(threads: int) -> str:
    """Why ``Options::intra_op_threads`` defaults to ``threads`` (``project.recorded_threads``)."""
    if threads == 0:
        return "0: ONNX Runtime's default, one per core (the model records no count: its products gain from every core)"
    return (f"{threads}: the count the model records (jaxconv.intra_op_threads: a second thread costs "
            "its kernels more than it saves); 0: ONNX Runtime's default, one per core")
