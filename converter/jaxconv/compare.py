"""Compare one output of an artifact with jax.jit, element by element.

Every element gets a class:

==============  ====================================================================================
``ok``          within the dtype's tolerance of jax.jit; or both NaN; or the same infinity
``float64``     outside that tolerance, but no further from the float64 result than float32 rounding
                allows (``<= 2 * noise + atol``). The noise of an element is the largest of jax.jit's
                error against float64 and how far jax.jit moves when the float inputs move by one
                rounding step (``spread``: the program's sensitivity to rounding), raised to the 90th
                percentile of that among elements of similar magnitude, and how far the float64 result
                itself moves when the float inputs move by up to one rounding step (``moved``: what any
                float32 evaluation may be off by, where a sum of huge terms cancels), or when every value
                the program computes takes a random error of one rounding step (``rounding``: a long sum's
                rounding, magnified by what follows). Also an element where jax.jit is inf or NaN (its
                float32 arithmetic overflowed), the float64 result is finite and within the dtype's
                range, and the artifact is within the dtype's tolerance of it
``subnormal``   both values are zero or subnormal: XLA on the CPU flushes subnormals to zero
``undecided``   that noise (without float64: the spread and the difference between jax.jit and JAX run
                op by op) exceeds the tolerance here, and the artifact is within a few times it:
                the check cannot tell
``mismatch``    anything else: a value off, NaN on one side only, an infinity not matched exactly,
                a finite value where jax.jit has an infinity and the float64 result is no finite
                value within the dtype's range near it
==============  ====================================================================================

Integers and booleans are compared exactly, in their own dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

# (rtol, atol) per dtype; integers and bools must match exactly.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-9, 1e-12), "float32": (1e-4, 1e-5), "float16": (1e-2, 1e-3), "bfloat16": (2e-2, 1e-2),
}
COMPONENT = {"complex64": "float32", "complex128": "float64"}

OK, FLOAT64, SUBNORMAL, UNDECIDED, MISMATCH = 0, 1, 2, 3, 4
CLASS_NAMES = ("ok", "float64", "subnormal", "undecided", "mismatch")
LICENSE_FACTOR = 2.0  # the artifact may be this many times further from float64 than jax.jit
UNDECIDED_FACTOR = 4.0  # beyond this many times jax.jit's uncertainty, a difference is a mismatch
NOISE_QUANTILE = 0.9
_BIN_OCTAVES = 4  # elements whose magnitudes lie within a factor 2**4 share a noise estimate


@dataclass(frozen=True)
class OutputCheck:
    """The comparison of one output on one input set.

    Attributes:
        name: output name (``output_0``).
        dtype: jax.jit's dtype.
        shape: jax.jit's shape.
        max_abs: largest absolute difference from jax.jit over elements finite on both sides.
        max_rel: largest relative difference from jax.jit among those.
        ok: False only for a mismatch (an undecided output is ok unless the check is strict).
        note: what differs, and where, in words.
        verdict: ``ok``, ``float64``, ``subnormal``, ``undecided`` or ``mismatch`` (the worst element).
        inputs: the input set (``example``, ``random``, ``edge``, ``given``).
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    ok: bool
    note: str = ""
    verdict: str = ""
    inputs: str = ""


@dataclass(frozen=True)
class References:
    """What the check knows about an output besides jax.jit's value.

    Attributes:
        float64: the function run on the inputs widened to float64 (complex as (re, im) pairs), or None.
        eager: the function run op by op (``jax.disable_jit``), or None.
        spread: per element, how far jax.jit's result moves when the float inputs move by one
            rounding step, or None.
        why_not: why ``float64`` is missing, for the note.
        moved: per element, how far the float64 result moves when each float input moves by its own
            fraction of one rounding step (``judging.float64_moved``), or None. Unlike ``spread`` it is
            not pooled (it is the element's own sensitivity, not a sample of jax.jit's errors), and it
            sees past inputs at the dtype's largest value: a step of FLT_MAX outwards overflows in
            float32, so jax.jit's ``spread`` is blind to the sum of -FLT_MAX / 6 and FLT_MAX / 6, whose
            products' rounding (half an ulp, 1.7e30) one float32 order keeps and another cancels.
        rounding: per element, how far the float64 result moves when every value the program computes
            takes a random rounding error (``rounding_noise``), or None: the rounding inside long sums,
            magnified by what follows (Adam's ``mu / sqrt(nu)`` after a gradient), which neither
            jax.jit's own error nor ``moved`` need show. Not pooled either.
    """

    float64: np.ndarray | None = None
    eager: np.ndarray | None = None
    spread: np.ndarray | None = None
    why_not: str = ""
    moved: np.ndarray | None = None
    rounding: np.ndarray | None = None


def is_float(a: np.ndarray) -> bool:
    return a.dtype.kind in "fc" or a.dtype.name == "bfloat16"


def is_narrow_float(dtype: Any) -> bool:
    name = np.dtype(dtype).name
    return name in ("float32", "float16", "bfloat16", "complex64")


def tolerance(dtype: str, rtol: float | None = None, atol: float | None = None) -> tuple[float, float]:
    default_rtol, default_atol = TOLERANCES.get(COMPONENT.get(dtype, dtype), (0.0, 0.0))
    return (default_rtol if rtol is None else rtol), (default_atol if atol is None else atol)


def smallest_normal(dtype: Any) -> float:
    name = np.dtype(dtype).name
    if name == "bfloat16":
        return 2.0 ** -126
    return float(np.finfo(np.dtype(COMPONENT.get(name, name))).tiny)


def largest_finite(dtype: Any) -> float:
    import ml_dtypes

    name = np.dtype(dtype).name
    return float(ml_dtypes.finfo(np.dtype(COMPONENT.get(name, name))).max)


def as_float64(a: np.ndarray) -> np.ndarray:
    """float64 values; a complex array becomes (re, im) pairs on a new last axis."""
    a = np.asarray(a)
    if a.dtype.kind == "c":
        return np.stack([a.real.astype(np.float64), a.imag.astype(np.float64)], axis=-1)
    return a.astype(np.float64)


def _pooled_noise(err: np.ndarray, magnitude: np.ndarray, known: np.ndarray) -> np.ndarray:
    """Per element: max(err, the NOISE_QUANTILE of err among known elements of similar magnitude)."""
    noise = np.where(known, err, 0.0)
    if not known.any():
        return noise
    with np.errstate(divide="ignore"):
        octave = np.floor(np.log2(np.maximum(np.abs(magnitude), 1e-300)) / _BIN_OCTAVES)
    bins = np.where(known, octave, np.nan)
    for b in np.unique(bins[known]):
        members = bins == b
        level = float(np.quantile(err[members], NOISE_QUANTILE))
        noise[members] = np.maximum(noise[members], level)
    return noise


def farthest(so_far: list[np.ndarray | None], got: Sequence[Any], wide: Sequence[np.ndarray]) -> list[np.ndarray | None]:
    """Per output: the elementwise largest finite distance between ``got`` (one more run of a float64
    reference) and ``wide`` (the float64 outputs), over this run and ``so_far`` (None before the first);
    an output of another shape keeps what it had."""
    out = list(so_far)
    for i, g in enumerate(got):
        g = as_float64(np.asarray(g))
        if i < len(wide) and g.shape == wide[i].shape:
            with np.errstate(all="ignore"):
                step = np.abs(g - wide[i])
            step = np.where(np.isfinite(step), step, 0.0)
            out[i] = step if out[i] is None else np.maximum(out[i], step)
    return out


def _finite_or_zero(a: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray | float:
    if a is None or a.shape != shape:
        return 0.0
    return np.where(np.isfinite(a), a, 0.0)


def float_classes(e: np.ndarray, a: np.ndarray, rtol: float, atol: float, tiny: float,
                  refs: References | None = None, largest: float = np.inf) -> np.ndarray:
    """The class (OK ... MISMATCH) of every element; all arrays float64 of one shape."""
    cls = np.full(e.shape, MISMATCH, np.int8)
    with np.errstate(all="ignore"):
        finite = np.isfinite(e) & np.isfinite(a)
        diff = np.where(finite, np.abs(a - e), 0.0)
        close = finite & (diff <= atol + rtol * np.abs(np.where(finite, e, 0.0)))
        same_non_finite = (np.isnan(e) & np.isnan(a)) | (np.isinf(e) & (e == a))
        cls[close | same_non_finite] = OK
        open_ = (cls == MISMATCH) & finite
        if refs is not None and open_.any():
            if refs.float64 is not None and refs.float64.shape == e.shape:
                t = refs.float64
                known = np.isfinite(t) & np.isfinite(e)
                err_jax = np.where(known, np.abs(e - t), 0.0)
                if refs.eager is not None and refs.eager.shape == e.shape:  # JAX's other float32 execution
                    err_jax = np.maximum(err_jax, np.where(known & np.isfinite(refs.eager), np.abs(refs.eager - t), 0.0))
                err_jax = np.maximum(err_jax, _finite_or_zero(refs.spread, e.shape))
                noise = np.maximum(np.maximum(_pooled_noise(err_jax, t, known), _finite_or_zero(refs.moved, e.shape)),
                                   _finite_or_zero(refs.rounding, e.shape))
                cand = open_ & known
                licensed = cand & (np.abs(a - t) <= LICENSE_FACTOR * noise + atol)
                cls[licensed] = FLOAT64
                uncertain = cand & ~licensed & (noise > atol + rtol * np.abs(np.where(known, t, 0.0)))
                cls[uncertain & (diff <= UNDECIDED_FACTOR * noise + atol)] = UNDECIDED
            elif refs.eager is not None or refs.spread is not None:
                g = refs.eager if refs.eager is not None and refs.eager.shape == e.shape else e
                known = np.isfinite(g) & np.isfinite(e)
                err_jax = np.maximum(np.where(known, np.abs(g - e), 0.0), _finite_or_zero(refs.spread, e.shape))
                noise = _pooled_noise(err_jax, e, known)
                uncertain = open_ & known & (noise > atol + rtol * np.abs(np.where(known, e, 0.0)))
                cls[uncertain & (diff <= UNDECIDED_FACTOR * noise + atol)] = UNDECIDED
        if refs is not None:
            cls[(cls == MISMATCH) & overflowed_in_jit(e, a, refs.float64, rtol, atol, largest)] = FLOAT64
        cls[(cls == MISMATCH) & finite & (np.abs(e) < tiny) & (np.abs(a) < tiny)] = SUBNORMAL
    return cls


def overflowed_in_jit(e: np.ndarray, a: np.ndarray, t: np.ndarray | None, rtol: float, atol: float,
                      largest: float) -> np.ndarray:
    """Elements where jax.jit is inf or NaN (its float32 arithmetic overflowed), the float64 result ``t``
    is finite and within the dtype's range (``largest``), and the artifact is within tolerance of it."""
    if t is None or t.shape != e.shape:
        return np.zeros(e.shape, bool)
    with np.errstate(all="ignore"):
        wide = np.isfinite(t) & (np.abs(np.where(np.isfinite(t), t, 0.0)) <= largest)
        t = np.where(wide, t, 0.0)
        return ~np.isfinite(e) & np.isfinite(a) & wide & (np.abs(a - t) <= atol + rtol * np.abs(t))


def _where_text(shape: tuple[int, ...], flat_index: int) -> str:
    return str([int(i) for i in np.unravel_index(flat_index, shape)]) if shape else "[]"


def _value_text(x: Any) -> str:
    return f"{x:.7g}" if isinstance(x, float) else str(x)


def judge(name: str, expected: np.ndarray, actual: np.ndarray, rtol: float | None = None,
          atol: float | None = None, refs: References | None = None, inputs: str = "",
          explained: np.ndarray | None = None) -> tuple[OutputCheck, np.ndarray | None]:
    """Compare one output; returns the row and the per-element classes (None on a shape or dtype error).

    Args:
        expected: jax.jit's output.
        actual: the artifact's output.
        refs: float64 and eager references for float outputs (None: tolerance only).
        inputs: the input set's label, kept in the row.
        explained: elements known to differ only through subnormal inputs (they agree once those
            are flushed to zero); a mismatch there becomes ``subnormal``.
    """
    expected, actual = np.asarray(expected), np.asarray(actual)
    dtype = expected.dtype.name
    if actual.shape != expected.shape:
        return OutputCheck(name, dtype, expected.shape, float("inf"), float("inf"), False,
                           f"shape {list(actual.shape)} != {list(expected.shape)}", "mismatch", inputs), None
    if actual.dtype != expected.dtype:
        return OutputCheck(name, dtype, expected.shape, float("nan"), float("nan"), False,
                           f"dtype {actual.dtype.name} != {dtype}", "mismatch", inputs), None
    if expected.size == 0:
        return OutputCheck(name, dtype, expected.shape, 0.0, 0.0, True, "", "ok", inputs), np.zeros(expected.shape, np.int8)
    if is_float(expected):
        rtol, atol = tolerance(dtype, rtol, atol)
        e, a = as_float64(expected), as_float64(actual)
        cls = float_classes(e, a, rtol, atol, smallest_normal(expected.dtype), refs, largest_finite(expected.dtype))
        if expected.dtype.kind == "c":
            cls = cls.max(axis=-1)
            e, a = expected.astype(np.complex128), actual.astype(np.complex128)
        with np.errstate(all="ignore"):
            finite = np.isfinite(e) & np.isfinite(a)
            diff = np.where(finite, np.abs(a - e), 0.0)
            rel = np.where(diff > 0, diff / np.maximum(np.abs(e), smallest_normal(expected.dtype)), 0.0)
        max_abs, max_rel = float(diff.max()), float(rel.max())
        show = lambda x: _value_text(complex(x) if np.iscomplexobj(x) else float(x))  # noqa: E731
    else:
        cls = np.where(expected == actual, OK, MISMATCH).astype(np.int8)
        bad = np.flatnonzero(cls.ravel() == MISMATCH)
        e_flat, a_flat = expected.ravel(), actual.ravel()
        diffs = [abs(int(e_flat[i]) - int(a_flat[i])) for i in bad[:10_000]]
        max_abs = float(max(diffs)) if diffs else 0.0
        max_rel = max((d / max(abs(int(e_flat[i])), 1) for d, i in zip(diffs, bad)), default=0.0)
        show = lambda x: str(x.item() if hasattr(x, "item") else x)  # noqa: E731
    if explained is not None and explained.shape == cls.shape:
        with np.errstate(all="ignore"):  # jax.jit's NaN from a flushed subnormal (0 / 0) is no overflow
            non_finite = ~np.isfinite(expected) if is_float(expected) else np.zeros(cls.shape, bool)
        cls[((cls == MISMATCH) | ((cls == FLOAT64) & non_finite)) & explained] = SUBNORMAL
    worst = int(cls.max())
    note = _note(cls, expected, actual, refs, show)
    return OutputCheck(name, dtype, expected.shape, max_abs, float(max_rel), worst != MISMATCH, note,
                       CLASS_NAMES[worst], inputs), cls


def _note(cls: np.ndarray, expected: np.ndarray, actual: np.ndarray, refs: References | None, show: Any) -> str:
    """Counts of the non-ok classes, and the first mismatching (or undecided) element."""
    counts = np.bincount(cls.ravel(), minlength=len(CLASS_NAMES))
    parts = []
    if counts[FLOAT64]:
        precision = COMPONENT.get(expected.dtype.name, expected.dtype.name)
        with np.errstate(all="ignore"):
            overflowed = int(((cls == FLOAT64) & ~np.isfinite(expected)).sum())
        if counts[FLOAT64] > overflowed:
            parts.append(f"{counts[FLOAT64] - overflowed} within JAX's {precision} accuracy against float64")
        if overflowed:
            parts.append(f"{overflowed} where jax.jit overflows in {precision} (inf or NaN) and the artifact has "
                         "the finite float64 value")
    if counts[SUBNORMAL]:
        parts.append(f"{counts[SUBNORMAL]} differ only in subnormals (XLA on the CPU flushes them to zero)")
    if counts[UNDECIDED]:
        against = "float64" if refs is not None and refs.float64 is not None else "JAX run op by op"
        why = f"; float64 unavailable: {refs.why_not}" if refs is not None and refs.float64 is None and refs.why_not else ""
        parts.append(f"{counts[UNDECIDED]} undecided (jax.jit itself is uncertain there, judged against {against}{why})")
    for k in (MISMATCH, UNDECIDED):
        if counts[k]:
            i = int(np.flatnonzero(cls.ravel() == k)[0])
            where = _where_text(cls.shape, i)
            e, a = expected.ravel()[i], actual.ravel()[i]
            text = f"at {where}: jax.jit {show(e)}, artifact {show(a)}"
            if refs is not None and refs.float64 is not None and expected.dtype.kind != "c":
                text += f", float64 {show(refs.float64.ravel()[i])}"
            if k == MISMATCH:
                nan_differs = is_float(expected) and bool(np.isnan(e)) != bool(np.isnan(a))
                what = "NaN positions differ" if nan_differs else "differ"
                if refs is not None and refs.float64 is None and refs.why_not and is_narrow_float(expected.dtype):
                    text += f" (judged without a float64 reference: {refs.why_not})"
                parts.insert(0, f"{counts[MISMATCH]} of {cls.size} elements {what}, first {text}")
            else:
                parts.append(f"first undecided {text}")
            break
    return "; ".join(parts)


def compare(name: str, expected: np.ndarray, actual: np.ndarray, rtol: float | None = None,
            atol: float | None = None) -> OutputCheck:
    """Compare one output with fixed tolerances only: every element must be ``ok``.

    NaNs must sit in the same places, infinities must match exactly, integers must be equal,
    and dtypes and shapes must agree. Subnormal-only differences count as differences here.
    """
    row, cls = judge(name, expected, actual, rtol, atol)
    if cls is None or cls.size == 0 or cls.max(initial=OK) == OK:
        return row
    return OutputCheck(row.name, row.dtype, row.shape, row.max_abs, row.max_rel, False, row.note, "mismatch", row.inputs)
