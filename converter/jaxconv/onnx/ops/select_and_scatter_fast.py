"""select_and_scatter for max (min) pooling's gradient without Where, behind a guard.

XLA's pick keeps the current element while ``pick >= candidate`` holds (``<=`` for min pooling), in
row-major window order. Where the operand holds no NaN that pick is the first window element equal to
the window's max (min), since -0.0 == +0.0 and inf == inf. The scatter is then the source times a 0/1
mask, added to the init value: ONNX Runtime's float Where is three passes with a data-dependent branch
(4-9 ns an element on a random condition), the comparisons, And/Not, Cast, Mul and Add here are
branch-free passes of a fraction of that.

The form is exact only where the operand holds no NaN (a NaN window max matches nothing) and the source
no NaN or inf (``0 * inf`` is NaN off the pick); an ``If`` on ``IsNaN(sum(operand) + sum(source) * 0)``
runs the exact lowering for such inputs. The init must be a constant other than -0.0: off the pick the
result is ``init + (+-0)``, which is init for any other value.

One strided Slice per window offset gives the offset's grid; their Max (Min) is the windows' extreme, an
Equal and an And/Not chain over the offsets the first match, ``Cast(match) * source`` the offset's
contribution. The contributions are summed per phase of the stride (a grid a stride's fraction of the
operand; one shifting Pad per offset, none where the windows tile the operand) and the phases
interleaved by Concats and a Reshape: the exact lowering's dilating Pads write the whole operand once per
offset. Windows shorter than their stride (phases no offset reaches) keep the exact lowering's scatter.

Measured (one thread, load 3-8, 41 alternating rounds, CPU time medians against the exact form): the max
pool gradient [32, 28, 28, 16] 2x2/2 0.26x, [16, 64, 64, 32] 3x3/2 SAME 0.24x; a Flax CNN's training
step (conv, max pool, conv, avg pool, dense; adamw) 0.69x, from 1.35x to 0.92x jax.jit's CPU time.
"""

from __future__ import annotations

import itertools
from typing import Callable

import numpy as np

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops import windowing as win
from jaxconv.onnx.ops._common import known_values
from jaxconv.onnx.ops.reduce import KINDS, body_kind
from jaxconv.stablehlo import ir as hir

# The selector directions whose pick is the first extreme element: the op that finds the extreme, its identity.
_FIRST_EXTREME = {"GE": ("Max", -np.inf), "LE": ("Min", np.inf)}
_SWAPPED = {"GE": "LE", "LE": "GE"}

Scatter = Callable[[list[str], str], str]


def direction(op: hir.Op) -> str | None:
    """'GE' or 'LE' when the select body picks the first max (min) of a window on NaN-free data, else None."""
    block = op.regions[0]
    if body_kind(block) != "stablehlo.compare":
        return None
    cmp = block.ops[0]
    found = cmp.attrs.get("comparison_direction")
    if found not in _FIRST_EXTREME or cmp.attrs.get("compare_type", "FLOAT") == "TOTALORDER":
        return None
    if cmp.operands[0] is block.args[1] and cmp.operands[1] is block.args[0]:
        return _SWAPPED[found]
    return found if cmp.operands[0] is block.args[0] else None


def applies(ctx: LoweringContext, op: hir.Op, init: str) -> bool:
    """True when the fast form computes XLA's result for NaN-free operands and finite sources."""
    xt, st = op.operands[0].type, op.operands[1].type
    if xt.dtype not in dt.FLOATS or st.dtype != xt.dtype:
        return False
    if KINDS.get(body_kind(op.regions[1]) or "") != "add":
        return False
    if direction(op) is None:
        return False
    value = known_values(ctx, init)
    return value is not None and value.size == 1 and not (value.item() == 0 and np.signbit(value.item()))


def guarded(ctx: LoweringContext, op: hir.Op, inputs: list[str], exact: Callable[[], str],
            scatter: Scatter) -> str:
    """``If(operand holds NaN or source NaN/inf, exact(), fast form)`` (see the module docstring)."""
    operand, source, init = inputs
    xt = op.operands[0].type
    work = dt.compute_dtype(xt.dtype, dt.ARITH)
    total = ctx.op("ReduceSum", [ctx.cast_if(operand, xt.dtype, work)], keepdims=0)
    src_total = ctx.op("ReduceSum", [ctx.cast_if(source, xt.dtype, work)], keepdims=0)
    probe = ctx.op("Add", [total, ctx.op("Mul", [src_total, ctx.scalar(0, work)])])
    unsafe = ctx.op("IsNaN", [probe])
    result_type = op.results[0].type
    branches = []
    for build in (exact, lambda: fast(ctx, op, inputs, scatter)):
        with ctx.subgraph() as scope:
            out = build()
            if out not in scope.produced():
                out = ctx.op("Identity", [out])
            branches.append(ctx.make_graph(scope, ctx.fresh("select_and_scatter"), [],
                                           [ctx.value_info(out, result_type)]))
    ctx.current_op = op
    return ctx.op("If", [unsafe], then_branch=branches[0], else_branch=branches[1])


def fast(ctx: LoweringContext, op: hir.Op, inputs: list[str], scatter: Scatter) -> str:
    """The Where-free form; ``scatter(contributions, init)`` places per-offset source grids as the
    exact lowering does."""
    operand, source, init = inputs
    xt = op.operands[0].type
    work = dt.compute_dtype(xt.dtype, dt.ARITH)
    x = ctx.cast_if(operand, xt.dtype, work)
    src = ctx.cast_if(source, xt.dtype, work)
    init0 = ctx.cast_if(ctx.op("Reshape", [init, ctx.i64([])]), xt.dtype, work)
    w = win.Window.from_attrs(op.attrs, xt.rank)
    pick = direction(op)
    assert pick is not None
    contributions = _first_matches(ctx, op, w, pick, x, src, work)
    if _phases_covered(w):
        return ctx.cast_if(_by_phase(ctx, op, w, contributions, init0, work), work, xt.dtype)
    return ctx.cast_if(scatter(contributions, init0), work, xt.dtype)


def _phases_covered(w: win.Window) -> bool:
    """Every phase of the stride gets some window offset: windows at least as long as the strides."""
    return all(w.dims[a] >= w.strides[a] for a in w.active_axes())


def _by_phase(ctx: LoweringContext, op: hir.Op, w: win.Window, contributions: list[str], init: str,
              work: str) -> str:
    """The per-offset grids summed per phase of the stride, the phases interleaved by Concats.

    Operand position ``p = s*j + r`` (per windowed axis, ``0 <= r < s``) receives from the offsets
    ``k = r + s*d`` the grid value at ``q = j - d``. So phase ``r``'s grid is the sum of those offsets'
    grids, each shifted ``d`` along (a Pad on a grid a stride's fraction of the operand), added from the
    last offset to the first: XLA's order, the source's row-major order. The phase grids, stacked on a
    new axis after each windowed axis and reshaped, are the operand; a Slice drops the padding. Where the
    windows tile the operand each phase has one offset and no Pad.
    """
    xt, st = op.operands[0].type, op.operands[1].type
    dtype = st.dtype
    active = w.active_axes()
    strides = [w.strides[a] for a in active]
    ext = [xt.shape[a] + sum(w.padding[a]) for a in active]  # type: ignore[operator]
    span = [-(-n // s) for n, s in zip(ext, strides)]  # phase grid length: ceil(extent / stride)
    offsets = list(itertools.product(*[range(w.dims[a]) for a in active]))
    grid = dict(zip(offsets, contributions))
    phases = {}
    for phase in itertools.product(*[range(s) for s in strides]):
        members = [k for k in offsets if all((o - r) % s == 0 for o, r, s in zip(k, phase, strides))]
        total: str | None = None
        for step, k in enumerate(reversed(members)):
            lo = [0] * xt.rank
            hi = [0] * xt.rank
            for i, a in enumerate(active):
                shift = (k[i] - phase[i]) // strides[i]
                lo[a], hi[a] = shift, span[i] - st.shape[a] - shift  # type: ignore[operator]
            placed = win.pad(ctx, grid[k], work, lo, hi, None)
            total = add_init(ctx, init, placed, work) if total is None else ctx.op("Add", [total, placed])
            if dtype != work and step < len(members) - 1:
                total = ctx.cast(ctx.cast(total, dtype), work)  # XLA rounds each float16/bfloat16 sum
        phases[phase] = total
    stacked_axes = [a + i + 1 for i, a in enumerate(active)]

    def joined(prefix: tuple[int, ...]) -> str:
        if len(prefix) == len(active):
            return ctx.op("Unsqueeze", [phases[prefix], ctx.i64(stacked_axes)])
        pieces = [joined(prefix + (r,)) for r in range(strides[len(prefix)])]
        return ctx.op("Concat", pieces, axis=stacked_axes[len(prefix)]) if len(pieces) > 1 else pieces[0]

    merged = {a: span[i] * strides[i] for i, a in enumerate(active)}
    out = ctx.op("Reshape", [joined(()), _merged_shape(ctx, contributions[0], xt, merged)])
    lo_pad = [w.padding[a][0] for a in active]
    if any(lo_pad) or any(merged[a] != xt.shape[a] for a in active):
        ends = [p + xt.shape[a] for p, a in zip(lo_pad, active)]  # type: ignore[operator]
        out = ctx.op("Slice", [out, ctx.i64(lo_pad), ctx.i64(ends), ctx.i64(active)])
    return out


def _merged_shape(ctx: LoweringContext, grid: str, xt: hir.TensorType, merged: dict[int, int]) -> str:
    """The operand's shape with the windowed axes' lengths ``merged``; a dynamic axis (never a windowed one)
    is -1 where it is the only one, else read from ``grid`` (a tensor with the operand's other axes)."""
    dims = [merged.get(a, d) for a, d in enumerate(xt.shape)]
    dynamic = [a for a, d in enumerate(dims) if d is None]
    if len(dynamic) <= 1:
        return ctx.i64([-1 if d is None else d for d in dims])  # type: ignore[misc]
    pieces = [ctx.i64([d]) if d is not None else ctx.op("Shape", [grid], start=a, end=a + 1)
              for a, d in enumerate(dims)]
    return ctx.op("Concat", pieces, axis=0)


def add_init(ctx: LoweringContext, init: str, x: str, dtype: str) -> str:
    """``init + x``, for floats as a Sum: the rewrites and ONNX Runtime drop an Add of a zero constant, which
    here turns the -0.0 of ``0 * negative source`` (or of a -0.0 source) into XLA's +0.0."""
    return ctx.op("Sum" if dtype in dt.FLOATS else "Add", [init, x])


def _first_matches(ctx: LoweringContext, op: hir.Op, w: win.Window, pick: str, x: str, src: str,
                   work: str) -> list[str]:
    """Per window offset (row-major), the source where that offset is its window's first extreme, else
    +-0: one strided Slice per offset, their Max (Min), an Equal and an And/Not chain over the offsets."""
    xt, st = op.operands[0].type, op.operands[1].type
    active = w.active_axes()
    lo_pad = [w.padding[a][0] for a in range(xt.rank)]
    hi_pad = [w.padding[a][1] for a in range(xt.rank)]
    padded = any(lo_pad) or any(hi_pad)
    extreme_op, fill = _FIRST_EXTREME[pick]
    if padded:
        x = win.pad(ctx, x, work, lo_pad, hi_pad, ctx.scalar(fill, work))
    src_shape = list(st.shape)
    offsets = list(itertools.product(*[range(w.dims[a]) for a in active]))
    parts = []
    for off in offsets:
        ends = [o + (src_shape[a] - 1) * w.strides[a] + 1  # type: ignore[operator]
                for o, a in zip(off, active)]
        parts.append(ctx.op("Slice", [x, ctx.i64(list(off)), ctx.i64(ends), ctx.i64(active),
                                      ctx.i64([w.strides[a] for a in active])]))
    extreme = ctx.op(extreme_op, parts) if len(parts) > 1 else parts[0]
    contributions = []
    seen: str | None = None
    for off, part in zip(offsets, parts):
        hit = ctx.op("Equal", [part, extreme])
        inside = in_bounds(off, active, w, src_shape, xt) if padded else None
        if inside is not None and not inside.all():
            # Padding holds the reduction's identity: a window of in-bounds -inf would match it too.
            hit = ctx.op("And", [hit, ctx.const(inside)])
        first = hit if seen is None else ctx.op("And", [hit, ctx.op("Not", [seen])])
        if off != offsets[-1]:
            seen = hit if seen is None else ctx.op("Or", [seen, hit])
        contributions.append(ctx.op("Mul", [ctx.op("Cast", [first], to=dt.onnx_type(work)), src]))
    return contributions


def in_bounds(off: tuple[int, ...], active: list[int], w: win.Window, src_shape: list[int | None],
              xt: hir.TensorType) -> np.ndarray:
    """Bool mask over the source grid (1 on passive axes): window element ``off`` is not padding."""
    mask = np.ones([src_shape[a] if a in active else 1 for a in range(xt.rank)], dtype=bool)
    for o, a in zip(off, active):
        pos = o + np.arange(src_shape[a]) * w.strides[a] - w.padding[a][0]  # type: ignore[operator]
        valid = (pos >= 0) & (pos < xt.shape[a])  # type: ignore[operator]
        shape = [1] * xt.rank
        shape[a] = src_shape[a]  # type: ignore[call-overload]
        mask = mask & valid.reshape(shape)
    return mask
