"""Op rows: LAPACK gesdd (singular value decomposition) of CPU exports, through sign-invariant functions.

Singular vectors are unique only up to sign, so rows compare singular values, reconstructions and the
functions built on them (pinv, lstsq, norms, cond, matrix_rank, polyfit); the vectors themselves are
compared in tests/ops/test_lapack_svd.py after a canonical sign.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from conformance.case import op_row

RNG = np.random.default_rng(11)


def _f(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _low_rank(shape, rank, dtype=np.float32):
    """A random matrix of the given rank (exactly, up to the rounding of its product)."""
    *batch, m, n = shape
    return (_f((*batch, m, rank), np.float64) @ _f((*batch, rank, n), np.float64)).astype(dtype)


def _values(a):
    return jnp.linalg.svd(a, compute_uv=False)


def _reconstruct(a):
    u, s, vt = jnp.linalg.svd(a, full_matrices=False)
    return (u * s[..., None, :]) @ vt


def _reconstruct_full(a):
    u, s, vt = jnp.linalg.svd(a)
    return (u * s[..., None, :]) @ vt


def _lstsq(a, b):
    return jnp.linalg.lstsq(a, b)[0]


# ---- singular values and reconstructions (gesdd modes N, S, A): tall, wide, square -------------------------
for n in [1, 2, 3, 4, 5, 6, 7, 8, 32]:
    op_row(f"lapack_svd.values.{n}", _values, _f((n, n)))
    op_row(f"lapack_svd.reconstruct.{n}", _reconstruct, _f((n, n)), tol=(1e-4, 1e-5))
for m, n in [(5, 3), (3, 5), (1, 4), (4, 1), (8, 2), (2, 7)]:
    op_row(f"lapack_svd.values.{m}x{n}", _values, _f((m, n)))
    op_row(f"lapack_svd.reconstruct.{m}x{n}", _reconstruct, _f((m, n)), tol=(1e-4, 1e-5))
op_row("lapack_svd.reconstruct_full.square", _reconstruct_full, _f((6, 6)), tol=(1e-4, 1e-5))
op_row("lapack_svd.values.batched", _values, _f((2, 3, 6, 4)))
op_row("lapack_svd.reconstruct.batched_wide", _reconstruct, _f((3, 2, 5)), tol=(1e-4, 1e-5))
op_row("lapack_svd.values.float64_batched", _values, _f((3, 7, 5), np.float64))
op_row("lapack_svd.reconstruct.float64_wide", _reconstruct, _f((2, 4, 9), np.float64))
op_row("lapack_svd.reconstruct.float64_32", _reconstruct, _f((32, 32), np.float64))
# Repeated singular values (an orthogonal matrix), a rank-deficient one, a zero one, graded columns.
op_row("lapack_svd.values.orthogonal", _values, np.linalg.qr(_f((5, 5), np.float64))[0].astype(np.float32))
op_row("lapack_svd.values.rank_deficient", _values, _low_rank((6, 5), 2), tol=(1e-5, 1e-5))
op_row("lapack_svd.svd.zeros", lambda a: jnp.linalg.svd(a, full_matrices=False), np.zeros((4, 3), np.float32),
       runs=[(np.zeros((4, 3), np.float32),)])
# Graded: FLT_MAX / 7 beside O(100) entries. LAPACK's values-only path (mode N) has normwise accuracy and
# returns 0 for the small ones; with vectors (mode S) it finds them, as the float64 result and Jacobi do.
op_row("lapack_svd.values_with_vectors.graded", lambda a: jnp.linalg.svd(a, full_matrices=False)[1],
       np.array([[4.8e37, -1e-38, 3e-38], [0, 0, 0.5], [-3.25, 100, -1e-3]], np.float32))
# Non-finite input: a NaN anywhere gives all NaN (LAPACK's info, JAX's fill); an infinity NaN values.
op_row("lapack_svd.values.non_finite", _values,
       np.stack([np.diag(np.array([np.nan, 1, 2], np.float32)), np.diag(np.array([np.inf, 1, 2], np.float32)),
                 np.array([[1, 2, 3], [4, -np.inf, 6], [7, 8, np.nan]], np.float32), _f((3, 3))]))
op_row("lapack_svd.values.non_finite_1x1", lambda a: jnp.linalg.svd(a, full_matrices=False)[1],
       np.array([[[np.inf]], [[-np.inf]], [[np.nan]], [[-2.0]]], np.float32))

# ---- functions built on the SVD ----------------------------------------------------------------------------
for shape in [(4, 4), (6, 3), (3, 6), (2, 5, 4)]:
    label = "x".join(map(str, shape))
    op_row(f"lapack_svd.pinv.{label}", jnp.linalg.pinv, _f(shape), tol=(1e-4, 1e-5))
    op_row(f"lapack_svd.norm2.{label}", lambda a: jnp.linalg.norm(a, ord=2, axis=(-2, -1)), _f(shape))
    op_row(f"lapack_svd.nuclear.{label}", lambda a: jnp.linalg.norm(a, ord="nuc", axis=(-2, -1)), _f(shape))
    op_row(f"lapack_svd.matrix_rank.{label}", jnp.linalg.matrix_rank, _f(shape))
op_row("lapack_svd.pinv.32", jnp.linalg.pinv, _f((32, 32)), tol=(1e-3, 1e-4))
op_row("lapack_svd.pinv.float64", jnp.linalg.pinv, _f((2, 5, 7), np.float64))
op_row("lapack_svd.pinv.rank_deficient", jnp.linalg.pinv, _low_rank((6, 5), 3), tol=(1e-4, 1e-5),
       runs=[(_low_rank((6, 5), 1),), (np.zeros((6, 5), np.float32),)])
op_row("lapack_svd.pinv.rank_deficient_float64", jnp.linalg.pinv, _low_rank((5, 7), 2, np.float64))
op_row("lapack_svd.matrix_rank.rank_deficient", jnp.linalg.matrix_rank,
       np.stack([_low_rank((6, 5), r) for r in range(6)]))
op_row("lapack_svd.matrix_rank.rank_deficient_float64", jnp.linalg.matrix_rank,
       np.stack([_low_rank((4, 7), r, np.float64) for r in range(5)]))
op_row("lapack_svd.cond.4", jnp.linalg.cond, _f((4, 4)), tol=(1e-4, 1e-5))
op_row("lapack_svd.cond.float64_batched", jnp.linalg.cond, _f((3, 5, 5), np.float64))
op_row("lapack_svd.norm2.float64", lambda a: jnp.linalg.norm(a, ord=2), _f((7, 3), np.float64))
op_row("lapack_svd.nuclear.float64", lambda a: jnp.linalg.norm(a, ord="nuc"), _f((3, 8), np.float64))
op_row("lapack_svd.lstsq.full_rank", _lstsq, _f((6, 3)), _f((6, 2)), tol=(1e-4, 1e-5))
op_row("lapack_svd.lstsq.underdetermined", _lstsq, _f((3, 5)), _f((3,)), tol=(1e-4, 1e-5))
op_row("lapack_svd.lstsq.rank_deficient", _lstsq, _low_rank((7, 4), 2), _f((7, 2)), tol=(1e-4, 1e-5))
op_row("lapack_svd.lstsq.float64_rank_deficient", _lstsq, _low_rank((5, 5), 3, np.float64),
       _f((5,), np.float64))
_X = np.linspace(-1, 1, 9)
op_row("lapack_svd.polyfit", lambda x, y: jnp.polyfit(x, y, 3), _X.astype(np.float32),
       (_X ** 3 - 2 * _X + 0.5 + 0.01 * _f((9,), np.float64)).astype(np.float32), tol=(1e-4, 1e-5))
op_row("lapack_svd.polyfit.float64", lambda x, y: jnp.polyfit(x, y, 2), _X, np.cos(_X))
