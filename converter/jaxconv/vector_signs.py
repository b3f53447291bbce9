"""Eigenvectors and singular vectors whose signs are LAPACK's choice, which the artifact does not copy.

An eigenvector of ``jnp.linalg.eigh`` (primitive ``eigh``, LAPACK's syevd in jax.jit) is unique only
up to its sign, and so is a pair (column i of U, row i of Vt) of ``jnp.linalg.svd`` (primitive ``svd``,
gesdd). Which sign jax.jit returns follows from LAPACK's arithmetic and cannot be reproduced; the
ONNX lowering writes a canonical sign instead: each eigenvector column is flipped so that its entry of
largest absolute value (the first such index on ties) is positive, and each singular pair is flipped
together so that u_i's entry of largest absolute value (first on ties) is positive. Extra columns of
a full U, or rows of a full Vt, beyond min(m, n) pair with no singular value and keep jax.jit's sign.

``as_vector_signs`` judges again each output beyond tolerance of jax.jit (a ``mismatch``,
``undecided`` or ``float64`` row) of a program computing real eigenvectors or singular vectors, where
it is beyond tolerance: against the same program run under jax.jit with those vectors' signs made
canonical (``CanonicalSigns``: its jaxpr evaluated again with each such op's results flipped, calls,
custom derivatives and remat followed into), and against that program's float64 result, whose signs
are canonical too: LAPACK's float64 signs often differ from its float32 ones, and judged against them
a wrong element was "within float64 accuracy". The row becomes ``vector-signs`` (shown as ``ok (vector
signs)``) when every such element agrees, else ``undecided`` or ``mismatch``. Where a vector op sits in
a loop or a branch there is no such program and the row stays as it was, and so does a row of an artifact
computed by XLA's own LAPACK calls (``FOREIGN_KERNELS``), which has jax.jit's signs.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

from jaxconv import references
from jaxconv.compare import (
    FLOAT64,
    MISMATCH,
    OK,
    SUBNORMAL,
    UNDECIDED,
    OutputCheck,
    References,
    as_float64,
    is_narrow_float,
    judge,
)
from jaxconv.jaxpr_rebind import bind, rebound_program
from jaxconv.known_differences import FOREIGN_KERNELS, program_eqns

VERDICT = "vector-signs"
NOTE = ("eigenvectors and singular vectors are unique only up to sign ({ops}): the artifact writes each with "
        "its largest entry positive, jax.jit has LAPACK's signs")


def _vectors_of(eqn: Any) -> list[Any]:
    """The eigenvector or singular-vector results of an ``eigh`` or ``svd`` equation; [] for any other."""
    name = eqn.primitive.name
    if name == "eigh":
        return [eqn.outvars[0]]
    if name == "svd" and eqn.params.get("compute_uv", False):
        return list(eqn.outvars[1:3])
    return []


def _real_vectors(eqn: Any) -> bool:
    """An ``eigh`` or ``svd`` equation computing real vectors (complex ones have a phase, not a sign)."""
    vectors = _vectors_of(eqn)
    return bool(vectors) and all(np.dtype(v.aval.dtype).kind == "f" for v in vectors)


def vector_ops(fn: Callable[..., Any], arg_specs: Sequence[Any], flat: Sequence[np.ndarray]) -> list[str]:
    """The names of the ops of the traced program that compute real eigenvectors or singular vectors."""
    return sorted({e.primitive.name for e in program_eqns(fn, arg_specs, flat) or [] if _real_vectors(e)})


def canonical_eigenvectors(v: Any) -> Any:
    """``v`` (columns: eigenvectors, batched) with each column's entry of largest magnitude made positive."""
    import jax.numpy as jnp

    where = jnp.argmax(jnp.abs(v), axis=-2)[..., None, :]
    return v * jnp.where(jnp.take_along_axis(v, where, axis=-2) < 0, -1, 1).astype(v.dtype)


def canonical_singular_vectors(u: Any, vt: Any) -> tuple[Any, Any]:
    """(u, vt) with each pair (column i of u, row i of vt), i < min(m, n), flipped together so that the
    column's entry of largest magnitude is positive; further columns and rows as they are."""
    import jax.numpy as jnp

    k = min(u.shape[-2], vt.shape[-1])
    paired = u[..., :k]
    where = jnp.argmax(jnp.abs(paired), axis=-2)[..., None, :]
    sign = jnp.where(jnp.take_along_axis(paired, where, axis=-2) < 0, -1, 1).astype(u.dtype)  # [..., 1, k]
    u = jnp.concatenate([paired * sign, u[..., k:]], axis=-1)
    vt = jnp.concatenate([vt[..., :k, :] * jnp.swapaxes(sign, -1, -2), vt[..., k:, :]], axis=-2)
    return u, vt


def _canonical_signs(eqn: Any, ins: list[Any]) -> list[Any]:
    """An ``eigh`` or ``svd`` equation's results, its vectors given canonical signs."""
    outs = bind(eqn, ins)
    if eqn.primitive.name == "eigh":
        outs[0] = canonical_eigenvectors(outs[0])
    else:
        outs[1], outs[2] = canonical_singular_vectors(outs[1], outs[2])
    return outs


def canonical_program(fn: Callable[..., Any], arg_specs: Sequence[Any],
                      flat: Sequence[np.ndarray]) -> Callable[..., Any] | None:
    """``fn`` with its eigenvectors and singular vectors given canonical signs, as a function of the same
    arguments (``jaxpr_rebind``); None when a vector op sits in a loop or a branch."""
    return rebound_program(fn, arg_specs, flat, _real_vectors, _canonical_signs)


class CanonicalSigns:
    """The references of the program with canonical vector signs on one input set, each computed once when
    first asked for: ``outputs()`` under jax.jit, ``float64()`` widened as the float64 reference is
    (``references.float64_outputs``). Either is None when there is no such program or its run fails."""

    def __init__(self, fn: Callable[..., Any], arg_specs: Sequence[Any], flat: Sequence[np.ndarray]) -> None:
        self._fn, self._arg_specs, self._flat = fn, arg_specs, flat
        self._cache: dict[str, Any] = {}

    def _program(self) -> Callable[..., Any] | None:
        if "program" not in self._cache:
            try:
                self._cache["program"] = canonical_program(self._fn, self._arg_specs, self._flat)
            except Exception:  # noqa: BLE001  (no such program then: the rows stay as they are)
                self._cache["program"] = None
        return self._cache["program"]

    def outputs(self) -> list[np.ndarray] | None:
        if "outputs" not in self._cache:
            program = self._program()
            try:
                self._cache["outputs"] = (None if program is None else
                                          references.reference_outputs(program, self._arg_specs, self._flat))
            except Exception:  # noqa: BLE001  (no such reference then)
                self._cache["outputs"] = None
        return self._cache["outputs"]

    def float64(self) -> tuple[list[np.ndarray] | None, str]:
        if "float64" not in self._cache:
            program = self._program()
            self._cache["float64"] = ((None, "the vector ops sit in a loop or a branch") if program is None
                                      else references.float64_outputs(program, self._arg_specs, self._flat))
        return self._cache["float64"]


def _text(x: Any) -> str:
    return f"{complex(x):.7g}" if np.iscomplexobj(x) else f"{float(x):.7g}"


def _judged_anew(row: OutputCheck, expected: np.ndarray, actual: np.ndarray, rtol: float | None,
                 atol: float | None, signs: CanonicalSigns, index: int, ops: list[str]) -> OutputCheck | None:
    """``row`` judged against the program with canonical vector signs where the artifact is beyond tolerance
    of jax.jit; None when that program gives no reference or the artifact is within tolerance everywhere."""
    _, plain = judge(row.name, expected, actual, rtol, atol)
    if plain is None or not (bad := plain == MISMATCH).any():
        return None
    other = signs.outputs()
    if other is None or index >= len(other) or np.shape(other[index]) != np.shape(expected):
        return None
    if np.array_equal(np.asarray(other[index]), expected, equal_nan=True):
        return None  # the output does not follow the vectors' signs: its row stands as judged
    _, quick = judge(row.name, other[index], actual, rtol, atol)
    refs = None
    if quick is None or not bool((quick[bad] <= SUBNORMAL).all()):  # the float64 reference, of the same signs
        truth, why = (signs.float64() if is_narrow_float(expected.dtype)
                      else (None, "the output is float64 already"))
        t = truth[index] if truth is not None and index < len(truth) else None
        usable = t is not None and np.shape(t) == np.shape(expected)
        refs = References(float64=as_float64(t) if usable else None, why_not=why or "no float64 result")
    again, cls = judge(row.name, other[index], actual, rtol, atol, refs=refs, inputs=row.inputs)
    if cls is None or cls.shape != bad.shape:
        return None
    cls = np.where(bad, cls, OK)
    worst = int(cls.max())
    signed = f"{NOTE.format(ops=', '.join(ops))}; against jax.jit with canonical signs"
    if worst < UNDECIDED:
        licensed = int((cls == FLOAT64).sum())
        within = f", {licensed} of them within JAX's accuracy against its float64 result" if licensed else ""
        return dataclasses.replace(row, ok=True, verdict=VERDICT,
                                   note=f"{signed}, the {int(bad.sum())} elements beyond tolerance of "
                                        f"jax.jit agree{within}")
    k = int(np.flatnonzero(cls.ravel() == worst)[0])
    where = [int(j) for j in np.unravel_index(k, cls.shape)] if cls.shape else []
    first = (f"first at {where}: jax.jit {_text(expected.ravel()[k])}, with canonical signs "
             f"{_text(np.asarray(other[index]).ravel()[k])}, artifact {_text(actual.ravel()[k])}")
    if worst == UNDECIDED:
        return dataclasses.replace(row, ok=True, verdict="undecided",
                                   note=f"{signed}, {int((cls == UNDECIDED).sum())} elements undecided, "
                                        f"{first}; {again.note}")
    note = (f"{int((cls == MISMATCH).sum())} of {cls.size} elements differ from jax.jit with LAPACK's and "
            f"with canonical vector signs ({', '.join(ops)}), {first}")
    return dataclasses.replace(row, ok=False, verdict="mismatch", note=note)


def as_vector_signs(rows: list[OutputCheck], fn: Callable[..., Any], arg_specs: Sequence[Any],
                    flat: Sequence[np.ndarray], expected: Sequence[np.ndarray], actual: Sequence[np.ndarray],
                    rtol: float | None, atol: float | None, kind: str,
                    signs: CanonicalSigns) -> list[OutputCheck]:
    """In a program computing real eigenvectors or singular vectors, the rows beyond tolerance of jax.jit
    (``mismatch``, ``undecided`` or ``float64``) judged again where they are: against the program with
    canonical vector signs (``signs``, the caller's for this input set), whose float64 reference has those
    signs too (the plain one has LAPACK's float64 signs, which often differ from float32's: a vector of
    the other sign there made every element of the row "within float64 accuracy", a wrong one included).
    A row whose every such element agrees becomes ``vector-signs`` (shown as ``ok (vector signs)``), else
    ``undecided`` or ``mismatch`` naming why. Artifacts computed by kernels jaxconv does not write
    (``FOREIGN_KERNELS``: XLA's own LAPACK calls, jax.jit's signs) keep their rows."""
    candidates = [i for i, r in enumerate(rows) if r.verdict in ("mismatch", "undecided", "float64")
                  and np.shape(actual[i]) == np.shape(expected[i])]
    if not candidates or kind in FOREIGN_KERNELS:
        return rows
    ops = vector_ops(fn, arg_specs, flat)
    if not ops:
        return rows
    out = list(rows)
    for i in candidates:
        e, a = np.asarray(expected[i]), np.asarray(actual[i])
        again = _judged_anew(rows[i], e, a, rtol, atol, signs, i, ops)
        out[i] = again if again is not None else rows[i]
    return out
