"""The matching the norm rules share (``layer_norm``, ``keras_norm``, ``rms_norm``): a mean over the
last axis, ``sqrt(v + eps)``, a constant along the last axis, a value read by given nodes alone."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _constants as constants
from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites import _regroup as rg

MIN_OPSET = 17  # LayerNormalization


def only_uses(value: ir.Value, *nodes: ir.Node) -> bool:
    """``value`` is read by ``nodes`` alone (each at least once) and is no graph output."""
    if value.is_graph_output():
        return False
    readers = {id(u.node) for u in value.uses() if m.is_live(u.node)}
    return readers == {id(n) for n in nodes}


def last_axis_mean(value: ir.Value | None, rank: int) -> tuple[ir.Value, list[ir.Node]] | None:
    """``(x, nodes)`` when ``value`` is the mean of ``x`` over the last of ``rank`` axes, keeping it:
    ``ReduceMean(x)``, or ``ReduceSum(x) / n`` with the zeros rule's ``Sum(s, +0.0)`` fix between, or a row
    of up to ``MAX_FUSED_ROW`` summed in blocks (``blocked_row_mean``); ``nodes`` from the one making
    ``value`` back to the reduction."""
    blocked = blocked_row_mean(value, rank)
    if blocked is not None:
        return blocked
    node = m.producer(value, "ReduceMean")
    nodes = [node]
    if node is None:
        div = m.producer(value, "Div")
        pair = m.binary(div, "Div")
        if div is None or pair is None:
            return None
        total, n = pair
        nodes = [div]
        fix = m.producer(total, "Sum")
        if fix is not None and len(fix.inputs) == 2 and m.is_scalar_const(fix.inputs[1], 0.0):
            nodes.append(fix)
            total = fix.inputs[0]
        node = m.producer(total, "ReduceSum")
        count = m.const(n)
        if node is None or count is None or count.size != 1:
            return None
        nodes.append(node)
        x = node.inputs[0]
        if x is None or x.shape is None or len(x.shape) != rank or x.shape[rank - 1] != float(count.reshape(())):
            return None
    if not m.attr(node, "keepdims", 1) or m.attr(node, "noop_with_empty_axes", 0):
        return None
    axes = m.reduce_axes(node)
    if axes is None or m.normalize_axes(axes, rank) != (rank - 1,):
        return None
    return node.inputs[0], nodes


# ORT's fused norm kernels sum a row in one pass: 9.2e-6 relative to float64 at 16384 columns of 0.1 (a sum's
# worst case; 4.5e-7 on normal rows), where the lowering's blocks (XLA's order) keep 1.3e-7; float32's
# tolerance is 1e-4. Longer rows keep the blocks.
MAX_FUSED_ROW = 16384


def blocked_row_mean(value: ir.Value | None, rank: int) -> tuple[ir.Value, list[ir.Node]] | None:
    """``(x, nodes)`` when ``value`` is the lowering's mean of ``x`` over its last axis of ``rank`` summed in
    blocks (``ops.reduce.pairwise_sum``: ``ReduceSum`` of ``Reshape(x, [..., blocks, SUM_BLOCK])``, the last
    block padded with zeros, then of the block sums, kept; times ``1 / n`` or over ``n``), rows of up to
    ``MAX_FUSED_ROW``; ``nodes`` from the one making ``value`` back to the Reshape (or the Pad)."""
    scaled = m.producer(value, "Mul", "Div")
    if scaled is None or len(scaled.inputs) != 2:
        return None
    total, factor = scaled.inputs
    if scaled.op_type == "Mul" and constants.evaluate(total) is not None:
        factor, total = total, factor
    outer = m.producer(total, "ReduceSum")
    inner = m.producer(outer.inputs[0], "ReduceSum") if outer is not None else None
    reshape = m.producer(inner.inputs[0], "Reshape") if inner is not None else None
    c = constants.evaluate(factor)  # jnp.var's count is an expression of constants, folded after the rules
    if reshape is None or c is None or c.size != 1 or not m.attr(outer, "keepdims", 1) or m.attr(inner, "keepdims", 1):
        return None
    x, pad = reshape.inputs[0], m.producer(reshape.inputs[0], "Pad")  # the last block padded with zeros
    if pad is not None and rg.summed_axes_after(pad, {rank - 1}) is None:
        return None
    padded = m.static_dims(x)
    if pad is not None:
        x = pad.inputs[0]
    dims, blocked = m.static_dims(x), m.static_dims(reshape.outputs[0])
    if x is None or dims is None or padded is None or blocked is None or len(dims) != rank or dims[-1] > MAX_FUSED_ROW \
            or blocked != [*dims[:-1], blocked[-2], blocked[-1]] or blocked[-2] * blocked[-1] != padded[-1]:
        return None
    n, k = dims[-1], float(c.reshape(()))
    if not (abs(k * n - 1) < 1e-6 if scaled.op_type == "Mul" else k == n):
        return None
    for node, ndim in ((inner, rank + 1), (outer, rank)):
        axes = m.reduce_axes(node)
        if axes is None or m.normalize_axes(axes, ndim) != (ndim - 1,) or m.attr(node, "noop_with_empty_axes", 0):
            return None
    nodes = [scaled, outer, inner, reshape] + ([pad] if pad is not None else [])
    if any(not only_uses(a.outputs[0], b) for a, b in steps(nodes)):
        return None
    return x, nodes


def steps(nodes: list[ir.Node]) -> list[tuple[ir.Node, ir.Node]]:
    """(producer, its one reader) along a mean's nodes, listed from the result back to the reduction."""
    return [(nodes[k + 1], nodes[k]) for k in range(len(nodes) - 1)]


def row_const(value: ir.Value | None, d: int) -> np.ndarray | None:
    """A float32 constant that broadcasts along the last axis only, as a 1-D array of ``d`` elements."""
    arr = m.folded(value)
    if arr is None or arr.dtype != np.float32 or arr.ndim == 0 or arr.shape[-1] != d \
            or any(n != 1 for n in arr.shape[:-1]):
        return None
    return arr.reshape(d)


def eps_add(sqrt: ir.Node) -> tuple[ir.Node, ir.Value, float] | None:
    """``(add, v, eps)`` for ``sqrt(v + eps)`` with a finite float32 ``eps >= 0``."""
    add = m.producer(sqrt.inputs[0], "Add")
    if add is None or len(add.inputs) != 2:
        return None
    for k in (0, 1):
        eps, var = m.const(add.inputs[1 - k]), add.inputs[k]
        if eps is not None and eps.size == 1 and eps.dtype == np.float32 and var is not None:
            value = float(eps.reshape(()))
            return (add, var, value) if np.isfinite(value) and value >= 0 else None
    return None


def any_mean(value: ir.Value | None, rank: int) -> tuple[ir.Value, list[ir.Node]] | None:
    """``last_axis_mean``, or ``ReduceSum(x) / (n - ddof)`` with a count that is an
    expression of constants (jnp.var's, folded only after the rules)."""
    found = last_axis_mean(value, rank)
    pair = m.binary(m.producer(value, "Div"), "Div")
    if found is not None or pair is None:
        return found
    node, count = m.producer(pair[0], "ReduceSum"), constants.evaluate(pair[1])
    x = node.inputs[0] if node is not None else None
    if x is None or count is None or count.size != 1 or x.shape is None or len(x.shape) != rank \
            or x.shape[rank - 1] != float(count.reshape(())) or not m.attr(node, "keepdims", 1) \
            or m.attr(node, "noop_with_empty_axes", 0):
        return None
    axes = m.reduce_axes(node)
    if axes is None or m.normalize_axes(axes, rank) != (rank - 1,):
        return None
    return x, [value.producer(), node]


def ddof_guard(value: ir.Value) -> ir.Node | None:
    """``Where(c, nan, v)`` making ``value`` with ``c`` false everywhere (jnp.var's guard for ``ddof``; the
    constant folding that drops it runs after the rules): the Where, whose ``v`` is ``value``'s content."""
    node = m.producer(value, "Where")
    if node is None or len(node.inputs) != 3 or node.inputs[2] is None or node.inputs[2].shape != value.shape:
        return None
    cond = constants.evaluate(node.inputs[0])
    if cond is None or cond.dtype != np.bool_ or cond.size == 0 or cond.any():
        return None
    return node


def reciprocal_of(sqrt: ir.Node) -> ir.Node | None:
    """``Reciprocal(s)`` or ``Div(1, s)``, the single reader of ``s`` (rsqrt as the lowering writes it)."""
    uses = m.live_uses(sqrt.outputs[0])
    if sqrt.outputs[0].is_graph_output() or len(uses) != 1:
        return None
    node = uses[0].node
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "Reciprocal":
        return node
    pair = m.binary(node, "Div")
    if pair is not None and pair[1] is sqrt.outputs[0] and m.is_scalar_const(pair[0], 1.0, rtol=0.0):
        return node
    return None
