"""Where jax.jit's result on NaN is its implementation's choice, which the artifact does not copy.

- LU factorization (``jax.lax.linalg.lu``, under ``jnp.linalg.det``, ``slogdet``, ``inv``, ``solve``,
  ``jax.scipy.linalg.lu`` and ``lu_factor``): each pivot is the first entry of largest magnitude in its
  column, found by BLAS's ``i?amax``. jaxlib calls the LAPACK SciPy ships (OpenBLAS), whose vectorised
  ``i?amax`` on a column holding NaN returns the NaN's index or the column's first entry, by kernel and
  precision (``isamax([1, NaN, 2])`` is 0 and ``idamax`` of the same is 1 on an AVX2 machine); reference
  LAPACK and the artifact pass over NaN. The matrix ``[[0, -0, inf, -inf], [NaN, ...], [-FLT_MAX, ...]]``
  gets pivot row 0 (a zero) in jax.jit, so ``det`` is 0 there; the artifact pivots on -FLT_MAX and
  gives NaN. Every value after a differing pivot can differ, integers (pivots, permutations) too.
- The symmetric eigendecomposition (``eigh``: ``jnp.linalg.eigh``, ``eigvalsh``), LAPACK's syevd in jax.jit,
  of a matrix holding NaN: LAPACK returns values of its own making (eigenvalues -1.41 and 1.41 for
  ``[[NaN, 1], [1, 1]]``, partly finite vectors); the artifact's Jacobi returns NaN.
- ``top_k`` of floats below ONNX opset 26: XLA orders floats by their bits, so -NaN comes after -inf
  (``top_k(-x)``, ``jnp.partition``, for x holding NaN); no ONNX op before ``BitCast`` (opset 26) reads
  a NaN's sign, so the artifact orders -NaN like +NaN. At opset 26 it reads them and this is no excuse.

``as_nan_choice`` makes a mismatch on edge values in such a program ``undecided`` (a warning; ``--strict``
fails it), naming the op and why. Random and given inputs hold no NaN: there every difference stays.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

from jaxconv.compare import OutputCheck
from jaxconv.known_differences import nan_dropping_ops

BITCAST_OPSET = 26  # the first ONNX opset with BitCast
LU_NOTE = ("an LU pivot on a column holding NaN is the BLAS's choice (jax.jit's OpenBLAS i?amax returns a NaN's "
           "index or the column's first entry; the artifact passes over NaN, as reference LAPACK does)")
EIGH_NOTE = ("LAPACK's eigendecomposition of a matrix holding NaN gives values of its own making (jax.jit: eigenvalues "
             "-1.41 and 1.41 for [[NaN, 1], [1, 1]]); the artifact gives NaN")
TOP_K_NOTE = (f"below ONNX opset {BITCAST_OPSET} the artifact cannot read a NaN's sign: top_k orders -NaN like +NaN, "
              f"where XLA puts -NaN after -inf (--opset {BITCAST_OPSET} reads it)")


def choices(fn: Callable[..., Any], arg_specs: Sequence[Any], flat: Sequence[np.ndarray], runner: Any) -> list[str]:
    """The notes of the NaN choices the traced program makes where the artifact (``runner``) does not copy them."""
    found = nan_dropping_ops(fn, arg_specs, flat, frozenset({"lu", "eigh", "top_k"})) or set()
    notes = [LU_NOTE] if "lu" in found else []
    if "eigh" in found:
        notes.append(EIGH_NOTE)
    opset = getattr(runner, "opset", None)
    if "top_k" in found and getattr(runner, "kind", "") == "onnx" and opset is not None and opset < BITCAST_OPSET:
        notes.append(TOP_K_NOTE)
    return notes


def as_nan_choice(rows: list[OutputCheck], classes: Sequence[np.ndarray | None], fn: Callable[..., Any],
                  arg_specs: Sequence[Any], flat: Sequence[np.ndarray], runner: Any) -> list[OutputCheck]:
    """Mismatches on edge values in a program with an LU factorization or a symmetric eigendecomposition,
    or a float top_k the artifact orders without NaN signs, as ``undecided`` rows naming why; others unchanged."""
    open_rows = [i for i, (r, cls) in enumerate(zip(rows, classes)) if r.verdict == "mismatch" and r.inputs == "edge"
                 and cls is not None]
    if not open_rows:
        return rows
    notes = choices(fn, arg_specs, flat, runner)
    if not notes:
        return rows
    out = list(rows)
    for i in open_rows:
        out[i] = dataclasses.replace(rows[i], ok=True, verdict="undecided", note=f"{'; '.join(notes)}; {rows[i].note}")
    return out
