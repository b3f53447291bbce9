"""Constants broadcast to full size shrunk back to the shape that carries their values.

Constant folding turns ``Expand(bias, shape)`` into a full-size initializer (a [32, 1024] copy of a
[1024] bias); ORT then reads that whole array on every run, and Gemm/Conv cannot take it as a bias.
A constant input of an elementwise op is cut to size 1 along every axis where its values repeat,
when the op's other input already has the full size there, so broadcasting gives the same result.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.rewrites import _match as m

_ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "Equal", "Less", "Greater",
                          "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "BitwiseAnd", "BitwiseOr"})
MIN_ELEMENTS = 16
# ONNX Runtime's CPU Expand has no kernel for these: an Expand must not be moved onto them.
_NO_ORT_EXPAND = frozenset(ir.DataType(dt.onnx_type(d)) for d in dt.ALL - dt.kernels("Expand"))  # bfloat16


def _shrunk(arr: np.ndarray, other: ir.Value) -> np.ndarray | None:
    """``arr`` cut down along repeated axes the other operand covers, or None when nothing changes."""
    if other.shape is None or len(other.shape) < arr.ndim:
        return None
    dims = list(other.shape)[len(other.shape) - arr.ndim:]
    out = arr
    for axis, d in enumerate(dims):
        if out.shape[axis] == 1 or not (isinstance(d, int) and d == out.shape[axis]):
            continue
        first = np.take(out, [0], axis=axis)
        if np.array_equal(out, np.broadcast_to(first, out.shape), equal_nan=out.dtype.kind in "fc"):
            out = first
    while out.ndim and out.shape[0] == 1:  # leading ones add nothing to broadcasting
        out = out[0]
    return None if out.size == arr.size else np.ascontiguousarray(out)


def _covers(other: ir.Value, value: ir.Value) -> bool:
    """True when ``other``'s shape already has every dimension of ``value``'s (so broadcasting ``value`` adds nothing)."""
    if other.shape is None or value.shape is None or len(other.shape) < len(value.shape):
        return False
    dims = list(other.shape)[len(other.shape) - len(value.shape):]
    return all(v == 1 or (isinstance(v, int) and isinstance(d, int) and v == d) or
               (isinstance(v, ir.SymbolicDim) and v.value is not None and v == d) for v, d in zip(value.shape, dims))


def _drop_expand(node: ir.Node, k: int) -> bool:
    """Read an Expand's input directly when another operand already has the expanded shape."""
    value = node.inputs[k]
    expand = m.producer(value, "Expand")
    if expand is None or value.is_graph_output():
        return False
    source = expand.inputs[0]
    if source is None or m.rank(source) is None or m.rank(source) > (m.rank(value) or 0):
        return False
    if not any(j != k and other is not None and _covers(other, value) for j, other in enumerate(node.inputs)):
        return False
    node.replace_input_with(k, source)
    return True


_POINTWISE = _ELEMENTWISE | frozenset({"Where", "Sqrt", "Neg", "Exp", "Log", "Tanh", "Abs", "Reciprocal", "Cast", "Not",
                                       "Erf", "Sin", "Cos", "Floor", "Ceil", "IsNaN", "IsInf", "Sign", "Round"})


def _sink_shared_expand(graph: ir.Graph, node: ir.Node) -> bool:
    """``op(Expand(a, s), Expand(b, s))`` -> ``Expand(op(a, b), s)``: the op runs on the small operands.

    Broadcasting commutes with a pointwise op, so the result is the same, and the op touches only
    the small operands.
    """
    if node.domain != "" or node.op_type not in _POINTWISE or len(node.outputs) != 1:
        return False
    if node.outputs[0].dtype in _NO_ORT_EXPAND:
        return False
    expands = [m.producer(v, "Expand") if v is not None else None for v in node.inputs]
    if not expands or any(e is None for e in expands):
        return False
    shape = expands[0].inputs[1]
    if any(not m.same_value(e.inputs[1], shape) for e in expands) or any(e.inputs[0] is None for e in expands):
        return False
    small = ir.node(node.op_type, [e.inputs[0] for e in expands], {k: a for k, a in node.attributes.items()})
    grow = ir.node("Expand", [small.outputs[0], shape])
    out = node.outputs[0]
    m.replace(graph, out, [small, grow], node)
    return True


def _fresh_name(graph: ir.Graph, name: str) -> str:
    """``name``, or ``name_K`` when the graph already has an initializer of that name."""
    taken = graph.initializers
    if name not in taken:
        return name
    k = 1
    while f"{name}_{k}" in taken:
        k += 1
    return f"{name}_{k}"


def rewrite(graph: ir.Graph) -> int:
    """Shrink broadcast constants feeding elementwise ops in ``graph``; returns how many."""
    count = 0
    cache: dict[tuple, ir.Value] = {}
    for node in list(graph):
        if _sink_shared_expand(graph, node):
            count += 1
            continue
        if node.domain == "" and node.op_type == "Where" and len(node.inputs) == 3:
            count += sum(_drop_expand(node, k) for k in range(3))
            continue
        if node.domain != "" or node.op_type not in _ELEMENTWISE or len(node.inputs) != 2:
            continue
        for k in (0, 1):
            value, other = node.inputs[k], node.inputs[1 - k]
            if value is None or other is None or value.is_graph_input():
                continue
            if _drop_expand(node, k):
                count += 1
                continue
            arr = m.const(value)
            if arr is None or arr.size < MIN_ELEMENTS or m.const(other) is not None:
                continue
            small = _shrunk(arr, other)
            if small is None:
                continue
            key = (small.dtype.str, small.shape, small.tobytes())
            new = cache.get(key)
            if new is None:
                new = ir.Value(name=_fresh_name(graph, f"{value.name}_unbroadcast"), const_value=ir.tensor(small))
                new.type = value.type
                new.shape = ir.Shape(small.shape)
                graph.register_initializer(new)
                cache[key] = new
            node.replace_input_with(k, new)
            count += 1
    return count
