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


def lower_top_k(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """chlo.top_k: the k largest along the last axis in IEEE total order, ties to the lower index.

    One stable TopK (plus a -0.0 tie pass, see ops/sort.py) and the indices cast to the
    result dtype; values are gathered from the original operand so every dtype stays exact.
    """
    from jaxconv.onnx.ops.sort import SortKey, gather_sorted, sort_permutation

    attrs = op.attrs.get("composite_attributes") or {}
    t = op.operands[0].type
    axis = t.rank - 1
    k = int(attrs["k"])
    descending = bool(attrs.get("largest", True))
    total = t.dtype in dt.FLOATS
    key = SortKey(0, descending, signed_zero=total, signed_nan=total)
    perm, values = sort_permutation(ctx, inputs[:1], [t], [key], axis, k)
    if values is None:
        values = gather_sorted(ctx, inputs[0], t.dtype, perm, axis)
    return [values, ctx.cast_if(perm, "int64", op.results[1].type.dtype)]


def _top_k_problem(op: hir.Op) -> str | None:
    attrs = op.attrs.get("composite_attributes") or {}
    t = op.operands[0].type
    if len(op.operands) != 1 or len(op.results) != 2 or t.rank == 0 or not isinstance(attrs.get("k"), int):
        return "chlo.top_k composite with an unexpected signature"
    return None


SPECIAL: dict[str, Callable[[LoweringContext, hir.Op, list[str]], list[str]]] = {"chlo.top_k": lower_top_k}
SPECIAL_CHECKS: dict[str, Callable[[hir.Op], str | None]] = {"chlo.top_k": _top_k_problem}


def composite_is_native(op: hir.Op) -> bool:
    """True when the composite maps to ONNX directly (no need to look at its decomposition)."""
    name = op.attrs.get("name")
    if name in NATIVE_UNARY:
        onnx_op, native = NATIVE_UNARY[name]
        return op.operands[0].type.dtype in native or op.operands[0].type.dtype in ("float16", "bfloat16")
    return name in SPECIAL and SPECIAL_CHECKS[name](op) is None


def _check(op: hir.Op) -> str | None:
    if composite_is_native(op):
        return None
    if op.attrs.get("decomposition") is None:
        return f"composite {op.attrs.get('name')} has no decomposition"
    return None


@lowering("stablehlo.composite", check=_check,
          onnx_ops=("Erf", "Asin", "Acos", "Asinh", "Acosh", "Atanh", "Sinh", "Cosh", "TopK"))
def lower_composite(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """Known composites by name; otherwise the decomposition function inlined."""
    name = op.attrs.get("name")
    if name in NATIVE_UNARY and composite_is_native(op):
        onnx_op, native = NATIVE_UNARY[name]
        src = op.operands[0].type.dtype
        work = src if src in native else "float32"
        out = ctx.op(onnx_op, [ctx.cast_if(inputs[0], src, work)])
        return [ctx.cast_if(out, work, op.results[0].type.dtype)]
    if name in SPECIAL and composite_is_native(op):
        return SPECIAL[name](ctx, op, inputs)
    callee = ctx.module.functions[op.attrs["decomposition"]]
    return ctx.lower_block(callee.body, inputs)
