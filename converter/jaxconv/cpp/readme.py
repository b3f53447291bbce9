"""README.md of the generated project: how to build, install and call the model."""

from __future__ import annotations

from jaxconv.cpp import template
from jaxconv.cpp.example import usage
from jaxconv.cpp.model import CppModel


def render(model: CppModel) -> str:
    c = model.cls
    ort = "ONNX Runtime's `libonnxruntime.so.1`"
    ship = (f"`lib{c}.so` (the model is inside it), `{c}.h` and {ort}" if model.embed
            else f"`lib{c}.so`, `{c}.h`, `model.onnx` and {ort}")
    return template.render("README.md.in", {
        "QUALIFIED": model.qualified, "FUNCTION": model.function, "CLS": c, "SHIP": ship,
        "INPUT_FILES": " ".join(t.name + ".npy" for t in model.inputs),
        "SHARE_NOTE": "" if model.embed else f", `share/{c}/model.onnx`",
        "INPUT_ROWS": "\n".join(f"| `{t.ident}` | `{t.doc}` | `{t.path}` |" for t in model.inputs)
        or "| (none) | | |",
        "OUTPUT_ROWS": "\n".join(f"| `{t.ident}` | `{t.doc}` | `{t.path}` |" for t in model.outputs),
        "DIMS": ", ".join(f"`{model.symbol_idents[s]}`" for s in model.symbols) or "none",
        "CTOR_ARGS": "" if model.embed else '("model.onnx")',
        "USAGE": usage(model),
    })
