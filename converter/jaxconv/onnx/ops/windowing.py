"""Shape helpers shared by convolution, reduce_window and select_and_scatter (no registrations here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext


@dataclass(frozen=True)
class Window:
    """Window attributes of reduce_window / select_and_scatter, with defaults filled in."""

    dims: tuple[int, ...]
    strides: tuple[int, ...]
    base_dilations: tuple[int, ...]
    window_dilations: tuple[int, ...]
    padding: tuple[tuple[int, int], ...]

    @classmethod
    def from_attrs(cls, attrs: dict, rank: int) -> "Window":
        ones = (1,) * rank
        pad = attrs.get("padding")
        padding = tuple((int(lo), int(hi)) for lo, hi in np.asarray(pad).reshape(rank, 2)) if pad is not None \
            else ((0, 0),) * rank
        return cls(dims=tuple(attrs["window_dimensions"]), strides=tuple(attrs.get("window_strides") or ones),
                   base_dilations=tuple(attrs.get("base_dilations") or ones),
                   window_dilations=tuple(attrs.get("window_dilations") or ones), padding=padding)

    def is_padding_only(self) -> bool:
        """True when every window holds one element at unit stride: the result is the padded operand."""
        return all(d == 1 and s == 1 and b == 1 and wd == 1 for d, s, b, wd in
                   zip(self.dims, self.strides, self.base_dilations, self.window_dilations))

    def active_axes(self) -> list[int]:
        """Axes the window actually touches (the rest are passed through unchanged)."""
        return [a for a in range(len(self.dims))
                if self.dims[a] != 1 or self.strides[a] != 1 or self.padding[a] != (0, 0)
                or self.base_dilations[a] != 1 or self.window_dilations[a] != 1]


def output_length(n: int, window: int, stride: int, dilation: int) -> int:
    """Number of window positions along an axis of (already padded) length ``n``."""
    span = dilation * (window - 1) + 1
    return 0 if n < span else (n - span) // stride + 1


def pad(ctx: LoweringContext, x: str, dtype: str, lo: Sequence[int], hi: Sequence[int], value: str | None) -> str:
    """``Pad`` (negative amounts crop) with a scalar ``value`` tensor of ``dtype`` (None = zeros)."""
    if not any(lo) and not any(hi):
        return x
    return _pad(ctx, x, dtype, ctx.i64(list(lo) + list(hi)), value)


def interleave(ctx: LoweringContext, x: str, dtype: str, shape: Sequence[int | None], axis: int, factor: int,
               value: str | None) -> tuple[str, list[int | None]]:
    """Insert ``factor - 1`` copies of ``value`` between neighbours along ``axis``.

    Returns the new tensor and its shape.
    """
    shape = list(shape)
    if factor == 1:
        return x, shape
    rank = len(shape)
    n = shape[axis]
    u = ctx.op("Unsqueeze", [x, ctx.i64([axis + 1])])
    lo = [0] * (rank + 1)
    hi = [0] * (rank + 1)
    hi[axis + 1] = factor - 1
    u = pad(ctx, u, dtype, lo, hi, value)
    merged = [d for d in shape]
    merged[axis] = None if n is None else n * factor
    if all(d is not None for d in merged):
        target = ctx.i64(merged)
    else:
        pieces = []
        if axis:
            pieces.append(ctx.op("Shape", [x], start=0, end=axis))
        pieces.append(ctx.i64([-1]))
        if axis + 1 < rank:
            pieces.append(ctx.op("Shape", [x], start=axis + 1, end=rank))
        target = ctx.op("Concat", pieces, axis=0)
    y = ctx.op("Reshape", [u, target])
    y = ctx.op("Slice", [y, ctx.i64([0]), ctx.i64([-(factor - 1)]), ctx.i64([axis])])
    shape[axis] = None if n is None else max(0, (n - 1) * factor + 1)
    return y, shape


def dilate(ctx: LoweringContext, x: str, dtype: str, shape: Sequence[int | None], factors: Sequence[int],
           axes: Sequence[int], value: str | None) -> tuple[str, list[int | None]]:
    """Interleave ``value`` along each of ``axes`` by the matching factor."""
    shape = list(shape)
    for axis, f in zip(axes, factors):
        x, shape = interleave(ctx, x, dtype, shape, axis, f, value)
    return x, shape


def inverse(perm: Sequence[int]) -> list[int]:
    """The inverse of a permutation."""
    out = [0] * len(perm)
    for i, p in enumerate(perm):
        out[p] = i
    return out


def constant_fold(ctx: LoweringContext, name: str, limit: int = 64) -> np.ndarray | None:
    """The value of ``name`` when it is computed from constants only (at most ``limit`` nodes), else None."""
    return ctx.fold(name, limit)


def pad_with_tensor(ctx: LoweringContext, x: str, dtype: str, padding: str, value: str | None,
                    leading: int = 0) -> str:
    """Pad by a [axes, 2] (lo, hi) padding tensor; ``leading`` unpadded axes come first."""
    pt = ctx.op("Transpose", [ctx.cast(padding, "int64")], perm=[1, 0])
    if leading:
        pt = ctx.op("Concat", [ctx.const(np.zeros((2, leading), np.int64)), pt], axis=1)
    return _pad(ctx, x, dtype, ctx.op("Reshape", [pt, ctx.i64([-1])]), value)


def _pad(ctx: LoweringContext, x: str, dtype: str, pads: str, value: str | None) -> str:
    """Constant-mode Pad, through a wider dtype where ONNX Runtime has no kernel at this opset."""
    via = dt.pad_work_dtype(dtype, ctx.opset)
    if via is None:
        return ctx.op("Pad", [x, pads, value], mode="constant")
    v = ctx.cast(value, via) if value is not None else None
    return ctx.cast(ctx.op("Pad", [ctx.cast(x, via), pads, v], mode="constant"), dtype)
