"""custom_call targets, optimization_barrier, and other ops with no numeric work."""

from __future__ import annotations

from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.registry import custom_call_target, lookup_custom_call, lowering, unsupported_target_reason
from jaxconv.stablehlo import ir as hir


def _check_custom_call(op: hir.Op) -> str | None:
    entry = lookup_custom_call(str(op.attrs.get("call_target_name")))
    if entry is None:
        return unsupported_target_reason(str(op.attrs.get("call_target_name")))
    return entry.check(op) if entry.check is not None else None


@lowering("stablehlo.custom_call", check=_check_custom_call, onnx_ops=("Identity",))
def lower_custom_call(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """By call target: see the custom-call targets below."""
    entry = lookup_custom_call(str(op.attrs.get("call_target_name")))
    assert entry is not None, "the preflight refuses unregistered targets"
    return entry.fn(ctx, op, inputs)


@custom_call_target("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "annotate_device_placement")
def lower_no_op_call(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """Sharding and placement annotations carry no computation for a single-device model: identities."""
    return list(inputs[: len(op.results)])


@custom_call_target("shape_assertion")
def lower_shape_assertion(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """jax.export's run-time checks of symbolic sizes: dropped (ONNX has no assertion op)."""
    return []


@lowering("stablehlo.optimization_barrier", onnx_ops=())
def lower_optimization_barrier(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """Values pass through unchanged."""
    return list(inputs)
