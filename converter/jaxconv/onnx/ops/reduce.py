"""Reductions: reduce with add/mul/max/min/and/or bodies (NaN-propagating like StableHLO)."""

from __future__ import annotations

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.registry import lowering
from jaxconv.stablehlo import ir as hir

_BODY_TO_ONNX = {
    "stablehlo.add": "ReduceSum", "stablehlo.multiply": "ReduceProd",
    "stablehlo.maximum": "ReduceMax", "stablehlo.minimum": "ReduceMin",
    "stablehlo.and": "ReduceMin", "stablehlo.or": "ReduceMax",
}
_COMBINE = {"ReduceSum": "Add", "ReduceProd": "Mul", "ReduceMax": "Max", "ReduceMin": "Min"}
_REDUCE_NATIVE = {
    "ReduceSum": frozenset({"float16", "float32", "float64", "int32", "int64"}),
    "ReduceProd": frozenset({"float16", "float32", "float64", "int32", "int64"}),
    "ReduceMax": frozenset({"float16", "float32", "float64", "int32", "int64", "int8", "uint8"}),
    "ReduceMin": frozenset({"float16", "float32", "float64", "int32", "int64", "int8", "uint8"}),
}


def body_kind(block: hir.Block) -> str | None:
    """The single binary op a reducer body applies to its two arguments, or None."""
    if len(block.ops) != 1 or len(block.returns) != 1:
        return None
    op = block.ops[0]
    if op.results[0] is not block.returns[0] or {v.id for v in op.operands} != {a.id for a in block.args}:
        return None
    return op.name


def _check_reduce(op: hir.Op) -> str | None:
    if len(op.results) != 1:
        return None if _is_argminmax(op) else f"variadic reduce with {len(op.results)} results and this body is not lowered yet"
    kind = body_kind(op.regions[0])
    if kind not in _BODY_TO_ONNX:
        return f"reduce body {kind or 'with several ops'} is not lowered yet"
    return None


def _is_argminmax(op: hir.Op) -> bool:
    from jaxconv.onnx.ops import indexing

    return getattr(indexing, "match_argminmax", lambda _op: None)(op) is not None


@lowering("stablehlo.reduce", check=_check_reduce, onnx_ops=("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ArgMax"))
def lower_reduce(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """Reduce* with the init value folded in; max/min propagate NaN."""
    if len(op.results) != 1:
        from jaxconv.onnx.ops import indexing

        return indexing.lower_argminmax(ctx, op, inputs)
    kind = body_kind(op.regions[0])
    onnx_op = _BODY_TO_ONNX[kind]
    x, init = inputs
    dtype = op.operands[0].type.dtype
    axes = ctx.i64(op.attrs["dimensions"])
    if dtype == "bool":
        xi = ctx.cast(x, "int32")
        out = ctx.op(onnx_op, [xi, axes], keepdims=0)
        combined = ctx.op(_COMBINE[onnx_op], [out, ctx.cast(init, "int32")])
        return ctx.cast(combined, "bool")
    work = dt.compute_dtype(dtype, _REDUCE_NATIVE[onnx_op])
    xw = ctx.cast_if(x, dtype, work)
    iw = ctx.cast_if(init, dtype, work)
    out = ctx.op(onnx_op, [xw, axes], keepdims=0)
    if onnx_op in ("ReduceMax", "ReduceMin") and work in dt.FLOATS:
        has_nan = ctx.op("ReduceMax", [ctx.cast(ctx.op("IsNaN", [xw]), "int32"), axes], keepdims=0)
        nan = ctx.scalar(float("nan"), work)
        out = ctx.op("Where", [ctx.cast(has_nan, "bool"), nan, out])
    if not _is_identity(ctx.constant_value(init), onnx_op):
        out = ctx.op(_COMBINE[onnx_op], [out, iw])
    return ctx.cast_if(out, work, dtype)


def _is_identity(value, onnx_op: str) -> bool:
    """True when ``value`` is the neutral element of the reduction (so combining is a no-op)."""
    import numpy as np

    if value is None or value.size != 1:
        return False
    v = value.reshape(-1)[0]
    if onnx_op == "ReduceSum":
        return bool(v == 0)
    if onnx_op == "ReduceProd":
        return bool(v == 1)
    if value.dtype.kind == "f" or value.dtype.name == "bfloat16":
        return bool(np.isinf(float(v)) and (float(v) < 0) == (onnx_op == "ReduceMax"))
    if value.dtype.kind in "iu":
        info = np.iinfo(value.dtype)
        return bool(v == (info.min if onnx_op == "ReduceMax" else info.max))
    return False
