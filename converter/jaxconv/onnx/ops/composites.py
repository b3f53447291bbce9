"""stablehlo.composite: known names map to ONNX ops; others inline their decomposition."""

from __future__ import annotations

from typing import Callable

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.registry import lowering
from jaxconv.stablehlo import ir as hir

# name -> (ONNX op, dtypes ONNX Runtime computes it in); others run the decomposition.
NATIVE_UNARY: dict[str, tuple[str, frozenset[str]]] = {
    "chlo.erf": ("Erf", dt.F32_F16),
    "chlo.asin": ("Asin", dt.F32_F16),
    "chlo.acos": ("Acos", dt.F32_F16),
    "chlo.sinh": ("Sinh", dt.F32_F16),
    "chlo.cosh": ("Cosh", dt.F32_F16),
    "chlo.asinh": ("Asinh", dt.F32_F16),
    "chlo.acosh": ("Acosh", dt.F32_F16),
    "chlo.atanh": ("Atanh", dt.F32_F16),
}

SPECIAL: dict[str, Callable[[LoweringContext, hir.Op, list[str]], list[str]]] = {}


def composite_is_native(op: hir.Op) -> bool:
    """True when the composite maps to ONNX directly (no need to look at its decomposition)."""
    name = op.attrs.get("name")
    if name in NATIVE_UNARY:
        onnx_op, native = NATIVE_UNARY[name]
        return op.operands[0].type.dtype in native or op.operands[0].type.dtype == "bfloat16"
    return name in SPECIAL


def _check(op: hir.Op) -> str | None:
    if composite_is_native(op):
        return None
    if op.attrs.get("decomposition") is None:
        return f"composite {op.attrs.get('name')} has no decomposition"
    return None


@lowering("stablehlo.composite", check=_check, onnx_ops=("Erf", "Asin", "TopK"))
def lower_composite(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """Known composites by name; otherwise the decomposition function inlined."""
    name = op.attrs.get("name")
    if name in NATIVE_UNARY and composite_is_native(op):
        onnx_op, native = NATIVE_UNARY[name]
        src = op.operands[0].type.dtype
        work = src if src in native else "float32"
        out = ctx.op(onnx_op, [ctx.cast_if(inputs[0], src, work)])
        return [ctx.cast_if(out, work, op.results[0].type.dtype)]
    if name in SPECIAL:
        return SPECIAL[name](ctx, op, inputs)
    callee = ctx.module.functions[op.attrs["decomposition"]]
    return ctx.lower_block(callee.body, inputs)
