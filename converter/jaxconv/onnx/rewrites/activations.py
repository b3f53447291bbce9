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
    if _split_const(add, "Add", 1.0) is not tanh.outputs[0]:
        return False
    last = _half_x_times(add.outputs[0], x)
    if last is None:
        return False
    m.replace(graph, last.outputs[0], ir.node("Gelu", [x], {"approximate": "tanh"}), last)
    return True


def _half_x_times(factor: ir.Value, x: ir.Value) -> ir.Node | None:
    """The last node of ``0.5 * x * factor`` in any order or association, ``factor`` read only there."""
    if len(factor.uses()) != 1 or factor.is_graph_output():
        return None
    # x * (0.5 * f)   or   (0.5 * x) * f   or   (x * 0.5) * f
    user = factor.uses()[0].node
    half = _split_const(user, "Mul", 0.5)
    if half is factor:
        if len(user.outputs[0].uses()) != 1 or user.outputs[0].is_graph_output():
            return None
        last = user.outputs[0].uses()[0].node
        if m.binary(last, "Mul") is None or m.other_input(last, user.outputs[0]) is not x:
            return None
        return last
    if m.binary(user, "Mul") is None:
        return None
    other = m.other_input(user, factor)
    if _split_const(m.producer(other), "Mul", 0.5) is not x:
        return None
    return user


_SQRT_HALF = math.sqrt(0.5)


def _scaled(value: ir.Value) -> list[tuple[ir.Value, float]]:
    """Each ``(v, c)`` with ``value = c * v`` through Neg and Mul/Div by scalar constants, nearest first."""
    chain, scale = [(value, 1.0)], 1.0
    for _ in range(4):
        node = m.producer(value)
        if node is None:
            break
        if node.op_type == "Neg":
            scale, value = -scale, node.inputs[0]
            chain.append((value, scale))
            continue
        pair = m.binary(node, node.op_type) if node.op_type in ("Mul", "Div") else None
        if pair is None:
            break
        a, b = pair
        cb, ca = _scalar(b), _scalar(a) if node.op_type == "Mul" else None
        if cb is not None and cb != 0:
            scale, value = scale * (cb if node.op_type == "Mul" else 1.0 / cb), a
        elif ca is not None:
            scale, value = scale * ca, b
        else:
            break
        chain.append((value, scale))
    return chain


def _scalar(value: ir.Value | None) -> float | None:
    """The one value a constant repeats (through Expand/Reshape chains, and a Sqrt of one), else None."""
    while m.const(value) is None and m.producer(value, *m.SHAPE_OPS) is not None:
        value = m.producer(value).inputs[0]
    sqrt = m.producer(value, "Sqrt")
    if sqrt is not None:
        root = _scalar(sqrt.inputs[0])
        return math.sqrt(root) if root is not None and root >= 0 else None
    arr = m.const(value)
    if arr is None or arr.size == 0 or arr.dtype.kind != "f":
        return None
    flat = arr.reshape(-1)
    return float(flat[0]) if arr.size == 1 or bool(np.all(flat == flat[0])) else None


def _rewrite_erf_gelu(graph: ir.Graph, erf: ir.Node, opset: int) -> bool:
    """``0.5 * x * (1 + Erf(x / sqrt 2))`` or ``0.5 * x * (1 - Erf(-x / sqrt 2))`` (the exact GELU, from
    chlo.erf or chlo.erfc) as Gelu (opset 20), or below opset 20 in the one form ONNX Runtime fuses."""
    if len(erf.outputs[0].uses()) != 1 or erf.outputs[0].is_graph_output():
        return False
    user = erf.outputs[0].uses()[0].node
    if _split_const(user, "Add", 1.0) is erf.outputs[0]:
        sign = 1.0
    elif (m.binary(user, "Sub") is not None and user.inputs[1] is erf.outputs[0]
          and m.is_scalar_const(user.inputs[0], 1.0)):
        sign = -1.0
    else:
        return False
    for x, scale in _scaled(erf.inputs[0]):
        if x.dtype != ir.DataType.FLOAT or abs(scale - sign * _SQRT_HALF) > 1e-6:
            continue
        last = _half_x_times(user.outputs[0], x)
        if last is not None and _same_shape(last.outputs[0], x):
            break
    else:
        return False
    if opset >= 20:
        m.replace(graph, last.outputs[0], ir.node("Gelu", [x], {"approximate": "none"}), last)
        return True
    if _ort_fused_form(erf, x, user, last):
        return False
    # ORT's GeluFusion (opset < 20) matches Div(x, sqrt 2) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5) only
    c = [ir.node("Constant", [], {"value": ir.tensor(np.array(v, np.float32))})
         for v in (math.sqrt(2.0), 1.0, 0.5)]
    div = ir.node("Div", [x, c[0].outputs[0]])
    new_erf = ir.node("Erf", [div.outputs[0]])
    add = ir.node("Add", [new_erf.outputs[0], c[1].outputs[0]])
    mul = ir.node("Mul", [x, add.outputs[0]])
    half = ir.node("Mul", [mul.outputs[0], c[2].outputs[0]])
    m.replace(graph, last.outputs[0], [*c, div, new_erf, add, mul, half], last)
    return True


def _same_shape(out: ir.Value, x: ir.Value) -> bool:
    """True when ``out``, computed from ``x`` and constants, has ``x``'s shape (Gelu(x) may replace it).

    With both shapes known they are compared. Inside loop bodies they often are not; there every
    constant between ``x`` and ``out`` must be all-ones in shape: the lowering broadcasts a scalar to
    its StableHLO operand's rank, which is ``x``'s (elementwise StableHLO ops take equal shapes).
    """
    if out.shape is not None and x.shape is not None:
        return out.shape == x.shape
    stack, seen = [out], 0
    while stack:
        value = stack.pop()
        if value is x:
            continue
        seen += 1
        if seen > 16:
            return False
        if _scalar(value) is not None or m.repeated_const(value) is not None:
            if value.shape is None or any(d != 1 for d in value.shape):
                return False
            continue
        node = m.producer(value)
        if node is None:
            return False
        stack.extend(node.inputs)
    return True


def _ort_fused_form(erf: ir.Node, x: ir.Value, user: ir.Node, last: ir.Node) -> bool:
    """True when the pattern already is ``Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)``."""
    div = m.producer(erf.inputs[0], "Div")
    mul = user.outputs[0].uses()[0].node
    return (div is not None and div.inputs[0] is x and user.op_type == "Add" and mul is not last
            and m.other_input(mul, user.outputs[0]) is x and _split_const(last, "Mul", 0.5) is mul.outputs[0])


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
        elif node.op_type == "Erf":
            count += _rewrite_erf_gelu(graph, node, opset)
        elif node.op_type == "Max":
            count += _rewrite_relu(graph, node)
    return count
