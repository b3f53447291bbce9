"""A convolution with few output positions and a large window (a weight gradient) as one Gemm a position.

``jax.grad`` of a convolution with respect to its kernel is itself a convolution: the input with its
batch and feature roles swapped, "convolved" with the output gradient as the kernel. Its output has
the forward kernel's small extent (3x3) and its kernel the forward output's large one (28x28), so
ONNX Runtime runs the Conv as im2col and GEMMs whose N is the handful of output positions, at a
fraction of its GEMM speed. Here each output position is one window of the padded input,
``[B, F * taps]``, multiplied in a Gemm by the kernel as a matrix: ``[F * taps, O]`` where that is
its layout (NHWC gradients), else ``[O, F * taps]`` (transB); the ``[B, O]`` results are concatenated
and laid out as the program wants.

The products and terms are the Conv's (padding zeros are multiplied, as in XLA's float32
convolution); only the order of the sums changes. Measured against the Conv (CPU time, one thread
and two): 0.52x for a 3x3 kernel's gradient over 14x14 (16 to 32 channels, batch 32), 0.52-0.54x
over 28x28 (1 to 16), 0.50-0.54x over 56x56 (64 to 64). All windows in one Concat and one Gemm
(0.66-0.91x) or a batched MatMul (0.70-1.16x) were slower, the windows in NHWC order with transA too
on the whole (0.48x over 14x14, 0.88-0.98x over 28x28, 0.67-0.75x over 56x56). On forward-conv
shapes the form is about even at ``2 * positions == taps`` and 1.1x slower at ``positions == taps``,
hence the rule in ``applies``.
"""

from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np

from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops import windowing as win
from jaxconv.onnx.ops.linalg import transpose
from jaxconv.stablehlo import ir as hir

# The form pays where the kernel has at least this many taps per output position.
MIN_TAPS_PER_POSITION = 2


def applies(ctx: LoweringContext, op: hir.Op, inputs: Sequence[str], lhs_dil: Sequence[int]) -> bool:
    """Whether ``op`` (a convolution lowered as ONNX Conv) is a weight gradient worth Gemms: static but for
    the contracted features (a symbolic batch), no groups or lhs dilation, few output positions, and a
    kernel computed at run time. A constant kernel is a model's forward layer (on a tiny feature map):
    its Conv stays, for ORT to fuse with the bias and activation and ``layout`` to keep NCHW."""
    groups = op.attrs.get("feature_group_count", 1), op.attrs.get("batch_group_count", 1)
    if op.name != "stablehlo.convolution" or groups != (1, 1) or any(d != 1 for d in lhs_dil):
        return False
    dn = hir.ConvDimensionNumbers.of(op.attrs["dimension_numbers"])
    lt, kt, result = op.operands[0].type, op.operands[1].type, op.results[0].type
    static = [lt.shape[d] for d in [dn.input_batch_dimension, *dn.input_spatial_dimensions]] \
        + [kt.shape[d] for d in [dn.kernel_output_feature_dimension, *dn.kernel_spatial_dimensions]]
    if not result.is_static or any(d is None for d in static):
        return False
    positions = int(np.prod([result.shape[d] for d in dn.output_spatial_dimensions]))
    taps = int(np.prod([kt.shape[d] for d in dn.kernel_spatial_dimensions]))
    return 0 < positions and MIN_TAPS_PER_POSITION * positions <= taps and ctx.fold(inputs[1], 16) is None


def lower(ctx: LoweringContext, op: hir.Op, x: str, k: str, strides: Sequence[int],
          rhs_dil: Sequence[int]) -> str:
    """``op`` of ``x`` and ``k`` (float32, in ``op``'s layouts) as one Gemm per output position."""
    dn = hir.ConvDimensionNumbers.of(op.attrs["dimension_numbers"])
    lt, kt, result = op.operands[0].type, op.operands[1].type, op.results[0].type
    isp, ksp = list(dn.input_spatial_dimensions), list(dn.kernel_spatial_dimensions)
    nsp = len(isp)
    taps = [kt.shape[d] for d in ksp]
    out_sp = [result.shape[d] for d in dn.output_spatial_dimensions]
    batch, features = lt.shape[dn.input_batch_dimension], kt.shape[dn.kernel_output_feature_dimension]
    padding = np.asarray(op.attrs.get("padding", np.zeros((nsp, 2), np.int64))).reshape(nsp, 2)
    x = transpose(ctx, x, [dn.input_batch_dimension, dn.input_feature_dimension] + isp)
    x = win.pad(ctx, x, "float32", [0, 0] + [int(p) for p in padding[:, 0]],
                [0, 0] + [int(p) for p in padding[:, 1]], None)
    kernel, trans_b = _kernel_matrix(ctx, k, dn, features)
    axes, steps = ctx.i64(list(range(2, 2 + nsp))), ctx.i64(list(rhs_dil))
    rows = ctx.i64([batch, -1])
    parts = []
    for position in itertools.product(*[range(m) for m in out_sp]):
        starts = [p * s for p, s in zip(position, strides)]
        ends = [st + (t - 1) * d + 1 for st, t, d in zip(starts, taps, rhs_dil)]
        window = ctx.op("Slice", [x, ctx.i64(starts), ctx.i64(ends), axes, steps])
        parts.append(ctx.op("Gemm", [ctx.op("Reshape", [window, rows]), kernel], transB=trans_b))
    out = parts[0] if len(parts) == 1 else ctx.op("Concat", parts, axis=0)
    out = ctx.op("Reshape", [out, ctx.i64(out_sp + [batch, features])])
    layout = list(dn.output_spatial_dimensions) + [dn.output_batch_dimension, dn.output_feature_dimension]
    return transpose(ctx, out, win.inverse(layout))


def _kernel_matrix(ctx: LoweringContext, k: str, dn: hir.ConvDimensionNumbers, features: int) -> tuple[str, int]:
    """The kernel as ``[F * taps, O]`` where its output features are its last axis (a weight gradient of
    NHWC, where the kernel is the output gradient), no Transpose; else as ``[O, F * taps]`` (transB)."""
    contracted = [dn.kernel_input_feature_dimension, *dn.kernel_spatial_dimensions]
    if contracted + [dn.kernel_output_feature_dimension] == list(range(len(contracted) + 1)):
        return ctx.op("Reshape", [k, ctx.i64([-1, features])]), 0
    k = transpose(ctx, k, [dn.kernel_output_feature_dimension] + contracted)
    return ctx.op("Reshape", [k, ctx.i64([features, -1])]), 1
