"""Complex LAPACK calls of JAX CPU exports (cgetrf/zgetrf, ctrsm/ztrsm, cpotrf/zpotrf) in the ONNX lowering,
compared with jax.jit: inverse, solve, determinant, LU, Cholesky and triangular solves of complex matrices."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest

from lowering_check import assert_onnx_matches_jax, x64_for


def cplx(shape, dtype=np.complex64, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dtype)


def well_conditioned(n, dtype=np.complex64, seed=0, batch=()):
    return (cplx(batch + (n, n), dtype, seed) + 3 * np.eye(n)).astype(dtype)


def hermitian(n, dtype=np.complex64, seed=0):
    a = cplx((n, n), np.complex128, seed)
    return (a @ a.conj().T / n + np.eye(n)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_inverse_solve_and_determinants(dtype):
    a, b = well_conditioned(5, dtype, 1), cplx((5, 2), dtype, 2)
    with x64_for(a):
        assert_onnx_matches_jax(jnp.linalg.inv, a)
        assert_onnx_matches_jax(jnp.linalg.solve, a, b)
        assert_onnx_matches_jax(lambda x: (jnp.linalg.det(x), *jnp.linalg.slogdet(x)), a)


def test_lu_factors_and_pivots_follow_the_largest_re_plus_im():
    """The pivot row is LAPACK's icamax (largest |re| + |im|, the first of equals), not the largest modulus:
    rows 1 and 2 of column 0 have |z| 3 and 2.9 but |re| + |im| 3 and 4.1."""
    a = cplx((4, 4), seed=3)
    a[:, 0] = [0.5, 3.0, 2.05 + 2.05j, 0.1j]
    lu, piv = jax.jit(jsl.lu_factor)(a)
    assert int(piv[0]) == 2  # what the test is about: jax picks row 2
    assert_onnx_matches_jax(jsl.lu_factor, a)
    assert_onnx_matches_jax(lambda x: jsl.lu(x), cplx((4, 3), seed=4))  # rectangular: P, L, U
    assert_onnx_matches_jax(lambda x: jsl.lu(x), cplx((3, 5), seed=5))


def test_singular_matrices_report_their_first_zero_pivot():
    """info marks a zero pivot; jnp.linalg.det is then exactly 0 and slogdet's sign 0."""
    a = cplx((4, 4), seed=6)
    a[:, 2] = a[:, 0] * (2 - 1j)
    a[3] = 0
    assert_onnx_matches_jax(lambda x: (jnp.linalg.det(x), jnp.linalg.slogdet(x)[0]), a)
    assert_onnx_matches_jax(jsl.lu_factor, np.zeros((3, 3), np.complex64))


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_hermitian_cholesky_and_cho_solve(dtype):
    h, b = hermitian(5, dtype, 7), cplx((5, 3), dtype, 8)
    with x64_for(h):
        assert_onnx_matches_jax(jnp.linalg.cholesky, h)
        assert_onnx_matches_jax(lambda x, y: jsl.cho_solve(jsl.cho_factor(x, lower=True), y), h, b)


def test_cholesky_of_a_matrix_that_is_not_positive_definite_is_nan_like_jax():
    h = hermitian(4, seed=9)
    h[2, 2] = -5.0
    assert_onnx_matches_jax(jnp.linalg.cholesky, h)
    assert np.isnan(np.tril(np.asarray(jax.jit(jnp.linalg.cholesky)(h)))[np.tril_indices(4)]).all()


def test_triangular_solves_in_every_mode():
    """trans_x N, T and C (adjoint), either triangle, unit diagonal or not: one function, six calls."""
    a, b = well_conditioned(4, seed=10), cplx((4, 3), seed=11)

    def f(x, y):
        return [jsl.solve_triangular(x, y, trans=trans, lower=lower, unit_diagonal=unit)
                for trans in (0, 1, 2) for lower, unit in ((True, False), (False, True))]

    assert_onnx_matches_jax(f, a, b)


def test_right_side_solves_and_batches():
    """A batch of solves (num_batch_dims 1) and a right-side solve (x a = b, side R)."""
    a, b = well_conditioned(4, seed=12, batch=(3,)), cplx((3, 4, 2), seed=13)
    assert_onnx_matches_jax(jnp.linalg.solve, a, b)
    assert_onnx_matches_jax(lambda x, y: jax.lax.linalg.triangular_solve(x, y, left_side=False, lower=True),
                            a, cplx((3, 2, 4), seed=14))


def test_complex_decompositions_without_a_lowering_are_named():
    from jaxconv.api import to_onnx
    from jaxconv.errors import UnsupportedError

    with pytest.raises(UnsupportedError, match=r"@lapack_cheevd_ffi x1 \(complex Hermitian eigendecomp"):
        to_onnx(jnp.linalg.eigh, "c64[3,3]", check=False)
    with pytest.raises(UnsupportedError, match=r"complex LAPACK getrf with a dynamic matrix size"):
        to_onnx(jnp.linalg.inv, "c64[n,n]", check=False)
