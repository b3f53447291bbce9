"""Reductions: reduce with add/mul/max/min/and/or/xor bodies, every dtype, NaN-propagating max/min.

Variadic reduces whose body pairs each accumulator with its own operand through one of those
ops are split into independent reductions; any other body (several results, several ops) is
applied to whole tensors over a halving tree of static extents.
"""

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
_SUM_NATIVE = dt.kernels("ReduceSum")
_MAX_NATIVE = dt.kernels("ReduceMax") - {"bool"}  # float16 via float32 (dtypes.ARITH)
# Elementwise Max/Min kernels (no i16/u16).
_MAXMIN_NATIVE = dt.kernels("Max")


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
    if dtype in ("float16", "bfloat16"):  # no float16 reduction kernels (see dtypes.ARITH)
        return "float32"
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


def init_is_noop(value: np.ndarray | None, kind: str, dtype: str) -> bool:
    """True when combining the init value into a reduction changes nothing.

    A float sum's +0 init is not: XLA starts from it, so a sum of -0s is +0, where ONNX
    Runtime's ReduceSum and CumSum give -0 (x + -0 is the only true no-op).
    """
    if not is_identity(value, kind, dtype):
        return False
    return not (kind == "add" and dtype in dt.FLOATS and not np.signbit(np.asarray(value, np.float64).reshape(())))


def with_init(ctx: LoweringContext, kind: str, out: str, init: str, dtype: str) -> str:
    """``out`` combined with a scalar init value; a float sum's +0 init only turns -0 into +0."""
    from jaxconv.onnx.ops._common import known_values, may_be_negative_zero, without_negative_zero

    value = known_values(ctx, init)
    if kind == "add" and dtype in dt.FLOATS and not may_be_negative_zero(ctx, out):
        return out  # a sum of values that are never -0 is not -0 either
    if kind == "add" and dtype in dt.FLOATS and value is not None and value.size == 1 \
            and float(np.asarray(value, np.float64).reshape(())) == 0 and not np.signbit(np.asarray(value, np.float64)).any():
        work = dt.float_work(dtype)
        return ctx.cast_if(without_negative_zero(ctx, ctx.cast_if(out, dtype, work), work), work, dtype)
    return combine(ctx, kind, out, init, dtype)


def combine(ctx: LoweringContext, kind: str, a: str, b: str, dtype: str) -> str:
    """Elementwise ``kind`` of two tensors of ``dtype`` (cast detours where ORT lacks a kernel)."""
    if dtype == "bool":
        return ctx.op(_LOGICAL[kind], [a, b])
    if kind in _BITWISE:
        return ctx.op(_BITWISE[kind], [a, b])
    native = _MAXMIN_NATIVE if kind in ("max", "min") else dt.ARITH
    work = dt.compute_dtype(dtype, native)
    a, b = ctx.cast_if(a, dtype, work), ctx.cast_if(b, dtype, work)
    if kind in ("max", "min") and work in dt.FLOATS:
        from jaxconv.onnx.ops.elementwise import extremum  # -0 < +0 on ties, like XLA

        out = extremum(ctx, a, b, work, kind == "max")
    else:
        out = ctx.op(_ELEMENTWISE[kind], [a, b])
    return ctx.cast_if(out, work, dtype)


def _check_reduce(op: hir.Op) -> str | None:
    n = len(op.results)
    if n != 1 and _is_argminmax(op):
        return None
    kinds = separable_kinds(op.regions[0], n)
    dims = op.attrs["dimensions"]
    if kinds is None:
        shape = op.operands[0].type.shape
        if any(shape[d] is None for d in dims):
            what = f"variadic reduce with {n} results" if n > 1 else "reduce"
            return f"{what} with a general body over a dynamic dimension is not lowered yet"
        return None
    for kind, v in zip(kinds, op.operands[:n]):
        dtype = v.type.dtype
        if needs_static_extent(kind, dtype) and not (kind == "add" and dtype in ("int64", "uint64")):
            if any(v.type.shape[d] is None for d in dims):
                return f"{dtype} {kind} reduction over a dynamic dimension is not lowered yet (it must wrap exactly)"
    return None


def separable_kinds(block: hir.Block, n: int) -> list[str] | None:
    """For a body whose result i is ``kind_i(acc_i, x_i)`` (one op each), the kinds; else None."""
    if n == 1:
        kind = reducer_kind(block)
        return None if kind is None else [kind]
    if len(block.args) != 2 * n or len(block.returns) != n or len(block.ops) != n:
        return None
    kinds = []
    for i, ret in enumerate(block.returns):
        op = next((o for o in block.ops if o.results and o.results[0] is ret), None)
        if op is None or op.name not in KINDS or {v.id for v in op.operands} != {block.args[i].id, block.args[n + i].id}:
            return None
        kinds.append(KINDS[op.name])
    return kinds


def _is_argminmax(op: hir.Op) -> bool:
    from jaxconv.onnx.ops import indexing

    return getattr(indexing, "match_argminmax", lambda _op: None)(op) is not None


@lowering("stablehlo.reduce", check=_check_reduce,
          onnx_ops=("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "BitwiseXor", "CumSum"))
def lower_reduce(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str] | str:
    """Reduce* with the init value folded in; max/min propagate NaN; bitwise bodies as a halving tree."""
    n = len(op.results)
    if n != 1 and _is_argminmax(op):
        from jaxconv.onnx.ops import indexing

        return indexing.lower_argminmax(ctx, op, inputs)
    kinds = separable_kinds(op.regions[0], n)
    dims = sorted(op.attrs["dimensions"])
    if kinds is None:
        return _general_reduce(ctx, op, inputs, dims)
    return [reduce_one(ctx, kind, inputs[i], op.operands[i].type, inputs[n + i], dims, op.results[i].type)
            for i, kind in enumerate(kinds)]


def reduce_one(ctx: LoweringContext, kind: str, x: str, xt: hir.TensorType, init: str, dims: list[int],
               result: hir.TensorType) -> str:
    """One reduction of ``kind`` over ``dims`` with its init value."""
    dtype = xt.dtype
    identity = init_is_noop(ctx.constant_value(init), kind, dtype)
    if not dims:
        return x  # XLA folds a reduce over no dimensions to its operand, init value unused.
    if any(xt.shape[d] == 0 for d in dims):
        return _broadcast_init(ctx, init, x, xt, result, dims)
    if all(xt.shape[d] == 1 for d in dims) and is_identity(ctx.constant_value(init), kind, dtype):
        # XLA folds a reduce over extent-1 dims with a neutral init to a reshape: a sum of one -0 stays -0.
        return ctx.op("Squeeze", [x, ctx.i64(dims)])
    out = reduce_axes(ctx, kind, x, dtype, dims, xt.shape)
    return out if identity else with_init(ctx, kind, out, init, dtype)


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
    if kind == "add" and dtype in ("int64", "uint64") and any(shape[a] is None for a in axes):
        return _wrapping_sum_64(ctx, x, dtype, axes, shape, keepdims)
    if dtype in dt.INTS and kind in ("add", "mul"):
        return _integer_sum_or_product(ctx, kind, x, dtype, axes, shape, keepdims)
    work = work_dtype(kind, dtype)
    flip = dtype == "uint64" and kind in ("max", "min")
    if flip:
        sign = ctx.scalar(np.uint64(1 << 63), "uint64")
        xw = ctx.cast(ctx.op("BitwiseXor", [x, sign]), "int64")
    else:
        xw = ctx.cast_if(x, dtype, work)
    if kind == "add" and work == "float32" and _long_sum(shape, axes):
        out = pairwise_sum(ctx, xw, axes, shape, keepdims)
    else:
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


def _wrapping_sum_64(ctx: LoweringContext, x: str, dtype: str, axes: list[int], shape: tuple[int | None, ...],
                     keepdims: bool) -> str:
    """A wrapping 64-bit sum over axes of any extent: the last element of a CumSum (which wraps) over
    the reduced axes flattened, with a zero in front so that empty extents give 0."""
    rank = len(shape)
    kept = [a for a in range(rank) if a not in axes]
    work = "int64"
    xw = ctx.cast_if(x, dtype, work)
    moved = ctx.op("Transpose", [xw], perm=kept + list(axes)) if kept + list(axes) != list(range(rank)) else xw
    lead = ctx.op("Shape", [moved], start=0, end=len(kept)) if kept else None
    target = ctx.i64([-1]) if lead is None else ctx.op("Concat", [lead, ctx.i64([-1])], axis=0)
    flat = ctx.op("Reshape", [moved, target])
    lo = [0] * (len(kept) + 1)
    lo[-1] = 1
    flat = ctx.op("Pad", [flat, ctx.i64(lo + [0] * len(lo)), ctx.scalar(0, work)], mode="constant")
    total = ctx.op("CumSum", [flat, ctx.const(np.array(len(kept), np.int64))])
    last = ctx.op("Slice", [total, ctx.i64([-1]), ctx.i64([np.iinfo(np.int64).max]), ctx.i64([len(kept)])])
    out = ctx.op("Squeeze", [last, ctx.i64([len(kept)])])
    if keepdims:
        out = ctx.op("Unsqueeze", [out, ctx.i64(sorted(axes))])
    return ctx.cast_if(out, work, dtype)


def _general_reduce(ctx: LoweringContext, op: hir.Op, inputs: list[str], dims: list[int]) -> list[str]:
    """Any body over static extents: halve each reduced axis, applying the body to whole tensors
    (lower half as accumulators, upper half as values), then fold the init values in first."""
    n = len(op.results)
    xts = [v.type for v in op.operands[:n]]
    xs, inits = list(inputs[:n]), [ctx.op("Reshape", [i, ctx.i64([])]) for i in inputs[n:]]
    block = op.regions[0]
    results = [r.type for r in op.results]
    if not dims:
        return xs  # XLA folds a reduce over no dimensions to its operands.
    if any(xts[0].shape[d] == 0 for d in dims):
        return [_broadcast_init(ctx, init, x, xt, rt, dims) for init, x, xt, rt in zip(inits, xs, xts, results)]

    def body(accs: list[str], values: list[str]) -> list[str]:
        return ctx.lower_block(block, list(accs) + list(values))

    for axis in dims:
        size = xts[0].shape[axis]
        assert size is not None
        while size > 1:
            h = size // 2

            def part(x: str, start: int, stop: int, axis: int = axis) -> str:
                return ctx.op("Slice", [x, ctx.i64([start]), ctx.i64([stop]), ctx.i64([axis])])

            ys = body([part(x, 0, h) for x in xs], [part(x, h, 2 * h) for x in xs])
            if size % 2:
                ys = [ctx.op("Concat", [y, part(x, 2 * h, size)], axis=axis) for y, x in zip(ys, xs)]
            xs, size = ys, h + size % 2
    xs = [ctx.op("Squeeze", [x, ctx.i64(dims)]) if dims else x for x in xs]
    from jaxconv.onnx.ops._common import expand

    accs = [expand(ctx, init, ctx.op("Shape", [x]), xt.dtype) for init, x, xt in zip(inits, xs, xts)]
    return body(accs, xs)


def needs_static_extent(kind: str, dtype: str) -> bool:
    """True when reducing ``dtype`` with ``kind`` needs static extents (a halving tree)."""
    if dtype == "bool" or dtype not in dt.INTS:
        return False
    return kind in _BITWISE or kind == "mul" or (kind == "add" and dt.bit_width(dtype) > 32)


# ONNX Runtime's float32 ReduceSum accumulates almost sequentially: 1e5 x 0.1 sums to 9998.74
# (XLA: 10000.0). Summing 0.1s along the contiguous last axis it is 4 ulps off at 256 elements
# (as XLA), 13 at 1024, 55 at 4096; along leading axes 32 ulps at 256 rows already.
SUM_BLOCK = 256
LONG_TRAILING_SUM = 1024
LONG_LEADING_SUM = 32


def _long_sum(shape: tuple[int | None, ...], axes: list[int]) -> bool:
    """True for a float32 sum that ``pairwise_sum`` should do (static reduced extents only)."""
    extents = [shape[a] for a in axes]
    if any(e is None for e in extents):
        return False
    n = int(np.prod(extents))
    trailing = list(axes) == list(range(len(shape) - len(axes), len(shape)))
    return n > (LONG_TRAILING_SUM if trailing else LONG_LEADING_SUM)


def pairwise_sum(ctx: LoweringContext, x: str, axes: list[int], shape: tuple[int | None, ...], keepdims: bool) -> str:
    """ReduceSum over ``axes`` in blocks of SUM_BLOCK contiguous elements, then the block sums, and so
    on: the rounding error grows with log(n) like XLA's, not with n."""
    rank = len(shape)
    kept = [a for a in range(rank) if a not in axes]
    if kept + sorted(axes) != list(range(rank)):
        x = ctx.op("Transpose", [x], perm=kept + sorted(axes))
    n = int(np.prod([shape[a] for a in axes]))
    x = ctx.op("Reshape", [x, ctx.i64([0] * len(kept) + [n])])
    while n > SUM_BLOCK:
        blocks = -(-n // SUM_BLOCK)
        if blocks * SUM_BLOCK != n:
            x = ctx.op("Pad", [x, ctx.i64([0] * (len(kept) + 1) + [0] * len(kept) + [blocks * SUM_BLOCK - n]),
                               ctx.scalar(0.0, "float32")])
        x = ctx.op("Reshape", [x, ctx.i64([0] * len(kept) + [blocks, SUM_BLOCK])])
        x = ctx.op("ReduceSum", [x, ctx.i64([-1])], keepdims=0)
        n = blocks
    out = ctx.op("ReduceSum", [x, ctx.i64([-1])], keepdims=0)
    if keepdims:
        out = ctx.op("Unsqueeze", [out, ctx.i64(sorted(axes))])
    return out


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
