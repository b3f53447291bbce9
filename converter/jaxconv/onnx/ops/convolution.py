"""convolution and dynamic_conv: ONNX Conv, or shifted slices + MatMul where Conv has no kernel.

Both paths bring the operands to [N, C, spatial...] x [O, I, spatial...], insert zeros for
``lhs_dilation`` (transposed convolutions), pad explicitly when padding is negative or a tensor,
fold ``batch_group_count`` into channel groups, and transpose the result to its layout. A float
convolution with few output positions and a large window (a weight gradient) is one Gemm a position
instead (``conv_weight_grad``).
"""

from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np
from onnx import helper

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops import conv_weight_grad as weight_grad
from jaxconv.onnx.ops import windowing as win
from jaxconv.onnx.ops.linalg import MATMUL_NATIVE, matmul_dtype, transpose
from jaxconv.onnx.registry import lowering
from jaxconv.stablehlo import ir as hir

# ONNX Runtime CPU Conv kernels (float16 is computed in float32 too, to round once like XLA).
_CONV_FLOATS = frozenset({"float16", "bfloat16", "float32"})
MAX_KERNEL_OFFSETS = 4096


def _work(op: hir.Op) -> tuple[str, bool]:
    """(dtype to compute in, whether ONNX Conv is used)."""
    result = op.results[0].type.dtype
    if result in _CONV_FLOATS:
        return "float32", True
    return matmul_dtype(result), False


def _window_attr(op: hir.Op, name: str, nsp: int) -> list[int] | None:
    """``name`` (window_strides, lhs_dilation, rhs_dilation) with one entry per spatial dim (default 1s).

    Some exported dynamic_conv ops carry more entries than spatial dims; when the extra entries
    repeat the same value the first ``nsp`` are unambiguous. Returns None when they are not.
    """
    values = [int(v) for v in (op.attrs.get(name) or [1] * nsp)]
    if len(values) == nsp:
        return values
    if len(values) > nsp and len(set(values)) == 1:
        return values[:nsp]
    return None


def _check(op: hir.Op) -> str | None:
    nsp = len(hir.ConvDimensionNumbers.of(op.attrs["dimension_numbers"]).input_spatial_dimensions)
    for name in ("window_strides", "lhs_dilation", "rhs_dilation"):
        if _window_attr(op, name, nsp) is None:
            return (f"convolution {name} {list(op.attrs.get(name))} does not have one entry per spatial "
                    f"dimension ({nsp})")
    if any(op.attrs.get("window_reversal") or ()):
        return "convolution with window_reversal is not lowered yet"
    fgc, bgc = op.attrs.get("feature_group_count", 1), op.attrs.get("batch_group_count", 1)
    if fgc > 1 and bgc > 1:
        return "convolution with both feature and batch groups is not valid StableHLO"
    work, use_conv = _work(op)
    if use_conv:
        return None
    if work not in MATMUL_NATIVE:
        return f"convolution producing {op.results[0].type.dtype} has no ONNX Runtime kernel"
    dn = hir.ConvDimensionNumbers.of(op.attrs["dimension_numbers"])
    lt, kt = op.operands[0].type, op.operands[1].type
    if op.name == "stablehlo.dynamic_conv" or any(lt.shape[d] is None for d in dn.input_spatial_dimensions) \
            or not kt.is_static or lt.shape[dn.input_feature_dimension] is None:
        return (f"{lt.dtype} convolution with dynamic spatial dims is not lowered yet "
                f"(ONNX Conv has no {lt.dtype} kernel)")
    if int(np.prod([kt.shape[d] for d in dn.kernel_spatial_dimensions])) > MAX_KERNEL_OFFSETS:
        return f"{lt.dtype} convolution with more than {MAX_KERNEL_OFFSETS} kernel positions is not lowered"
    return None


@lowering("stablehlo.convolution", "stablehlo.dynamic_conv", check=_check,
          onnx_ops=("Conv", "Transpose", "Pad", "MatMul", "Gemm", "Slice", "Concat"))
def lower_convolution(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Conv for f32/f16/bf16 (any layout, dilation, padding, groups); shifted slices + MatMul for f64 and ints."""
    dn = hir.ConvDimensionNumbers.of(op.attrs["dimension_numbers"])
    lt, kt, result = op.operands[0].type, op.operands[1].type, op.results[0].type
    work, use_conv = _work(op)
    isp = list(dn.input_spatial_dimensions)
    ksp = list(dn.kernel_spatial_dimensions)
    nsp = len(isp)
    strides = _window_attr(op, "window_strides", nsp)
    lhs_dil = _window_attr(op, "lhs_dilation", nsp)
    rhs_dil = _window_attr(op, "rhs_dilation", nsp)
    assert strides is not None and lhs_dil is not None and rhs_dil is not None
    if result.is_static and 0 in result.shape:
        return _zeros(ctx, result)
    if 0 in result.shape and (empty := _empty_of_run_time_batch(ctx, inputs[0], lt, dn, result, op)) is not None:
        return empty
    if use_conv and weight_grad.applies(ctx, op, inputs, lhs_dil):
        out = weight_grad.lower(ctx, op, ctx.cast_if(inputs[0], lt.dtype, work),
                                ctx.cast_if(inputs[1], kt.dtype, work), strides, rhs_dil)
        return ctx.cast_if(out, work, result.dtype)

    lhs_perm = [dn.input_batch_dimension, dn.input_feature_dimension] + isp
    rhs_perm = [dn.kernel_output_feature_dimension, dn.kernel_input_feature_dimension] + ksp
    x = transpose(ctx, ctx.cast_if(inputs[0], lt.dtype, work), lhs_perm)
    shape: list[int | None] = [lt.shape[d] for d in lhs_perm]
    k = transpose(ctx, ctx.cast_if(inputs[1], kt.dtype, work), rhs_perm)
    kshape = [kt.shape[d] for d in rhs_perm]
    fgc, bgc = op.attrs.get("feature_group_count", 1), op.attrs.get("batch_group_count", 1)
    # XLA on CPU runs a 1-D/2-D lhs-dilated convolution with unit strides and no groups as a
    # transposed convolution that skips the holes; its other convolutions multiply them (0 x inf).
    if use_conv and any(d > 1 for d in lhs_dil) and nsp <= 2 and fgc == 1 and bgc == 1 and kt.is_static \
            and all(s == 1 for s in strides) and op.name == "stablehlo.convolution":
        padding = np.asarray(op.attrs.get("padding", np.zeros((nsp, 2), np.int64))).reshape(nsp, 2)
        out = _transposed(ctx, x, k, kshape, strides, lhs_dil, rhs_dil, padding, fgc)
        out = transpose(ctx, out, win.inverse([dn.output_batch_dimension, dn.output_feature_dimension]
                                              + list(dn.output_spatial_dimensions)))
        return ctx.cast_if(out, work, result.dtype)
    real = None
    if not use_conv and work in dt.FLOATS and op.name == "stablehlo.convolution":
        padding = np.asarray(op.attrs.get("padding", np.zeros((nsp, 2), np.int64))).reshape(nsp, 2)
        real = _real_positions(shape[2:], lhs_dil, padding)
    x, shape = win.dilate(ctx, x, work, shape, lhs_dil, range(2, 2 + nsp), None)

    if op.name == "stablehlo.dynamic_conv":
        x = win.pad_with_tensor(ctx, x, work, inputs[2], None, leading=2)
        shape[2:] = [None] * nsp
        pads = [0] * (2 * nsp)
    else:
        padding = np.asarray(op.attrs.get("padding", np.zeros((nsp, 2), np.int64))).reshape(nsp, 2)
        lo, hi = [int(p) for p in padding[:, 0]], [int(p) for p in padding[:, 1]]
        if not use_conv or any(p < 0 for p in lo + hi):
            x = win.pad(ctx, x, work, [0, 0] + lo, [0, 0] + hi, None)
            shape[2:] = [None if s is None else s + a + b for s, a, b in zip(shape[2:], lo, hi)]
            pads = [0] * (2 * nsp)
        else:
            pads = lo + hi
    groups = fgc
    if bgc > 1:
        x, shape = _batch_groups_to_channels(ctx, x, shape, bgc)
        groups = bgc
    if use_conv:
        out = ctx.op("Conv", [x, k], strides=strides, dilations=rhs_dil, pads=pads, group=groups,
                     kernel_shape=kshape[2:])
    else:
        out = _shifted_matmul(ctx, x, shape, k, kshape, strides, rhs_dil, groups, real)
    out = transpose(ctx, out, win.inverse([dn.output_batch_dimension, dn.output_feature_dimension]
                                          + list(dn.output_spatial_dimensions)))
    return ctx.cast_if(out, work, result.dtype)


def _zeros(ctx: LoweringContext, result: hir.TensorType) -> str:
    """An empty result (a window longer than the input, or a zero-size dim): a constant, no Conv."""
    return ctx.const(np.zeros(result.shape, dtype=dt.numpy_dtype(result.dtype)))


def _empty_of_run_time_batch(ctx: LoweringContext, x: str, lt: hir.TensorType, dn: hir.ConvDimensionNumbers,
                             result: hir.TensorType, op: hir.Op) -> str | None:
    """An empty result whose batch is known at run time only (a symbolic batch; a window longer than the
    input): zeros of the input's batch by the result's static dims, no Conv (ONNX Runtime rejects a Conv
    whose kernel is larger than its padded input). None where another result dim is symbolic."""
    if op.attrs.get("batch_group_count", 1) != 1 or any(
            d is None for a, d in enumerate(result.shape) if a != dn.output_batch_dimension):
        return None
    return _zeros_of_batch(ctx, x, dn.input_batch_dimension, list(result.shape), dn.output_batch_dimension,
                           result.dtype)


def _zeros_of_batch(ctx: LoweringContext, x: str, x_batch: int, dims: Sequence[int | None], batch: int,
                    dtype: str) -> str:
    """Zeros of shape ``dims`` whose axis ``batch`` is ``x``'s axis ``x_batch``, read at run time."""
    size = ctx.op("Shape", [x], start=x_batch, end=x_batch + 1)
    shape = ctx.op("Concat", [size if a == batch else ctx.i64([d]) for a, d in enumerate(dims)], axis=0)
    return ctx.op("ConstantOfShape", [shape], value=helper.make_tensor("zero", dt.onnx_type(dtype), [1], [0]))


def _batch_groups_to_channels(ctx: LoweringContext, x: str, shape: list[int | None], bgc: int
                              ) -> tuple[str, list[int | None]]:
    """[N, C, S...] -> [N / bgc, bgc * C, S...]: batch group g becomes channel group g."""
    rank = len(shape)
    rest = ctx.op("Shape", [x], start=1, end=rank)
    split = ctx.op("Reshape", [x, ctx.op("Concat", [ctx.i64([bgc, -1]), rest], axis=0)])
    moved = ctx.op("Transpose", [split], perm=[1, 0] + list(range(2, rank + 1)))
    spatial = ctx.op("Shape", [x], start=2, end=rank)
    c = shape[1]
    merged = ctx.op("Reshape", [moved, ctx.op("Concat", [ctx.i64([-1, bgc * c]), spatial], axis=0)])  # type: ignore
    n = shape[0]
    return merged, [None if n is None else n // bgc, bgc * c] + shape[2:]  # type: ignore[operator]


def _shifted_matmul(ctx: LoweringContext, x: str, shape: Sequence[int | None], k: str, kshape: Sequence[int],
                    strides: Sequence[int], dil: Sequence[int], groups: int,
                    real: list[np.ndarray] | None = None) -> str:
    """Exact convolution of padded [N, C, P...] by [O, C/groups, K...]: one strided Slice per kernel offset,
    stacked, then a grouped MatMul (for dtypes ONNX Conv lacks).

    ``real`` marks, per spatial dim, the positions of the padded input that hold an element (not
    padding or an lhs-dilation hole). XLA never multiplies a kernel tap by those for float64
    (0 x inf would be NaN), so then each offset gets its own MatMul and skips them.
    """
    nsp = len(kshape) - 2
    if real is not None and not all(r.all() for r in real):
        return _masked_shifted_matmul(ctx, x, shape, k, kshape, strides, dil, groups, real)
    c, o = shape[1], kshape[0]
    ksp = list(kshape[2:])
    out_sp = [win.output_length(p, kk, s, d) for p, kk, s, d in zip(shape[2:], ksp, strides, dil)]  # type: ignore
    axes = ctx.i64(list(range(2, 2 + nsp)))
    steps = ctx.i64(list(strides))
    parts = []
    for off in itertools.product(*[range(kk) for kk in ksp]):
        starts = [j * d for j, d in zip(off, dil)]
        ends = [st + (m - 1) * s + 1 if m else st for st, m, s in zip(starts, out_sp, strides)]
        part = ctx.op("Slice", [x, ctx.i64(starts), ctx.i64(ends), axes, steps])
        parts.append(ctx.op("Unsqueeze", [part, ctx.i64([2])]))
    cols = parts[0] if len(parts) == 1 else ctx.op("Concat", parts, axis=2)
    kprod = int(np.prod(ksp))
    oprod = int(np.prod(out_sp))
    cg = c // groups  # type: ignore[operator]
    cols = ctx.op("Reshape", [cols, ctx.i64([-1, groups, cg * kprod, oprod])])
    w = ctx.op("Reshape", [k, ctx.i64([groups, o // groups, cg * kprod])])
    out = ctx.op("MatMul", [w, cols])
    return ctx.op("Reshape", [out, ctx.i64([-1, o] + out_sp)])


def _real_positions(spatial: Sequence[int | None], lhs_dil: Sequence[int], padding: np.ndarray) -> list[np.ndarray] | None:
    """Per spatial dim, which positions of the dilated and padded input hold an input element."""
    out = []
    for n, ld, (lo, hi) in zip(spatial, lhs_dil, padding):
        if n is None:
            return None
        length = (n - 1) * ld + 1 + int(lo) + int(hi) if n else int(lo) + int(hi)
        mask = np.zeros(max(length, 0), bool)
        pos = int(lo) + ld * np.arange(n)
        pos = pos[(pos >= 0) & (pos < length)]
        mask[pos] = True
        out.append(mask)
    return out


def _masked_shifted_matmul(ctx: LoweringContext, x: str, shape: Sequence[int | None], k: str, kshape: Sequence[int],
                           strides: Sequence[int], dil: Sequence[int], groups: int, real: list[np.ndarray]) -> str:
    """_shifted_matmul with one MatMul per kernel offset, its padding/hole positions replaced by +0 (XLA starts its sums from +0)."""
    from jaxconv.onnx.ops._common import where

    nsp = len(kshape) - 2
    c, o = shape[1], kshape[0]
    ksp = list(kshape[2:])
    out_sp = [win.output_length(p, kk, s, d) for p, kk, s, d in zip(shape[2:], ksp, strides, dil)]  # type: ignore
    axes = ctx.i64(list(range(2, 2 + nsp)))
    steps = ctx.i64(list(strides))
    cg = c // groups  # type: ignore[operator]
    oprod = int(np.prod(out_sp))
    dtype = "float64"
    w_all = ctx.op("Reshape", [k, ctx.i64([groups, o // groups, cg, int(np.prod(ksp))])])
    total = None
    for flat, off in enumerate(itertools.product(*[range(kk) for kk in ksp])):
        starts = [j * d for j, d in zip(off, dil)]
        valid = np.ones(out_sp, bool)
        for i, (st, m, s) in enumerate(zip(starts, out_sp, strides)):
            line = real[i][st + s * np.arange(m)]
            valid &= line.reshape([m if a == i else 1 for a in range(nsp)])
        if not valid.any():
            continue
        ends = [st + (m - 1) * s + 1 if m else st for st, m, s in zip(starts, out_sp, strides)]
        part = ctx.op("Slice", [x, ctx.i64(starts), ctx.i64(ends), axes, steps])
        cols = ctx.op("Reshape", [part, ctx.i64([-1, groups, cg, oprod])])
        w = ctx.op("Gather", [w_all, ctx.i64([flat])], axis=3)  # [g, O/g, cg, 1]
        w = ctx.op("Reshape", [w, ctx.i64([groups, o // groups, cg])])
        term = ctx.op("MatMul", [w, cols])  # [N, g, O/g, P]
        if not valid.all():
            term = where(ctx, ctx.const(valid.reshape(-1)), term, ctx.scalar(0.0, dtype), dtype)
        total = term if total is None else ctx.op("Add", [total, term])
    if total is None:  # every window sees only padding: XLA sums nothing
        return _zeros_of_batch(ctx, x, 0, [None, o, *out_sp], 0, dtype)
    return ctx.op("Reshape", [total, ctx.i64([-1, o] + out_sp)])


def _transposed(ctx: LoweringContext, x: str, k: str, kshape: Sequence[int], strides: Sequence[int],
                lhs_dil: Sequence[int], rhs_dil: Sequence[int], padding: np.ndarray, groups: int) -> str:
    """A convolution with lhs dilation as ConvTranspose of [N, C, S...] by [O, C/groups, K...]: only input
    elements meet kernel taps (XLA on CPU skips the holes, so 0 x inf never makes a NaN there)."""
    nsp = len(kshape) - 2
    o, cg = kshape[0], kshape[1]
    ksp = list(kshape[2:])
    # Flip the taps and swap the channel roles: [O, C/g, K] -> [C, O/g, K].
    axes = list(range(2, 2 + nsp))
    flipped = ctx.op("Slice", [k, ctx.i64([-1] * nsp), ctx.i64([-(2 ** 63)] * nsp), ctx.i64(axes), ctx.i64([-1] * nsp)])
    split = ctx.op("Reshape", [flipped, ctx.i64([groups, o // groups, cg] + ksp)])
    moved = ctx.op("Transpose", [split], perm=[0, 2, 1] + [3 + i for i in range(nsp)])
    w = ctx.op("Reshape", [moved, ctx.i64([groups * cg, o // groups] + ksp)])
    begin = [(kk - 1) * d - int(lo) for kk, d, (lo, _) in zip(ksp, rhs_dil, padding)]
    end = [(kk - 1) * d - int(hi) for kk, d, (_, hi) in zip(ksp, rhs_dil, padding)]
    out = ctx.op("ConvTranspose", [x, w], strides=list(lhs_dil), dilations=list(rhs_dil),
                 pads=[max(b, 0) for b in begin] + [max(e, 0) for e in end], group=groups, kernel_shape=ksp)
    # Padding wider than the dilated kernel adds outputs that see only padding: zeros in XLA.
    out = win.pad(ctx, out, "float32", [0, 0] + [max(-b, 0) for b in begin], [0, 0] + [max(-e, 0) for e in end], None)
    if any(s > 1 for s in strides):
        out = ctx.op("Slice", [out, ctx.i64([0] * nsp), ctx.i64([2 ** 62] * nsp), ctx.i64(axes), ctx.i64(list(strides))])
    return out
