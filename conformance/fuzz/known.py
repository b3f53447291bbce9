"""Known, named limitations: mismatch classes the fuzzer counts separately, each with its reason.

A class is ``op/dtype/kind`` (``where/f32/signed-zero``), prefixed with the target for
targets other than ONNX (``tflite:add/f16/value``). Patterns use shell wildcards. A row
belongs here only when the difference is not jaxconv's to fix: a documented difference
(README, "Known differences from jax.jit"), a bug in jax itself, or a limit of the runtime.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass


@dataclass(frozen=True)
class Known:
    pattern: str
    reason: str


FTZ = "XLA on CPU flushes subnormal floats to zero, ONNX Runtime keeps them (README: Known differences)"

KNOWN: tuple[Known, ...] = (
    Known("*/*/subnormal", FTZ),
)


def match(klass: str, table: tuple[Known, ...] = KNOWN) -> Known | None:
    """The first row whose pattern matches ``klass``, or None."""
    for row in table:
        if fnmatch.fnmatchcase(klass, row.pattern):
            return row
    return None
