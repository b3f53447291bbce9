"""Float <-> same-width integer bit reinterpretation without ONNX BitCast (opsets below 26).

The IEEE fields are decoded or encoded with exact arithmetic:

- bits -> float: sign, biased exponent and mantissa are cut out with BitShift/BitwiseAnd on the
  unsigned bits, the magnitude is ``significand * 2**(exponent - bias - mantissa_bits)`` computed
  in float64 (the significand has at most 53 bits and the power of two comes from a constant
  table, so the product is the exact value), then Cast to the target float, which is exact
  because the value is representable there.
- float -> bits: the exponent is ``floor(log2|x|)`` from Log, corrected by one step against a table
  of powers of two; the mantissa is ``|x| / 2**e * 2**mantissa_bits`` (exact in float64), with the
  implicit leading bit masked off; the sign of zeros comes from ``1/x``.

Every non-NaN value (signed zeros, subnormals, infinities) maps exactly. NaN payloads and NaN
signs cannot be carried without BitCast: a NaN bit pattern becomes a NaN (quiet, positive), and a
NaN float becomes the canonical quiet NaN pattern (0x7FC00000 for float32, the bits of jnp.nan).
"""

from __future__ import annotations

import math

import numpy as np

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext

_WORK = "float64"  # holds every float32/float16/bfloat16 value and every float64 value exactly


def _fields(dtype: str) -> tuple[int, int, int]:
    """(bit width, exponent bits, mantissa bits) of a float dtype."""
    return dt.bit_width(dtype), dt.exponent_bits(dtype), dt.mantissa_bits(dtype)


def _powers_of_two(lo: int, hi: int) -> np.ndarray:
    """``2.0**k`` for k in lo..hi as float64 (ldexp is exact, subnormals and inf included)."""
    return np.ldexp(np.ones(hi - lo + 1), np.arange(lo, hi + 1)).astype(np.float64)


def _gather(ctx: LoweringContext, table: np.ndarray, index: str) -> str:
    """``table[index]`` for an int64 index tensor."""
    return ctx.op("Gather", [ctx.const(table, _WORK), index], axis=0)


def bits_to_float(ctx: LoweringContext, bits: str, dtype: str) -> str:
    """The float of ``dtype`` whose bits are the same-width unsigned integer ``bits``.

    NaN bit patterns give a NaN of unspecified payload and sign.
    """
    width, ebits, mbits = _fields(dtype)
    bias = (1 << (ebits - 1)) - 1
    u = "uint64" if width == 64 else "uint32"  # uint8/uint16 are widened (zero-extended) first
    wide = ctx.cast_if(bits, dt.same_width_unsigned(dtype), u)
    exp_max = (1 << ebits) - 1
    sign = ctx.op("BitShift", [wide, ctx.scalar(width - 1, u)], direction="RIGHT")
    shifted = ctx.op("BitShift", [wide, ctx.scalar(mbits, u)], direction="RIGHT")
    biased = ctx.op("BitwiseAnd", [shifted, ctx.scalar(exp_max, u)])
    mant = ctx.op("BitwiseAnd", [wide, ctx.scalar((1 << mbits) - 1, u)])
    e_idx = ctx.cast(biased, "int64")
    # significand: mantissa plus the implicit bit for normal numbers (< 2**53: exact in float64)
    implicit = np.where(np.arange(exp_max + 1) > 0, float(1 << mbits), 0.0)
    significand = ctx.op("Add", [ctx.cast(mant, _WORK), _gather(ctx, implicit, e_idx)])
    # scale 2**(max(E, 1) - bias - mbits); inf for E = max, so the product is +inf there
    scale = _powers_of_two(1 - bias - mbits, exp_max - 1 - bias - mbits)
    scale = np.concatenate([scale[:1], scale, [np.inf]])
    magnitude = ctx.op("Mul", [significand, _gather(ctx, scale, e_idx)])
    # factor index: sign + 2 * is_nan, factors (+1, -1, NaN, NaN); 0 * -1 gives -0
    is_nan = ctx.op("And", [ctx.op("Equal", [biased, ctx.scalar(exp_max, u)]),
                            ctx.op("Not", [ctx.op("Equal", [mant, ctx.scalar(0, u)])])])
    f_idx = ctx.op("Add", [ctx.cast(sign, "int64"), ctx.op("Mul", [ctx.cast(is_nan, "int64"), ctx.scalar(2, "int64")])])
    value = ctx.op("Mul", [magnitude, _gather(ctx, np.array([1.0, -1.0, np.nan, np.nan]), f_idx)])
    if dtype == _WORK:
        return value
    value = ctx.cast(value, "float32")  # exact; bfloat16 and float16 are reached through float32
    return ctx.cast_if(value, "float32", dtype)


def float_to_bits(ctx: LoweringContext, x: str, dtype: str) -> str:
    """The same-width unsigned integer holding the bits of ``x`` (a ``dtype`` float).

    Exact for every value but NaN, which gives the canonical quiet NaN bits (sign 0, top mantissa bit).
    """
    width, ebits, mbits = _fields(dtype)
    bias = (1 << (ebits - 1)) - 1
    exp_max = (1 << ebits) - 1
    e_min = 1 - bias  # exponent of the smallest normal
    e_low = e_min - mbits  # exponent of the smallest subnormal
    xf = ctx.cast_if(ctx.cast_if(x, dtype, "float32") if dtype == "bfloat16" else x,
                     "float32" if dtype == "bfloat16" else dtype, _WORK)
    zero, one = ctx.scalar(0.0, _WORK), ctx.scalar(1.0, _WORK)
    is_nan = ctx.op("IsNaN", [xf])
    is_inf = ctx.op("IsInf", [xf])
    a = ctx.op("Abs", [xf])
    is_zero = ctx.op("Equal", [a, zero])
    special = ctx.op("Or", [ctx.op("Or", [is_nan, is_inf]), is_zero])
    finite = ctx.op("Where", [special, one, a])  # a positive finite stand-in where |x| is 0, inf or NaN
    # exponent estimate floor(log2 |x|), clamped to the type's range, then corrected by one step
    log2 = ctx.op("Mul", [ctx.op("Log", [finite]), ctx.scalar(1.0 / math.log(2.0), _WORK)])
    est = ctx.op("Max", [ctx.op("Floor", [log2]), ctx.scalar(float(e_low), _WORK)])
    est = ctx.op("Min", [est, ctx.scalar(float(bias), _WORK)])
    est = ctx.cast(est, "int64")
    low = ctx.scalar(e_low, "int64")
    p = _gather(ctx, _powers_of_two(e_low, bias), ctx.op("Sub", [est, low]))
    too_high = ctx.cast(ctx.op("Greater", [p, finite]), "int64")
    too_low = ctx.cast(ctx.op("LessOrEqual", [ctx.op("Add", [p, p]), finite]), "int64")
    e = ctx.op("Add", [ctx.op("Sub", [est, too_high]), too_low])
    # biased exponent: 0 for zeros and subnormals, exp_max for inf and NaN
    biased = ctx.op("Max", [ctx.op("Add", [e, ctx.scalar(bias, "int64")]), ctx.scalar(0, "int64")])
    biased = ctx.op("Where", [is_zero, ctx.scalar(0, "int64"), biased])
    biased = ctx.op("Where", [ctx.op("Or", [is_inf, is_nan]), ctx.scalar(exp_max, "int64"), biased])
    # mantissa: |x| / 2**max(e, e_min) * 2**mbits is an integer below 2**(mbits + 1); drop the implicit bit
    e_scale = ctx.op("Sub", [ctx.op("Max", [e, ctx.scalar(e_min, "int64")]), low])
    a_fin = ctx.op("Where", [special, zero, a])
    q = ctx.op("Mul", [ctx.op("Div", [a_fin, _gather(ctx, _powers_of_two(e_low, bias), e_scale)]),
                       ctx.scalar(float(1 << mbits), _WORK)])
    mant = ctx.op("BitwiseAnd", [ctx.cast(q, "int64"), ctx.scalar((1 << mbits) - 1, "int64")])
    mant = ctx.op("Where", [is_nan, ctx.scalar(1 << (mbits - 1), "int64"), mant])
    # sign: x < 0, or 1/x < 0 for -0; NaN gets sign 0
    negative = ctx.op("Or", [ctx.op("Less", [xf, zero]), ctx.op("Less", [ctx.op("Reciprocal", [xf]), zero])])
    negative = ctx.op("And", [negative, ctx.op("Not", [is_nan])])
    sign_value = np.iinfo(np.int64).min if width == 64 else 1 << (width - 1)  # 2**63 wraps to INT64_MIN
    sign = ctx.op("Mul", [ctx.cast(negative, "int64"), ctx.scalar(sign_value, "int64")])
    total = ctx.op("Add", [ctx.op("Add", [sign, ctx.op("Mul", [biased, ctx.scalar(1 << mbits, "int64")])]), mant])
    return ctx.cast(total, dt.same_width_unsigned(dtype))  # below 2**width: Cast keeps the bits
