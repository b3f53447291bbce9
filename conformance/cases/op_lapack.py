"""Op rows: LAPACK custom calls of CPU exports (potrf, trsm, getrf), every jnp/scipy entry point."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax import lax

from conformance.case import op_row

RNG = np.random.default_rng(0)
S = jax.ShapeDtypeStruct


def _general(shape, dtype=np.float32):
    """Matrices with singular values in [1, 2] (condition number <= 2) whose LU still needs row swaps."""
    n = shape[-1]
    batch = shape[:-2]
    q1 = np.linalg.qr(RNG.standard_normal(batch + (n, n)))[0]
    q2 = np.linalg.qr(RNG.standard_normal(batch + (n, n)))[0]
    s = RNG.uniform(1.0, 2.0, batch + (1, n))
    return ((q1 * s) @ q2).astype(dtype)


def _spd(shape, dtype=np.float32):
    a = RNG.standard_normal(shape)
    n = shape[-1]
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)).astype(dtype)


def _f(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _triangular(n, lower, dtype=np.float32, batch=()):
    """A well-conditioned triangle (diagonal away from zero); the other triangle holds junk LAPACK must not read."""
    a = RNG.uniform(-0.5, 0.5, batch + (n, n))
    a += np.eye(n) * RNG.uniform(1.0, 2.0, batch + (1, n)) * RNG.choice([-1, 1], batch + (1, n))
    junk = 100 * RNG.standard_normal(batch + (n, n))
    mask = np.tril(np.ones((n, n), bool)) if lower else np.triu(np.ones((n, n), bool))
    return np.where(mask, a, junk).astype(dtype)


def _det(a):
    return jnp.linalg.det(a), *jnp.linalg.slogdet(a)


# ---- cholesky (potrf) ---------------------------------------------------------------------------------
for n in [1, 2, 5, 16]:
    op_row(f"lapack.cholesky.{n}", jnp.linalg.cholesky, _spd((n, n)))
op_row("lapack.cholesky.batched", jnp.linalg.cholesky, _spd((2, 3, 4, 4)))
op_row("lapack.cholesky.float64_batched", jnp.linalg.cholesky, _spd((3, 6, 6), np.float64))
op_row("lapack.cholesky.upper", lambda a: jsl.cholesky(a, lower=False), _spd((5, 5)))
# LAPACK's info != 0 makes JAX return NaN for that matrix only; the batch's other matrix is unaffected.
_GOOD, _BAD = _spd((4, 4)), _spd((4, 4))
_BAD[2, 2] = -50.0
op_row("lapack.cholesky.not_positive_definite", jnp.linalg.cholesky,
       np.stack([_GOOD, _BAD, np.ones((4, 4), np.float32), -_GOOD]))  # ones: rank one, a zero pivot at step 2
op_row("lapack.cho_factor_solve", lambda a, b: jsl.cho_solve(jsl.cho_factor(a), b), _spd((5, 5)), _f((5, 3)))

# ---- solve_triangular (trsm) ----------------------------------------------------------------------------
for lower in [True, False]:
    for trans in [0, 1, 2]:
        for unit in [False, True]:
            op_row(f"lapack.solve_triangular.{'lower' if lower else 'upper'}.trans{trans}.{'unit' if unit else 'diag'}",
                   lambda a, b, lower=lower, trans=trans, unit=unit: jsl.solve_triangular(
                       a, b, trans=trans, lower=lower, unit_diagonal=unit),
                   _triangular(5, lower), _f((5, 3)))
# x op(a) = b: LAPACK side = 'R'.
for lower, transpose_a in [(True, False), (False, True)]:
    op_row(f"lapack.triangular_solve.right_side.{'lower' if lower else 'upper_transposed'}",
           lambda a, b, lower=lower, t=transpose_a: lax.linalg.triangular_solve(a, b, left_side=False, lower=lower,
                                                                                transpose_a=t),
           _triangular(4, lower, batch=(2,)), _f((2, 3, 4)))
for n in [1, 2, 16]:
    op_row(f"lapack.solve_triangular.vector_rhs.{n}", lambda a, b: jsl.solve_triangular(a, b, lower=True),
           _triangular(n, True), _f((n,)))
op_row("lapack.solve_triangular.float64_batched", lambda a, b: jsl.solve_triangular(a, b, lower=False, trans=1),
       _triangular(6, False, np.float64, batch=(3,)), _f((3, 6, 2), np.float64))

# ---- solve / inv / det / slogdet (getrf + trsm) ------------------------------------------------------------
for n in [1, 2, 5, 16]:
    op_row(f"lapack.solve.{n}", jnp.linalg.solve, _general((n, n)), _f((n, 2)))
_A, _B = _general((4, 5, 5), np.float64), _f((4, 5, 3), np.float64)
op_row("lapack.solve.float64_batched", jnp.linalg.solve, _A, _B)
op_row("lapack.solve.float64_vector_rhs", jnp.linalg.solve, _A[0], _B[0, :, 0])
for n in [1, 2, 5, 16]:
    op_row(f"lapack.inv.{n}", jnp.linalg.inv, _general((n, n)))
op_row("lapack.inv.batched", jnp.linalg.inv, _general((2, 3, 4, 4)))
op_row("lapack.inv.float64_batched", jnp.linalg.inv, _general((3, 7, 7), np.float64))
for n in [4, 5, 16]:  # n <= 3 determinants are closed forms, no LAPACK call
    op_row(f"lapack.det_slogdet.{n}", _det, _general((n, n)))
op_row("lapack.det_slogdet.float64_batched", _det, _general((2, 3, 6, 6), np.float64))
# A zero pivot (LAPACK info > 0) leaves its column unscaled: det is exactly 0, slogdet -inf, like jax.jit.
_RANK_TWO = np.array([[1, 2, 3, 4], [2, 4, 6, 8], [1, 0, 1, 0], [3, 1, 2, 5]], np.float32)
_RANK_TWO[3] = _RANK_TWO[0] + _RANK_TWO[2]
op_row("lapack.det_slogdet.singular", _det, np.stack([_RANK_TWO, np.zeros((4, 4), np.float32), _general((4, 4))]))
_A = _general((3, 4, 4))
op_row("lapack.dynamic_batch", lambda a: (jnp.linalg.inv(a), jnp.linalg.cholesky(a @ jnp.swapaxes(a, -1, -2))), _A,
       specs=[S((jax.export.symbolic_shape("b")[0], 4, 4), np.float32)], runs=[[_A[:1]], [_general((5, 4, 4))]])

# ---- lu / lu_factor (getrf) ---------------------------------------------------------------------------------
for n in [1, 2, 5, 16]:
    op_row(f"lapack.lu_factor.{n}", jsl.lu_factor, _general((n, n)))
for shape in [(3, 5), (5, 3), (1, 4), (4, 1)]:
    op_row(f"lapack.lu.{shape[0]}x{shape[1]}", jsl.lu, _f(shape))
# lax.linalg.lu: packed LU, 0-based pivots and the permutation, batched.
op_row("lapack.lu.float64_batched", lax.linalg.lu, _general((2, 3, 6, 6), np.float64))
# Equal |a[i, j]| candidates: LAPACK's i?amax takes the first; so must the unrolled argmax.
_TIES = np.array([[2, 1, 1], [-2, 1, 3], [2, 5, 1]], np.float32)
op_row("lapack.lu_factor.pivot_ties", jsl.lu_factor, np.stack([np.array([[1, 2, 0], [-1, 3, 1], [1, -1, 2]], np.float32), _TIES]))
op_row("lapack.lu.pivot_ties", jsl.lu, _TIES)
op_row("lapack.lu_solve", lambda a, b: jsl.lu_solve(jsl.lu_factor(a), b, trans=1), _general((6, 6)), _f((6, 2)))

for name, fn, shapes in [("cholesky", jnp.linalg.cholesky, [(2, 0, 0)]), ("lu_factor", jsl.lu_factor, [(0, 0)]),
                         ("lu", jsl.lu, [(0, 3)]), ("solve_triangular", lambda a, b: jsl.solve_triangular(a, b), [(0, 0), (0, 2)])]:
    op_row(f"lapack.empty.{name}", fn, *[np.zeros(s, np.float32) for s in shapes])

# A NaN pivot propagates (LAPACK only stops at a pivot <= 0, and JAX then returns all NaN).
_NAN, _INF = np.nan, np.inf
_MATS = np.array([[[4, 2, 0], [2, _NAN, 0], [0, 0, 1]], [[4, 2, 0], [2, -3, 0], [0, 0, 1]],
                  [[_NAN, 2, 0], [2, 5, 0], [0, 0, 1]], [[4, 2, 0], [_INF, 5, 0], [0, 0, 1]],
                  [[4, _NAN, 0], [2, 5, 0], [0, 0, 1]], [[4, 2, 1], [2, _INF, 1], [1, 1, 9]],
                  [[4, 2, 1], [2, 5, 1], [1, 1, 0]]], np.float32)
for upper in [False, True]:
    op_row(f"lapack.cholesky.nan_inf.{'upper' if upper else 'lower'}", lambda a, upper=upper: jnp.linalg.cholesky(a, upper=upper),
           _MATS, expect="allclose", tol=(1e-6, 1e-6))
