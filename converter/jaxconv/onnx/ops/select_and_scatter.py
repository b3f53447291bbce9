"""select_and_scatter (the gradient of max pooling) by unrolling the window offsets.

XLA scans each window in row-major order and keeps the current pick while ``select(pick, next)``
holds; the unrolled chain of Where below reproduces that order exactly (ties, NaN included),
then each source value is added at the position its window picked.
"""

from __future__ import annotations

import itertools

import numpy as np

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops import windowing as win
from jaxconv.onnx.ops.reduce import body_kind
from jaxconv.onnx.registry import lowering
from jaxconv.stablehlo import ir as hir

_COMPARE = {"GE": "GreaterOrEqual", "GT": "Greater", "LE": "LessOrEqual", "LT": "Less", "EQ": "Equal"}
# ONNX Runtime Where/compare kernels: move other dtypes through a wider one.
_SELECT_NATIVE = frozenset({"float16", "float32", "float64", "int8", "uint8", "int32", "int64"})
MAX_WINDOW = 1024


def _check(op: hir.Op) -> str | None:
    xt = op.operands[0].type
    if not (xt.is_static and op.operands[1].type.is_static):
        return "select_and_scatter on dynamic shapes is not lowered yet"
    if body_kind(op.regions[1]) != "stablehlo.add":
        return "select_and_scatter with a scatter body other than add is not lowered yet"
    w = win.Window.from_attrs(op.attrs, xt.rank)
    if any(p != (0, 0) for p in w.padding):
        return "select_and_scatter with padding is not lowered yet"
    if int(np.prod(w.dims)) > MAX_WINDOW:
        return f"select_and_scatter windows larger than {MAX_WINDOW} elements are not lowered"
    return None


@lowering("stablehlo.select_and_scatter", check=_check, onnx_ops=("Slice", "Where", "Pad", "Add"))
def lower_select_and_scatter(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """One strided Slice per window offset, a Where chain for the pick, a Pad per offset for the scatter."""
    operand, source, init = inputs
    xt, st = op.operands[0].type, op.operands[1].type
    w = win.Window.from_attrs(op.attrs, xt.rank)
    active = w.active_axes()
    src_shape = list(st.shape)
    offsets = list(itertools.product(*[range(w.dims[a]) for a in active]))
    pick_val: str | None = None
    pick_idx: str = ctx.scalar(0, "int32")
    select = _selector(ctx, op)
    for k, off in enumerate(offsets):
        starts = [o for o in off]
        ends = [o + (src_shape[a] - 1) * w.strides[a] + 1 for o, a in zip(off, active)]
        part = ctx.op("Slice", [operand, ctx.i64(starts), ctx.i64(ends), ctx.i64(active),
                                ctx.i64([w.strides[a] for a in active])])
        if pick_val is None:
            pick_val = part
            continue
        keep = select(pick_val, part)
        pick_val = _where(ctx, keep, pick_val, part, xt.dtype)
        pick_idx = ctx.op("Where", [keep, pick_idx, ctx.scalar(k, "int32")])
    dtype = st.dtype
    work = dt.compute_dtype(dtype, dt.ARITH)
    src = ctx.cast_if(source, dtype, work)
    zero = ctx.scalar(0, work)
    total = ctx.op("Expand", [ctx.cast_if(ctx.op("Reshape", [init, ctx.i64([])]), dtype, work), ctx.i64(xt.shape)])
    for k, off in enumerate(offsets):
        chosen = ctx.op("Equal", [pick_idx, ctx.scalar(k, "int32")]) if len(offsets) > 1 else None
        contrib = _where(ctx, chosen, src, zero, work) if chosen is not None else src
        placed, shape = win.dilate(ctx, contrib, work, src_shape, [w.strides[a] for a in active], active, None)
        lo = [0] * xt.rank
        hi = [0] * xt.rank
        for o, a in zip(off, active):
            lo[a] = o
            hi[a] = xt.shape[a] - o - shape[a]  # type: ignore[operator]
        placed = win.pad(ctx, placed, work, lo, hi, None)
        total = ctx.op("Add", [total, placed])
    return ctx.cast_if(total, work, dtype)


def _where(ctx: LoweringContext, cond: str, a: str, b: str, dtype: str) -> str:
    work = dt.compute_dtype(dtype, _SELECT_NATIVE) if dtype != "bool" else "int32"
    if work not in _SELECT_NATIVE:
        work = "float64" if dtype in dt.FLOATS else "int64"
    out = ctx.op("Where", [cond, ctx.cast_if(a, dtype, work), ctx.cast_if(b, dtype, work)])
    return ctx.cast_if(out, work, dtype)


def _selector(ctx: LoweringContext, op: hir.Op):
    """fn(pick, candidate) -> bool tensor: True keeps the current pick."""
    block = op.regions[0]
    name = body_kind(block)
    cmp = block.ops[0] if name == "stablehlo.compare" else None
    direction = cmp.attrs.get("comparison_direction") if cmp is not None else None
    if cmp is not None and direction in _COMPARE and cmp.attrs.get("compare_type", "FLOAT") != "TOTALORDER":
        swapped = cmp.operands[0] is block.args[1]
        dtype = op.operands[0].type.dtype
        work = dt.compute_dtype(dtype, _SELECT_NATIVE)

        def direct(pick: str, cand: str) -> str:
            a, b = (cand, pick) if swapped else (pick, cand)
            return ctx.op(_COMPARE[direction], [ctx.cast_if(a, dtype, work), ctx.cast_if(b, dtype, work)])

        return direct

    def inline(pick: str, cand: str) -> str:
        return ctx.lower_block(block, [pick, cand])[0]

    return inline
