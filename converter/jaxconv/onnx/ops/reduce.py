"""Reductions: reduce with add/mul/max/min/and/or/xor bodies, every dtype, NaN-propagating max/min."""

from __future__ import annotations

from typing import Callable

import numpy as np

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.registry import lowering
from jaxconv.stablehlo import ir as hir

KINDS = {
    "stablehlo.add": "add", "stablehlo.multiply": "mul", "stablehlo.maximum": "max",
    "stablehlo.minimum": "min", "stablehlo.and": "and", "stablehlo.or": "or", "stablehlo.xor": "xor",
}
_REDUCE_OP = {"add": "ReduceSum", "mul": "ReduceProd", "max": "ReduceMax", "min": "ReduceMin"}
_ELEMENTWISE = {"add": "Add", "mul": "Mul", "max": "Max", "min": "Min"}
_BITWISE = {"and": "BitwiseAnd", "or": "BitwiseOr", "xor": "BitwiseXor"}
_LOGICAL = {"and": "And", "or": "Or", "xor": "Xor", "add": "Or", "mul": "And", "max": "Or", "min": "And"}
# ONNX Runtime CPU kernels of ReduceSum/Prod and ReduceMax/Min.
_SUM_NATIVE = frozenset({"float32", "float64", "int32", "int64"})
_MAX_NATIVE = frozenset({"float16", "float32", "float64", "int8", "uint8", "int32", "int64"})
# Elementwise Max/Min kernels (no i16/u16).
_MAXMIN_NATIVE = frozenset({"float16", "float32", "float64", "int8", "uint8", "int32", "int64", "uint32", "uint64"})


def body_kind(block: hir.Block) -> str | None:
    """The single binary op a reducer body applies to its two arguments, or None."""
    if len(block.ops) != 1 or len(block.returns) != 1 or len(block.args) != 2:
        return None
    op = block.ops[0]
    if op.results[0] is not block.returns[0] or {v.id for v in op.operands} != {a.id for a in block.args}:
        return None
    return op.name


def reducer_kind(block: hir.Block) -> str | None:
    """'add', 'mul', 'max', 'min', 'and', 'or' or 'xor' for a one-op reducer body, else None."""
    return KINDS.get(body_kind(block) or "")


def work_dtype(kind: str, dtype: str) -> str:
    """The dtype a reduction of ``kind`` over ``dtype`` is computed in (results are cast back).

    Sums and products of narrow integers wrap identically in a wider type; float16/bfloat16
    accumulate in float32; unsigned 64-bit max/min go through int64 with the sign bit flipped.
    """
    if dtype in ("float16", "bfloat16"):
        return "float32" if kind in ("add", "mul") or dtype == "bfloat16" else dtype
    if kind in ("add", "mul"):
        if dtype in _SUM_NATIVE:
            return dtype
        return "int64" if dtype in ("uint32", "uint64") else "int32"
    if kind in ("max", "min"):
        if dtype in _MAX_NATIVE:
            return dtype
        return "int64" if dtype in ("uint32", "uint64") else "int32"
    return dtype


def identity_value(kind: str, dtype: str) -> np.ndarray:
    """The neutral element of ``kind`` in ``dtype``."""
    np_dtype = dt.numpy_dtype(dtype)
    if dtype == "bool":
        return np.array(kind in ("and", "mul", "min"), dtype=bool)
    if kind in ("add", "or", "xor"):
        return np.zeros((), np_dtype)
    if kind == "mul":
        return np.ones((), np_dtype)
    if kind == "and":
        return np.array(-1).astype(np_dtype) if dtype in dt.SIGNED else np.array(np.iinfo(np_dtype).max, np_dtype)
    floating = dtype in dt.FLOATS
    if kind == "max":
        return np.array(-np.inf if floating else np.iinfo(np_dtype).min).astype(np_dtype)
    return np.array(np.inf if floating else np.iinfo(np_dtype).max).astype(np_dtype)


def is_identity(value: np.ndarray | None, kind: str, dtype: str) -> bool:
    """True when ``value`` is a scalar equal to the neutral element of ``kind``."""
    if value is None or value.size != 1:
        return False
    v = np.asarray(value).reshape(())
    ident = identity_value(kind, dtype)
    if dtype in dt.FLOATS:
        a, b = float(v), float(ident)
        return a == b and np.signbit(a) == np.signbit(b) or (kind == "add" and a == 0.0)
    return bool(v == ident)


def combine(ctx: LoweringContext, kind: str, a: str, b: str, dtype: str) -> str:
    """Elementwise ``kind`` of two tensors of ``dtype`` (cast detours where ORT lacks a kernel)."""
    if dtype == "bool":
        return ctx.op(_LOGICAL[kind], [a, b])
    if kind in _BITWISE:
        return ctx.op(_BITWISE[kind], [a, b])
    native = _MAXMIN_NATIVE if kind in ("max", "min") else dt.ARITH
    work = dt.compute_dtype(dtype, native)
    out = ctx.op(_ELEMENTWISE[kind], [ctx.cast_if(a, dtype, work), ctx.cast_if(b, dtype, work)])
    return ctx.cast_if(out, work, dtype)


def _check_reduce(op: hir.Op) -> str | None:
    if len(op.results) != 1:
        if _is_argminmax(op):
            return None
        return f"variadic reduce with {len(op.results)} results and this body is not lowered yet"
    kind = reducer_kind(op.regions[0])
    if kind is None:
        name = body_kind(op.regions[0])
        return f"reduce body {name or 'with several ops'} is not lowered yet"
    dtype = op.operands[0].type.dtype
    if needs_static_extent(kind, dtype):
        shape = op.operands[0].type.shape
        if any(shape[d] is None for d in op.attrs["dimensions"]):
            return f"{dtype} {kind} reduction over a dynamic dimension is not lowered yet (it must wrap exactly)"
    return None


def _is_argminmax(op: hir.Op) -> bool:
    from jaxconv.onnx.ops import indexing

    return getattr(indexing, "match_argminmax", lambda _op: None)(op) is not None


@lowering("stablehlo.reduce", check=_check_reduce,
          onnx_ops=("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "BitwiseXor", "ArgMax"))
def lower_reduce(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str] | str:
    """Reduce* with the init value folded in; max/min propagate NaN; bitwise bodies as a halving tree."""
    if len(op.results) != 1:
        from jaxconv.onnx.ops import indexing

        return indexing.lower_argminmax(ctx, op, inputs)
    kind = reducer_kind(op.regions[0])
    assert kind is not None
    x, init = inputs
    xt = op.operands[0].type
    dims = sorted(op.attrs["dimensions"])
    dtype = xt.dtype
    identity = is_identity(ctx.constant_value(init), kind, dtype)
    if not dims:
        return x  # XLA folds a reduce over no dimensions to its operand, init value unused.
    if any(xt.shape[d] == 0 for d in dims):
        return _broadcast_init(ctx, init, x, xt, op.results[0].type, dims)
    out = reduce_axes(ctx, kind, x, dtype, dims, xt.shape)
    return out if identity else combine(ctx, kind, out, init, dtype)


def reduce_axes(ctx: LoweringContext, kind: str, x: str, dtype: str, axes: list[int],
                shape: tuple[int | None, ...], keepdims: bool = False) -> str:
    """Reduce ``x`` over ``axes`` with ``kind`` (no init value), result in ``dtype``."""
    axes_t = ctx.i64(axes)
    if dtype == "bool":
        xi = ctx.cast(x, "int32")
        if kind == "xor":
            total = ctx.op("ReduceSum", [xi, axes_t], keepdims=int(keepdims))
            return ctx.cast(ctx.op("BitwiseAnd", [total, ctx.scalar(1, "int32")]), "bool")
        onnx_op = "ReduceMax" if kind in ("or", "add", "max") else "ReduceMin"
        return ctx.cast(ctx.op(onnx_op, [xi, axes_t], keepdims=int(keepdims)), "bool")
    if kind in _BITWISE:
        return tree_reduce(ctx, x, axes, shape, lambda a, b: ctx.op(_BITWISE[kind], [a, b]), keepdims)
    if dtype in dt.INTS and kind in ("add", "mul"):
        return _integer_sum_or_product(ctx, kind, x, dtype, axes, shape, keepdims)
    work = work_dtype(kind, dtype)
    flip = dtype == "uint64" and kind in ("max", "min")
    if flip:
        sign = ctx.scalar(np.uint64(1 << 63), "uint64")
        xw = ctx.cast(ctx.op("BitwiseXor", [x, sign]), "int64")
    else:
        xw = ctx.cast_if(x, dtype, work)
    out = ctx.op(_REDUCE_OP[kind], [xw, axes_t], keepdims=int(keepdims))
    if kind in ("max", "min") and work in dt.FLOATS:
        has_nan = ctx.op("ReduceMax", [ctx.cast(ctx.op("IsNaN", [xw]), "uint8"), axes_t], keepdims=int(keepdims))
        out = ctx.op("Where", [ctx.cast(has_nan, "bool"), ctx.scalar(float("nan"), work), out])
    if flip:
        return ctx.op("BitwiseXor", [ctx.cast(out, "uint64"), sign])
    return ctx.cast_if(out, work, dtype)


def _integer_sum_or_product(ctx: LoweringContext, kind: str, x: str, dtype: str, axes: list[int],
                            shape: tuple[int | None, ...], keepdims: bool) -> str:
    """Wrapping integer sums/products (ONNX Runtime's integer ReduceSum/ReduceProd saturate).

    Sums of types up to 32 bits are exact in int64 and wrap when cast back; 64-bit sums and all
    products combine halves with the elementwise Add/Mul, which wrap like XLA.
    """
    if kind == "add" and dt.bit_width(dtype) <= 32:
        out = ctx.op("ReduceSum", [ctx.cast(x, "int64"), ctx.i64(axes)], keepdims=int(keepdims))
        return ctx.cast(out, dtype)
    work = dtype if dtype in ("int32", "int64", "uint32") else ("int64" if dtype == "uint64" else "int32")
    onnx_op = _ELEMENTWISE[kind]
    out = tree_reduce(ctx, ctx.cast_if(x, dtype, work), axes, shape, lambda a, b: ctx.op(onnx_op, [a, b]), keepdims)
    return ctx.cast_if(out, work, dtype)


def needs_static_extent(kind: str, dtype: str) -> bool:
    """True when reducing ``dtype`` with ``kind`` needs static extents (a halving tree)."""
    if dtype == "bool" or dtype not in dt.INTS:
        return False
    return kind in _BITWISE or kind == "mul" or (kind == "add" and dt.bit_width(dtype) > 32)


def tree_reduce(ctx: LoweringContext, x: str, axes: list[int], shape: tuple[int | None, ...],
                fn: Callable[[str, str], str], keepdims: bool = False) -> str:
    """Reduce static ``axes`` by combining halves with ``fn`` (log2(n) steps per axis)."""
    for axis in axes:
        n = shape[axis]
        assert n is not None and n > 0
        while n > 1:
            h = n // 2
            lo = ctx.op("Slice", [x, ctx.i64([0]), ctx.i64([h]), ctx.i64([axis])])
            hi = ctx.op("Slice", [x, ctx.i64([h]), ctx.i64([2 * h]), ctx.i64([axis])])
            y = fn(lo, hi)
            if n % 2:
                rest = ctx.op("Slice", [x, ctx.i64([2 * h]), ctx.i64([n]), ctx.i64([axis])])
                y = ctx.op("Concat", [y, rest], axis=axis)
            x, n = y, h + n % 2
    if not keepdims:
        x = ctx.op("Squeeze", [x, ctx.i64(axes)])
    return x


def _broadcast_init(ctx: LoweringContext, init: str, x: str, xt: hir.TensorType, result: hir.TensorType,
                    dims: list[int]) -> str:
    """The result of reducing over a zero-size dimension: the init value everywhere."""
    kept = [d for d in range(xt.rank) if d not in dims]
    if result.is_static:
        shape = ctx.i64(result.shape)
    else:
        shape = ctx.op("Concat", [ctx.i64([xt.shape[d]]) if xt.shape[d] is not None
                                  else ctx.op("Shape", [x], start=d, end=d + 1) for d in kept], axis=0)
    if result.dtype == "bfloat16":
        return ctx.cast(ctx.op("Expand", [ctx.cast(init, "float32"), shape]), "bfloat16")
    return ctx.op("Expand", [init, shape])


from jaxconv.onnx.ops import reduce_window as _reduce_window  # noqa: E402,F401  (registers reduce_window)
