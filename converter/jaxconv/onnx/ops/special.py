"""custom_call targets, optimization_barrier, and other ops with no numeric work."""

from __future__ import annotations

from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.registry import lowering
from jaxconv.stablehlo import ir as hir

# Targets that carry no computation for a single-device model.
_IDENTITY_TARGETS = {"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "annotate_device_placement"}
_DROPPED_TARGETS = {"shape_assertion"}


def _check_custom_call(op: hir.Op) -> str | None:
    target = op.attrs.get("call_target_name")
    if target in _IDENTITY_TARGETS or target in _DROPPED_TARGETS:
        return None
    from jaxconv.onnx.ops import custom_calls

    if target in custom_calls.HANDLERS:
        check = custom_calls.CHECKS.get(target)
        return check(op) if check is not None else None
    for explain in custom_calls.EXPLAINERS:
        reason = explain(target)
        if reason:
            return reason
    return f"custom call target {target!r} has no ONNX equivalent"


@lowering("stablehlo.custom_call", check=_check_custom_call, onnx_ops=("Identity",))
def lower_custom_call(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """shape_assertion is dropped; sharding annotations are identities; others by target."""
    target = op.attrs.get("call_target_name")
    if target in _DROPPED_TARGETS:
        return []
    if target in _IDENTITY_TARGETS:
        return list(inputs[: len(op.results)])
    from jaxconv.onnx.ops import custom_calls

    return custom_calls.HANDLERS[target](ctx, op, inputs)


@lowering("stablehlo.optimization_barrier", onnx_ops=())
def lower_optimization_barrier(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """Values pass through unchanged."""
    return list(inputs)
