"""stablehlo.composite: registered names map to ONNX ops; others inline their decomposition.

Each known composite is a ``@composite`` entry of the registry, whose ``check`` says when it
applies; outside that (or for a name with no entry) the decomposition function is lowered instead.
"""

from __future__ import annotations

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.registry import Lowering, composite, lookup_composite, lowering
from jaxconv.stablehlo import ir as hir

# name -> ONNX op for the unary CHLO functions ONNX Runtime computes in float32 and float16.
NATIVE_UNARY: dict[str, str] = {
    "chlo.erf": "Erf", "chlo.asin": "Asin", "chlo.acos": "Acos", "chlo.sinh": "Sinh", "chlo.cosh": "Cosh",
    "chlo.asinh": "Asinh", "chlo.acosh": "Acosh", "chlo.atanh": "Atanh",
}
# Computed in float32 (half floats cast there and back); other dtypes inline the decomposition.
_UNARY_DTYPES = dt.F32_ONLY | {"float16", "bfloat16"}


def _unary_problem(op: hir.Op) -> str | None:
    dtype = op.operands[0].type.dtype
    return None if dtype in _UNARY_DTYPES else f"{op.attrs.get('name')} on {dtype}"


def lower_native_unary(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """The ONNX function of the same name; bfloat16 computes in float32 and rounds once."""
    src = op.operands[0].type.dtype
    work = src if src in dt.F32_ONLY else "float32"
    out = ctx.op(NATIVE_UNARY[op.attrs["name"]], [ctx.cast_if(inputs[0], src, work)])
    return [ctx.cast_if(out, work, op.results[0].type.dtype)]


for _name, _onnx_op in NATIVE_UNARY.items():
    composite(_name, check=_unary_problem, onnx_ops=(_onnx_op,),
              conditions="float32, float16, bfloat16 (half floats in float32)")(lower_native_unary)


# Operand dtypes whose scaled erfc groups become ``chlo.erfc`` (ONNX Runtime has no float64 Erf).
ERFC_DTYPES = ("float32", "float16", "bfloat16")


def collapse_erfc_groups(module: hir.Module) -> int:
    """Put ``chlo.erfc`` back in place of jax's inline decomposition where ``lower_erfc`` applies."""
    from jaxconv.stablehlo.primitive_groups import collapse_erfc

    return collapse_erfc(module, ERFC_DTYPES)


def _erfc_problem(op: hir.Op) -> str | None:
    dtype = op.operands[0].type.dtype
    return None if dtype in ERFC_DTYPES else f"chlo.erfc on {dtype}"


@lowering("chlo.erfc", check=_erfc_problem, onnx_ops=("Erf", "Sub"),
          conditions="float32, float16, bfloat16 (in float32); the exact GELU's erfc only (primitive_groups)")
def lower_erfc(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """``1 - Erf(x)`` in float32: the erfc of jax.nn.gelu(approximate=False) (see stablehlo.primitive_groups).

    ``stablehlo.primitive_groups.collapse_erfc`` makes this op only from jax's erfc decomposition
    whose result is scaled by its own input (``0.5 * x * erfc(-x / sqrt(2))``) or read by that
    product's derivative (jax.grad, jax.jvp, Jacobians). Measured against
    jax.jit's float32 erfc on 2M points in [-10, 10]: max abs error 2.4e-7; the relative error passes
    1e-4 from x = 2.52 and reaches 1 (``1 - Erf(x)`` is 0 from x = 3.92, where erfc(x) is 3e-8). The
    GELU's largest difference is 4.8e-7 (README, "Known differences"). NaN and +-inf give NaN, 0 and 2
    as jax does.
    """
    src = op.operands[0].type.dtype
    erf = ctx.op("Erf", [ctx.cast_if(inputs[0], src, "float32")])
    out = ctx.op("Sub", [ctx.scalar(1.0, "float32"), erf])
    return [ctx.cast_if(out, "float32", op.results[0].type.dtype)]


def _top_k_problem(op: hir.Op) -> str | None:
    attrs = op.attrs.get("composite_attributes") or {}
    t = op.operands[0].type
    if len(op.operands) != 1 or len(op.results) != 2 or t.rank == 0 or not isinstance(attrs.get("k"), int):
        return "chlo.top_k composite with an unexpected signature"
    return None


@composite("chlo.top_k", check=_top_k_problem, onnx_ops=("TopK", "GatherElements"),
           conditions="rank >= 1, a static k")
def lower_top_k(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """The k largest along the last axis in IEEE total order, ties to the lower index.

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


def native_lowering(op: hir.Op) -> Lowering | None:
    """The registered lowering that applies to this composite, or None (its decomposition is inlined)."""
    entry = lookup_composite(str(op.attrs.get("name")))
    if entry is None or (entry.check is not None and entry.check(op) is not None):
        return None
    return entry


def composite_is_native(op: hir.Op) -> bool:
    """True when the composite maps to ONNX directly (no need to look at its decomposition)."""
    return native_lowering(op) is not None


def _check(op: hir.Op) -> str | None:
    if composite_is_native(op):
        return None
    if op.attrs.get("decomposition") is None:
        return f"composite {op.attrs.get('name')} has no decomposition"
    return None


@lowering("stablehlo.composite", check=_check,
          onnx_ops=("Erf", "Asin", "Acos", "Asinh", "Acosh", "Atanh", "Sinh", "Cosh", "TopK"))
def lower_composite(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """By name: see the composites below; any other the decomposition function inlined."""
    entry = native_lowering(op)
    if entry is not None:
        return entry.fn(ctx, op, inputs)
    callee = ctx.module.functions[op.attrs["decomposition"]]
    return ctx.lower_block(callee.body, inputs)
