"""Run a TF SavedModel through its ``serving_default`` signature, inputs and outputs by name."""

from __future__ import annotations

import os
import re
from typing import Any, Sequence

import numpy as np

from jaxconv.errors import ArtifactError

_OUTPUT_INDEX = re.compile(r"^output_(\d+)$")
# MLIR diagnostic inside TF's message, e.g. ``model.py:3:4: error: unregistered operation ...``.
_MLIR_ERROR = re.compile(r"(?:^|\s)error: (.+)$")
# Lines of TF's runtime error that only say where it happened.
_TF_NOISE = re.compile(r"^(Graph execution error:|Detected at node|<stack traces unavailable>|Node: |\[\[|File \")")
_TF_SUFFIX = re.compile(r"\s*(\[\[.*?\]\]|\[Op:[^\]]*\])\s*$")


def output_order(names: Sequence[str]) -> list[str]:
    """``output_0, output_1, ..., output_10`` in numeric order; other names after, sorted."""
    numbered = sorted((int(m.group(1)), n) for n in names if (m := _OUTPUT_INDEX.match(n)))
    return [n for _, n in numbered] + sorted(n for n in names if not _OUTPUT_INDEX.match(n))


class SavedModelRunner:
    """Loads a SavedModel folder and runs its ``serving_default`` signature.

    Inputs are taken in the order of the ``jaxconv_signature.json`` stored beside the model (the
    converted program's order), else sorted by name: a SavedModel signature keeps no argument order.
    """

    kind = "saved-model"

    def __init__(self, path: str) -> None:
        from jaxconv.tf.saved_model import SIGNATURE_KEY, import_tensorflow, quiet_stderr, read_signature

        if not os.path.isdir(path) or not os.path.exists(os.path.join(path, "saved_model.pb")):
            raise ArtifactError(f"{path} is not a SavedModel folder (no saved_model.pb)")
        tf = import_tensorflow()
        self.path = path
        try:
            with quiet_stderr():
                self._loaded = tf.saved_model.load(path)
        except Exception as e:
            raise ArtifactError(f"TensorFlow cannot load {path}: {_first_line(e)}") from e
        signatures = dict(self._loaded.signatures)
        if SIGNATURE_KEY in signatures:
            self._fn = signatures[SIGNATURE_KEY]
        elif len(signatures) == 1:
            self._fn = next(iter(signatures.values()))
        else:
            raise ArtifactError(f"{path} has no {SIGNATURE_KEY} signature (has: {', '.join(sorted(signatures)) or 'none'})")
        specs = self._fn.structured_input_signature[1]
        stored = read_signature(path)
        if stored is not None and {t.name for t in stored.inputs} == set(specs):
            self.input_names = [t.name for t in stored.inputs]
        else:
            self.input_names = sorted(specs)
        self.input_dtypes = [specs[n].dtype for n in self.input_names]
        self.output_names = output_order(list(self._fn.structured_outputs))

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run on flat inputs in signature order; returns the outputs in order."""
        import tensorflow as tf

        from jaxconv.tf.saved_model import quiet_stderr

        if len(inputs) != len(self.input_names):
            raise ArtifactError(f"the SavedModel takes {len(self.input_names)} inputs, got {len(inputs)}")
        try:
            feed: dict[str, Any] = {}
            for name, dtype, a in zip(self.input_names, self.input_dtypes, inputs):
                feed[name] = tf.constant(np.asarray(a), dtype=dtype)
            with quiet_stderr():
                out = self._fn(**feed)
        except Exception as e:
            raise ArtifactError(f"running the SavedModel failed: {type(e).__name__}: {error_cause(e)}") from e
        return [np.asarray(out[n].numpy()) for n in self.output_names]


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def error_cause(e: BaseException) -> str:
    """The line of a TF runtime error that says what went wrong, not where.

    TF's message starts with ``Graph execution error:`` and node locations; the cause is the first
    MLIR ``error:`` (e.g. an op the StableHLO reader does not know), else the first other line
    (e.g. ``No FFI handler registered for lapack_spotrf_ffi ...``).
    """
    lines = [line.strip() for line in str(e).splitlines()]
    for line in lines:
        m = _MLIR_ERROR.search(line)
        if m:
            return m.group(1).strip()[:300]
    for line in lines:
        if line and not _TF_NOISE.match(line):
            cause = line
            while (trimmed := _TF_SUFFIX.sub("", cause)) != cause:
                cause = trimmed
            if cause:
                return cause[:300]
    return _first_line(e)
