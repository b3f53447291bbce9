"""select_and_scatter (the gradient of max pooling) by unrolling the window offsets.

XLA scans each window in row-major order and keeps the current pick while ``select(pick, next)``
holds; the unrolled chain of Where below reproduces that order exactly (ties, NaN included),
then each source value is added at the position its window picked, in the source's row-major order.
Max and min pooling's selectors take a Where-free form where the data allow it
(``select_and_scatter_fast``).
"""

from __future__ import annotations

import itertools

import numpy as np

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops import select_and_scatter_fast as fast
from jaxconv.onnx.ops import windowing as win
from jaxconv.onnx.ops._common import may_be_negative_zero, where
from jaxconv.onnx.ops.reduce import KINDS, body_kind, combine, identity_value
from jaxconv.onnx.registry import lowering
from jaxconv.stablehlo import ir as hir

_COMPARE = {"GE": "GreaterOrEqual", "GT": "Greater", "LE": "LessOrEqual", "LT": "Less", "EQ": "Equal"}
# ONNX Runtime Where/compare kernels: move other dtypes through a wider one.
_SELECT_NATIVE = frozenset({"float16", "float32", "float64", "int8", "uint8", "int32", "int64"})
MAX_WINDOW = 1024


def _check(op: hir.Op) -> str | None:
    xt, st = op.operands[0].type, op.operands[1].type
    w = win.Window.from_attrs(op.attrs, xt.rank)
    active = w.active_axes()
    if any(xt.shape[a] is None or st.shape[a] is None for a in active):
        return "select_and_scatter over a dynamic windowed dimension is not lowered yet"
    if KINDS.get(body_kind(op.regions[1]) or "") is None:
        return "select_and_scatter with a scatter body other than one add/mul/max/min/and/or/xor is not lowered yet"
    if any(b != 1 for b in w.base_dilations) or any(d != 1 for d in w.window_dilations):
        return "select_and_scatter with dilations is not valid StableHLO"
    if int(np.prod(w.dims)) > MAX_WINDOW:
        return f"select_and_scatter windows larger than {MAX_WINDOW} elements are not lowered"
    return None


@lowering("stablehlo.select_and_scatter", check=_check,
          onnx_ops=("Slice", "Where", "Pad", "Add", "If", "Max", "Min", "Equal", "Mul", "Sum", "Concat"))
def lower_select_and_scatter(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """The exact lowering, or for max/min pooling both it and the Where-free form under an If."""
    if fast.applies(ctx, op, inputs[2]):
        return fast.guarded(ctx, op, inputs, lambda: _exact(ctx, op, inputs), _Scatter(ctx, op, inputs[2]))
    return _exact(ctx, op, inputs)


def _exact(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """One strided Slice per window offset, a Where chain for the pick, a Pad per offset for the scatter.

    Padding positions are never picked (a window's first in-bounds element starts the pick) and
    what lands on them is dropped, as in XLA.
    """
    operand, source, init = inputs
    xt, st = op.operands[0].type, op.operands[1].type
    w = win.Window.from_attrs(op.attrs, xt.rank)
    active = w.active_axes()
    lo_pad = [w.padding[a][0] for a in range(xt.rank)]
    hi_pad = [w.padding[a][1] for a in range(xt.rank)]
    padded = any(lo_pad) or any(hi_pad)
    src_shape = list(st.shape)
    x = win.pad(ctx, operand, xt.dtype, lo_pad, hi_pad, None) if padded else operand
    offsets = list(itertools.product(*[range(w.dims[a]) for a in active]))
    pick_val: str | None = None
    pick_ok: str | None = None
    pick_idx: str = ctx.scalar(0, "int32")
    select = _selector(ctx, op)
    for k, off in enumerate(offsets):
        starts = [o for o in off]
        ends = [o + (src_shape[a] - 1) * w.strides[a] + 1 for o, a in zip(off, active)]
        part = ctx.op("Slice", [x, ctx.i64(starts), ctx.i64(ends), ctx.i64(active),
                                ctx.i64([w.strides[a] for a in active])])
        ok = ctx.const(fast.in_bounds(off, active, w, src_shape, xt)) if padded else None
        if pick_val is None:
            pick_val, pick_ok = part, ok
            continue
        take = ctx.op("Not", [select(pick_val, part)])
        if ok is not None:
            # Take the candidate when it is in bounds and either beats the pick or no pick exists yet.
            take = ctx.op("And", [ok, ctx.op("Or", [take, ctx.op("Not", [pick_ok])])])
            pick_ok = ctx.op("Or", [pick_ok, ok])
        pick_val = _where(ctx, take, part, pick_val, xt.dtype)
        pick_idx = ctx.op("Where", [take, ctx.scalar(k, "int32"), pick_idx])
    scatter = _Scatter(ctx, op, init)
    work, fill = scatter.work, scatter.fill
    src = ctx.cast_if(source, st.dtype, work)
    contributions = []
    for k, off in enumerate(offsets):
        chosen = ctx.op("Equal", [pick_idx, ctx.scalar(k, "int32")]) if len(offsets) > 1 else None
        if pick_ok is not None:
            chosen = pick_ok if chosen is None else ctx.op("And", [chosen, pick_ok])
        contributions.append(_where(ctx, chosen, src, fill, work) if chosen is not None else src)
    init0 = ctx.cast_if(ctx.op("Reshape", [init, ctx.i64([])]), st.dtype, work)
    return ctx.cast_if(scatter(contributions, init0), work, st.dtype)


class _Scatter:
    """``self(contributions, init)``: each window offset's source grid (``work`` dtype, ``fill`` where
    nothing lands) placed at its offset and combined into ``init`` by the scatter body.

    Contributions are combined from the last offset to the first: an operand element that several
    overlapping windows pick then receives their source values in the source's row-major order, XLA's.
    """

    def __init__(self, ctx: LoweringContext, op: hir.Op, init: str) -> None:
        self.ctx, self.op = ctx, op
        self.dtype = dtype = op.operands[1].type.dtype
        self.kind = KINDS[body_kind(op.regions[1])]  # type: ignore[index]
        self.exact_add = self.kind == "add" and dtype != "bool"
        self.work = dt.compute_dtype(dtype, dt.ARITH) if self.exact_add else dtype
        # x + -0.0 is x for every float, x + +0.0 is not for x = -0.0: a -0.0 init needs the -0.0 fill (whose
        # selects cost more, float_select), any other the +0.0 fill.
        zero = -0.0 if dtype in dt.FLOATS and may_be_negative_zero(ctx, init) else 0
        self.fill = (ctx.scalar(zero, self.work) if self.exact_add
                     else ctx.const(identity_value(self.kind, dtype), dtype))

    def __call__(self, contributions: list[str], init: str) -> str:
        ctx, op, work = self.ctx, self.op, self.work
        xt, st = op.operands[0].type, op.operands[1].type
        w = win.Window.from_attrs(op.attrs, xt.rank)
        active = w.active_axes()
        lo_pad = [w.padding[a][0] for a in range(xt.rank)]
        hi_pad = [w.padding[a][1] for a in range(xt.rank)]
        ext = {a: xt.shape[a] + lo_pad[a] + hi_pad[a] for a in active}  # type: ignore[operator]
        offsets = list(itertools.product(*[range(w.dims[a]) for a in active]))
        total: str | None = None
        for off, contrib in reversed(list(zip(offsets, contributions))):
            strides = [w.strides[a] for a in active]
            placed, shape = win.dilate(ctx, contrib, work, list(st.shape), strides, active, self.fill)
            lo = [0] * xt.rank
            hi = [0] * xt.rank
            for o, a in zip(off, active):
                lo[a] = o
                hi[a] = ext[a] - o - shape[a]  # type: ignore[operator]
            placed = win.pad(ctx, placed, work, lo, hi, self.fill)
            if total is None and self.exact_add:
                total = fast.add_init(ctx, init, placed, work)
            elif total is None:
                total = combine(ctx, self.kind, init, placed, work)
            else:
                total = (ctx.op("Add", [total, placed]) if self.exact_add
                         else combine(ctx, self.kind, total, placed, work))
            if self.exact_add and self.dtype != work and off != offsets[0]:
                # XLA rounds each float16/bfloat16 sum; a float32 sum of two rounds to the same value.
                total = ctx.cast(ctx.cast(total, self.dtype), work)
        assert total is not None
        if any(lo_pad) or any(hi_pad):
            total = win.pad(ctx, total, work, [-p for p in lo_pad], [-p for p in hi_pad], None)
        return total


def _where(ctx: LoweringContext, cond: str, a: str, b: str, dtype: str) -> str:
    work = dt.compute_dtype(dtype, _SELECT_NATIVE) if dtype != "bool" else "int32"
    if work not in _SELECT_NATIVE:
        work = "float64" if dtype in dt.FLOATS else "int64"
    out = where(ctx, cond, ctx.cast_if(a, dtype, work), ctx.cast_if(b, dtype, work), work)
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
        work = "uint8" if dtype == "bool" else dt.compute_dtype(dtype, _SELECT_NATIVE)

        def direct(pick: str, cand: str) -> str:
            a, b = (cand, pick) if swapped else (pick, cand)
            return ctx.op(_COMPARE[direction], [ctx.cast_if(a, dtype, work), ctx.cast_if(b, dtype, work)])

        return direct

    def inline(pick: str, cand: str) -> str:
        return ctx.lower_block(block, [pick, cand])[0]

    return inline
