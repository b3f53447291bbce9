"""Elementwise arithmetic, math, logic, comparison and conversion ops."""

from __future__ import annotations

import numpy as np

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops._common import compute_in, direct
from jaxconv.onnx.registry import lowering
from jaxconv.stablehlo import ir as hir

# ---- 1:1 table rows -----------------------------------------------------------------------
direct("stablehlo.add", "Add")
direct("stablehlo.subtract", "Sub")
direct("stablehlo.multiply", "Mul")
direct("stablehlo.maximum", "Max")
direct("stablehlo.minimum", "Min")
direct("stablehlo.exponential", "Exp", dt.FLOAT_MATH)
direct("stablehlo.log", "Log", dt.FLOAT_MATH)
direct("stablehlo.sqrt", "Sqrt", dt.FLOAT_MATH)
direct("stablehlo.tanh", "Tanh", dt.FLOAT_MATH)
direct("stablehlo.sine", "Sin", dt.FLOAT_MATH)
direct("stablehlo.cosine", "Cos", dt.FLOAT_MATH)
direct("stablehlo.floor", "Floor", dt.FLOAT_MATH)
direct("stablehlo.ceil", "Ceil", dt.FLOAT_MATH)
direct("stablehlo.logistic", "Sigmoid", dt.FLOAT_MATH)
direct("stablehlo.round_nearest_even", "Round", dt.FLOAT_MATH)


@lowering("stablehlo.divide", onnx_ops=("Div",))
def lower_divide(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Div; integer division guards division by zero and INT_MIN/-1 like XLA."""
    dtype = op.results[0].type.dtype
    if dtype in dt.FLOATS:
        names, work = compute_in(ctx, inputs, [v.type for v in op.operands], dt.FLOAT_MATH)
        return ctx.cast_if(ctx.op("Div", names), work, dtype)
    lhs, rhs = inputs
    zero = ctx.scalar(0, dtype)
    one = ctx.scalar(1, dtype)
    is_zero = ctx.op("Equal", [rhs, zero])
    bad = is_zero
    if dtype in dt.SIGNED:
        info = np.iinfo(dtype)
        overflow = ctx.op("And", [ctx.op("Equal", [lhs, ctx.scalar(info.min, dtype)]),
                                  ctx.op("Equal", [rhs, ctx.scalar(-1, dtype)])])
        bad = ctx.op("Or", [is_zero, overflow])
    safe_rhs = _where(ctx, bad, one, rhs, dtype)
    names, work = compute_in(ctx, [lhs, safe_rhs], [v.type for v in op.operands], dt.ARITH)
    q = ctx.cast_if(ctx.op("Div", names), work, dtype)
    # x / 0 = -1 (all ones for unsigned); INT_MIN / -1 = INT_MIN (= lhs)
    by_zero = ctx.scalar(-1 if dtype in dt.SIGNED else np.iinfo(dtype).max, dtype)
    q = _where(ctx, is_zero, by_zero, q, dtype)
    if dtype in dt.SIGNED:
        q = _where(ctx, overflow, lhs, q, dtype)
    return q


def _where(ctx: LoweringContext, cond: str, a: str, b: str, dtype: str) -> str:
    """Where with a cast detour for dtypes ONNX Runtime's Where has no kernel for."""
    work = dt.compute_dtype(dtype, frozenset({"float16", "float32", "float64", "int32", "int64", "uint8", "int8", "uint32", "string"}))
    if work == dtype:
        return ctx.op("Where", [cond, a, b])
    return ctx.cast(ctx.op("Where", [cond, ctx.cast(a, work), ctx.cast(b, work)]), dtype)


@lowering("stablehlo.negate", onnx_ops=("Neg",))
def lower_negate(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Neg; unsigned negation is 0 - x (wrapping)."""
    dtype = op.results[0].type.dtype
    if dtype in dt.UNSIGNED:
        return ctx.op("Sub", [ctx.scalar(0, dtype), inputs[0]])
    names, work = compute_in(ctx, inputs, [op.operands[0].type], frozenset({"float16", "float32", "float64", "int8", "int16", "int32", "int64"}))
    return ctx.cast_if(ctx.op("Neg", names), work, dtype)


@lowering("stablehlo.abs", onnx_ops=("Abs",))
def lower_abs(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Abs."""
    names, work = compute_in(ctx, inputs, [op.operands[0].type], dt.ARITH)
    return ctx.cast_if(ctx.op("Abs", names), work, op.results[0].type.dtype)


@lowering("stablehlo.rsqrt", onnx_ops=("Sqrt", "Reciprocal"))
def lower_rsqrt(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """1 / sqrt(x)."""
    names, work = compute_in(ctx, inputs, [op.operands[0].type], dt.FLOAT_MATH)
    return ctx.cast_if(ctx.op("Reciprocal", [ctx.op("Sqrt", names)]), work, op.results[0].type.dtype)


_COMPARE = {"EQ": ("Equal", False), "NE": ("Equal", True), "LT": ("Less", False),
            "LE": ("LessOrEqual", False), "GT": ("Greater", False), "GE": ("GreaterOrEqual", False)}


@lowering("stablehlo.compare", onnx_ops=("Equal", "Less", "Greater"))
def lower_compare(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Comparisons (FLOAT, SIGNED, UNSIGNED; TOTALORDER by integer view)."""
    onnx_op, negate = _COMPARE[op.attrs["comparison_direction"]]
    src = op.operands[0].type.dtype
    native = frozenset({"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})
    if onnx_op == "Equal":
        native = native | {"bool"}
    names, _ = compute_in(ctx, inputs, [v.type for v in op.operands], native)
    if src == "bool" and onnx_op != "Equal":
        names = [ctx.cast(n, "int32") for n in names]
    out = ctx.op(onnx_op, names)
    return ctx.op("Not", [out]) if negate else out


@lowering("stablehlo.select", onnx_ops=("Where",))
def lower_select(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Where."""
    cond, a, b = inputs
    return _where(ctx, cond, a, b, op.results[0].type.dtype)


@lowering("stablehlo.convert", onnx_ops=("Cast",))
def lower_convert(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Cast; float to int saturates and maps NaN to 0 like XLA on CPU; x -> bool is x != 0."""
    src = op.operands[0].type.dtype
    dst = op.results[0].type.dtype
    x = inputs[0]
    if src == dst:
        return x
    if dst == "bool":
        return ctx.op("Not", [ctx.op("Equal", [x, ctx.scalar(0, src)])]) if src != "bfloat16" else \
            ctx.op("Not", [ctx.op("Equal", [ctx.cast(x, "float32"), ctx.scalar(0, "float32")])])
    if src in dt.FLOATS and dst in dt.INTS:
        return _float_to_int(ctx, x, src, dst)
    return ctx.cast(x, dst)


def _float_to_int(ctx: LoweringContext, x: str, src: str, dst: str) -> str:
    work = "float64" if dst in ("int64", "uint64", "int32", "uint32") else "float32"
    xf = ctx.cast_if(x, src, work)
    info = np.iinfo(dst)
    lo = ctx.scalar(float(info.min), work)
    # Largest float below or equal to the int max that rounds safely when cast.
    hi_value = float(info.max) if work == "float64" and info.bits <= 32 else float(np.nextafter(np.float64(info.max), 0)) if info.bits == 64 else float(info.max)
    hi = ctx.scalar(hi_value, work)
    is_nan = ctx.op("IsNaN", [xf])
    clamped = ctx.op("Min", [ctx.op("Max", [xf, lo]), hi])
    zeroed = ctx.op("Where", [is_nan, ctx.scalar(0, work), clamped])
    out = ctx.cast(zeroed, dst)
    if info.bits == 64:
        big = ctx.op("GreaterOrEqual", [xf, ctx.scalar(float(info.max), work)])
        out = ctx.op("Where", [big, ctx.scalar(info.max, dst), out])
    return out
