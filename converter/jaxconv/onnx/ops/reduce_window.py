"""reduce_window: pooling (MaxPool / Conv with a ones kernel), cumulative scans, and exact strided slices.

Every path gives XLA's result: padding and base-dilation holes are skipped (they hold the
reduction's identity here), max/min propagate NaN, and the init value is combined once into
every window.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops import windowing as win
from jaxconv.onnx.ops.custom_calls import custom_call_target
from jaxconv.onnx.ops.linalg import transpose
from jaxconv.onnx.ops.reduce import combine, identity_value, is_identity, reducer_kind, work_dtype
from jaxconv.onnx.registry import lowering
from jaxconv.stablehlo import ir as hir

_POOL_FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})
_CONV_SUM_FLOATS = frozenset({"float16", "bfloat16", "float32"})
_CUMPROD_NATIVE = frozenset({"float32", "float64", "int32", "int64", "uint32", "uint64"})
MAX_SLICES = 4096


def _check_reduce_window(op: hir.Op) -> str | None:
    if len(op.results) != 1:
        return f"reduce_window with {len(op.results)} operands is not lowered yet"
    kind = reducer_kind(op.regions[0])
    if kind is None:
        return "reduce_window body is not a single add/mul/max/min/and/or/xor"
    xt = op.operands[0].type
    w = win.Window.from_attrs(op.attrs, xt.rank)
    return _check_window(kind, xt, w)


def _check_window(kind: str, xt: hir.TensorType, w: win.Window) -> str | None:
    if _plan(kind, xt, w) != "slices":
        return None
    if any(xt.shape[a] is None for a in w.active_axes()):
        return "reduce_window over a dynamic dimension with this window is not lowered yet"
    return None


@lowering("stablehlo.reduce_window", check=_check_reduce_window,
          onnx_ops=("MaxPool", "Conv", "CumSum", "CumProd", "Slice", "Max", "Add"))
def lower_reduce_window(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Pooling, cumulative scan or strided-slice reduction, whichever is exact for the window."""
    kind = reducer_kind(op.regions[0])
    assert kind is not None
    xt = op.operands[0].type
    w = win.Window.from_attrs(op.attrs, xt.rank)
    return reduce_window(ctx, kind, inputs[0], xt, inputs[1], w, op.results[0].type)


def reduce_window(ctx: LoweringContext, kind: str, x: str, xt: hir.TensorType, init: str, w: win.Window,
                  result: hir.TensorType) -> str:
    """Lower one reduce_window of ``kind`` (see module docstring)."""
    identity = is_identity(ctx.constant_value(init), kind, xt.dtype)
    plan = _plan(kind, xt, w)
    if plan == "identity":
        return x if identity else combine(ctx, kind, x, ctx.op("Reshape", [init, ctx.i64([])]), xt.dtype)
    if plan == "cumulative":
        axis = w.active_axes()[0]
        out = cumulative(ctx, kind, x, xt.dtype, xt.shape, axis, reverse=w.padding[axis][0] == 0)
    elif plan in ("maxpool", "sumconv"):
        out = _pool(ctx, kind, x, xt, w, result, plan)
    else:
        out = _slices(ctx, kind, x, xt, w)
    return out if identity else combine(ctx, kind, out, ctx.op("Reshape", [init, ctx.i64([])]), xt.dtype)


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
    """Inclusive scan of ``kind`` along ``axis``: CumSum, CumProd (opset 26) or a log-step scan."""
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
    """Hillis-Steele scan: combine with a copy shifted by 1, 2, 4, ... filled with the identity."""
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
    work = "float32" if xt.dtype in ("bfloat16",) or (plan == "sumconv" and xt.dtype == "float16") else xt.dtype
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
        if kind == "min":
            out = ctx.op("Mul", [out, sign])
        nan_mask = ctx.cast(ctx.op("IsNaN", [src]), work)
        has_nan = ctx.op("Greater", [ctx.op("MaxPool", [nan_mask], **attrs), ctx.scalar(0, work)])
        out = ctx.op("Where", [has_nan, ctx.scalar(np.nan, work), out])
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


# ---- dynamic_reduce_window ---------------------------------------------------------------------------

@custom_call_target("stablehlo.dynamic_reduce_window")
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
    raise UnsupportedError("stablehlo.dynamic_reduce_window whose window depends on a symbolic dimension "
                           "is not lowered yet; export with concrete sizes for that axis")


from jaxconv.onnx.ops import select_and_scatter as _select_and_scatter  # noqa: E402,F401  (registers it)
