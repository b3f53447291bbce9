"""A Sub of a constant inside a Conv's per-channel affine chain as an Add of its negation.

Inference batch norm after a Conv with a bias (Flax NNX/linen ``Conv`` then ``BatchNorm``) lowers to
``Conv -> Add(bias) -> Sub(mean) -> Mul(scale) -> Add(beta)``. ORT folds Adds and Muls of constants
into the Conv (and then fuses the ReLU), but not a Sub, so the whole chain runs elementwise outside
its blocked layout (a ReorderOutput and four passes over the activations). ``x - c`` and
``x + (-c)`` are the same IEEE operation, so the Sub becomes an Add: the numbers cannot change.
The layout rule does this for a Sub right after the Conv; this one follows the chain.
"""

from __future__ import annotations

import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m

_CHAIN = frozenset({"Add", "Mul", "Sub"})
MAX_DEPTH = 4


def rewrite(graph: ir.Graph) -> int:
    """Rewrite the Subs of constants that follow a Conv through an affine chain; returns how many."""
    count = 0
    for node in list(graph):
        if node.op_type != "Sub" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
            continue
        x, c = node.inputs
        if x is None or c is None or not _is_const(c) or _is_const(x) or not _after_conv(x):
            continue
        if not node.outputs[0].uses() and not node.outputs[0].is_graph_output():
            continue
        neg = ir.node("Neg", [c])
        m.replace(graph, node.outputs[0], [neg, ir.node("Add", [x, neg.outputs[0]])], node)
        count += 1
    return count


def _is_const(value: ir.Value | None) -> bool:
    return m.folded(value) is not None


def _after_conv(value: ir.Value) -> bool:
    """Whether ``value`` is a Conv's output through at most MAX_DEPTH Adds/Muls/Subs of constants."""
    for _ in range(MAX_DEPTH + 1):
        node = m.producer(value)
        if node is None or node.domain not in ("", "ai.onnx"):
            return False
        if node.op_type == "Conv":
            return True
        if node.op_type not in _CHAIN or len(node.inputs) != 2:
            return False
        a, b = node.inputs
        if _is_const(b) and not _is_const(a):
            value = a
        elif node.op_type != "Sub" and _is_const(a) and not _is_const(b):
            value = b
        else:
            return False
    return False
