"""Element-wise comparison of a target's outputs with jax.jit, and the kind of each difference.

Integers and bools must be equal. Floats must have NaNs in the same places, infinities of
the same sign, zeros of the same sign, and other values within the dtype's tolerance. The
kind of a difference (``value``, ``nan``, ``inf``, ``signed-zero``, ``subnormal``, ``shape``,
``dtype``) is part of a mismatch's class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-9, 1e-12), "float32": (1e-4, 1e-6), "float16": (1e-2, 1e-4), "bfloat16": (2e-2, 1e-3),
}
# When several kinds of difference appear in one output, the class names the most telling one.
PRIORITY = ("shape", "dtype", "value", "inf", "nan", "signed-zero", "subnormal")


@dataclass
class Diff:
    """The first output that differs, how, and where.

    Attributes:
        output: position of the output.
        kind: one of PRIORITY.
        index: index of one differing element (of the most telling kind).
        expected: jax.jit's value there; actual: the target's.
        count: how many elements differ.
    """

    output: int
    kind: str
    index: tuple[int, ...] = ()
    expected: object = None
    actual: object = None
    count: int = 0

    def line(self) -> str:
        where = f"[{', '.join(str(i) for i in self.index)}]" if self.index else ""
        if self.kind in ("shape", "dtype"):
            return f"output {self.output}: {self.kind} {self.actual} != {self.expected}"
        return (f"output {self.output}{where}: expected {_fmt(self.expected)}, got {_fmt(self.actual)} "
                f"({self.count} element{'s' if self.count != 1 else ''} differ, {self.kind})")


def _fmt(v: object) -> str:
    if isinstance(v, float) and v == 0:
        return "-0.0" if np.signbit(v) else "0.0"
    return repr(v)


def _tiny(dtype: np.dtype) -> float:
    import ml_dtypes

    return float(ml_dtypes.finfo(dtype).tiny)


def compare_one(expected: np.ndarray, actual: np.ndarray, position: int = 0,
                tolerances: dict[str, tuple[float, float]] = TOLERANCES) -> Diff | None:
    """The difference between one expected and one actual output, or None when they agree."""
    expected, actual = np.asarray(expected), np.asarray(actual)
    if expected.shape != actual.shape:
        return Diff(position, "shape", expected=list(expected.shape), actual=list(actual.shape))
    if expected.dtype != actual.dtype:
        return Diff(position, "dtype", expected=expected.dtype.name, actual=actual.dtype.name)
    if expected.size == 0:
        return None
    name = expected.dtype.name
    if name not in tolerances:
        bad = expected != actual
        if not bad.any():
            return None
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        return Diff(position, "value", idx, expected[idx].item(), actual[idx].item(), int(bad.sum()))
    rtol, atol = tolerances[name]
    e, a = expected.astype(np.float64), actual.astype(np.float64)
    tiny = _tiny(expected.dtype)
    with np.errstate(all="ignore"):
        nan_e, nan_a = np.isnan(e), np.isnan(a)
        inf_e, inf_a = np.isinf(e), np.isinf(a)
        close = np.abs(e - a) <= atol + rtol * np.abs(e)
        zero_sign = (e == 0) & (a == 0) & (np.signbit(e) != np.signbit(a))
        kinds = {
            "nan": nan_e != nan_a,
            "inf": ~nan_e & ~nan_a & (inf_e | inf_a) & (e != a),
            "signed-zero": zero_sign,
            "value": ~nan_e & ~nan_a & ~inf_e & ~inf_a & ~close,
        }
        # A difference where either side is subnormal (or zero against a subnormal) is XLA's flushing.
        sub = ((np.abs(e) < tiny) | (np.abs(a) < tiny)) & ~nan_e & ~nan_a
        kinds["subnormal"] = kinds["value"] & sub
        kinds["value"] = kinds["value"] & ~sub
    total = sum(int(m.sum()) for m in kinds.values())
    if total == 0:
        return None
    for kind in PRIORITY:
        mask = kinds.get(kind)
        if mask is not None and mask.any():
            idx = tuple(int(i) for i in np.argwhere(mask)[0]) if expected.ndim else ()
            return Diff(position, kind, idx, float(e[idx]), float(a[idx]), total)
    return None


def compare_all(expected: Sequence[np.ndarray], actual: Sequence[np.ndarray]) -> Diff | None:
    """The first differing output (by position), or None."""
    if len(expected) != len(actual):
        return Diff(0, "shape", expected=f"{len(expected)} outputs", actual=f"{len(actual)} outputs")
    for k, (e, a) in enumerate(zip(expected, actual)):
        d = compare_one(e, a, k)
        if d is not None:
            return d
    return None
