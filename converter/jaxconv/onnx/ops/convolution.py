"""convolution and dynamic_conv: ONNX Conv, or shifted slices + MatMul where Conv has no kernel.

Both paths bring the operands to [N, C, spatial...] x [O, I, spatial...], insert zeros for
``lhs_dilation`` (transposed convolutions), pad explicitly when padding is negative or a tensor,
fold ``batch_group_count`` into channel groups, and transpose the result to its layout.
"""

from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
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
    nsp = len(op.attrs["dimension_numbers"]["input_spatial_dimensions"])
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
    dn = op.attrs["dimension_numbers"]
    lt, kt = op.operands[0].type, op.operands[1].type
    if op.name == "stablehlo.dynamic_conv" or any(lt.shape[d] is None for d in dn["input_spatial_dimensions"]) \
            or not kt.is_static or lt.shape[dn["input_feature_dimension"]] is None:
        return (f"{lt.dtype} convolution with dynamic spatial dims is not lowered yet "
                f"(ONNX Conv has no {lt.dtype} kernel)")
    if int(np.prod([kt.shape[d] for d in dn["kernel_spatial_dimensions"]])) > MAX_KERNEL_OFFSETS:
        return f"{lt.dtype} convolution with more than {MAX_KERNEL_OFFSETS} kernel positions is not lowered"
    return None


@lowering("stablehlo.convolution", "stablehlo.dynamic_conv", check=_check,
          onnx_ops=("Conv", "Transpose", "Pad", "MatMul"))
def lower_convolution(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Conv for f32/f16/bf16 (any layout, dilation, padding, groups); shifted slices + MatMul for f64 and ints."""
    dn = op.attrs["dimension_numbers"]
    lt, kt, result = op.operands[0].type, op.operands[1].type, op.results[0].type
    work, use_conv = _work(op)
    isp = list(dn["input_spatial_dimensions"])
    ksp = list(dn["kernel_spatial_dimensions"])
    nsp = len(isp)
    strides = _window_attr(op, "window_strides", nsp)
    lhs_dil = _window_attr(op, "lhs_dilation", nsp)
    rhs_dil = _window_attr(op, "rhs_dilation", nsp)
    assert strides is not None and lhs_dil is not None and rhs_dil is not None
    if result.is_static and 0 in result.shape:
        return _zeros(ctx, result)
    fgc, bgc = op.attrs.get("feature_group_count", 1), op.attrs.get("batch_group_count", 1)

    lhs_perm = [dn["input_batch_dimension"], dn["input_feature_dimension"]] + isp
    rhs_perm = [dn["kernel_output_feature_dimension"], dn["kernel_input_feature_dimension"]] + ksp
    x = transpose(ctx, ctx.cast_if(inputs[0], lt.dtype, work), lhs_perm)
    shape: list[int | None] = [lt.shape[d] for d in lhs_perm]
    k = transpose(ctx, ctx.cast_if(inputs[1], kt.dtype, work), rhs_perm)
    kshape = [kt.shape[d] for d in rhs_perm]
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
        out = _shifted_matmul(ctx, x, shape, k, kshape, strides, rhs_dil, groups)
    out = transpose(ctx, out, win.inverse([dn["output_batch_dimension"], dn["output_feature_dimension"]]
                                          + list(dn["output_spatial_dimensions"])))
    return ctx.cast_if(out, work, result.dtype)


def _zeros(ctx: LoweringContext, result: hir.TensorType) -> str:
    """An empty result (a window longer than the input, or a zero-size dim): a constant, no Conv."""
    return ctx.const(np.zeros(result.shape, dtype=dt.numpy_dtype(result.dtype)))


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
                    strides: Sequence[int], dil: Sequence[int], groups: int) -> str:
    """Exact convolution of padded [N, C, P...] by [O, C/groups, K...]: one strided Slice per kernel offset,
    stacked, then a grouped MatMul (for dtypes ONNX Conv lacks)."""
    nsp = len(kshape) - 2
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
