"""Op rows: LAPACK syevd (symmetric eigendecomposition) of CPU exports, through sign-invariant functions.

Eigenvectors are unique only up to sign, so rows compare eigenvalues and reconstructions; the vectors
themselves are compared in tests/ops/test_lapack_eigen.py after a canonical sign.
"""

from __future__ import annotations

import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

from conformance.case import op_row

RNG = np.random.default_rng(0)


def _symmetric(shape, dtype=np.float32):
    a = RNG.standard_normal(shape)
    return ((a + np.swapaxes(a, -1, -2)) / 2).astype(dtype)


def _reconstruct(a):
    w, v = jnp.linalg.eigh(a)
    return (v * w[..., None, :]) @ jnp.swapaxes(v, -1, -2)


def _reconstruct_upper(a):
    w, v = jsl.eigh(a, lower=False)
    return (v * w[..., None, :]) @ jnp.swapaxes(v, -1, -2)


# ---- eigvalsh / eigh (syevd) ----------------------------------------------------------------------------
for n in [1, 2, 3, 4, 5, 6, 7, 8, 32]:
    op_row(f"lapack_eigen.eigvalsh.{n}", jnp.linalg.eigvalsh, _symmetric((n, n)))
    op_row(f"lapack_eigen.eigh_reconstruct.{n}", _reconstruct, _symmetric((n, n)), tol=(1e-4, 1e-5))
op_row("lapack_eigen.eigvalsh.batched", jnp.linalg.eigvalsh, _symmetric((2, 3, 5, 5)))
op_row("lapack_eigen.eigvalsh.float64_batched", jnp.linalg.eigvalsh, _symmetric((3, 6, 6), np.float64))
op_row("lapack_eigen.eigh_reconstruct.float64_batched", _reconstruct, _symmetric((2, 7, 7), np.float64))
op_row("lapack_eigen.eigh_reconstruct.float64_32", _reconstruct, _symmetric((32, 32), np.float64))
# jax.scipy.linalg.eigh reads the triangle it is told to (no symmetrization): the other one holds junk.
_JUNK = _symmetric((5, 5)) + np.tril(100 * np.ones((5, 5), np.float32), -1)
op_row("lapack_eigen.eigh_reconstruct.upper", _reconstruct_upper, _JUNK, tol=(1e-4, 1e-5))
op_row("lapack_eigen.eigvalsh.upper", lambda a: jsl.eigh(a, lower=False, eigvals_only=True), _JUNK)
# Repeated and clustered eigenvalues, a zero matrix, a diagonal one (LAPACK's order of equal values).
_Q = np.linalg.qr(RNG.standard_normal((6, 6)))[0]
op_row("lapack_eigen.eigh_reconstruct.repeated", _reconstruct,
       ((_Q * np.array([1, 1, 1, 2, 2, -3.0])) @ _Q.T).astype(np.float32), tol=(1e-4, 1e-5))
op_row("lapack_eigen.eigh.diagonal", jnp.linalg.eigh, np.diag(np.array([2, 2, 1, -1], np.float32)),
       runs=[(np.zeros((4, 4), np.float32),)])
# Graded: a huge diagonal entry beside an O(100) block; Jacobi keeps the small eigenvalues to full accuracy.
_GRADED = np.array([[4.8e37, 0, -1.6], [0, 0, 50.25], [-1.6, 50.25, -1e-3]], np.float32)
op_row("lapack_eigen.eigvalsh.graded", jnp.linalg.eigvalsh, _GRADED)
# Non-finite input: JAX's NaN fill where LAPACK fails; a diagonal matrix keeps its finite entries (NaN
# eigenvalues when it holds inf but no NaN). Diagonal matrices only: their vectors have LAPACK's signs.
op_row("lapack_eigen.eigh.non_finite", jnp.linalg.eigh,
       np.stack([np.diag(np.array([np.nan, np.inf, 1], np.float32)), np.diag(np.array([1, np.nan, 0], np.float32)),
                 np.full((3, 3), np.nan, np.float32), np.diag(np.array([np.inf, 2, 0], np.float32))]))
