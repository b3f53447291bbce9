"""Wrong ONNX artifacts for the check's tests: a model's first output routed through extra nodes."""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper


def wrap_output(path: str, make: Callable[[str, str], list]) -> str:
    """The model at ``path`` with its first output computed by ``make(tmp, out)`` from what it was
    (``tmp``), saved beside it as ``*.bad.onnx``; returns that path."""
    model = onnx.load(path)
    graph = model.graph
    out = graph.output[0].name
    tmp = out + "_before"
    for node in graph.node:
        node.output[:] = [tmp if o == out else o for o in node.output]
    graph.node.extend(make(tmp, out))
    bad = path.replace(".onnx", ".bad.onnx")
    onnx.save(model, bad)
    return bad


def const(name: str, value) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name))


def nan_to_zero(tmp: str, out: str) -> list:
    return [helper.make_node("IsNaN", [tmp], [tmp + "_is"]), const(tmp + "_zero", np.float32(0)),
            helper.make_node("Where", [tmp + "_is", tmp + "_zero", tmp], [out])]


def minus_inf_to_nan(tmp: str, out: str) -> list:
    return [const(tmp + "_ninf", np.float32(-np.inf)), const(tmp + "_nan", np.float32(np.nan)),
            helper.make_node("Equal", [tmp, tmp + "_ninf"], [tmp + "_is"]),
            helper.make_node("Where", [tmp + "_is", tmp + "_nan", tmp], [out])]
