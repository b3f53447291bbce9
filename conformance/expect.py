"""The element-by-element expectations of a row (``Case.expect``): ``exact``, ``bits`` and ``allclose``.

``close`` rows are compared by ``jaxconv.compare.compare`` (the converter's own check). The two
stricter forms here read every element:

- ``exact``: values bit for bit, NaN in the same places, zeros of the same sign (unless the row
  says ``signed_zeros=False``). XLA on the CPU flushes subnormal results to zero and ONNX Runtime
  does not, so a subnormal of the zero's sign is accepted where jax.jit gives zero.
- ``bits``: the outputs' bytes identical (NaN signs and payloads too): for ops that move values
  and never compute them (sort, top_k).
- ``allclose``: within ``tol["*"]`` (``numpy.testing.assert_allclose``, NaN places equal), zeros of
  the same sign unless ``signed_zeros=False``.

Integer and bool outputs are compared exactly in both forms; shapes and dtypes must be equal.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)


def _comparable(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    return x.astype(np.float32) if x.dtype == BF16 else x


def _first(what: str, bad: np.ndarray, e: np.ndarray, a: np.ndarray) -> str:
    i = int(bad[0])
    return f"{what}: {bad.size} mismatches, first at {i}: expected {e.flat[i]!r}, got {a.flat[i]!r}"


def mismatch(expected: np.ndarray, actual: np.ndarray, expect: str, tol: tuple[float | None, float | None] | None,
             signed_zeros: bool, what: str) -> str | None:
    """Why ``actual`` does not meet ``expect`` against ``expected`` (one line), or None when it does."""
    e, a = _comparable(expected), _comparable(actual)
    if e.shape != a.shape:
        return f"{what}: shape {a.shape} != {e.shape}"
    if np.asarray(actual).dtype != np.asarray(expected).dtype:
        return f"{what}: dtype {np.asarray(actual).dtype} != {np.asarray(expected).dtype}"
    if expect == "bits":
        width = np.asarray(expected).dtype.itemsize
        eb = np.ascontiguousarray(expected).view(np.uint8).reshape(-1, width)
        ab = np.ascontiguousarray(actual).view(np.uint8).reshape(-1, width)
        bad = np.flatnonzero((eb != ab).any(axis=1))
        return _first(what + " bytes", bad, np.asarray(expected).ravel(), np.asarray(actual).ravel()) if bad.size else None
    if e.dtype.kind not in "fc":
        bad = np.flatnonzero(e != a)
        return _first(what, bad, e, a) if bad.size else None
    with np.errstate(all="ignore"):
        if expect == "allclose":
            rtol, atol = tol if tol is not None else (None, None)
            try:
                np.testing.assert_allclose(a, e, rtol=rtol or 0.0, atol=atol or 0.0, equal_nan=True, err_msg=what)
            except AssertionError as err:
                return " ".join(str(err).split())[:400]
            if signed_zeros and e.dtype.kind == "f":
                zeros = np.flatnonzero((e == 0) & (a == 0) & (np.signbit(e) != np.signbit(a)))
                if zeros.size:
                    return f"{what}: sign of zero differs at {zeros[:5].tolist()}"
            return None
        same = (e == a) | (np.isnan(e) & np.isnan(a))
        if e.dtype.kind == "c":
            return _first(what, np.flatnonzero(~same), e, a) if not same.all() else None
        if signed_zeros:
            same &= (np.signbit(e) == np.signbit(a)) | np.isnan(e)
        tiny = float(ml_dtypes.finfo(np.asarray(expected).dtype).tiny)
        same |= (e == 0) & (np.abs(a) < tiny) & (np.signbit(e) == np.signbit(a))
    bad = np.flatnonzero(~same)
    return _first(what, bad, e, a) if bad.size else None
