"""StableHLO -> ONNX lowering (registry, context, driver, ops/<family>.py, passes)."""
