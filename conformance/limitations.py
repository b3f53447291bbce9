"""Known limitations: (case, target[, device]) -> the reason it is expected to fail.

Keys may use shell-style wildcards in the case part (``dtype.bf16.*``). A limited cell that
fails is reported as ``xfail (reason)``; a limited cell that passes fails the run, so a
row must be deleted as soon as the converter handles it. Every row needs a reason.
"""

from __future__ import annotations

import fnmatch
from typing import Mapping

ANY_DEVICE = "*"

_TF_RNG = "jax2tf cannot serialize the XLA RngBitGenerator for this target"
_COMPLEX_ORT = "ONNX Runtime has no complex types"
_LAPACK = "LAPACK custom calls (lapack_*_ffi) have no lowering"

# (case pattern, target, device) -> reason. Device "*" means every device.
LIMITATIONS: dict[tuple[str, str, str], str] = {
    ("op.fft.*", "onnx", ANY_DEVICE): _COMPLEX_ORT,
    ("op.complex.*", "onnx", ANY_DEVICE): _COMPLEX_ORT,
    ("op.linalg.cholesky", "onnx", ANY_DEVICE): _LAPACK,
    ("op.linalg.solve", "onnx", ANY_DEVICE): _LAPACK,
    ("op.rng_bit_generator.*", "onnx", ANY_DEVICE): "XLA's backend-defined bit generator cannot be reproduced bit-exactly",
}


def _key(entry: tuple[str, ...]) -> tuple[str, str, str]:
    if len(entry) == 2:
        return entry[0], entry[1], ANY_DEVICE
    if len(entry) == 3:
        return entry  # type: ignore[return-value]
    raise ValueError(f"limitation key {entry!r} must be (case, target) or (case, target, device)")


def validate(table: Mapping[tuple[str, ...], str]) -> None:
    """Every row has a non-empty reason and a well-formed key; raises ValueError otherwise."""
    for k, reason in table.items():
        _key(k)
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"limitation {k!r} has no reason: every limitation must say why")


def lookup(case: str, target: str, device: str, table: Mapping[tuple[str, ...], str] | None = None) -> str | None:
    """The reason ``case`` is expected to fail on ``target``/``device``, or None."""
    table = LIMITATIONS if table is None else table
    for k, reason in table.items():
        pattern, t, d = _key(k)
        if t == target and d in (ANY_DEVICE, device) and fnmatch.fnmatchcase(case, pattern):
            return reason
    return None


validate(LIMITATIONS)
