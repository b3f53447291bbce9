"""stablehlo.dynamic_pad: edge padding given as run-time operands."""

from __future__ import annotations

import numpy as np

from jaxconv.errors import UnsupportedError
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops import shape as sh
from jaxconv.onnx.registry import lowering
from jaxconv.stablehlo import ir as hir


@lowering("stablehlo.dynamic_pad", onnx_ops=("Pad",), conditions="interior padding that folds to zeros")
def lower_dynamic_pad(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """One constant-mode Pad with the low and high edges from the operands (negative edges crop);
    interior padding must fold to zeros."""
    x, value, low, high, interior = inputs
    inner = ctx.fold(interior)
    if inner is None or np.any(np.asarray(inner) != 0):
        raise UnsupportedError("stablehlo.dynamic_pad with interior padding that is not a constant zero "
                               "is not lowered")
    pads = ctx.op("Concat", [ctx.cast_if(low, op.operands[2].type.dtype, "int64"),
                             ctx.cast_if(high, op.operands[3].type.dtype, "int64")], axis=0)
    scalar = ctx.op("Reshape", [value, ctx.i64([])])
    return sh.pad(ctx, x, pads, scalar, op.operands[0].type.dtype)
