"""reduce_window: pooling (MaxPool / Conv with a ones kernel), cumulative scans, and exact strided slices.

Every path gives XLA's result: padding and base-dilation holes are skipped (they hold the
reduction's identity here), max/min propagate NaN, and the init value is combined once into
every window.

Cumulative float16/bfloat16 sums and products (cumsum, cumprod: every step rounds, so the
order shows in the result) and general or multi-operand bodies follow XLA CPU's order: each
window is folded in row-major order starting from the init value, and a cumulative window
longer than ``XLA_SCAN_BASE`` is split into tiles the way XLA's ReduceWindowRewriter does
(scan each tile, exclusive scan of the tile totals, combine); the scans match XLA bit for bit.
So are other bfloat16 sum and product windows over static windowed dimensions; the rest
accumulate in float32 and round once. Cumulative float32/float64 products take the same tiled
order at every opset (``product_in_xla_order``).
"""

from __future__ import annotations

import itertools
from typing import Callable, Sequence

import numpy as np

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops import windowing as win
from jaxconv.onnx.ops._common import expand, known_values, where, without_negative_zero
from jaxconv.onnx.ops.linalg import transpose
from jaxconv.onnx.ops.reduce import (
    combine,
    identity_value,
    init_is_noop,
    is_identity,
    reducer_kind,
    with_init,
    work_dtype,
)
from jaxconv.onnx.registry import custom_call_target, lowering
from jaxconv.stablehlo import ir as hir

_POOL_FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})
_CONV_SUM_FLOATS = frozenset({"float16", "bfloat16", "float32"})
_CUMPROD_NATIVE = dt.kernels("CumProd")
MAX_SLICES = 4096
# Window positions folded one by one when the order of evaluation matters.
MAX_ORDERED_WINDOW = 1024
# XLA CPU's ReduceWindowRewriter base length: longer cumulative windows are tiled.
XLA_SCAN_BASE = 16
_ROUNDING = frozenset({"float16", "bfloat16"})

# combine(accumulators, values) -> new accumulators: one tensor per reduce_window operand.
Combiner = Callable[[list[str], list[str]], list[str]]


def ordered(kind: str | None, xt: hir.TensorType, w: win.Window) -> bool:
    """True when the window is folded in XLA's order: general bodies, cumulative float16/bfloat16
    sums and products, and bfloat16 sum and product windows over static windowed dimensions with at
    most ``MAX_ORDERED_WINDOW`` positions (XLA rounds after every step, so the order shows)."""
    if kind is None:
        return True
    if kind not in ("add", "mul") or xt.dtype not in _ROUNDING:
        return False
    if _cumulative_axis(xt, w) is not None:
        return True
    active = w.active_axes()
    # float16 windows are not always folded row-major by XLA (a 2x3 window sums its rows first)
    return (xt.dtype == "bfloat16" and all(xt.shape[a] is not None for a in active)
            and int(np.prod([w.dims[a] for a in active])) <= MAX_ORDERED_WINDOW)


def product_in_xla_order(kind: str | None, xt: hir.TensorType, w: win.Window) -> bool:
    """True for a cumulative float32/float64 product: ``ordered_reduce_window`` folds it in XLA CPU's
    order, left to right from the init value, in tiles past ``XLA_SCAN_BASE`` elements. ONNX
    CumProd (opset 26) is not used for them: ONNX Runtime's associates otherwise (on edge rows it
    differed from jax.jit at n = 7 reversed, and at n = 40 and 300 either way).

    Partial products overflow and underflow, so their association shows on edge values: on the row
    [FLT_MAX, -FLT_MAX, FLT_MAX/7, -FLT_MIN, 3 FLT_MIN] XLA's left-to-right product is +inf at
    index 4, while a log-step scan first pairs -FLT_MIN * 3 FLT_MIN = -0, then -inf * -0 = NaN.
    """
    return kind == "mul" and xt.dtype in ("float32", "float64") and _cumulative_axis(xt, w) is not None


def _check_reduce_window(op: hir.Op) -> str | None:
    n = len(op.results)
    xt = op.operands[0].type
    w = win.Window.from_attrs(op.attrs, xt.rank)
    kind = reducer_kind(op.regions[0]) if n == 1 else None
    if kind is not None:
        return _check_window(kind, xt, w)
    return check_ordered([v.type for v in op.operands[:n]], w)


def _check_window(kind: str, xt: hir.TensorType, w: win.Window) -> str | None:
    if ordered(kind, xt, w):
        return check_ordered([xt], w)
    if _plan(kind, xt, w) != "slices":
        return None
    if any(xt.shape[a] is None for a in w.active_axes()):
        return "reduce_window over a dynamic dimension with this window is not lowered yet"
    return None


def check_ordered(xts: Sequence[hir.TensorType], w: win.Window) -> str | None:
    """Why a window folded in XLA's order cannot be lowered, or None."""
    if _scan_axis(xts[0], w) is not None:
        return None
    active = w.active_axes()
    if any(t.shape[a] is None for t in xts for a in active):
        return "reduce_window with this body over a dynamic windowed dimension is not lowered yet"
    positions = int(np.prod([w.dims[a] for a in active])) if active else 1
    if positions > MAX_ORDERED_WINDOW:
        return (f"reduce_window with this body and {positions} window positions is not lowered "
                f"(at most {MAX_ORDERED_WINDOW})")
    return None


@lowering("stablehlo.reduce_window", check=_check_reduce_window,
          onnx_ops=("MaxPool", "Conv", "CumSum", "CumProd", "Slice", "Max", "Add", "Gather", "Resize"))
def lower_reduce_window(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """Pooling, cumulative scan or strided-slice reduction; general and multi-operand bodies in XLA's order."""
    n = len(op.results)
    xt = op.operands[0].type
    w = win.Window.from_attrs(op.attrs, xt.rank)
    if all(r.type.is_static for r in op.results) and (0 in xt.shape or any(0 in r.type.shape for r in op.results)):
        # No window holds an element: every output is its init value.
        return [_filled(ctx, init, r.type) for init, r in zip(inputs[n:], op.results)]
    kind = reducer_kind(op.regions[0]) if n == 1 else None
    if kind == "add":
        upsampled = upsampled_window_sum(ctx, op, inputs[1], w)
        if upsampled is not None:
            return [upsampled]
    if kind is not None:
        return [reduce_window(ctx, kind, inputs[0], xt, inputs[1], w, op.results[0].type)]
    block = op.regions[0]

    def body(accs: list[str], values: list[str]) -> list[str]:
        return ctx.lower_block(block, list(accs) + list(values))

    return ordered_reduce_window(ctx, body, inputs[:n], [v.type for v in op.operands[:n]], inputs[n:], w)


def _filled(ctx: LoweringContext, init: str, result: hir.TensorType) -> str:
    """``init`` (a scalar) broadcast to the static ``result`` shape."""
    scalar = ctx.op("Reshape", [init, ctx.i64([])])
    return expand(ctx, scalar, ctx.i64(list(result.shape)), result.dtype)


def reduce_window(ctx: LoweringContext, kind: str, x: str, xt: hir.TensorType, init: str, w: win.Window,
                  result: hir.TensorType) -> str:
    """Lower one reduce_window of ``kind`` (see module docstring)."""
    if kind == "add" and w.is_padding_only() and is_identity(ctx.constant_value(init), kind, xt.dtype):
        # XLA folds one-element windows with unit strides and a zero init to the padded operand (-0 stays -0);
        # bf16 adds the +0 init
        scalar = ctx.op("Reshape", [init, ctx.i64([])])
        out = win.pad(ctx, x, xt.dtype, [lo for lo, _ in w.padding], [hi for _, hi in w.padding], scalar)
        return with_init(ctx, kind, out, scalar, xt.dtype) if xt.dtype == "bfloat16" else out
    if ordered(kind, xt, w) or product_in_xla_order(kind, xt, w):
        def fold(accs: list[str], values: list[str]) -> list[str]:
            return [rounded_combine(ctx, kind, accs[0], values[0], xt.dtype)]

        return ordered_reduce_window(ctx, fold, [x], [xt], [init], w)[0]
    identity = init_is_noop(ctx.constant_value(init), kind, xt.dtype)
    plan = _plan(kind, xt, w)
    if plan == "identity":
        return x if identity else with_init(ctx, kind, x, ctx.op("Reshape", [init, ctx.i64([])]), xt.dtype)
    if plan == "cumulative":
        axis = w.active_axes()[0]
        out = cumulative(ctx, kind, x, xt.dtype, xt.shape, axis, reverse=w.padding[axis][0] == 0)
    elif plan in ("maxpool", "sumconv"):
        out = _pool(ctx, kind, x, xt, w, result, plan)
    else:
        out = _slices(ctx, kind, x, xt, w)
    return out if identity else with_init(ctx, kind, out, ctx.op("Reshape", [init, ctx.i64([])]), xt.dtype)


def _plan(kind: str, xt: hir.TensorType, w: win.Window) -> str:
    active = w.active_axes()
    if not active:
        return "identity"
    if len(active) == 1 and _is_cumulative(xt, w, active[0]):
        return "cumulative"
    no_base = all(b == 1 for b in w.base_dilations)
    if no_base and len(active) <= 3 and xt.dtype in _POOL_FLOATS:
        if kind in ("max", "min"):
            return "maxpool"
        if kind == "add" and xt.dtype in _CONV_SUM_FLOATS:
            return "sumconv"
    return "slices"


def _is_cumulative(xt: hir.TensorType, w: win.Window, axis: int) -> bool:
    n = w.dims[axis]
    return (xt.shape[axis] is not None and n == xt.shape[axis] and n > 1 and w.strides[axis] == 1
            and w.base_dilations[axis] == 1 and w.window_dilations[axis] == 1
            and w.padding[axis] in ((n - 1, 0), (0, n - 1)))


# ---- cumulative scans ----------------------------------------------------------------------------

def cumulative(ctx: LoweringContext, kind: str, x: str, dtype: str, shape: Sequence[int | None], axis: int,
               reverse: bool) -> str:
    """Inclusive scan of ``kind`` along ``axis``: CumSum, CumProd (opset 26) or a log-step scan.

    The log-step scan is exact only where the association cannot show: max, min, logic and
    integer products (they wrap, a ring). Static float32/float64 products are folded in XLA's
    order instead (``product_in_xla_order``); below opset 26 the symbolic-length lowering refuses them.
    """
    axis_t = ctx.const(np.array(axis, dtype=np.int64))
    if kind == "add" and dtype != "bool":
        work = work_dtype("add", dtype)
        out = ctx.op("CumSum", [ctx.cast_if(x, dtype, work), axis_t], reverse=int(reverse))
        return ctx.cast_if(out, work, dtype)
    if kind == "mul" and dtype != "bool" and ctx.opset >= 26:
        work = dtype if dtype in _CUMPROD_NATIVE else work_dtype("mul", dtype)
        out = ctx.op("CumProd", [ctx.cast_if(x, dtype, work), axis_t], reverse=int(reverse))
        return ctx.cast_if(out, work, dtype)
    return log_step_scan(ctx, kind, x, dtype, shape, axis, reverse)


def log_step_scan(ctx: LoweringContext, kind: str, x: str, dtype: str, shape: Sequence[int | None], axis: int,
                  reverse: bool) -> str:
    """Hillis-Steele scan: combine with a copy shifted by 1, 2, 4, ... filled with the identity.

    It associates differently from XLA's left-to-right fold: only for kinds where that cannot
    change the result (see ``cumulative``).
    """
    n = shape[axis]
    assert n is not None
    rank = len(shape)
    fill = ctx.const(identity_value(kind, dtype), dtype)
    s = 1
    while s < n:
        lo, hi = [0] * rank, [0] * rank
        if reverse:
            part = ctx.op("Slice", [x, ctx.i64([s]), ctx.i64([n]), ctx.i64([axis])])
            hi[axis] = s
        else:
            part = ctx.op("Slice", [x, ctx.i64([0]), ctx.i64([n - s]), ctx.i64([axis])])
            lo[axis] = s
        shifted = win.pad(ctx, part, dtype, lo, hi, fill)
        x = combine(ctx, kind, x, shifted, dtype)
        s *= 2
    return x


# ---- pooling ---------------------------------------------------------------------------------------

def _pool(ctx: LoweringContext, kind: str, x: str, xt: hir.TensorType, w: win.Window, result: hir.TensorType,
          plan: str) -> str:
    """MaxPool (max, and min as -MaxPool(-x)) or a ones-kernel Conv (sum) over [P, 1, active...]."""
    active = w.active_axes()
    passive = [a for a in range(xt.rank) if a not in active]
    perm = passive + active
    work = "float32" if xt.dtype in ("bfloat16", "float16") else xt.dtype  # no float16 MaxPool/Conv kernels
    xw = ctx.cast_if(x, xt.dtype, work)
    xp = transpose(ctx, xw, perm)
    pieces = [ctx.i64([-1, 1])] + [ctx.i64([xt.shape[a]]) if xt.shape[a] is not None
                                   else ctx.op("Shape", [xp], start=len(passive) + i, end=len(passive) + i + 1)
                                   for i, a in enumerate(active)]
    xp4 = ctx.op("Reshape", [xp, ctx.op("Concat", pieces, axis=0)])
    kernel = [w.dims[a] for a in active]
    strides = [w.strides[a] for a in active]
    dil = [w.window_dilations[a] for a in active]
    lo = [w.padding[a][0] for a in active]
    hi = [w.padding[a][1] for a in active]
    extent = [d * (k - 1) + 1 for k, d in zip(kernel, dil)]
    explicit = any(p < 0 for p in lo + hi) or any(p >= e for p, e in zip(lo + hi, extent + extent))
    if plan == "maxpool":
        fill = ctx.scalar(-np.inf, work)
        sign = ctx.scalar(-1, work)
        src = ctx.op("Mul", [xp4, sign]) if kind == "min" else xp4
        pads = [0] * (2 * len(active))
        if explicit:
            src = win.pad(ctx, src, work, [0, 0] + lo, [0, 0] + hi, fill)
        else:
            pads = lo + hi
        attrs = dict(kernel_shape=kernel, strides=strides, dilations=dil, pads=pads)
        out = ctx.op("MaxPool", [src], **attrs)
        # ONNX Runtime's MaxPool drops NaN and starts from the lowest finite value, so a window of
        # -inf (or padding) alone gives -FLT_MAX. One more MaxPool over a code per element
        # (2 NaN, 1 above -inf, 0 -inf) tells both cases apart.
        code = ctx.op("Add", [ctx.cast(ctx.op("Greater", [src, fill]), work),
                              ctx.op("Mul", [ctx.cast(ctx.op("IsNaN", [src]), work), ctx.scalar(2, work)])])
        seen = ctx.op("MaxPool", [code], **attrs)
        out = where(ctx, ctx.op("Less", [seen, ctx.scalar(0.5, work)]), fill, out, work)
        out = where(ctx, ctx.op("Greater", [seen, ctx.scalar(1.5, work)]), ctx.scalar(np.nan, work), out, work)
        if kind == "min":
            out = ctx.op("Mul", [out, sign])
    else:
        pads = lo + hi
        src = xp4
        if explicit and any(p < 0 for p in lo + hi):
            src = win.pad(ctx, src, work, [0, 0] + lo, [0, 0] + hi, None)
            pads = [0] * (2 * len(active))
        ones = ctx.const(np.ones([1, 1] + kernel, dtype=dt.numpy_dtype(work)))
        out = ctx.op("Conv", [src, ones], kernel_shape=kernel, strides=strides, dilations=dil, pads=pads)
    if result.is_static:
        back = ctx.i64([result.shape[a] for a in perm])
    else:
        back = ctx.op("Concat", [ctx.op("Shape", [xp], start=0, end=len(passive)),
                                 ctx.op("Shape", [out], start=2, end=2 + len(active))], axis=0)
    out = ctx.op("Reshape", [out, back])
    out = transpose(ctx, out, win.inverse(perm))
    return ctx.cast_if(out, work, xt.dtype)


# ---- a sum pool's gradient: nearest-neighbour upsampling ------------------------------------------

# Resize nearest is ORT's fast upsampling where the axes after the repeated ones are short (NCHW's H and
# W: Gather and Expand copy runs that short one element at a time); ORT has it for these floats.
_RESIZE_FLOATS = frozenset({"float16", "float32"})
_MIN_GATHER_RUN = 16
# Resize (half_pixel, round_prefer_floor) maps output i = j s + r to the input nearest to j + (r + 1/2) / s
# - 1/2, computed in float32: 1/2s from a tie, so exact far below 2 ** 23 (every s up to 1000 checked at
# 2 ** 20 outputs).
_MAX_RESIZE_LENGTH = 1 << 20


def upsampled_window_sum(ctx: LoweringContext, op: hir.Op, init: str, w: win.Window) -> str | None:
    """A window sum over zeros interleaved into ``g`` whose windows are as long as the interleave's period,
    as ``g`` repeated along each axis (nearest-neighbour upsampling) and edge-padded; None when the
    reduce_window is not one.

    JAX's transpose of a sum pool (and so of ``nn.avg_pool``) pads the cotangent ``g`` with ``s - 1``
    zeros between values (``s`` the pool's stride), then sums windows of the pool's size at stride 1.
    Where that window is ``s`` long (non-overlapping pools) every window holds exactly one value of ``g``:
    output ``i`` is ``g[ceil((i - lo) / s)]`` (+0 past ``g``'s ends), that is ``g`` repeated ``s`` times,
    shifted by ``lo - (s - 1)`` (for ``g`` of at least one element along the axis). XLA adds it to the +0
    init and zeros: -0 becomes +0 and nothing else changes, so one zero-sign fix on ``g`` keeps every bit.
    The window sum as a Conv of ones over the interleaved planes ([1024, 1, 15, 15] for a 2x2 pool of
    [32, 14, 14, 32]) took 1.36 ms plus a 0.3 ms ReorderOutput in ORT (one thread); two Gathers and the fix
    take 0.11 ms, and a small CNN's training step (batch 32) went from 12.4 to 10.8 ms of CPU time
    (medians of 201 alternating calls, load 4.4).
    """
    xt = op.operands[0].type
    if xt.dtype not in dt.FLOATS or any(s != 1 for s in w.strides) or any(b != 1 for b in w.base_dilations) \
            or any(d != 1 for d in w.window_dilations) or any(p != (0, 0) for p in w.padding) \
            or w.is_padding_only() or not _is_positive_zero(ctx, init):
        return None
    made = ctx.producer(ctx.name_of(op.operands[0]))
    if made is None or made.metadata_props.get("stablehlo.op") != "stablehlo.pad":
        return None
    pad = ctx.defining_op(op.operands[0])
    if pad is None or pad.name != "stablehlo.pad":
        return None
    g_value, fill = pad.operands
    factors = [k + 1 for k in pad.attrs["interior_padding"]]
    g, fill_name = ctx.scope.lookup(g_value), ctx.scope.lookup(fill)
    zero = known_values(ctx, fill_name) if fill_name is not None else None
    if g is None or zero is None or zero.size != 1 or float(np.asarray(zero, np.float64).reshape(())) != 0 \
            or list(factors) != list(w.dims) \
            or any(g_value.type.shape[a] in (None, 0) for a, s in enumerate(factors) if s > 1):
        return None
    g = with_init(ctx, "add", g, ctx.op("Reshape", [init, ctx.i64([])]), xt.dtype)  # -0 -> +0 (XLA's 0 + g)
    up = repeat_each(ctx, g, xt.dtype, list(g_value.type.shape), factors)
    lo = [int(p) - (s - 1) for p, s in zip(pad.attrs["edge_padding_low"], factors)]
    hi = [int(p) - (s - 1) for p, s in zip(pad.attrs["edge_padding_high"], factors)]
    return win.pad(ctx, up, xt.dtype, lo, hi, None)


def repeat_each(ctx: LoweringContext, x: str, dtype: str, shape: list[int | None], factors: list[int]) -> str:
    """``x`` with every element repeated ``factors[a]`` times along each axis ``a`` (static where > 1).

    Gathers of the repeated indices, one per axis, where the elements after the last repeated axis form
    runs of ``_MIN_GATHER_RUN`` or more; else one Resize (nearest) for the floats ORT resizes. Copies
    only: every bit kept.
    """
    axes = [a for a, s in enumerate(factors) if s > 1]
    after = shape[axes[-1] + 1:]
    run = None if None in after else int(np.prod(after))  # type: ignore[arg-type]
    short = run is not None and run < _MIN_GATHER_RUN
    if short and dtype in _RESIZE_FLOATS \
            and all(shape[a] * factors[a] <= _MAX_RESIZE_LENGTH for a in axes):  # type: ignore[operator]
        scales = ctx.const(np.array(factors, np.float32))
        return ctx.op("Resize", [x, None, scales], mode="nearest",
                      coordinate_transformation_mode="half_pixel", nearest_mode="round_prefer_floor")
    for a in axes:
        index = np.repeat(np.arange(shape[a], dtype=np.int64), factors[a])  # type: ignore[arg-type]
        x = ctx.op("Gather", [x, ctx.const(index)], axis=a)
    return x


# ---- exact strided slices --------------------------------------------------------------------------

def _slices(ctx: LoweringContext, kind: str, x: str, xt: hir.TensorType, w: win.Window) -> str:
    """Pad (and dilate) with the identity, then combine one strided Slice per window offset, axis by axis."""
    dtype = xt.dtype
    init0 = ctx.const(identity_value(kind, dtype), dtype)
    active = w.active_axes()
    shape: list[int | None] = list(xt.shape)
    x, shape = win.dilate(ctx, x, dtype, shape, [w.base_dilations[a] for a in active], active, init0)
    lo = [w.padding[a][0] if a in active else 0 for a in range(xt.rank)]
    hi = [w.padding[a][1] if a in active else 0 for a in range(xt.rank)]
    x = win.pad(ctx, x, dtype, lo, hi, init0)
    for a in active:
        n = shape[a] + lo[a] + hi[a]  # type: ignore[operator]
        k, s, d = w.dims[a], w.strides[a], w.window_dilations[a]
        m = win.output_length(n, k, s, d)
        acc = None
        for j in range(k):
            start = j * d
            part = ctx.op("Slice", [x, ctx.i64([start]), ctx.i64([start + (m - 1) * s + 1 if m else start]),
                                    ctx.i64([a]), ctx.i64([s])])
            acc = part if acc is None else combine(ctx, kind, acc, part, dtype)
        x = acc  # type: ignore[assignment]
        shape[a] = m
    return x


# ---- XLA's order: row-major windows and tiled scans ------------------------------------------------

def ordered_reduce_window(ctx: LoweringContext, fold: Combiner, xs: Sequence[str], xts: Sequence[hir.TensorType],
                          inits: Sequence[str], w: win.Window) -> list[str]:
    """reduce_window evaluated in XLA CPU's order, with ``fold`` applied to whole tensors.

    A cumulative window longer than ``XLA_SCAN_BASE`` becomes XLA's tiled scan; any other
    window pads (and dilates) each operand with its init value and folds one strided Slice
    per window position, in row-major order, into accumulators that start at the init values.
    """
    inits = [ctx.op("Reshape", [i, ctx.i64([])]) for i in inits]
    scan = _scan_axis(xts[0], w)
    if scan is not None:
        axis, reverse, exclusive = scan
        return xla_scan(ctx, fold, list(xs), inits, [t.dtype for t in xts], xts[0].rank, xts[0].shape[axis],  # type: ignore[arg-type]
                        axis, reverse, exclusive)
    active = w.active_axes()
    padded = []
    shape: list[int | None] = list(xts[0].shape)
    for x, xt, init in zip(xs, xts, inits):
        y, shape = win.dilate(ctx, x, xt.dtype, xt.shape, [w.base_dilations[a] for a in active], active, init)
        lo = [w.padding[a][0] if a in active else 0 for a in range(xt.rank)]
        hi = [w.padding[a][1] if a in active else 0 for a in range(xt.rank)]
        padded.append(win.pad(ctx, y, xt.dtype, lo, hi, init))
    lengths = {a: shape[a] + w.padding[a][0] + w.padding[a][1] for a in active}  # type: ignore[operator]
    counts = {a: win.output_length(lengths[a], w.dims[a], w.strides[a], w.window_dilations[a]) for a in active}
    accs: list[str] | None = None
    for offset in itertools.product(*[range(w.dims[a]) for a in active]):
        starts = [j * w.window_dilations[a] for j, a in zip(offset, active)]
        ends = [st + (counts[a] - 1) * w.strides[a] + 1 if counts[a] else st for st, a in zip(starts, active)]
        parts = [ctx.op("Slice", [y, ctx.i64(starts), ctx.i64(ends), ctx.i64(active),
                                  ctx.i64([w.strides[a] for a in active])]) for y in padded]
        if accs is None:
            accs = [expand(ctx, init, ctx.op("Shape", [parts[0]]), t.dtype) for init, t in zip(inits, xts)]
        accs = fold(accs, parts)
    if accs is None:  # no active axis: every window holds one element
        accs = fold([expand(ctx, init, ctx.op("Shape", [x]), t.dtype) for init, x, t in zip(inits, xs, xts)], list(xs))
    return accs


def _scan_axis(xt: hir.TensorType, w: win.Window) -> tuple[int, bool, bool] | None:
    """(axis, reverse, exclusive) when XLA CPU rewrites this window into a tiled scan, else None."""
    scan = _cumulative_axis(xt, w)
    if scan is None or xt.shape[scan[0]] <= XLA_SCAN_BASE:  # type: ignore[operator]
        return None
    return scan


def _cumulative_axis(xt: hir.TensorType, w: win.Window) -> tuple[int, bool, bool] | None:
    """(axis, reverse, exclusive) for a cumulative window (inclusive or exclusive scan), else None."""
    active = w.active_axes()
    if len(active) != 1:
        return None
    a = active[0]
    n = xt.shape[a]
    if n is None or w.dims[a] != n or w.strides[a] != 1 or w.base_dilations[a] != 1 \
            or w.window_dilations[a] != 1:
        return None
    lo, hi = w.padding[a]
    if hi == 0 and lo in (n - 1, n):
        return a, False, lo == n
    if lo == 0 and hi in (n - 1, n):
        return a, True, hi == n
    return None


def xla_scan(ctx: LoweringContext, fold: Combiner, xs: list[str], inits: list[str], dtypes: Sequence[str], rank: int,
             n: int, axis: int, reverse: bool, exclusive: bool) -> list[str]:
    """Cumulative fold along a static ``axis`` of length ``n``, in XLA CPU's order.

    Up to ``XLA_SCAN_BASE`` elements, output i folds init, x[0], ..., x[i] (forward) or
    init, x[i], ..., x[n-1] (reverse) one by one. Longer axes are padded with the init
    value to a multiple of the base, split into rows of the base length, scanned per row;
    the row totals get an exclusive scan (recursively) that is folded into every row.
    ``exclusive`` adds the init value in front (behind for reverse) of the n results.
    """
    base = XLA_SCAN_BASE
    if n <= base:
        out = _sequential_scan(ctx, fold, xs, inits, dtypes, n, axis, reverse)
    else:
        padded_n = -(-n // base) * base
        rows = padded_n // base
        tiles = []
        for x, init, dtype in zip(xs, inits, dtypes):
            lo, hi = [0] * rank, [0] * rank
            hi[axis] = padded_n - n
            x = win.pad(ctx, x, dtype, lo, hi, init) if padded_n != n else x
            tiles.append(ctx.op("Reshape", [x, _split_shape(ctx, x, rank, axis, [rows, base])]))
        outer = _sequential_scan(ctx, fold, tiles, inits, dtypes, base, axis + 1, reverse)
        edge = [base - 1, base] if not reverse else [0, 1]
        totals = [ctx.op("Squeeze", [ctx.op("Slice", [o, ctx.i64([edge[0]]), ctx.i64([edge[1]]),
                                                        ctx.i64([axis + 1])]), ctx.i64([axis + 1])]) for o in outer]
        carry = xla_scan(ctx, fold, totals, inits, dtypes, rank, rows, axis, reverse, exclusive=True)
        keep = [0, rows] if not reverse else [1, rows + 1]
        carry = [expand(ctx, ctx.op("Unsqueeze", [ctx.op("Slice", [c, ctx.i64([keep[0]]), ctx.i64([keep[1]]),
                                                                   ctx.i64([axis])]), ctx.i64([axis + 1])]),
                        ctx.op("Shape", [o]), dtype) for c, o, dtype in zip(carry, outer, dtypes)]
        joined = fold(outer, carry)
        out = []
        for y in joined:
            flat = ctx.op("Reshape", [y, _merge_shape(ctx, y, rank, axis, padded_n)])
            out.append(ctx.op("Slice", [flat, ctx.i64([0]), ctx.i64([n]), ctx.i64([axis])]) if padded_n != n else flat)
    if exclusive:
        padded = []
        for y, init, dtype in zip(out, inits, dtypes):
            lo, hi = [0] * rank, [0] * rank
            (hi if reverse else lo)[axis] = 1
            padded.append(win.pad(ctx, y, dtype, lo, hi, init))
        out = padded
    return out


def _sequential_scan(ctx: LoweringContext, fold: Combiner, xs: list[str], inits: list[str], dtypes: Sequence[str],
                     m: int, axis: int, reverse: bool) -> list[str]:
    """Inclusive scan of ``m`` (static) elements along ``axis``, folding one element at a time."""
    def take(x: str, start: int, stop: int) -> str:
        return ctx.op("Slice", [x, ctx.i64([start]), ctx.i64([stop]), ctx.i64([axis])])

    if not reverse:
        cols = [[take(x, t, t + 1) for x in xs] for t in range(m)]
        accs = [expand(ctx, init, ctx.op("Shape", [c]), d) for init, c, d in zip(inits, cols[0], dtypes)]
        steps = []
        for t in range(m):
            accs = fold(accs, cols[t])
            steps.append(accs)
        return [steps[0][i] if m == 1 else ctx.op("Concat", [s[i] for s in steps], axis=axis) for i in range(len(xs))]
    # Output i folds x[i], x[i+1], ... in increasing order: step t adds x[i + t] to outputs i < m - t.
    accs = [expand(ctx, init, ctx.op("Shape", [x]), d) for init, x, d in zip(inits, xs, dtypes)]
    for t in range(m):
        heads = [take(a, 0, m - t) if t else a for a in accs]
        new = fold(heads, [take(x, t, m) if t else x for x in xs])
        accs = [ctx.op("Concat", [h, take(a, m - t, m)], axis=axis) if t else h for h, a in zip(new, accs)]
    return accs


def _is_positive_zero(ctx: LoweringContext, name: str) -> bool:
    """True when ``name`` is known to hold only +0."""
    value = known_values(ctx, name)
    if value is None or value.size == 0:
        return False
    v = np.asarray(value, np.float64)
    return not v.any() and not np.signbit(v).any()


def rounded_combine(ctx: LoweringContext, kind: str, a: str, b: str, dtype: str) -> str:
    """``combine`` rounding to ``dtype`` after every step.

    float16 goes through explicit float32 arithmetic: ONNX Runtime runs float16 Add/Mul in
    float32 and drops the roundings between consecutive float16 nodes.
    """
    if kind == "add" and dtype in ("float16", "bfloat16") and _is_positive_zero(ctx, a):
        # a first step from the +0 init: ORT's NoopElimination would drop the Add and keep -0
        work = dt.float_work(dtype)
        return ctx.cast_if(without_negative_zero(ctx, ctx.cast_if(b, dtype, work), work), work, dtype)
    if dtype == "float16" and kind in ("add", "mul"):
        out = combine(ctx, kind, ctx.cast(a, "float32"), ctx.cast(b, "float32"), "float32")
        return ctx.cast(out, "float16")
    return combine(ctx, kind, a, b, dtype)


def _split_shape(ctx: LoweringContext, x: str, rank: int, axis: int, sizes: list[int]) -> str:
    pieces = []
    if axis:
        pieces.append(ctx.op("Shape", [x], start=0, end=axis))
    pieces.append(ctx.i64(sizes))
    if axis + 1 < rank:
        pieces.append(ctx.op("Shape", [x], start=axis + 1, end=rank))
    return pieces[0] if len(pieces) == 1 else ctx.op("Concat", pieces, axis=0)


def _merge_shape(ctx: LoweringContext, y: str, rank: int, axis: int, size: int) -> str:
    pieces = []
    if axis:
        pieces.append(ctx.op("Shape", [y], start=0, end=axis))
    pieces.append(ctx.i64([size]))
    if axis + 1 < rank:
        pieces.append(ctx.op("Shape", [y], start=axis + 2, end=rank + 1))
    return pieces[0] if len(pieces) == 1 else ctx.op("Concat", pieces, axis=0)


# ---- dynamic_reduce_window ---------------------------------------------------------------------------

@custom_call_target("stablehlo.dynamic_reduce_window", onnx_ops=("MaxPool", "Conv", "CumSum", "Slice", "Max", "Add"),
                    conditions="constant window sizes, strides and dilations (padding may follow symbolic sizes "
                               "without base dilation); a sum, product, max or min reducer")
def lower_dynamic_reduce_window(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """reduce_window whose window attributes are operands (lowered when they are constants)."""
    from jaxconv.errors import UnsupportedError

    body = ctx.module.functions[op.attrs["called_computations"][0]].body
    kind = reducer_kind(body)
    if kind is None or len(op.results) != 1:
        raise UnsupportedError("stablehlo.dynamic_reduce_window with this reducer is not lowered yet")
    xt = op.operands[0].type
    x, init, *attr_names = inputs
    values = [win.constant_fold(ctx, n) for n in attr_names]
    if all(v is not None for v in values[:4]):
        attrs = dict(zip(("window_dimensions", "window_strides", "base_dilations", "window_dilations"),
                         (tuple(int(i) for i in v) for v in values[:4])))
        attrs["padding"] = values[4]
        if values[4] is None:
            # Padding computed from symbolic sizes (SAME pooling): pad with the identity first.
            if any(b != 1 for b in attrs["base_dilations"]):
                raise UnsupportedError("stablehlo.dynamic_reduce_window with base dilation and computed padding "
                                       "is not lowered yet")
            fill = ctx.const(identity_value(kind, xt.dtype), xt.dtype)
            x = win.pad_with_tensor(ctx, x, xt.dtype, attr_names[4], fill)
            xt = hir.TensorType(xt.dtype, tuple(None for _ in xt.shape))
            attrs["padding"] = np.zeros((xt.rank, 2), np.int64)
        w = win.Window.from_attrs(attrs, xt.rank)
        problem = _check_window(kind, xt, w)
        if problem:
            raise UnsupportedError(f"stablehlo.dynamic_reduce_window: {problem}")
        return [reduce_window(ctx, kind, x, xt, init, w, op.results[0].type)]
    from jaxconv.onnx.ops.dynamic_reduce_window import lower_symbolic_window

    return [lower_symbolic_window(ctx, kind, x, xt, init, attr_names)]


from jaxconv.onnx.ops import select_and_scatter as _select_and_scatter  # noqa: E402,F401  (registers it)
