"""Which elements of an output differ from jax.jit, and of what class.

A limitation row that expects a compare failure names the outputs allowed to differ and the
classes of element allowed to differ in them, so a new wrong number in a limited cell is not
hidden by the known one. The classes:

=============  ==================================================================
``nan``        NaN on one side only
``inf``        an infinity on either side, not matched (wrong sign, or finite)
``signed-zero`` both zero, different signs
``subnormal``  explained by subnormals: both values below the smallest normal, or
               the difference goes away when the subnormal inputs are flushed to
               zero (XLA on the CPU flushes them; most runtimes do not). Where a
               difference of another class remains after flushing, that class is used
``precision``  explained by jax.jit's reduced precision: the element agrees with jax.jit at
               matrix-product precision HIGHEST (on a GPU, jax.jit computes float32 dots and
               convolutions in TF32 by default; ONNX Runtime computes them in float32)
``value``      any other difference beyond the tolerance (integers: any difference)
``shape``      the output's shape differs
``dtype``      the output's dtype differs
``other``      the comparison failed, but no element differs by the rules above
=============  ==================================================================
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

CLASSES = ("nan", "inf", "signed-zero", "subnormal", "precision", "value", "shape", "dtype", "other")
FLUSHED_DTYPES = frozenset({"float32", "float64", "bfloat16"})  # f16 computes in f32 (its subnormals are normal there)


def _tolerance(dtype: str, rtol: float | None, atol: float | None) -> tuple[float, float]:
    from jaxconv.compare import TOLERANCES

    default_rtol, default_atol = TOLERANCES.get(dtype, (0.0, 0.0))
    return (default_rtol if rtol is None else rtol), (default_atol if atol is None else atol)


def _is_float(a: np.ndarray) -> bool:
    return a.dtype.kind == "f" or a.dtype.name == "bfloat16"


def _tiny(dtype: np.dtype) -> float:
    if dtype.name == "bfloat16":
        return 2.0 ** -126
    return float(np.finfo(dtype).tiny)


def element_classes(expected: np.ndarray, actual: np.ndarray, rtol: float | None = None,
                    atol: float | None = None) -> np.ndarray:
    """A string array (expected's shape) naming each differing element's class; "" where they agree.

    Shape differences cannot be placed on elements: the result then has a single element "shape".
    """
    expected, actual = np.asarray(expected), np.asarray(actual)
    if expected.shape != actual.shape:
        return np.array(["shape"])
    out = np.full(expected.shape, "", dtype=object)
    if expected.size == 0:
        return out
    if expected.dtype.kind == "c" or not _is_float(expected):
        with np.errstate(all="ignore"):
            differ = expected != actual.astype(expected.dtype) if expected.dtype.kind != "c" else expected != actual
        out[np.asarray(differ)] = "value"
        return out
    rtol, atol = _tolerance(expected.dtype.name, rtol, atol)
    e, a = expected.astype(np.float64), actual.astype(np.float64)
    nan_e, nan_a = np.isnan(e), np.isnan(a)
    numbers = ~nan_e & ~nan_a
    with np.errstate(all="ignore"):
        diff = np.where(e == a, 0.0, np.abs(e - a))
        finite = np.isfinite(e) & np.isfinite(a)
        beyond = numbers & finite & (diff > atol + rtol * np.abs(np.where(finite, e, 0.0)))
    tiny = _tiny(expected.dtype)
    out[beyond] = "value"
    out[beyond & (np.abs(e) < tiny) & (np.abs(a) < tiny)] = "subnormal"
    out[numbers & ~finite & (e != a)] = "inf"
    out[numbers & (e == 0) & (a == 0) & (np.signbit(e) != np.signbit(a))] = "signed-zero"
    out[nan_e != nan_a] = "nan"
    return out


def flush_subnormals(arrays: Sequence[np.ndarray]) -> list[np.ndarray] | None:
    """The arrays with float32/float64 subnormals replaced by a zero of the same sign; None if there are none."""
    out, changed = [], False
    for x in arrays:
        x = np.asarray(x)
        if x.dtype.name in FLUSHED_DTYPES:
            sub = (x != 0) & (np.abs(x) < np.finfo(x.dtype).tiny)
            if sub.any():
                x = np.where(sub, np.copysign(np.zeros((), x.dtype), x), x).astype(x.dtype)
                changed = True
        out.append(x)
    return out if changed else None


def explain_by_flushing(classes: np.ndarray, expected: np.ndarray, flushed_actual: np.ndarray,
                        rtol: float | None = None, atol: float | None = None) -> np.ndarray:
    """Reclassify the differing elements that change once the inputs are flushed to zero.

    An element that then agrees is ``subnormal``; one that still differs, in another class,
    takes that class (the difference left once the subnormals are out of the way).
    """
    again = element_classes(expected, flushed_actual, rtol, atol)
    if again.shape != classes.shape:
        return classes
    out = classes.copy()
    changed = (classes != "") & (again != classes)
    out[changed & (again == "")] = "subnormal"
    out[changed & (again != "")] = again[changed & (again != "")]
    return out


def explain_by_precision(classes: np.ndarray, precise_expected: np.ndarray, actual: np.ndarray,
                         rtol: float | None = None, atol: float | None = None) -> np.ndarray:
    """Reclassify as ``precision`` the differing elements that agree with jax.jit at precision HIGHEST."""
    again = element_classes(precise_expected, actual, rtol, atol)
    if again.shape != classes.shape:
        return classes
    out = classes.copy()
    out[(classes != "") & (again == "")] = "precision"
    return out


def summarize(index: int, classes: np.ndarray, expected: np.ndarray, actual: np.ndarray, max_abs: float,
              sizes: dict[str, int] | None = None) -> dict[str, Any]:
    """The record of one differing output: which classes, how many elements, the worst abs error."""
    differing = classes[classes != ""]
    names = {str(c) for c in np.unique(differing)} if differing.size else set()
    if np.asarray(actual).dtype != np.asarray(expected).dtype:
        names.add("dtype")
    record: dict[str, Any] = {"output": index, "classes": sorted(names or {"other"}, key=CLASSES.index),
                              "count": int(differing.size), "max_abs": float(max_abs)}
    if sizes:
        record["sizes"] = dict(sizes)
    return record


def describe(record: dict[str, Any]) -> str:
    """``3 nan, subnormal element(s)`` for an error line."""
    return f"{record['count']} {', '.join(record['classes'])} element(s)"
