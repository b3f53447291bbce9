"""Run artifacts: ONNX Runtime, TFLite/LiteRT, TensorFlow, jax.export.

``open_artifact(path)`` picks the runtime by what the path is.
"""

from __future__ import annotations

import os

from jaxconv.errors import ArtifactError
from jaxconv.runtimes.base import Runner


def artifact_kind(path: str) -> str:
    """One of onnx, tflite, saved-model, jaxexport, stablehlo; raises ArtifactError otherwise."""
    if not os.path.exists(path):
        raise ArtifactError(f"artifact not found: {path}")
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, "saved_model.pb")):
            return "saved-model"
        raise ArtifactError(f"{path} is a folder without saved_model.pb: not a SavedModel")
    ext = os.path.splitext(path)[1].lower()
    kinds = {".onnx": "onnx", ".tflite": "tflite", ".jaxexport": "jaxexport", ".mlir": "stablehlo", ".mlirbc": "stablehlo"}
    if ext in kinds:
        return kinds[ext]
    raise ArtifactError(f"unknown artifact type {ext or '(no extension)'} for {path}: "
                        "expected .onnx, .tflite, .jaxexport or a SavedModel folder")


def open_artifact(path: str) -> Runner:
    """A Runner for the artifact at ``path``."""
    kind = artifact_kind(path)
    if kind == "onnx":
        from jaxconv.runtimes.onnxrt import OnnxRunner

        return OnnxRunner(path)
    if kind == "jaxexport":
        from jaxconv.runtimes.jaxexport import JaxExportRunner

        return JaxExportRunner(path)
    if kind == "tflite":
        from jaxconv.runtimes.tflite import TFLiteRunner

        return TFLiteRunner(path)
    if kind == "saved-model":
        from jaxconv.runtimes.tf import SavedModelRunner

        return SavedModelRunner(path)
    raise ArtifactError(f"{path}: StableHLO text/bytecode cannot be run directly; check the .jaxexport instead")
