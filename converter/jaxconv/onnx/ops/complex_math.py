"""Complex transcendental functions: exp, expm1, log, log1p, sqrt, rsqrt, power, sin, cos, tan, tanh.

The formulas and their edge cases are XLA's CPU emitter's (``EmitComplexUnaryOp``,
``EmitComplexSqrt``, ``EmitComplexRsqrt``, ``EmitComplexPower``); CHLO's complex asin, acos,
atan, sinh, cosh, asinh, acosh and atanh reach the lowering already expanded into these ops.
"""

from __future__ import annotations

import math
from typing import Callable

from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops._complex import component, pack, parts, select
from jaxconv.onnx.ops.complex_arith import magnitude
from jaxconv.onnx.registry import REGISTRY, complex_lowering
from jaxconv.stablehlo import ir as hir

Halves = tuple[str, str]


def real_fn(ctx: LoweringContext, name: str, inputs: list[str], work: str) -> str:
    """The real lowering of ``stablehlo.<name>`` on ``work`` tensors (shapes unknown to it)."""
    args = [hir.Value(hir.TensorType(work, ())) for _ in inputs]
    op = hir.Op(f"stablehlo.{name}", args, [hir.Value(hir.TensorType(work, ()))], {}, [], "")
    out = REGISTRY[op.name].fn(ctx, op, inputs)
    return out if isinstance(out, str) else out[0]


def _copysign(ctx: LoweringContext, magnitude_: str, sign_of: str, work: str) -> str:
    from jaxconv.onnx.ops.elementwise import sign_bit

    mag = ctx.op("Abs", [magnitude_])
    return select(ctx, sign_bit(ctx, sign_of, work), ctx.op("Neg", [mag]), mag, work)


def _exp(ctx: LoweringContext, z: Halves, w: str) -> Halves:
    a, b = z
    e = ctx.op("Exp", [a])
    return ctx.op("Mul", [e, ctx.op("Cos", [b])]), ctx.op("Mul", [e, ctx.op("Sin", [b])])


def _expm1(ctx: LoweringContext, z: Halves, w: str) -> Halves:
    a, b = z
    zero, one = ctx.scalar(0.0, w), ctx.scalar(1.0, w)
    em1 = real_fn(ctx, "exponential_minus_one", [a], w)
    s = ctx.op("Sin", [ctx.op("Mul", [b, ctx.scalar(0.5, w)])])
    cosm1 = ctx.op("Mul", [ctx.scalar(-2.0, w), ctx.op("Mul", [s, s])])
    cos_b = ctx.op("Add", [cosm1, one])
    re = ctx.op("Add", [ctx.op("Mul", [em1, cos_b]), cosm1])
    im = select(
        ctx,
        ctx.op("Equal", [b, zero]),
        zero,
        ctx.op("Mul", [ctx.op("Add", [em1, one]), ctx.op("Sin", [b])]),
        w,
    )
    return re, im


def _log(ctx: LoweringContext, z: Halves, w: str) -> Halves:
    a, b = z
    return ctx.op("Log", [magnitude(ctx, a, b, w)]), real_fn(ctx, "atan2", [b, a], w)


def _log1p(ctx: LoweringContext, z: Halves, w: str) -> Halves:
    a, b = z
    one = ctx.scalar(1.0, w)
    a1 = ctx.op("Add", [a, one])
    abs_a1, abs_b = ctx.op("Abs", [a1]), ctx.op("Abs", [b])
    hi, lo = ctx.op("Max", [abs_a1, abs_b]), ctx.op("Min", [abs_a1, abs_b])
    hi_m1 = select(ctx, ctx.op("Greater", [a1, abs_b]), a, ctx.op("Sub", [hi, one]), w)
    q = ctx.op("Div", [lo, hi])
    r = ctx.op(
        "Add",
        [
            ctx.op("Mul", [ctx.scalar(0.5, w), real_fn(ctx, "log_plus_one", [ctx.op("Mul", [q, q])], w)]),
            real_fn(ctx, "log_plus_one", [hi_m1], w),
        ],
    )
    re = select(ctx, ctx.op("IsNaN", [r]), lo, r, w)
    return re, real_fn(ctx, "atan2", [b, a1], w)


def _sqrt(ctx: LoweringContext, z: Halves, w: str) -> Halves:
    a, b = z
    zero, inf = ctx.scalar(0.0, w), ctx.scalar(math.inf, w)
    r = magnitude(ctx, a, b, w, 0.5)
    t = ctx.op("Mul", [real_fn(ctx, "atan2", [b, a], w), ctx.scalar(0.5, w)])
    cos, sin = ctx.op("Cos", [t]), ctx.op("Sin", [t])
    abs_b = ctx.op("Abs", [b])
    b_inf, a_pinf, a_ninf = (
        ctx.op("Equal", [abs_b, inf]),
        ctx.op("Equal", [a, inf]),
        ctx.op("Equal", [a, ctx.scalar(-math.inf, w)]),
    )
    re = select(
        ctx,
        ctx.op("Or", [b_inf, a_pinf]),
        inf,
        select(ctx, ctx.op("And", [a_ninf, ctx.op("Not", [b_inf])]), zero, ctx.op("Mul", [r, cos]), w),
        w,
    )
    im = select(
        ctx,
        ctx.op("Or", [b_inf, a_ninf]),
        _copysign(ctx, inf, b, w),
        select(
            ctx,
            ctx.op("IsNaN", [r]),
            ctx.scalar(math.nan, w),
            select(ctx, ctx.op("Equal", [sin, zero]), sin, ctx.op("Mul", [r, sin]), w),
            w,
        ),
        w,
    )
    r_zero = ctx.op("Equal", [r, zero])
    return select(ctx, r_zero, zero, re, w), select(ctx, r_zero, zero, im, w)


def _rsqrt(ctx: LoweringContext, z: Halves, w: str) -> Halves:
    a, b = z
    zero, inf = ctx.scalar(0.0, w), ctx.scalar(math.inf, w)
    r = magnitude(ctx, a, b, w, -0.5)
    t = ctx.op("Mul", [real_fn(ctx, "atan2", [b, a], w), ctx.scalar(-0.5, w)])
    re, im = ctx.op("Mul", [r, ctx.op("Cos", [t])]), ctx.op("Mul", [r, ctx.op("Sin", [t])])
    zz = ctx.op("And", [ctx.op("Equal", [a, zero]), ctx.op("Equal", [b, zero])])
    edge = ctx.op(
        "Or",
        [
            ctx.op("And", [ctx.op("Equal", [ctx.op("Abs", [b]), inf]), ctx.op("IsNaN", [a])]),
            ctx.op("Equal", [ctx.op("Abs", [a]), inf]),
        ],
    )
    a0, nb0 = _copysign(ctx, zero, a, w), ctx.op("Neg", [_copysign(ctx, zero, b, w)])
    return (
        select(ctx, zz, inf, select(ctx, edge, a0, re, w), w),
        select(ctx, zz, ctx.scalar(math.nan, w), select(ctx, edge, nb0, im, w), w),
    )


def _sin_cos(is_sin: bool) -> Callable[[LoweringContext, Halves, str], Halves]:
    def fn(ctx: LoweringContext, z: Halves, w: str) -> Halves:
        x, y = z
        half = ctx.scalar(0.5, w)
        e = ctx.op("Exp", [y])
        he, hne = ctx.op("Mul", [half, e]), ctx.op("Div", [half, e])
        sinh, cosh = ctx.op("Sub", [he, hne]), ctx.op("Add", [he, hne])
        sx, cx = ctx.op("Sin", [x]), ctx.op("Cos", [x])
        if is_sin:
            return ctx.op("Mul", [sx, cosh]), ctx.op("Mul", [cx, sinh])
        return ctx.op("Mul", [cx, cosh]), ctx.op("Neg", [ctx.op("Mul", [sx, sinh])])

    return fn


def _tanh_of(ctx: LoweringContext, a: str, b: str, w: str) -> Halves:
    zero, four, inf = ctx.scalar(0.0, w), ctx.scalar(4.0, w), ctx.scalar(math.inf, w)
    two_a = ctx.op("Add", [a, a])
    e2 = real_fn(ctx, "exponential_minus_one", [two_a], w)
    en2 = real_fn(ctx, "exponential_minus_one", [ctx.op("Neg", [two_a])], w)
    num_r = ctx.op("Sub", [e2, en2])
    cos_b, sin_b = ctx.op("Cos", [b]), ctx.op("Sin", [b])
    num_i = ctx.op("Mul", [four, ctx.op("Mul", [cos_b, sin_b])])
    sum_m2 = ctx.op("Add", [e2, en2])
    denom = ctx.op("Add", [sum_m2, ctx.op("Mul", [ctx.op("Mul", [cos_b, cos_b]), four])])
    real = select(
        ctx,
        ctx.op("Equal", [sum_m2, inf]),
        _copysign(ctx, ctx.scalar(1.0, w), a, w),
        ctx.op("Div", [num_r, denom]),
        w,
    )
    imag = ctx.op("Div", [num_i, denom])
    a_inf = ctx.op("Equal", [ctx.op("Abs", [a]), inf])
    sin2b_nan = ctx.op("IsNaN", [num_i])
    real = select(ctx, ctx.op("And", [sin2b_nan, ctx.op("Not", [a_inf])]), ctx.scalar(math.nan, w), real, w)
    imag = select(
        ctx, ctx.op("Or", [ctx.op("Equal", [b, zero]), ctx.op("And", [a_inf, sin2b_nan])]), zero, imag, w
    )
    return real, imag


def _tanh(ctx: LoweringContext, z: Halves, w: str) -> Halves:
    return _tanh_of(ctx, z[0], z[1], w)


def _tan(ctx: LoweringContext, z: Halves, w: str) -> Halves:
    re, im = _tanh_of(ctx, ctx.op("Neg", [z[1]]), z[0], w)  # tan(x + iy) = -i tanh(-y + ix)
    return im, ctx.op("Neg", [re])


_UNARY = {
    "exponential": _exp,
    "exponential_minus_one": _expm1,
    "log": _log,
    "log_plus_one": _log1p,
    "sqrt": _sqrt,
    "rsqrt": _rsqrt,
    "sine": _sin_cos(True),
    "cosine": _sin_cos(False),
    "tanh": _tanh,
    "tan": _tan,
}


@complex_lowering(*(f"stablehlo.{k}" for k in _UNARY), onnx_ops=("Exp", "Sin", "Cos", "Log", "Sqrt", "Atan"))
def lower_unary(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """A complex elementary function on (re, im) halves, as XLA's CPU emitter computes it."""
    w = component(op.results[0].type.dtype)
    return pack(ctx, *_UNARY[op.short_name](ctx, parts(ctx, inputs[0]), w))


@complex_lowering("stablehlo.power", onnx_ops=("Pow", "Exp", "Log", "Cos", "Sin"))
def lower_power(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """(a + bi)^(c + di) = |z|^c e^(-d arg z) (cos q + i sin q), q = c arg z + d log|z|, with XLA's cases
    for 0^w, z^0, 1^w and inf^c."""
    w = component(op.results[0].type.dtype)
    (a, b), (c, d) = parts(ctx, inputs[0]), parts(ctx, inputs[1])
    o = ctx.op
    zero, one, inf = ctx.scalar(0.0, w), ctx.scalar(1.0, w), ctx.scalar(math.inf, w)
    r = magnitude(ctx, a, b, w)
    arg = real_fn(ctx, "atan2", [b, a], w)
    coeff = o("Mul", [real_fn(ctx, "power", [r, c], w), o("Exp", [o("Mul", [o("Neg", [d]), arg])])])
    q = o("Add", [o("Mul", [c, arg]), o("Mul", [d, o("Log", [r])])])
    re, im = o("Mul", [coeff, o("Cos", [q])]), o("Mul", [coeff, o("Sin", [q])])

    def case(cond: str, vr: str, vi: str) -> None:
        nonlocal re, im
        re, im = select(ctx, cond, vr, re, w), select(ctx, cond, vi, im, w)

    d0, c0 = o("Equal", [d, zero]), o("Equal", [c, zero])
    case(
        o("And", [o("And", [o("Equal", [r, zero]), d0]), o("LessOrEqual", [zero, c])]),
        select(ctx, c0, one, zero, w),
        zero,
    )
    case(o("And", [c0, d0]), one, zero)
    case(o("And", [o("Equal", [a, one]), o("Equal", [b, zero])]), one, zero)
    inf_real = o("And", [o("And", [o("Equal", [a, inf]), o("Equal", [b, zero])]), d0])
    case(o("And", [inf_real, o("Greater", [c, zero])]), inf, zero)
    case(o("And", [inf_real, o("Less", [c, zero])]), zero, zero)
    return pack(ctx, re, im)
