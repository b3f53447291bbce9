"""An integer range check ``lo <= x & x <= hi`` as ``Clip(x, lo, hi) == x``: two nodes instead of three.

``jnp.take`` (``nn.Embed``) tests its wrapped indices this way before filling out-of-range rows.
For integers both forms are true exactly when ``lo <= x <= hi`` (with ``lo <= hi``), so the
boolean result is the same.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m

_INTEGERS = frozenset({ir.DataType.INT32, ir.DataType.INT64})


def rewrite(graph: ir.Graph) -> int:
    """Turn ``And(x >= lo, x <= hi)`` in ``graph`` into ``Equal(Clip(x, lo, hi), x)``; returns how many."""
    return sum(_fold(graph, node) for node in m.each_node(graph, "And"))


def _bound(node: ir.Node | None, op_type: str) -> tuple[ir.Value, np.ndarray] | None:
    """(x, bound) of ``x >= bound`` / ``x <= bound`` with a one-element integer constant bound."""
    if node is None or node.domain not in ("", "ai.onnx") or node.op_type != op_type:
        return None
    if len(node.outputs[0].uses()) != 1 or node.outputs[0].is_graph_output():
        return None
    x, c = node.inputs
    arr = m.folded(c)
    if x is None or arr is None or arr.size != 1 or x.dtype not in _INTEGERS:
        return None
    if x.shape is None or node.outputs[0].shape is None or x.shape != node.outputs[0].shape:
        return None  # the bound must not broadcast x to a larger shape
    return x, arr.reshape(())


def _fold(graph: ir.Graph, node: ir.Node) -> int:
    a, b = (m.producer(v) for v in node.inputs)
    for ge, le in ((a, b), (b, a)):
        low, high = _bound(ge, "GreaterOrEqual"), _bound(le, "LessOrEqual")
        if low is None or high is None or low[0] is not high[0] or low[1] > high[1]:
            continue
        x = low[0]
        dtype = x.dtype.numpy()
        lo = ir.node("Constant", [], attributes={"value": ir.tensor(np.asarray(low[1], dtype))})
        hi = ir.node("Constant", [], attributes={"value": ir.tensor(np.asarray(high[1], dtype))})
        clip = ir.node("Clip", [x, lo.outputs[0], hi.outputs[0]])
        equal = ir.node("Equal", [clip.outputs[0], x])
        m.replace(graph, node.outputs[0], [lo, hi, clip, equal], node)
        return 1
    return 0
