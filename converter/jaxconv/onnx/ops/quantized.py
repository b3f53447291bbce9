"""uniform_quantize and uniform_dequantize, after the reader's quant_math rewrite.

By then every value has a plain type: quantized values are their storage integers
(``QuantType.carrier``) and the quantized type sits in ``attrs["quant"]``. The numbers follow
StableHLO's ``legalize-quant-to-math`` pass, which the StableHLO interpreter (and so the test
data) uses:

- dequantize: ``float(q - zero_point) * scale`` is DequantizeLinear exactly (uint8 and 16-bit
  storage); int8, int32 and other storage go through the same arithmetic (see ``_DQ_STORAGE``).
- quantize: ``round_half_even(clamp(x / scale + zero_point, storage_min, storage_max))`` in float
  arithmetic. QuantizeLinear adds the zero point after rounding, so ties and values near them
  differ for odd zero points.
- requantize: ``round_half_even(clamp(q * merged_scale + merged_zero_point))`` with
  ``merged_scale = scale_in / scale_out`` and ``merged_zero_point = zp_out - zp_in * merged_scale``,
  clamped only below 32 bits.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.registry import lowering
from jaxconv.stablehlo import ir as hir
from jaxconv.stablehlo.quant_types import QuantType

# Storage types whose DequantizeLinear ONNX Runtime runs as written. Not int8 or int32: at opset 21
# its QDQ propagation puts a QuantizeLinear after a Transpose or Reshape that the DequantizeLinear
# feeds, and then refuses its own model ("output_dtype INT8 does not match y_zero_point type UINT8";
# no int32 QuantizeLinear kernel).
_DQ_STORAGE = frozenset({"uint8", "int16", "uint16"})


def _check(op: hir.Op) -> str | None:
    if not isinstance(op.attrs.get("quant"), QuantType):
        return "a quantize/dequantize whose types the reader did not resolve (no !quant.uniform type)"
    return None


def _param(ctx: LoweringContext, values: Sequence[float | int], q: QuantType, rank: int, dtype: str) -> str:
    """One value per tensor (a scalar), or one per slice along the quantized axis (broadcastable)."""
    arr = np.asarray(values, dtype=dt.numpy_dtype(dtype))
    if q.axis is None:
        return ctx.const(arr.reshape(()))
    return ctx.const(arr.reshape([len(values)] + [1] * (rank - q.axis - 1)))


@lowering("stablehlo.uniform_dequantize", check=_check, onnx_ops=("DequantizeLinear",))
def lower_uniform_dequantize(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Storage integers to float: ``(q - zero_point) * scale`` (DequantizeLinear where it has a kernel)."""
    q: QuantType = op.attrs["quant"]
    src = op.operands[0].type.dtype
    rank = op.operands[0].type.rank
    if src in _DQ_STORAGE:
        scale = ctx.const(np.asarray(q.scales if q.per_axis else q.scales[0], np.float32))
        zp = ctx.const(np.asarray(q.zero_points if q.per_axis else q.zero_points[0], dt.numpy_dtype(src)))
        out = ctx.op("DequantizeLinear", [inputs[0], scale, zp], axis=q.axis if q.per_axis else None)
    else:
        zp = _param(ctx, q.zero_points, q, rank, "int64")
        centred = ctx.op("Sub", [ctx.cast_if(inputs[0], src, "int64"), zp])
        out = ctx.op("Mul", [ctx.cast(centred, "float32"), _param(ctx, q.scales, q, rank, "float32")])
    return ctx.cast_if(out, "float32", op.results[0].type.dtype)


@lowering("stablehlo.uniform_quantize", check=_check, onnx_ops=("Div", "Add", "Clip", "Round", "Cast"))
def lower_uniform_quantize(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Float to storage integers, or storage integers to other storage integers (requantize)."""
    q: QuantType = op.attrs["quant"]
    src = op.operands[0].type
    dst = op.results[0].type.dtype
    rank = src.rank
    if "operand_quant" in op.attrs:
        return _requantize(ctx, inputs[0], src.dtype, op.attrs["operand_quant"], q, dst, rank)
    x = ctx.cast_if(inputs[0], src.dtype, "float32")
    y = ctx.op("Div", [x, _param(ctx, q.scales, q, rank, "float32")])
    if any(q.zero_points):
        y = ctx.op("Add", [y, _param(ctx, [float(z) for z in q.zero_points], q, rank, "float32")])
    y = _clip(ctx, y, q)
    return ctx.cast(ctx.op("Round", [y]), dst)


def _clip(ctx: LoweringContext, y: str, q: QuantType) -> str:
    lo, hi = ctx.scalar(float(q.storage_min), "float32"), ctx.scalar(float(q.storage_max), "float32")
    return ctx.op("Clip", [y, lo, hi])


def _requantize(ctx: LoweringContext, x: str, src: str, q_in: QuantType, q_out: QuantType, dst: str,
                rank: int) -> str:
    """``round_half_even(clamp(q * merged_scale + merged_zero_point))``, as legalize-quant-to-math does."""
    if q_in == q_out:
        return ctx.cast_if(x, src, dst)
    n = max(len(q_in.scales), len(q_out.scales))
    s_in = [q_in.scales[i if q_in.per_axis else 0] for i in range(n)]
    s_out = [q_out.scales[i if q_out.per_axis else 0] for i in range(n)]
    z_in = [q_in.zero_points[i if q_in.per_axis else 0] for i in range(n)]
    z_out = [q_out.zero_points[i if q_out.per_axis else 0] for i in range(n)]
    merged = [a / b for a, b in zip(s_in, s_out)]
    merged_zp = [zo - zi * m for zo, zi, m in zip(z_out, z_in, merged)]
    layout = q_out if q_out.per_axis else q_in
    y = ctx.op("Mul", [ctx.cast(x, "float32"), _param(ctx, merged, layout, rank, "float32")])
    if any(z != 0 for z in merged_zp):
        y = ctx.op("Add", [y, _param(ctx, merged_zp, layout, rank, "float32")])
    if dt.bit_width(dst) < 32:
        y = _clip(ctx, y, q_out)
    return ctx.cast(ctx.op("Round", [y]), dst)
