"""Elementwise arithmetic, math, comparison and selection ops.

Each lowering reproduces what XLA computes on CPU for every dtype JAX uses:
- bfloat16 has no ONNX Runtime arithmetic kernels; it is computed in float32 and rounded back
  after every op, which is what XLA does too.
- float16 transcendental functions are computed in float32 and rounded once.
- integer division and remainder guard the cases where ONNX Runtime errors or traps
  (x / 0, INT_MIN / -1) and give XLA's answers instead.
- maximum/minimum order -0 below +0, sign keeps -0 and NaN, integer power follows XLA.
- float-to-integer conversion saturates and maps NaN to 0.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import onnx_ir as ir

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx import xla_bfloat16
from jaxconv.onnx.context import RECIPROCAL_KEY, LoweringContext
from jaxconv.onnx.ops import nan_selects
from jaxconv.onnx.ops._common import (
    compute_in,
    direct,
    is_inf,
    known_values,
    result,
    unary_in,
    where,
    without_negative_zero,
)
from jaxconv.onnx.ops.bitcast import bits_to_float, float_to_bits
from jaxconv.onnx.registry import lowering
from jaxconv.onnx.xla_division import OWN_RULES, divides_by_exp_as_a_product, moved_from
from jaxconv.stablehlo import ir as hir

# ---- 1:1 table rows -----------------------------------------------------------------------
direct("stablehlo.floor", "Floor", dt.FLOAT_MATH)
direct("stablehlo.ceil", "Ceil", dt.FLOAT_MATH)
direct("stablehlo.round_nearest_even", "Round", dt.FLOAT_MATH)
direct("stablehlo.exponential", "Exp", dt.F32_F64)
direct("stablehlo.log", "Log", dt.F32_F64)
direct("stablehlo.sqrt", "Sqrt", dt.F32_F64)
direct("stablehlo.tanh", "Tanh", dt.F32_F64)
direct("stablehlo.sine", "Sin", dt.F32_F64)
direct("stablehlo.cosine", "Cos", dt.F32_F64)
direct("stablehlo.abs", "Abs", dt.ARITH)


# ---- add, subtract, multiply ----------------------------------------------------------------
def _binary(onnx_op: str, bool_op: str) -> Callable[[LoweringContext, hir.Op, list[str]], str]:
    def lower(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
        dtype = op.results[0].type.dtype
        if dtype == "bool":
            return ctx.op(bool_op, inputs, same_shape_inputs=True)
        names, work = compute_in(ctx, inputs, dtype, dt.ARITH)
        return result(ctx, op, ctx.op(onnx_op, names, same_shape_inputs=True), work)

    lower.__doc__ = f"{onnx_op}; integers wrap; booleans use {bool_op}."
    return lower


lowering("stablehlo.add", onnx_ops=("Add",))(_binary("Add", "Or"))
lowering("stablehlo.subtract", onnx_ops=("Sub",))(_binary("Sub", "Xor"))
_multiply = _binary("Mul", "And")


@lowering("stablehlo.multiply", onnx_ops=("Mul", "Where"))
def lower_multiply(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Mul; integers wrap; booleans use And; a float32/float64 product by a bool converted to float is a select."""
    selected = select_by_converted_bool(ctx, op.results[0].type.dtype, inputs[0], inputs[1])
    return selected if selected is not None else _multiply(ctx, op, inputs)


def select_by_converted_bool(ctx: LoweringContext, dtype: str, lhs: str, rhs: str) -> str | None:
    """``pred ? v : +0`` for ``convert(pred) * v`` (either order), as XLA's algebraic simplifier computes it:
    a NaN or an infinity where ``pred`` is False gives 0, not NaN (measured on jax 0.10.2). Only where the
    convert is an operand itself: one broadcast after it (``m[None] * v``) stays a product in XLA."""
    if dtype not in ("float32", "float64"):
        return None
    for mask, other in ((lhs, rhs), (rhs, lhs)):
        made = ctx.producer(mask)
        source = made.inputs[0] if made is not None and made.op_type == "Cast" else None
        if made is None or source is None or source.dtype != ir.DataType.BOOL \
                or made.metadata_props.get("stablehlo.op") != "stablehlo.convert":
            continue
        return where(ctx, source.name or "", other, ctx.scalar(0.0, dtype), dtype)
    return None


# ---- maximum, minimum, clamp ----------------------------------------------------------------
def extremum(ctx: LoweringContext, a: str, b: str, work: str, is_max: bool) -> str:
    """XLA's maximum/minimum of two values already in a Max/Min kernel dtype: NaN propagates and
    -0 < +0 (ONNX Runtime's Max/Min return either zero of a tie)."""
    out = ctx.op("Max" if is_max else "Min", [a, b])
    if work not in dt.FLOATS:
        return out
    values = [known_values(ctx, n) for n in (a, b)]
    if any(v is not None and not np.any(v == 0) for v in values):
        return out  # a zero never meets a zero
    for x, v in ((a, values[1]), (b, values[0])):
        if is_max and v is not None and np.all((v == 0) & ~np.signbit(v)):
            # max(x, +0) is never -0. Relu (which ONNX Runtime fuses into a Conv or Gemm before
            # it) keeps NaN but returns -0 for -0; a select makes that +0 (ONNX Runtime's
            # NoopElimination would drop an Add(+0)).
            relu = ctx.op("Relu", [x]) if work in ("float32", "float64") else out
            return without_negative_zero(ctx, relu, work)
        if not is_max and v is not None and work in ("float32", "float64") and np.all((v == 0) & ~np.signbit(v)):
            # min(x, +0) is x where x is a zero (either sign) and Min's result elsewhere, which is then
            # never -0: x goes third, the input ONNX Runtime's Where copies exactly (see float_select).
            nonzero = ctx.op("Xor", [ctx.op("Equal", [x, ctx.scalar(0.0, work)]), ctx.const(np.array(True))])
            return ctx.op("Where", [nonzero, ctx.op("Min", [x, ctx.scalar(0.0, work)]), x])
    # A zero result takes its sign from 1/a and 1/b (+inf for +0, -inf for -0).
    zero = ctx.scalar(0.0, work)
    is_zero = ctx.op("Equal", [out, zero])
    recips = [ctx.op("Reciprocal", [n]) for n in (a, b)]
    if is_max:
        fix = ctx.op("And", [is_zero, ctx.op("Greater", [ctx.op("Max", recips), zero])])
        return where(ctx, fix, zero, out, work)
    fix = ctx.op("And", [is_zero, ctx.op("Less", [ctx.op("Min", recips), zero])])
    return where(ctx, fix, ctx.scalar(-0.0, work), out, work)


def _extremum_lowering(is_max: bool) -> Callable[[LoweringContext, hir.Op, list[str]], str]:
    def lower(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
        dtype = op.results[0].type.dtype
        if dtype == "bool":
            return ctx.op("Or" if is_max else "And", inputs)
        names, work = compute_in(ctx, inputs, dtype, dt.MAX_MIN)
        return result(ctx, op, extremum(ctx, names[0], names[1], work, is_max), work)

    lower.__doc__ = f"{'Max' if is_max else 'Min'}, NaN-propagating, with -0 < +0 like XLA."
    return lower


lowering("stablehlo.maximum", onnx_ops=("Max",))(_extremum_lowering(True))
lowering("stablehlo.minimum", onnx_ops=("Min",))(_extremum_lowering(False))


@lowering("stablehlo.clamp", onnx_ops=("Max", "Min"))
def lower_clamp(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """min(max(x, lo), hi) with scalar or full-shape bounds, NaN-propagating (any dtype)."""
    lo, x, hi = inputs
    dtype = op.results[0].type.dtype
    if dtype == "bool":
        return ctx.op("And", [ctx.op("Or", [x, lo]), hi])
    (lo, x, hi), work = compute_in(ctx, [lo, x, hi], dtype, dt.MAX_MIN)
    return result(ctx, op, extremum(ctx, extremum(ctx, x, lo, work, True), hi, work, False), work)


# ---- divide, remainder, power -----------------------------------------------------------------
def _int_guards(ctx: LoweringContext, lhs: str, rhs: str, dtype: str) -> tuple[str, str]:
    """(rhs == 0, a divisor with 0 and -1 replaced by 1) so Div/Mod never trap."""
    is_zero = ctx.op("Equal", [rhs, ctx.scalar(0, dtype)])
    bad = is_zero
    if dtype in dt.SIGNED:
        bad = ctx.op("Or", [is_zero, ctx.op("Equal", [rhs, ctx.scalar(-1, dtype)])])
    return is_zero, where(ctx, bad, ctx.scalar(1, dtype), rhs, dtype)


@lowering("stablehlo.divide", onnx_ops=("Div",))
def lower_divide(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Div; integers truncate, x / 0 is -1, INT_MIN / -1 is INT_MIN; float16 by a constant, sqrt, rsqrt or exp as XLA: x * (1 / d)."""
    dtype = op.results[0].type.dtype
    if dtype == "float16":
        by_reciprocal = _f16_reciprocal(ctx, op, inputs[0], inputs[1])
        if by_reciprocal is not None:
            return by_reciprocal
    if dtype in dt.FLOATS:
        names, work = compute_in(ctx, inputs, dtype, dt.ARITH)
        quotient = ctx.op("Div", names, same_shape_inputs=True)
        if dtype in ("float32", "float64") and _by_reciprocal_in_xla(ctx, op, inputs[0], inputs[1]):
            node = ctx.producer(quotient)
            assert node is not None
            node.metadata_props[RECIPROCAL_KEY] = "1"
        return result(ctx, op, quotient, work)
    lhs, rhs = inputs
    is_zero, safe = _int_guards(ctx, lhs, rhs, dtype)
    # x / -1 is computed as -(x / 1), which wraps INT_MIN to itself.
    q = ctx.op("Div", [lhs, safe])
    if dtype in dt.SIGNED:
        minus_one = ctx.op("Equal", [rhs, ctx.scalar(-1, dtype)])
        negated = ctx.op("Sub", [ctx.scalar(0, dtype), lhs])
        q = where(ctx, minus_one, negated, q, dtype)
    by_zero = ctx.scalar(-1 if dtype in dt.SIGNED else np.iinfo(dtype).max, dtype)
    return where(ctx, is_zero, by_zero, q, dtype)


def _by_reciprocal_in_xla(ctx: LoweringContext, op: hir.Op, lhs: str, rhs: str) -> bool:
    """Whether XLA's algebraic simplifier computes this float32/float64 ``lhs / rhs`` as ``lhs * (1 / rhs)``:
    when the divisor is a constant, or a broadcast of fewer elements (``x / x.max(-1, keepdims=True)``,
    ``x / 255.0``, ``x / s`` for a scalar input) not made by a root, exp or power, and the dividend is not
    a constant. Measured on
    [64, 256] arrays: such quotients differ from IEEE division in 20-34% of the elements and equal the
    product by the reciprocal in all; ``a / b`` of one shape stays IEEE division. One ulp matters where a
    comparison or a cast to an integer follows (``(x / x.max() * 255).astype(uint8)``: 254 against 255)."""
    if known_values(ctx, lhs) is not None:
        return False
    source, movers = _divisor_source(ctx, rhs)
    if ctx.constant_value(source) is not None or known_values(ctx, source) is not None:
        return True
    made = ctx.producer(source)
    if not movers or (made is not None and made.metadata_props.get("stablehlo.op") in OWN_RULES):
        return False
    small, whole = ctx.value(source).shape, op.results[0].type.shape
    if small is None or not small.is_static() or any(d is None for d in whole):
        return any(m.op_type == "Expand" for m in movers)
    return int(np.prod(small.numpy())) < int(np.prod(whole))


def _divisor_source(ctx: LoweringContext, rhs: str) -> tuple[str, list[ir.Node]]:
    """The value a divisor is moved or broadcast from, and those nodes (``xla_division.moved_from``)."""
    source, movers = moved_from(ctx.value(rhs))
    return source.name or rhs, movers


def _f16_reciprocal(ctx: LoweringContext, op: hir.Op, lhs: str, rhs: str) -> str | None:
    """``lhs / rhs`` in float16 as XLA on CPU computes it, or None where that is IEEE division.

    XLA's algebraic simplifier turns ``a / c`` (``c`` constant, ``a`` not) into ``a * (1 / c)``,
    ``a / sqrt(b)`` (also through a broadcast) into ``a * rsqrt(b)``, ``a / rsqrt(b)`` into ``a * sqrt(b)``,
    ``a / exp(b)`` into ``a * exp(-b)`` (jax 0.10's XLA: ``xla_division.divides_by_exp_as_a_product``) and
    ``a / broadcast(b)`` into ``a * broadcast(1 / b)`` (a softmax's
    sum, a row maximum: the float32 rule, ``_by_reciprocal_in_xla``), the reciprocal rounded to float16
    before the product: one float16 ulp from IEEE division in a quarter to a third of the elements (a
    norm's ``c / sqrt(var)``, ``jax.nn.softmax``). The product of two float16 values is exact in float32,
    so one rounding follows.
    """
    if known_values(ctx, lhs) is not None:
        return None
    source, movers = _divisor_source(ctx, rhs)  # value-preserving nodes (a broadcast) between the two
    node = ctx.producer(source)
    constant = ctx.constant_value(source)
    if constant is not None:
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            inverse = (np.float32(1) / np.asarray(constant, np.float32)).astype(np.float16)
        recip = ctx.const(inverse)
    else:
        recip = _f16_inverse(ctx, node)
        if recip is None and not _by_reciprocal_in_xla(ctx, op, lhs, rhs):
            return None
        if recip is None:  # 1 / b in float32, rounded to float16 as XLA computes a float16 division
            recip = ctx.cast(ctx.op("Reciprocal", [ctx.cast(source, "float32")]), "float16")
    for mover in reversed(movers):  # the broadcast again, on the reciprocal
        recip = ctx.op(mover.op_type, [recip] + [v.name if v is not None else None for v in mover.inputs[1:]],
                       **{k: a.value for k, a in mover.attributes.items()})
    product = ctx.op("Mul", [ctx.cast(lhs, "float32"), ctx.cast(recip, "float32")])
    return ctx.cast(product, "float16")


def _f16_inverse(ctx: LoweringContext, node: ir.Node | None) -> str | None:
    """The float16 inverse XLA multiplies by when ``node`` rounds a float16 sqrt, rsqrt or exp to float16
    (each computed in float32): rsqrt(b), sqrt(b) or exp(-b), rounded once from float32; else None."""
    if node is None or node.op_type != "Cast" or node.inputs[0] is None:
        return None
    kind = node.metadata_props.get("stablehlo.op")
    chain = {"stablehlo.sqrt": ("Sqrt",), "stablehlo.rsqrt": ("Reciprocal", "Sqrt"),
             "stablehlo.exponential": ("Exp",) if divides_by_exp_as_a_product() else None}.get(kind or "")
    found, value = [], node.inputs[0]
    for op_type in chain or ():
        producer = value.producer() if value is not None else None
        if producer is None or producer.op_type != op_type or producer.metadata_props.get("stablehlo.op") != kind:
            return None
        found.append(producer)
        value = producer.inputs[0]
    if not found or value is None:
        return None
    if kind == "stablehlo.sqrt":  # 1 / sqrt(b): the float32 root before its rounding
        inverse = ctx.op("Reciprocal", [found[0].outputs[0].name])
    elif kind == "stablehlo.rsqrt":  # 1 / rsqrt(b) = sqrt(b)
        inverse = found[1].outputs[0].name
    else:  # 1 / exp(b) = exp(-b)
        inverse = ctx.op("Exp", [ctx.op("Neg", [value.name])])
    return ctx.cast(inverse, "float16")



@lowering("stablehlo.remainder", onnx_ops=("Mod",))
def lower_remainder(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Mod(fmod=1): truncated remainder with the dividend's sign; integer x % 0 = x, INT_MIN % -1 = 0."""
    dtype = op.results[0].type.dtype
    if dtype in dt.FLOATS:
        names, work = compute_in(ctx, inputs, dtype, dt.ARITH)
        return result(ctx, op, ctx.op("Mod", names, fmod=1), work)
    lhs, rhs = inputs
    is_zero, safe = _int_guards(ctx, lhs, rhs, dtype)
    r = ctx.op("Mod", [lhs, safe], fmod=1)  # x % 1 == x % -1 == 0
    return where(ctx, is_zero, lhs, r, dtype)


# XLA raises integers to a power by squaring over the exponent's low 6 bits only.
_XLA_POW_BITS = 6


@lowering("stablehlo.power", onnx_ops=("Pow",))
def lower_power(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Pow for floats; integers by repeated squaring like XLA (wrapping; negative exponents give 0
    except for bases 1 and -1)."""
    dtype = op.results[0].type.dtype
    if dtype in dt.FLOATS:
        names, work = compute_in(ctx, inputs, dtype, dt.F32_F64)
        return result(ctx, op, ctx.op("Pow", names), work)
    work = "int64" if dt.bit_width(dtype) == 64 else "int32"
    x, e = (ctx.cast_if(n, dtype, work) for n in inputs)
    zero, one = ctx.scalar(0, work), ctx.scalar(1, work)

    def bit_clear(k: int) -> str:
        return ctx.op("Equal", [ctx.op("BitwiseAnd", [e, ctx.scalar(1 << k, work)]), zero])

    acc = ctx.op("Where", [bit_clear(0), one, x])
    base = x
    for k in range(1, _XLA_POW_BITS):
        base = ctx.op("Mul", [base, base])
        acc = ctx.op("Where", [bit_clear(k), acc, ctx.op("Mul", [acc, base])])
    if dtype in dt.SIGNED:
        minus_one = ctx.scalar(-1, work)
        parity = ctx.op("Where", [bit_clear(0), one, minus_one])
        small = ctx.op("Where", [ctx.op("Equal", [x, one]), one,
                                 ctx.op("Where", [ctx.op("Equal", [x, minus_one]), parity, zero])])
        acc = ctx.op("Where", [ctx.op("Less", [e, zero]), small, acc])
    return result(ctx, op, acc, work)


# ---- unary arithmetic --------------------------------------------------------------------------
@lowering("stablehlo.negate", onnx_ops=("Neg",))
def lower_negate(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Neg; unsigned negation is 0 - x (wrapping)."""
    dtype = op.results[0].type.dtype
    if dtype in dt.UNSIGNED:
        return ctx.op("Sub", [ctx.scalar(0, dtype), inputs[0]])
    x, work = unary_in(ctx, op, inputs, dt.NEG)
    return result(ctx, op, ctx.op("Neg", [x]), work)


@lowering("stablehlo.sign", onnx_ops=("Sign",))
def lower_sign(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Sign; for floats -0 stays -0 and NaN stays NaN."""
    dtype = op.results[0].type.dtype
    if dtype not in dt.FLOATS:
        return ctx.op("Sign", inputs)
    x, work = unary_in(ctx, op, inputs, dt.FLOAT_MATH)
    return result(ctx, op, float_sign(ctx, x, work), work)


def float_sign(ctx: LoweringContext, x: str, work: str) -> str:
    """sign(x) keeping ±0 and NaN, without Where (ONNX Runtime's Where and Sign lose -0):
    c / max(|c|, smallest subnormal) with c = clip(x, -1, 1)."""
    c = ctx.op("Clip", [x, ctx.scalar(-1.0, work), ctx.scalar(1.0, work)])
    denominator = ctx.op("Max", [ctx.op("Abs", [c]), ctx.scalar(np.finfo(dt.numpy_dtype(work)).smallest_subnormal, work)])
    return ctx.op("Div", [c, denominator])


@lowering("stablehlo.round_nearest_afz", onnx_ops=("Floor", "Where"))
def lower_round_afz(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Round half away from zero, exact for every float (signed zeros, halves, ±inf, NaN)."""
    x, work = unary_in(ctx, op, inputs, dt.FLOAT_MATH)
    a = ctx.op("Abs", [x])
    t = ctx.op("Floor", [a])
    up = ctx.cast(ctx.op("GreaterOrEqual", [ctx.op("Sub", [a, t]), ctx.scalar(0.5, work)]), work)
    r = ctx.op("Add", [t, up])
    return result(ctx, op, ctx.op("Mul", [r, float_sign(ctx, x, work)]), work)


@lowering("stablehlo.rsqrt", onnx_ops=("Sqrt", "Reciprocal"))
def lower_rsqrt(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """1 / sqrt(x)."""
    x, work = unary_in(ctx, op, inputs, dt.F32_F64)
    return result(ctx, op, ctx.op("Reciprocal", [ctx.op("Sqrt", [x])]), work)


@lowering("stablehlo.logistic", onnx_ops=("Exp", "Reciprocal"))
def lower_logistic(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """1 / (1 + exp(-x)); ONNX Runtime's Sigmoid is off by up to 2e-4 relative for x < -7."""
    x, work = unary_in(ctx, op, inputs, dt.F32_F64)
    denominator = ctx.op("Add", [ctx.scalar(1.0, work), ctx.op("Exp", [ctx.op("Neg", [x])])])
    return result(ctx, op, ctx.op("Reciprocal", [denominator]), work)


@lowering("stablehlo.cbrt", onnx_ops=("Pow",))
def lower_cbrt(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Real cube root: Pow(|x|, 1/3) in float64 (plus one Newton step for float64 inputs), sign restored."""
    dtype = op.results[0].type.dtype
    x = ctx.cast_if(inputs[0], dtype, "float64")
    a = ctx.op("Abs", [x])
    y = ctx.op("Pow", [a, ctx.scalar(1.0 / 3.0, "float64")])
    if dtype == "float64":
        # y <- y - (y - a / y^2) / 3; only where y is finite and nonzero.
        step = ctx.op("Div", [ctx.op("Sub", [y, ctx.op("Div", [a, ctx.op("Mul", [y, y])])]), ctx.scalar(3.0, "float64")])
        regular = ctx.op("And", [ctx.op("Greater", [y, ctx.scalar(0.0, "float64")]),
                                 ctx.op("Not", [ctx.op("IsInf", [y])])])
        y = ctx.op("Where", [regular, ctx.op("Sub", [y, step]), y])
    return ctx.cast_if(ctx.op("Mul", [y, float_sign(ctx, x, "float64")]), "float64", dtype)


@lowering("stablehlo.tan", onnx_ops=("Tan",))
def lower_tan(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Tan; float64 (no kernel) as Sin / Cos."""
    x, work = unary_in(ctx, op, inputs, dt.F32_F64)
    if work == "float64":
        return ctx.op("Div", [ctx.op("Sin", [x]), ctx.op("Cos", [x])])
    return result(ctx, op, ctx.op("Tan", [x]), work)


# |x| below which exp(x) is a finite normal number of the type: expm1's ratio x / log(exp(x)) is taken on x
# clamped to it (beyond, the ratio is 1 to within an ulp).
_EXPM1_RANGE = {"float32": 80.0, "float64": 700.0}


@lowering("stablehlo.exponential_minus_one", onnx_ops=("Exp", "Log"))
def lower_expm1(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """exp(x) - 1 accurate near 0 and with no select: Kahan's (u - 1) * x / log(u), u = exp(x), on a clamped x.

    ONNX Runtime's Where costs up to 40 Muls where its condition follows the data. The ratio is taken as
    ``(u - 1) * t`` with ``t = x' / log(exp(x'))`` on x clamped to a range where both are finite (t is 1 to
    within an ulp outside it). Where exp(x') rounds to 1, ``δ = 1`` makes t 1 and ``u - 1`` x: ±0, ±inf and
    NaN come out as jax's."""
    x, work = unary_in(ctx, op, inputs, dt.F32_F64)
    one, bound = ctx.scalar(1.0, work), _EXPM1_RANGE[work]
    clamped = ctx.op("Min", [ctx.op("Max", [x, ctx.scalar(-bound, work)]), ctx.scalar(bound, work)])
    u_clamped = ctx.op("Exp", [clamped])
    delta = ctx.cast(ctx.op("Equal", [u_clamped, one]), work)
    t = ctx.op("Div", [ctx.op("Add", [clamped, delta]), ctx.op("Add", [ctx.op("Log", [u_clamped]), delta])])
    # (δ x') - (1 - u): u - 1 where δ is 0, and x (-0 kept: -0 - +0 is -0) where it is 1 (x' is x there; x'
    # and not x, whose infinities would make δ x NaN).
    u_minus_one = ctx.op("Sub", [ctx.op("Mul", [delta, clamped]), ctx.op("Sub", [one, ctx.op("Exp", [x])])])
    return result(ctx, op, ctx.op("Mul", [u_minus_one, t]), work)


@lowering("stablehlo.log_plus_one", onnx_ops=("Log",))
def lower_log1p(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """log(1 + x) accurate near 0 and with no select: Kahan's x * log(v) / (v - 1), v = 1 + x.

    Where v rounds to 1, ``δ = 1`` makes the ratio 1, and v taken from x clamped to the type's largest finite
    value so that +inf gives +inf (x times a finite ratio). ±0, -1, below -1 and NaN come out as jax's."""
    x, work = unary_in(ctx, op, inputs, dt.F32_F64)
    one = ctx.scalar(1.0, work)
    v = ctx.op("Add", [ctx.op("Min", [x, ctx.scalar(float(np.finfo(dt.numpy_dtype(work)).max), work)]), one])
    v_minus_one = ctx.op("Sub", [v, one])
    delta = ctx.cast(ctx.op("Equal", [v_minus_one, ctx.scalar(0.0, work)]), work)
    ratio = ctx.op("Div", [ctx.op("Add", [ctx.op("Log", [v]), delta]), ctx.op("Add", [v_minus_one, delta])])
    return result(ctx, op, ctx.op("Mul", [x, ratio]), work)


def sign_bit(ctx: LoweringContext, x: str, work: str) -> str:
    """True where a float has its sign bit set (-0 included, NaN excluded), without BitCast."""
    zero = ctx.scalar(0.0, work)
    key = ctx.op("Min", [x, ctx.op("Reciprocal", [x])])  # negative exactly when the sign bit is set
    return ctx.op("Less", [key, zero])


@lowering("stablehlo.atan2", onnx_ops=("Atan",))
def lower_atan2(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """atan2(y, x) in all quadrants with IEEE signed zeros and infinities; float64 refines a
    float32 Atan with one rotation step (float64 has no Atan kernel)."""
    dtype = op.results[0].type.dtype
    work = dt.float_work(dtype)
    y, x = (ctx.cast_if(n, dtype, work) for n in inputs)
    ax, ay = ctx.op("Abs", [x]), ctx.op("Abs", [y])
    q = ctx.op("Div", [ctx.op("Min", [ax, ay]), ctx.op("Max", [ax, ay])])  # in [0, 1]
    if work == "float64":
        a0 = ctx.cast(ctx.op("Atan", [ctx.cast(q, "float32")]), "float64")
        cos, sin = ctx.op("Cos", [a0]), ctx.op("Sin", [a0])
        # (1 + iq) e^{-i a0} = r e^{i d}: d ~ imag/real, error O(d^3).
        real = ctx.op("Add", [cos, ctx.op("Mul", [q, sin])])
        imag = ctx.op("Sub", [ctx.op("Mul", [q, cos]), sin])
        a0 = ctx.op("Add", [a0, ctx.op("Div", [imag, real])])
    else:
        a0 = ctx.op("Atan", [q])
    a = ctx.op("Where", [ctx.op("Greater", [ay, ax]), ctx.op("Sub", [ctx.scalar(math.pi / 2, work), a0]), a0])
    zero, inf = ctx.scalar(0.0, work), ctx.scalar(math.inf, work)
    both_zero = ctx.op("And", [ctx.op("Equal", [ax, zero]), ctx.op("Equal", [ay, zero])])
    both_inf = ctx.op("And", [ctx.op("Equal", [ax, inf]), ctx.op("Equal", [ay, inf])])
    a = ctx.op("Where", [both_zero, zero, ctx.op("Where", [both_inf, ctx.scalar(math.pi / 4, work), a])])
    a = ctx.op("Where", [sign_bit(ctx, x, work), ctx.op("Sub", [ctx.scalar(math.pi, work), a]), a])
    y_sign = ctx.op("Where", [sign_bit(ctx, y, work), ctx.scalar(-1.0, work), ctx.scalar(1.0, work)])
    out = ctx.op("Mul", [a, y_sign])
    return ctx.cast_if(out, work, dtype)


@lowering("stablehlo.is_finite", onnx_ops=("IsNaN", "IsInf"))
def lower_is_finite(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Not(IsNaN(x) or IsInf(x))."""
    native = dt.IS_NAN_INF if ctx.opset >= 20 else dt.IS_NAN_INF - {"bfloat16"}  # bf16 IsNaN/IsInf from opset 20
    x, work = unary_in(ctx, op, inputs, native)
    return ctx.op("Not", [ctx.op("Or", [ctx.op("IsNaN", [x]), is_inf(ctx, x, work)])])


# ---- select, compare ---------------------------------------------------------------------------
@lowering("stablehlo.select", onnx_ops=("Where",))
def lower_select(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Where (scalar or full-shape predicate), any dtype; none where a NaN test changes only NaN payloads.

    A select on a NaN test that changes nothing but a NaN's payload (``nan_selects``) is its other side."""
    cond, a, b = inputs
    shapes = {tuple(v.type.shape) for v in (*op.operands, *op.results)}
    if op.results[0].type.dtype in dt.FLOATS and len(shapes) == 1 and nan_selects.redundant(ctx, cond, a, b):
        return b
    return where(ctx, cond, a, b, op.results[0].type.dtype, exact_zeros=True)


_COMPARE = {"EQ": ("Equal", False), "NE": ("Equal", True), "LT": ("Less", False),
            "LE": ("LessOrEqual", False), "GT": ("Greater", False), "GE": ("GreaterOrEqual", False)}


def total_order_key(ctx: LoweringContext, x: str, dtype: str) -> str:
    """An integer whose signed order is IEEE totalOrder of the float ``x`` (needs BitCast, opset 26).

    Negative floats have their magnitude bits flipped so larger magnitudes sort lower;
    -NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN.
    """
    bits = dt.bit_width(dtype)
    key_type = "int64" if bits == 64 else "int32"
    i = ctx.cast_if(ctx.op("BitCast", [x], to=dt.onnx_type(f"int{bits}")), f"int{bits}", key_type)
    flipped = ctx.op("BitwiseXor", [i, ctx.scalar((1 << (bits - 1)) - 1, key_type)])
    return ctx.op("Where", [ctx.op("Less", [i, ctx.scalar(0, key_type)]), flipped, i])


@lowering("stablehlo.compare", onnx_ops=("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"))
def lower_compare(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Every direction for FLOAT, SIGNED, UNSIGNED and TOTALORDER (BitCast, opset >= 26) compares."""
    onnx_op, negate = _COMPARE[op.attrs["comparison_direction"]]
    kind = op.attrs.get("compare_type", "")
    src = op.operands[0].type.dtype
    names = list(inputs)
    if kind == "TOTALORDER" and src in dt.FLOATS:
        ctx.require_opset(26, "stablehlo.compare with TOTALORDER (it reads float bits with BitCast)")
        names = [total_order_key(ctx, n, src) for n in names]
    elif src == "bool":
        if onnx_op != "Equal":
            names = [ctx.cast(n, "uint8") for n in names]
    elif kind == "UNSIGNED" and src in dt.SIGNED:
        names = [ctx.cast(n, dt.same_width_unsigned(src)) for n in names]
    elif kind == "SIGNED" and src in dt.UNSIGNED:
        names = [ctx.cast(n, dt.same_width_signed(src)) for n in names]
    else:
        names, _ = compute_in(ctx, names, src, dt.COMPARE)
    out = ctx.op(onnx_op, names, same_shape_inputs=True)
    return ctx.op("Not", [out]) if negate else out



# ---- convert, bitcast_convert, reduce_precision --------------------------------------------------
@lowering("stablehlo.convert", onnx_ops=("Cast",))
def lower_convert(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Cast; float -> int saturates with NaN -> 0 (XLA on CPU), x -> bool is x != 0, bfloat16 via float32;
    a computed bfloat16 value converted to float32 is its float32 value before rounding (``xla_bfloat16``)."""
    src = op.operands[0].type.dtype
    dst = op.results[0].type.dtype
    x = inputs[0]
    if src == dst:
        return x
    if dst == "bool":
        (x,), work = compute_in(ctx, [x], src, dt.COMPARE)
        return ctx.op("Not", [ctx.op("Equal", [x, ctx.scalar(0, work)])])
    if src in dt.FLOATS and dst in dt.INTS:
        return float_to_int(ctx, x, src, dst)
    if src in dt.FLOATS and dst in dt.FLOATS and "bfloat16" in (src, dst) and "float32" not in (src, dst):
        x = ctx.cast(x, "float32")  # XLA rounds float64 -> bfloat16 through float32 too
    if (src, dst) == ("bfloat16", "float32"):
        before_rounding = xla_bfloat16.unrounded(ctx.producer(x))
        if before_rounding is not None and before_rounding.name:
            return before_rounding.name  # XLA computes the op in float32 and hands that to the convert
    return ctx.cast(x, dst)


def float_to_int(ctx: LoweringContext, x: str, src: str, dst: str) -> str:
    """Truncate toward zero, saturating at dst's range, NaN -> 0 (ONNX Runtime's Cast gives INT_MIN)."""
    work = dt.float_work(src)
    xf = ctx.cast_if(x, src, work)
    info = np.iinfo(dst)
    wtype = dt.numpy_dtype(work).type
    upper = wtype(2.0 ** (info.bits if dst in dt.UNSIGNED else info.bits - 1))  # exact power of two
    below = np.nextafter(upper, wtype(0))  # largest float under the first out-of-range integer
    lowest = ctx.scalar(float(info.min), work)
    clean = ctx.op("Where", [ctx.op("IsNaN", [xf]), ctx.scalar(0.0, work), ctx.op("Max", [xf, lowest])])
    out = ctx.cast(ctx.op("Min", [clean, ctx.const(below, work)]), dst)
    if int(below) < info.max:  # the float type cannot reach dst's maximum: patch x >= upper
        too_big = ctx.op("GreaterOrEqual", [xf, ctx.const(upper, work)])
        out = where(ctx, too_big, ctx.scalar(info.max, dst), out, dst)
    return out


def _to_bits(ctx: LoweringContext, x: str, dtype: str) -> str:
    """The same-width unsigned integer holding ``x``'s bits."""
    u = dt.same_width_unsigned(dtype)
    if dtype in dt.FLOATS and ctx.opset < 26:
        return float_to_bits(ctx, x, dtype)
    if dtype in dt.FLOATS:
        return ctx.op("BitCast", [x], to=dt.onnx_type(u))
    return ctx.cast_if(x, dtype, u)


def _from_bits(ctx: LoweringContext, u: str, dtype: str) -> str:
    """Reinterpret same-width unsigned bits as ``dtype``."""
    if dtype in dt.FLOATS and ctx.opset < 26:
        return bits_to_float(ctx, u, dtype)
    if dtype in dt.FLOATS:
        return ctx.op("BitCast", [u], to=dt.onnx_type(dtype))
    return ctx.cast_if(u, dt.same_width_unsigned(dtype), dtype)


def _check_bitcast(op: hir.Op) -> str | None:
    src, dst = op.operands[0].type.dtype, op.results[0].type.dtype
    if "bool" in (src, dst) and src != dst:
        return "bitcast_convert to or from bool has no ONNX equivalent"
    return None


@lowering("stablehlo.bitcast_convert", check=_check_bitcast, onnx_ops=("BitCast", "Cast", "BitShift", "BitwiseAnd", "Gather"))
def lower_bitcast_convert(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Reinterpret bits: integer <-> integer by Cast at any opset; floats by BitCast from opset 26.

    Below opset 26 float bits are decoded/encoded arithmetically (ops/bitcast.py): exact for every
    non-NaN value; a NaN float gives the canonical quiet NaN bits (sign and payload are lost) and a
    NaN bit pattern gives a NaN. Width changes split or join little-endian pieces along a trailing
    dimension.
    """
    src, dst = op.operands[0].type.dtype, op.results[0].type.dtype
    x = inputs[0]
    if src == dst:
        return x
    sw, dw = dt.bit_width(src), dt.bit_width(dst)
    bits = _to_bits(ctx, x, src)
    if sw == dw:
        return _from_bits(ctx, bits, dst)
    su, du = dt.same_width_unsigned(src), dt.same_width_unsigned(dst)
    axis = ctx.i64([-1])
    if sw > dw:  # one element -> sw/dw trailing pieces, least significant first
        pieces = []
        for k in range(sw // dw):
            part = bits if k == 0 else shift(ctx, bits, ctx.scalar(k * dw, su), su, "RIGHT")
            pieces.append(ctx.op("Unsqueeze", [ctx.cast(part, du), axis]))
        return _from_bits(ctx, ctx.op("Concat", pieces, axis=-1), dst)
    wide = ctx.cast(bits, du)  # zero-extend each piece
    total = None
    for k in range(dw // sw):
        part = ctx.op("Gather", [wide, ctx.const(np.array(k, np.int64))], axis=-1)
        if k:
            part = shift(ctx, part, ctx.scalar(k * sw, du), du, "LEFT")
        total = part if total is None else ctx.op("BitwiseOr", [total, part])
    return _from_bits(ctx, total, dst)


def shift(ctx: LoweringContext, x: str, amount: str, dtype: str, direction: str) -> str:
    """BitShift of unsigned ``x`` (u8/u16/u32/u64 kernels at every opset; >= width gives 0)."""
    return ctx.op("BitShift", [x, amount], direction=direction)


@lowering("stablehlo.reduce_precision", onnx_ops=("BitCast", "Cast"))
def lower_reduce_precision(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Round to a float format with fewer exponent/mantissa bits, like XLA (round to nearest even,
    overflow to inf, values under the normal range flushed to signed zero, NaN kept).

    Formats equal to a Cast round trip (float32 -> bfloat16 -> float32, or the identity) work at
    any opset; the general case works on the bits (BitCast, opset 26).
    """
    dtype = op.results[0].type.dtype
    ebits, mbits = int(op.attrs["exponent_bits"]), int(op.attrs["mantissa_bits"])
    src_e, src_m = dt.exponent_bits(dtype), dt.mantissa_bits(dtype)
    x = inputs[0]
    if ebits >= src_e and mbits >= src_m:
        return x
    if dtype == "float32" and ebits >= src_e and mbits == 7:
        return ctx.cast(ctx.cast(x, "bfloat16"), "float32")
    ctx.require_opset(26, f"stablehlo.reduce_precision to (exponent {ebits}, mantissa {mbits}) bits")
    width = dt.bit_width(dtype)
    u = dt.same_width_unsigned(dtype)
    bits = _to_bits(ctx, x, dtype)
    one = ctx.scalar(1, u)
    if mbits < src_m:
        drop = src_m - mbits
        last = ctx.op("BitwiseAnd", [shift(ctx, bits, ctx.scalar(drop, u), u, "RIGHT"), one])
        bias = ctx.op("Add", [last, ctx.scalar((1 << (drop - 1)) - 1, u)])
        keep = ctx.scalar(((1 << width) - 1) ^ ((1 << drop) - 1), u)
        bits = ctx.op("BitwiseAnd", [ctx.op("Add", [bits, bias]), keep])
    if ebits < src_e:
        exp_mask = ((1 << src_e) - 1) << src_m
        src_bias = (1 << (src_e - 1)) - 1
        new_bias = (1 << (ebits - 1)) - 1
        exponent = ctx.op("BitwiseAnd", [bits, ctx.scalar(exp_mask, u)])
        overflow = ctx.op("Greater", [exponent, ctx.scalar((src_bias + new_bias) << src_m, u)])
        underflow = ctx.op("LessOrEqual", [exponent, ctx.scalar((src_bias - new_bias) << src_m, u)])
        signed_zero = ctx.op("BitwiseAnd", [bits, ctx.scalar(1 << (width - 1), u)])
        signed_inf = ctx.op("BitwiseOr", [signed_zero, ctx.scalar(exp_mask, u)])
        bits = where(ctx, overflow, signed_inf, where(ctx, underflow, signed_zero, bits, u), u)
    return where(ctx, ctx.op("IsNaN", [x]), x, _from_bits(ctx, bits, dtype), dtype, exact_zeros=True)
