"""Activation forms: jax.nn.gelu (tanh approximation, and the exact one) as Gelu, ``max(x, 0)`` as Relu,
jax.nn.leaky_relu's select as LeakyRelu, jax.nn.hard_swish as HardSwish.

Gelu (opset 20) with ``approximate="tanh"`` computes jax's formula
``x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))``. Relu lets ORT fuse it into the Conv or
Gemm before it. NaN passes through Relu as through jax's max, but Relu(-0.0) is -0.0 where jax
gives +0.0 (and ORT removes an ``Add(+0.0)`` after it), so the max becomes Relu only where every
consumer is blind to the sign of zero: a MatMul, Gemm, Conv, sum or comparison, possibly through
reshapes, Pads and ops whose results differ only in a zero's sign then (max pools, adds, products).

The exact GELU ``0.5 * x * (1 + Erf(x / sqrt 2))`` (or ``1 - Erf(-x / sqrt 2)``, jax's erfc put back by
``stablehlo.primitive_groups``) becomes Gelu with ``approximate="none"`` (opset 20), below opset 20
the one Erf form ONNX Runtime fuses; on float16 and bfloat16 it is computed in float32 between two
Casts (``_erf_gelu``).
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from jaxconv._scale_chain import Kind, scaled_chain
from jaxconv.onnx.rewrites import _constants as constants
from jaxconv.onnx.rewrites import _match as m

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_COMMUTATIVE = ("Mul", "Add")


def _split_const(node: ir.Node | None, op_type: str, value: float, rtol: float = 1e-6) -> ir.Value | None:
    """For ``node = op(c, y)`` or ``op(y, c)`` with constant ``c == value``: ``y``; else None."""
    pair = m.binary(node, op_type)
    if pair is None:
        return None
    a, b = pair
    if _is_scalar(b, value, rtol):
        return a
    if op_type in _COMMUTATIVE and _is_scalar(a, value, rtol):
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


def _half_x_times(factor: ir.Value, x: ir.Value, rounding: ir.DataType | None = None) -> ir.Node | None:
    """The last node of ``0.5 * x * factor`` in any order or association, ``factor`` read only there
    (values passing through ``rounding`` on the way, see ``_unrounded``)."""
    read = _sole_reader(factor, rounding)
    if read is None:
        return None
    # x * (0.5 * f)   or   (0.5 * x) * f   or   (x * 0.5) * f
    factor, user = read
    if _split_const(user, "Mul", 0.5) is factor:
        read = _sole_reader(user.outputs[0], rounding)
        if read is None or m.binary(read[1], "Mul") is None:
            return None
        return read[1] if _unrounded(m.other_input(read[1], read[0]), rounding) is x else None
    if m.binary(user, "Mul") is None:
        return None
    other = _unrounded(m.other_input(user, factor), rounding)
    if _unrounded(_split_const(m.producer(other), "Mul", 0.5), rounding) is not x:
        return None
    return user


def _unrounded(value: ir.Value | None, rounding: ir.DataType | None) -> ir.Value | None:
    """``value`` before its round trips through ``rounding`` (a float32 value cast to a half float and
    back, as the lowering writes after each op of a half-float computation), and before the Cast that
    widens a ``rounding`` value to float32; ``value`` itself without ``rounding``."""
    while rounding is not None and value is not None and value.dtype == ir.DataType.FLOAT:
        back = m.producer(value, "Cast")
        if back is None or back.inputs[0].dtype != rounding:
            break
        there = m.producer(back.inputs[0], "Cast")
        if there is None or there.inputs[0].dtype != ir.DataType.FLOAT:
            return back.inputs[0]  # a half-float value, widened
        value = there.inputs[0]
    return value


def _sole_reader(value: ir.Value, rounding: ir.DataType | None) -> tuple[ir.Value, ir.Node] | None:
    """``(v, node)``: the one node reading ``value`` past its round trips through ``rounding``, and the
    value it reads; None when ``value`` (or a round trip's value) has other readers or is an output."""
    while True:
        if len(value.uses()) != 1 or value.is_graph_output():
            return None
        node = value.uses()[0].node
        back = _sole_use(node.outputs[0]) if _is_cast(node, rounding) else None
        if back is None or not _is_cast(back, ir.DataType.FLOAT):
            return value, node
        value = back.outputs[0]


def _sole_use(value: ir.Value) -> ir.Node | None:
    uses = value.uses()
    return uses[0].node if len(uses) == 1 and not value.is_graph_output() else None


def _is_cast(node: ir.Node | None, to: ir.DataType | None) -> bool:
    return (to is not None and node is not None and node.op_type == "Cast" and node.domain == ""
            and m.attr(node, "to") == to)


_SQRT_HALF = math.sqrt(0.5)


def _scaled(value: ir.Value, rounding: ir.DataType | None = None) -> list[tuple[ir.Value, float]]:
    """Each ``(v, c)`` with ``value = c * v`` through Neg and Mul/Div by scalar constants, nearest first
    (and round trips through ``rounding``, see ``_unrounded``)."""

    def operation(v: ir.Value) -> tuple[Kind, list[ir.Value]] | None:
        node = m.producer(v, *_SCALING_OPS)
        if node is None or len(node.inputs) != (1 if node.op_type == "Neg" else 2):
            return None
        return _SCALING_OPS[node.op_type], [_unrounded(i, rounding) for i in node.inputs]

    return scaled_chain(_unrounded(value, rounding), operation, repeated_scalar)


_SCALING_OPS: dict[str, Kind] = {"Neg": "neg", "Mul": "mul", "Div": "div"}


def repeated_scalar(value: ir.Value | None) -> float | None:
    """The one float a constant repeats (see ``_repeated``), else None."""
    arr = _repeated(value)
    if arr is None or arr.size == 0 or arr.dtype.kind != "f":
        return None
    flat = arr.reshape(-1)
    return float(flat[0]) if arr.size == 1 or bool(np.all(flat == flat[0])) else None


def _is_scalar(value: ir.Value | None, expected: float, rtol: float) -> bool:
    """True when ``value`` is a constant whose elements all equal ``expected`` (within ``rtol``)."""
    found = repeated_scalar(value)
    return found is not None and abs(found - expected) <= rtol * abs(expected)


def _repeated(value: ir.Value | None) -> np.ndarray | None:
    """The constant ``value`` repeats, through shape ops (``m.SHAPE_OPS``), Casts, Sqrt and Reciprocal (all
    computed: the lowering casts a half-float constant to float32 and back around its broadcast, and divides
    a half float by a broadcast scalar as a product by its reciprocal), else None. Its shape may differ
    from ``value``'s."""
    arr = m.const(value)
    node = m.producer(value, "Cast", "Sqrt", "Reciprocal", *m.SHAPE_OPS)
    if arr is not None or node is None:
        return arr
    src = _repeated(node.inputs[0])
    if src is None or node.op_type in m.SHAPE_OPS:
        return src
    if node.op_type == "Cast":
        return src.astype(ir.DataType(m.attr(node, "to")).numpy())
    if src.dtype.kind != "f":
        return None
    if node.op_type == "Reciprocal":
        with np.errstate(divide="ignore"):
            return (np.ones((), src.dtype) / src).astype(src.dtype)
    return np.sqrt(src) if bool(np.all(src >= 0)) else None


def _rewrite_erf_gelu(graph: ir.Graph, erf: ir.Node, opset: int) -> bool:
    """``0.5 * x * (1 + Erf(x / sqrt 2))`` or ``0.5 * x * (1 - Erf(-x / sqrt 2))`` (the exact GELU, from
    chlo.erf or chlo.erfc) as Gelu (opset 20), or below opset 20 in the one form ONNX Runtime fuses."""
    for rounding in (None, *_HALF_FLOATS):
        found = _erf_gelu(erf, rounding)
        if found is not None:
            break
    else:
        return False
    user, last, x = found
    widen = [ir.node("Cast", [x], {"to": ir.DataType.FLOAT})] if x.dtype != ir.DataType.FLOAT else []
    if widen:
        x = widen[0].outputs[0]
    if opset >= 20:
        m.replace(graph, last.outputs[0], [*widen, ir.node("Gelu", [x], {"approximate": "none"})], last)
        return True
    if not widen and _ort_fused_form(erf, x, user, last):
        return False
    # ORT's GeluFusion (opset < 20) matches Div(x, sqrt 2) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5) only
    c = [ir.node("Constant", [], {"value": ir.tensor(np.array(v, np.float32))})
         for v in (math.sqrt(2.0), 1.0, 0.5)]
    div = ir.node("Div", [x, c[0].outputs[0]])
    new_erf = ir.node("Erf", [div.outputs[0]])
    add = ir.node("Add", [new_erf.outputs[0], c[1].outputs[0]])
    mul = ir.node("Mul", [x, add.outputs[0]])
    half = ir.node("Mul", [mul.outputs[0], c[2].outputs[0]])
    m.replace(graph, last.outputs[0], [*widen, *c, div, new_erf, add, mul, half], last)
    return True


# the half floats, each with its unit roundoff (how far a constant rounded to it may be from the real one)
_HALF_FLOATS = {ir.DataType.FLOAT16: 2.0 ** -11, ir.DataType.BFLOAT16: 2.0 ** -8}


def _erf_gelu(erf: ir.Node, rounding: ir.DataType | None) -> tuple[ir.Node, ir.Node, ir.Value] | None:
    """``(node adding or subtracting erf from 1, last node, x)`` of the exact GELU around ``erf``, or None.

    With ``rounding`` (a half float) ``x`` has that dtype and the GELU is computed as the lowering
    writes a half-float jax.nn.gelu: in float32, each op's result rounded to ``rounding`` and back,
    ``sqrt(1/2)`` rounded too, the result rounded once more. Gelu of ``x`` in float32, rounded once,
    replaces it (ONNX Runtime has no half-float Gelu or Erf kernel: it runs a float16 Gelu as 8 float32
    nodes between Casts and refuses a bfloat16 one). It is within the dtype's tolerance of jax.jit and
    nearer the exact GELU: jax rounds erfc's argument, which moves the result by up to 16 float16 ulps
    in the tail. Of 20001 points in [-12, 12] it is the correctly rounded GELU at 19014 (float16) and
    13842 (bfloat16), jax.jit at 16076 and 13134 (tests/test_erfc_gelu_half.py).
    """
    read = _sole_reader(erf.outputs[0], rounding)
    if read is None:
        return None
    erf_value, user = read
    if _split_const(user, "Add", 1.0) is erf_value:
        sign = 1.0
    elif (m.binary(user, "Sub") is not None and user.inputs[1] is erf_value
          and _is_scalar(user.inputs[0], 1.0, 1e-6)):
        sign = -1.0
    else:
        return None
    tol = 1e-6 if rounding is None else _HALF_FLOATS[rounding]
    for x, scale in _scaled(erf.inputs[0], rounding):
        if x.dtype != (rounding or ir.DataType.FLOAT) or abs(scale - sign * _SQRT_HALF) > tol:
            continue
        last = _half_x_times(user.outputs[0], x, rounding)
        if last is None or not _same_shape(last.outputs[0], x):
            continue
        if rounding is not None and not _is_cast(_sole_use(last.outputs[0]), rounding):
            continue
        return user, last, x
    return None


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
        if repeated_scalar(value) is not None or m.repeated_const(value) is not None:
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
_PASS_THROUGH = frozenset({"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Pad"})
# consumers that only compare the value (a zero's sign changes no comparison) ...
_COMPARE = frozenset({"Greater", "Less", "Equal", "GreaterOrEqual", "LessOrEqual", "IsNaN", "IsInf"})
# ... and those whose result differs at most in a zero's sign when an input zero's sign does (a max
# pool picks an element; x + -0 = x + 0 = x for x != 0, and for x = +-0 the sum is a zero; -0 * y and
# +0 * y are zeros or both NaN; a dividend's too, not a divisor's: 1 / -0 = -inf)
_ZERO_SIGN_ONLY = frozenset({"MaxPool", "Add", "Sub", "Max", "Min", "Relu", "Mul"})


def _zero_sign_unseen(value: ir.Value, depth: int = 0) -> bool:
    """True when no consumer of ``value`` can tell -0.0 from +0.0.

    Relu(-0.0) is -0.0 where jax's max gives +0.0, and ORT drops an ``Add(+0.0)`` after it as a
    no-op, so Relu only replaces the max where the sign of a zero cannot reach an output.
    """
    if value.is_graph_output() or depth > 16 or not value.uses():
        return False
    for use in value.uses():
        node = use.node
        if node.domain != "":
            return False
        if node.op_type in _SIGN_BLIND or node.op_type in _COMPARE:
            continue
        if node.op_type == "Where" and m.through_zero_sign_fix(node.outputs[0]) is value:
            continue  # the lowering's own -0 -> +0 fix
        if (node.op_type in _PASS_THROUGH and use.idx == 0) or node.op_type in _ZERO_SIGN_ONLY \
                or (node.op_type == "Where" and use.idx > 0) or (node.op_type == "Div" and use.idx == 0):
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
        elif node.op_type == "Mul":
            count += _rewrite_leaky_relu(graph, node) or _rewrite_hard_swish(graph, node, opset)
    return count


def _rewrite_hard_swish(graph: ir.Graph, product: ir.Node, opset: int) -> bool:
    """``x * (min(max(x + 3, 0), 6) / 6)`` (jax.nn.hard_swish; Keras' ``* (1 / 6)``) as HardSwish (opset 14),
    which ORT fuses into the Conv before it in its blocked layout (keras-hub's MobileNetV3 ran 11 more
    layout reorders around the five nodes).

    ORT computes ``x * max(0, min(1, x / 6 + 0.5))``: of every float32 in [-8, 8] 7.9% differ from
    jax.jit in the last bits, all within 0.006 of the float32 tolerance (the largest near x = -3, where
    the result is about 1e-7 and 6e-8 off); NaN, infinities and zero signs agree on every input
    (tests/test_rewrites_hswish.py). Only the scale after the clamp is matched: ``x * r / 6`` overflows
    to inf for huge x where HardSwish returns x.
    """
    pair = m.binary(product, "Mul")
    if pair is None or opset < 14:
        return False
    for x, gate in (pair, pair[::-1]):
        if x.dtype != ir.DataType.FLOAT or not _is_hard_sigmoid_of(gate, x):
            continue
        if not _same_shape(product.outputs[0], x):
            return False
        m.replace(graph, product.outputs[0], ir.node("HardSwish", [x]), product)
        return True
    return False


_SIXTH = float(np.float32(1 / 6))  # Keras' 1.0 / 6.0 as the float32 constant the lowering writes


def _is_hard_sigmoid_of(value: ir.Value, x: ir.Value) -> bool:
    """True when ``value`` is ``min(max(x + 3, 0), 6) / 6`` or ``* (1 / 6)`` (jax.nn.hard_sigmoid), each step
    read only by the next. Where ``x = a + c`` with ``c`` constant, XLA computes ``x + 3`` as ``a + (c + 3)``
    (``xla_reassociation.fold_additions`` writes it so): that shift is matched too."""
    scale = m.producer(value, "Mul", "Div")
    if scale is None or not m.sole_live_use(value):
        return False
    if scale.op_type == "Div":
        six = _split_const(scale, "Div", 6.0, 0.0)
    else:
        six = _split_const(scale, "Mul", _SIXTH, 0.0)
    pair = m.binary(m.producer(six, "Min"), "Min")
    if six is None or pair is None or not m.sole_live_use(six):
        return False
    low = pair[0] if _is_scalar(pair[1], 6.0, 0.0) else pair[1] if _is_scalar(pair[0], 6.0, 0.0) else None
    shifted = _relu_input(low)
    if shifted is None or not m.sole_live_use(shifted):
        return False
    added = m.binary(m.producer(shifted, "Add"), "Add")
    for a, shift in (added, added[::-1]) if added is not None else ():
        if a is x and _is_scalar(shift, 3.0, 0.0):
            return True
        if _shifted_by_three(x, a, m.folded(shift)):
            return True
    return False


def _shifted_by_three(x: ir.Value, a: ir.Value, shift: np.ndarray | None) -> bool:
    """True when ``x = a + c`` (either order), ``c`` a float32 constant and ``shift == c + 3`` in float32."""
    added = m.binary(m.producer(x, "Add"), "Add")
    if shift is None or shift.dtype != np.float32 or added is None or a not in added:
        return False
    c = m.folded(added[1] if added[0] is a else added[0])
    if c is None or c.dtype != np.float32:
        return False
    moved = c + np.float32(3)
    if moved.size == 1 and shift.size == 1:  # scalars of any rank (x's shape is checked after)
        return bool(moved.reshape(-1)[0] == shift.reshape(-1)[0])
    return moved.shape == shift.shape and bool(np.array_equal(moved, shift))


def _relu_input(value: ir.Value | None) -> ir.Value | None:
    """``a`` for ``value = max(a, +0)`` as the lowering writes it (a Relu, bare or with its -0 fix or the Abs
    this module leaves for it), each step read only by the next; else None. ``a = x + 3`` is never -0, so
    the fix changes nothing there."""
    if value is None or not m.sole_live_use(value):
        return None
    fixed = m.through_zero_sign_fix(value)
    absolute = m.producer(value, "Abs")
    if fixed is value:
        fixed = absolute.inputs[0] if absolute is not None else None
    if fixed is not None:
        if not m.sole_live_use(fixed):
            return None
        value = fixed
    relu = m.producer(value, "Relu")
    return relu.inputs[0] if relu is not None else None


def _rewrite_leaky_relu(graph: ir.Graph, product: ir.Node) -> bool:
    """``where(x >= 0, x, alpha * x)`` (jax.nn.leaky_relu, Keras' leaky_relu) as LeakyRelu, which ORT fuses
    into the Conv before it and keeps in its blocked layout (a CSPDarkNet ran 65 layout reorders around
    the select's six nodes).

    The lowering writes a float select as ``Where(not c, 1, x) * Where(c, 1, alpha * x)`` (``float_select``:
    -0 kept). ORT's LeakyRelu is ``x >= 0 ? x : alpha * x`` in float32, the same bits for every input
    (NaN, infinities, -0, subnormals: neither form flushes them, where jax.jit on the CPU reads a negative
    subnormal as -0 and returns it unchanged); with ``x > 0`` the condition only differs at zeros, where
    ``alpha * x`` is ``x`` itself for ``alpha >= 0``.
    """
    pair = m.binary(product, "Mul")
    if pair is None:
        return False
    found = select_operands(*pair)
    if found is None:
        return False
    cond, x, other = found
    compare = m.producer(cond, "GreaterOrEqual", "Greater")
    zero = _repeated(compare.inputs[1]) if compare is not None else None
    if compare is None or compare.inputs[0] is not x or zero is None or zero.dtype != np.float32 \
            or not bool(np.all(zero == 0)):
        return False
    scaled = m.binary(m.producer(other, "Mul"), "Mul")
    if scaled is None or x not in scaled:
        return False
    alpha = repeated_scalar(scaled[1] if scaled[0] is x else scaled[0])
    if alpha is None or (compare.op_type == "Greater" and alpha < 0):
        return False
    m.replace(graph, product.outputs[0], ir.node("LeakyRelu", [x], {"alpha": float(alpha)}), product)
    return True


def select_operands(a: ir.Value, b: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value] | None:
    """``(c, x, y)`` when ``a * b`` is the lowering's float select ``Where(not c, 1, x) * Where(c, 1, y)``."""
    for first, second in ((a, b), (b, a)):
        negated, chosen = m.producer(first, "Where"), m.producer(second, "Where")
        if negated is None or chosen is None or not _is_scalar(negated.inputs[1], 1.0, 0.0) \
                or not _is_scalar(chosen.inputs[1], 1.0, 0.0):
            continue
        flip = m.binary(m.producer(negated.inputs[0], "Xor"), "Xor")
        if flip is None or chosen.inputs[0] not in flip:
            continue
        other = flip[1] if flip[0] is chosen.inputs[0] else flip[0]
        truth = m.const(other)
        if truth is None or truth.dtype != np.bool_ or not bool(np.all(truth)):
            continue
        return chosen.inputs[0], negated.inputs[2], chosen.inputs[2]
    return None


def negated_products(graph: ir.Graph) -> int:
    """A SiLU's ``Neg`` of a product by a constant weight (a MatMul's, a Conv's with its bias) folded into the
    weight's sign; returns how many.

    jax.nn.silu lowers to ``y / (1 + exp(-y))`` (keras: ``y * (1 / (1 + exp(-y)))``), four or five
    kernels on the feed-forward's widest activation. Where ``y = x @ W`` with ``W`` constant,
    ``ny = x @ (-W)`` is ``-y`` bit for bit (every product and partial sum negated; rounding to nearest
    is symmetric), so the ``Neg`` goes and ``y``'s other readers read ``ny`` with one of their operands
    negated as exactly: ``y / (1 + e)`` as ``ny / (-1 - e)`` and ``y * (1 / (1 + e))`` as
    ``ny * (1 / (-1 - e))``, which ORT still fuses into one Div (``1 + e`` with ``e`` an Exp is never
    zero). A sum of zeros is +0.0 either way, so ``ny`` is +0.0 where ``-y`` is -0.0: the rule fires
    where the readers' results reach no output but through ops blind to a zero's sign (the
    down-projection's MatMul). Figures with ``rotary`` in that module's docstring.

    A Conv's ``conv(x, -W) - B`` is ``-conv(x, W, B)`` as exactly, and ops that only move elements (the
    Reshapes around a pointwise convolution's MatMul) keep the negation: keras-hub EfficientNet's 64 SiLUs
    and squeeze-excite gates (``1 / (1 + exp(-z))``, the Neg alone reading ``z``) lose their Negs, 0.95x its
    ORT time (two threads spinning, same bits). A Conv's weights are often a Transpose of a constant until the
    clean-up folds it, so they are evaluated here (``_constants.evaluate``).
    """
    return m.count_everywhere(graph, "Neg", _negated_product)


def _negated_product(graph: ir.Graph, neg: ir.Node) -> int:
    y = neg.inputs[0] if neg.inputs else None
    product = _product_behind(y)
    if y is None or product is None or y.is_graph_output():
        return 0
    negated_inputs = _negated_product_inputs(product)
    if negated_inputs is None:
        return 0
    plans = []
    for use in y.uses():
        reader = use.node
        if reader.op_type == "Neg" and reader.domain == "":
            continue
        twice = len(reader.inputs) != 2 or reader.inputs[0] is reader.inputs[1]
        other = None if twice else m.other_input(reader, y)
        plan = None
        if other is not None and reader.domain == "" and (
                reader.op_type == "Mul" or (reader.op_type == "Div" and use.idx == 0)):
            plan = _negated(other)
        if plan is None or not _zero_sign_unseen(reader.outputs[0]):
            return 0  # x @ (-W) is +0.0 where -(x @ W) is -0.0 (a sum of zeros): the sign must not show
        plans.append(plan)
    for k, c in negated_inputs:
        product.replace_input_with(k, m.new_initializer(graph, np.negative(c), "negated_weight"))
    for node, k, c, op in plans:
        negated = m.new_initializer(graph, np.negative(c), "negated_const")
        if op == node.op_type:
            node.replace_input_with(k, negated)
        else:  # Add(c, e) or Add(e, c) -> Sub(-c, e)
            rest = node.inputs[1 - k]
            node.op_type = op
            node.replace_input_with(0, negated)
            node.replace_input_with(1, rest)
    for use in list(y.uses()):
        if use.node.op_type == "Neg" and use.node.domain == "":
            use.node.outputs[0].replace_all_uses_with(y)
            graph.remove(use.node, safe=True)
    return 1


_MOVES_ELEMENTS = _PASS_THROUGH - {"Pad"}  # a Pad adds +0.0 where a negated value would hold -0.0


def _product_behind(y: ir.Value | None) -> ir.Node | None:
    """The MatMul or Conv that computes ``y``, directly or through ops that only move its elements (a pointwise
    convolution's MatMul between Reshapes), each step read by nothing else; else None."""
    value = y
    for _ in range(4):
        node = None if value is None else value.producer()
        if node is None or node.domain != "":
            return None
        if node.op_type in ("MatMul", "Conv"):
            return node
        if node.op_type not in _MOVES_ELEMENTS:
            return None
        value = node.inputs[0] if node.inputs else None
        if value is None or len(value.uses()) != 1 or value.is_graph_output():
            return None
    return None


def _negated_product_inputs(product: ir.Node) -> list[tuple[int, np.ndarray]] | None:
    """The constant inputs of a MatMul ``x @ W`` or a Conv ``conv(x, W) + B`` whose negation negates its output
    bit for bit (``W``, and ``B`` where given), with their values; None where one is not a float constant."""
    count = len(product.inputs)
    if product.domain != "" or not (count == 2 if product.op_type == "MatMul" else 2 <= count <= 3):
        return None
    consts = []
    for k in range(1, len(product.inputs)):
        if k == 2 and product.inputs[k] is None:
            continue  # a Conv without bias
        c = constants.evaluate(product.inputs[k])  # a weight transposed at run time until the clean-up folds it
        if c is None or c.dtype.kind != "f":
            return None
        consts.append((k, c))
    return consts


def _negated(value: ir.Value) -> tuple[ir.Node, int, np.ndarray, str] | None:
    """How to negate ``value`` exactly by negating one constant operand of its producer (read by nothing
    else): (node, operand index, constant, the node's new op type), or None."""
    node = value.producer()
    if node is None or node.domain != "" or len(node.inputs) != 2:
        return None
    if len(value.uses()) != 1 or value.is_graph_output():
        return None
    for k in (0, 1):
        c = m.const(node.inputs[k])
        if c is None or c.dtype.kind != "f":
            continue
        rest = node.inputs[1 - k]
        if node.op_type == "Div" and k == 0:  # c / (-a) rather than -c / a: ORT fuses y * (1 / a) into y / a
            return _negated(rest) or (node, k, c, node.op_type)
        if node.op_type == "Mul":
            return node, k, c, node.op_type
        if node.op_type == "Add" and bool(np.all(c > 0)) and m.producer(rest, "Exp") is not None:
            return node, k, c, "Sub"  # -(c + e) = -c - e; c + e > 0 (or NaN): no zero to sign
    return None
