"""StableHLO -> ONNX lowering (registry, context, driver, ops/<family>.py, passes)."""

from jaxconv.onnx.lazy_imports import defer as _defer

_defer("sympy")  # onnx_ir's symbolic-dimension arithmetic: imported only if used
_defer("onnx_ir._symbolic_shapes")
