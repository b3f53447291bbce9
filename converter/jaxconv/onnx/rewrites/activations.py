"""Activation forms: jax.nn.gelu (tanh approximation) as Gelu, ``max(x, 0)`` as Relu.

Gelu (opset 20) with ``approximate="tanh"`` computes jax's formula
``x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))``. Relu lets ORT fuse it into the Conv or
Gemm before it. NaN passes through Relu as through jax's max, but Relu(-0.0) is -0.0 where jax
gives +0.0 (and ORT removes an ``Add(+0.0)`` after it), so the max becomes Relu only where every
consumer is blind to the sign of zero: a MatMul, Gemm, Conv or sum, possibly through reshapes.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_COMMUTATIVE = ("Mul", "Add")


def _split_const(node: ir.Node | None, op_type: str, value: float, rtol: float = 1e-6) -> ir.Value | None:
    """For ``node = op(c, y)`` or ``op(y, c)`` with constant ``c == value``: ``y``; else None."""
    pair = m.binary(node, op_type)
    if pair is None:
        return None
    a, b = pair
    if m.is_scalar_const(b, value, rtol):
        return a
    if op_type in _COMMUTATIVE and m.is_scalar_const(a, value, rtol):
        return b
    return None


def _is_cube(value: ir.Value, x: ir.Value) -> bool:
    node = m.producer(value)
    if node is None:
        return False
    if node.op_type == "Pow":
        return node.inputs[0] is x and m.is_scalar_const(node.inputs[1], 3.0)
    pair = m.binary(node, "Mul")
    if pair is None:
        return False
    for a, b in (pair, pair[::-1]):
        if a is x:
            sq = m.binary(m.producer(b), "Mul")
            if sq is not None and sq[0] is x and sq[1] is x:
                return True
    return False


def _gelu_input(tanh: ir.Node) -> ir.Value | None:
    """x when ``tanh``'s argument is ``sqrt(2/pi) * (x + 0.044715 * x^3)``."""
    inner = _split_const(m.producer(tanh.inputs[0]), "Mul", _SQRT_2_OVER_PI, 1e-5)
    pair = m.binary(m.producer(inner), "Add") if inner is not None else None
    if pair is None:
        return None
    for x, rest in (pair, pair[::-1]):
        cube = _split_const(m.producer(rest), "Mul", 0.044715, 1e-5)
        if cube is not None and _is_cube(cube, x):
            return x
    return None


def _rewrite_gelu(graph: ir.Graph, tanh: ir.Node) -> bool:
    x = _gelu_input(tanh)
    # ORT's Gelu for double is only float32-accurate: float64 keeps the Tanh formula
    if x is None or x.dtype == ir.DataType.DOUBLE or len(tanh.outputs[0].uses()) != 1:
        return False
    add = tanh.outputs[0].uses()[0].node
    if _split_const(add, "Add", 1.0) is not tanh.outputs[0] or len(add.outputs[0].uses()) != 1:
        return False
    # x * (0.5 * (1 + t))   or   (0.5 * x) * (1 + t)   or   x * 0.5 * (1 + t) in any order
    user = add.outputs[0].uses()[0].node
    half = _split_const(user, "Mul", 0.5)
    if half is add.outputs[0]:
        if len(user.outputs[0].uses()) != 1:
            return False
        last = user.outputs[0].uses()[0].node
        if m.binary(last, "Mul") is None or m.other_input(last, user.outputs[0]) is not x:
            return False
    else:
        pair = m.binary(user, "Mul")
        if pair is None:
            return False
        other = m.other_input(user, add.outputs[0])
        if _split_const(m.producer(other), "Mul", 0.5) is not x:
            return False
        last = user
    m.replace(graph, last.outputs[0], ir.node("Gelu", [x], {"approximate": "tanh"}), last)
    return True


def _rewrite_relu(graph: ir.Graph, node: ir.Node) -> bool:
    pair = m.binary(node, "Max")
    if pair is None:
        return False
    for x, zero in (pair, pair[::-1]):
        arr = m.repeated_const(zero)
        if arr is None or arr.dtype not in (np.float32, np.float64) or not np.all(arr == 0) or np.any(np.signbit(arr)) \
                or m.const(x) is not None:
            continue
        shape = tuple(zero.shape) if zero.shape is not None and zero.shape.is_static() else m.const(zero)
        if shape is None or not _broadcasts_into(tuple(shape) if not hasattr(shape, "shape") else shape.shape, x):
            continue
        if not _zero_sign_unseen(node.outputs[0]):
            return False
        m.replace(graph, node.outputs[0], ir.node("Relu", [x]), node)
        return True
    return False


# consumers whose results do not depend on the sign of a zero input (sums start from +0.0)
_SIGN_BLIND = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose", "ReduceSum", "ReduceMean"})
_PASS_THROUGH = frozenset({"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})


def _zero_sign_unseen(value: ir.Value, depth: int = 0) -> bool:
    """True when no consumer of ``value`` can tell -0.0 from +0.0.

    Relu(-0.0) is -0.0 where jax's max gives +0.0, and ORT drops an ``Add(+0.0)`` after it as a
    no-op, so Relu only replaces the max where the sign of a zero cannot reach an output.
    """
    if value.is_graph_output() or depth > 8 or not value.uses():
        return False
    for use in value.uses():
        node = use.node
        if node.domain != "":
            return False
        if node.op_type in _SIGN_BLIND:
            continue
        if node.op_type == "Where" and m.through_zero_sign_fix(node.outputs[0]) is value:
            continue  # the lowering's own -0 -> +0 fix
        if node.op_type in _PASS_THROUGH and use.idx == 0:
            if not _zero_sign_unseen(node.outputs[0], depth + 1):
                return False
            continue
        if node.op_type == "Add" and _positive_zero(m.other_input(node, value)):
            if not _zero_sign_unseen(node.outputs[0], depth + 1):
                return False
            continue
        return False
    return True


def _positive_zero(value: ir.Value | None) -> bool:
    arr = m.const(value)
    return arr is not None and arr.dtype.kind == "f" and bool(np.all(arr == 0)) and not np.any(np.signbit(arr))


def _broadcasts_into(shape: tuple[int, ...], x: ir.Value) -> bool:
    """True when a constant of ``shape`` broadcasts into ``x`` without growing it."""
    if all(d == 1 for d in shape) and (m.rank(x) is not None and len(shape) <= m.rank(x)):
        return True
    if x.shape is None or len(shape) > len(x.shape):
        return False
    dims = list(x.shape)[len(x.shape) - len(shape):]
    return all(c == 1 or (isinstance(d, int) and d == c) for c, d in zip(shape, dims))


def _drop_zero_sign_fix(graph: ir.Graph, node: ir.Node) -> bool:
    """``Where(Equal(v, 0), +0.0, v)`` (turning -0.0 into +0.0) is ``v`` where no consumer sees a zero's sign."""
    if node.op_type != "Where" or len(node.inputs) != 3:
        return False
    out = node.outputs[0]
    v = m.through_zero_sign_fix(out)
    if v is out:
        return False
    if _zero_sign_unseen(out):
        out.replace_all_uses_with(v)
        return True
    relu = m.producer(v, "Relu")
    zero = node.inputs[1]
    if relu is None or m.const(zero) is None or m.const(zero).size != 1:
        return False
    # after a Relu (values >= 0, -0 or NaN) Abs gives +0 for -0 and keeps NaN: one pass, not two (ORT's
    # Max(v, +0) is no fix: its scalar loop over the last len % 4 elements returns -0)
    m.replace(graph, out, ir.node("Abs", [v]), node)
    return True


def rewrite(graph: ir.Graph, opset: int) -> int:
    """Replace gelu (opset >= 20) and relu patterns in ``graph``; returns how many."""
    count = 0
    for node in list(graph):
        if node.graph is None or node.domain != "":
            continue
        if node.op_type == "Where":
            count += _drop_zero_sign_fix(graph, node)
            continue
        if node.op_type == "Tanh" and opset >= 20:
            count += _rewrite_gelu(graph, node)
        elif node.op_type == "Max":
            count += _rewrite_relu(graph, node)
    return count
