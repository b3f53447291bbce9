"""jaxconv: convert jitted JAX functions to StableHLO, TF SavedModel, TFLite and ONNX, checked against JAX.

Heavy dependencies (jax, TensorFlow, onnx) load on first use, so ``import jaxconv`` is cheap.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "check",
    "load",
    "to_onnx",
    "to_saved_model",
    "to_stablehlo",
    "to_tflite",
    "JaxconvError",
]

_API = {"check", "load", "to_onnx", "to_saved_model", "to_stablehlo", "to_tflite"}


def __getattr__(name: str) -> Any:
    if name in _API:
        from jaxconv import api

        return getattr(api, name)
    if name == "JaxconvError":
        from jaxconv.errors import JaxconvError

        return JaxconvError
    raise AttributeError(f"module 'jaxconv' has no attribute {name!r}")
