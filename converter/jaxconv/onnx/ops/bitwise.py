"""Logic and bit operations: and/or/xor/not, shifts, popcnt, count_leading_zeros.

Booleans use the logical ONNX ops; integers the Bitwise* ops (opset 18). Shifts follow
StableHLO: a shift amount that is negative or at least the bit width gives 0 (left and
logical right) or the sign fill (arithmetic right). Opset 28's BitShift has exactly that rule
for every integer type; below 28 the value is shifted as the same-width unsigned type, whose
BitShift already gives 0 for out-of-range amounts.
"""

from __future__ import annotations

from typing import Callable

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.registry import lowering
from jaxconv.stablehlo import ir as hir

SIGNED_SHIFT_OPSET = 28


def _logic(bool_op: str, int_op: str) -> Callable[[LoweringContext, hir.Op, list[str]], str]:
    def lower(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
        return ctx.op(bool_op if op.results[0].type.dtype == "bool" else int_op, inputs)

    lower.__doc__ = f"{bool_op} for booleans, {int_op} for integers."
    return lower


lowering("stablehlo.and", onnx_ops=("And", "BitwiseAnd"))(_logic("And", "BitwiseAnd"))
lowering("stablehlo.or", onnx_ops=("Or", "BitwiseOr"))(_logic("Or", "BitwiseOr"))
lowering("stablehlo.xor", onnx_ops=("Xor", "BitwiseXor"))(_logic("Xor", "BitwiseXor"))
lowering("stablehlo.not", onnx_ops=("Not", "BitwiseNot"))(_logic("Not", "BitwiseNot"))


def unsigned_shift(ctx: LoweringContext, x: str, amount: str, dtype: str, direction: str) -> str:
    """Shift ``x`` of integer ``dtype`` as its same-width unsigned type (logical); amounts read as unsigned."""
    u = dt.same_width_unsigned(dtype)
    out = ctx.op("BitShift", [ctx.cast_if(x, dtype, u), ctx.cast_if(amount, dtype, u)], direction=direction)
    return ctx.cast_if(out, u, dtype)


def _bitshift_28(ctx: LoweringContext, x: str, amount: str, direction: str) -> str:
    return ctx.op("BitShift", [x, amount], direction=direction)


@lowering("stablehlo.shift_left", onnx_ops=("BitShift",))
def lower_shift_left(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """BitShift LEFT; amounts >= bit width (or negative) give 0."""
    dtype = op.results[0].type.dtype
    x, s = inputs
    if ctx.opset >= SIGNED_SHIFT_OPSET:
        return _bitshift_28(ctx, x, s, "LEFT")
    return unsigned_shift(ctx, x, s, dtype, "LEFT")


@lowering("stablehlo.shift_right_logical", onnx_ops=("BitShift",))
def lower_shift_right_logical(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """BitShift RIGHT on the unsigned view (zero fill); amounts >= bit width give 0."""
    dtype = op.results[0].type.dtype
    x, s = inputs
    if dtype in dt.UNSIGNED and ctx.opset >= SIGNED_SHIFT_OPSET:
        return _bitshift_28(ctx, x, s, "RIGHT")
    return unsigned_shift(ctx, x, s, dtype, "RIGHT")


@lowering("stablehlo.shift_right_arithmetic", onnx_ops=("BitShift",))
def lower_shift_right_arithmetic(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Sign-filling right shift (unsigned types fill with their top bit); amounts >= bit width give 0 or all ones."""
    dtype = op.results[0].type.dtype
    signed = dt.same_width_signed(dtype)  # unsigned values fill with their top bit too
    x, s = (ctx.cast_if(n, dtype, signed) for n in inputs)
    if ctx.opset >= SIGNED_SHIFT_OPSET:
        return ctx.cast_if(_bitshift_28(ctx, x, s, "RIGHT"), signed, dtype)
    # m = -1 for negative x, else 0;  x >>a s == ((x ^ m) >>u s) ^ m, also for s >= width.
    m = ctx.op("Sub", [ctx.scalar(0, signed), ctx.cast(ctx.op("Less", [x, ctx.scalar(0, signed)]), signed)])
    shifted = unsigned_shift(ctx, ctx.op("BitwiseXor", [x, m]), s, signed, "RIGHT")
    return ctx.cast_if(ctx.op("BitwiseXor", [shifted, m]), signed, dtype)


def _container(dtype: str) -> str:
    return "uint64" if dt.bit_width(dtype) == 64 else "uint32"


def _zero_extend(ctx: LoweringContext, x: str, dtype: str) -> tuple[str, str]:
    """``x``'s bits as an unsigned u32/u64 value (no sign extension); returns (name, dtype)."""
    work = _container(dtype)
    return ctx.cast_if(ctx.cast_if(x, dtype, dt.same_width_unsigned(dtype)), dt.same_width_unsigned(dtype), work), work


def popcount(ctx: LoweringContext, x: str, work: str) -> str:
    """Set bits of unsigned u32/u64 ``x`` (SWAR: pairs, nibbles, bytes, then one multiply)."""
    width = dt.bit_width(work)

    def c(v: int) -> str:
        return ctx.scalar(v, work)

    def rshift(v: str, k: int) -> str:
        return ctx.op("BitShift", [v, c(k)], direction="RIGHT")

    def pattern(byte: int) -> int:
        return int.from_bytes(bytes([byte]) * (width // 8), "little")

    x = ctx.op("Sub", [x, ctx.op("BitwiseAnd", [rshift(x, 1), c(pattern(0x55))])])
    x = ctx.op("Add", [ctx.op("BitwiseAnd", [x, c(pattern(0x33))]), ctx.op("BitwiseAnd", [rshift(x, 2), c(pattern(0x33))])])
    x = ctx.op("BitwiseAnd", [ctx.op("Add", [x, rshift(x, 4)]), c(pattern(0x0F))])
    return rshift(ctx.op("Mul", [x, c(pattern(0x01))]), width - 8)


@lowering("stablehlo.popcnt", onnx_ops=("BitwiseAnd", "BitShift"))
def lower_popcnt(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Population count by SWAR on the zero-extended unsigned bits."""
    dtype = op.results[0].type.dtype
    x, work = _zero_extend(ctx, inputs[0], dtype)
    return ctx.cast(popcount(ctx, x, work), dtype)


@lowering("stablehlo.count_leading_zeros", onnx_ops=("BitwiseOr", "BitShift"))
def lower_count_leading_zeros(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Bit width minus the bit length: smear the highest set bit down, then count the ones."""
    dtype = op.results[0].type.dtype
    x, work = _zero_extend(ctx, inputs[0], dtype)
    k = 1
    while k < dt.bit_width(dtype):
        x = ctx.op("BitwiseOr", [x, ctx.op("BitShift", [x, ctx.scalar(k, work)], direction="RIGHT")])
        k *= 2
    length = popcount(ctx, x, work)
    return ctx.cast(ctx.op("Sub", [ctx.scalar(dt.bit_width(dtype), work), length]), dtype)
