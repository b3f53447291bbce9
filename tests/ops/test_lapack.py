"""LAPACK custom calls of CPU exports (potrf, trsm, getrf): every jnp/scipy entry point against jax.jit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from jax import lax

from jaxconv.errors import UnsupportedError
from lowering_check import assert_onnx_matches_jax

RNG = np.random.default_rng(0)
S = jax.ShapeDtypeStruct


def _specs(*arrays):
    """Explicit specs (a float64 argument needs them: they switch on x64 for the export)."""
    return [S(a.shape, a.dtype) for a in arrays]


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


# ---- cholesky (potrf) ---------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 5, 16])
def test_cholesky_sizes(n):
    assert_onnx_matches_jax(jnp.linalg.cholesky, _spd((n, n)))


def test_cholesky_batched():
    assert_onnx_matches_jax(jnp.linalg.cholesky, _spd((2, 3, 4, 4)))


def test_cholesky_float64_batched():
    a = _spd((3, 6, 6), np.float64)
    assert_onnx_matches_jax(jnp.linalg.cholesky, a, specs=_specs(a))


def test_cholesky_upper():
    assert_onnx_matches_jax(lambda a: jsl.cholesky(a, lower=False), _spd((5, 5)))


def test_cholesky_not_positive_definite_is_nan_like_jax():
    """LAPACK's info != 0 makes JAX return NaN for that matrix only; the batch's other matrix is unaffected."""
    good, bad = _spd((4, 4)), _spd((4, 4))
    bad[2, 2] = -50.0
    semidefinite = np.ones((4, 4), np.float32)  # rank one: a zero pivot at step 2
    assert_onnx_matches_jax(jnp.linalg.cholesky, np.stack([good, bad, semidefinite, -good]))


def test_cho_factor_and_cho_solve():
    a, b = _spd((5, 5)), _f((5, 3))
    assert_onnx_matches_jax(lambda a, b: jsl.cho_solve(jsl.cho_factor(a), b), a, b)


# ---- solve_triangular (trsm) ----------------------------------------------------------------------------

@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("trans", [0, 1, 2])
@pytest.mark.parametrize("unit_diagonal", [False, True])
def test_solve_triangular_options(lower, trans, unit_diagonal):
    a, b = _triangular(5, lower), _f((5, 3))
    assert_onnx_matches_jax(
        lambda a, b: jsl.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit_diagonal), a, b)


@pytest.mark.parametrize("lower,transpose_a", [(True, False), (False, True)])
def test_triangular_solve_right_side(lower, transpose_a):
    """x op(a) = b: LAPACK side = 'R'."""
    a, b = _triangular(4, lower, batch=(2,)), _f((2, 3, 4))
    fn = lambda a, b: lax.linalg.triangular_solve(a, b, left_side=False, lower=lower, transpose_a=transpose_a)  # noqa: E731
    assert_onnx_matches_jax(fn, a, b)


@pytest.mark.parametrize("n", [1, 2, 16])
def test_solve_triangular_sizes_vector_rhs(n):
    assert_onnx_matches_jax(lambda a, b: jsl.solve_triangular(a, b, lower=True), _triangular(n, True), _f((n,)))


def test_solve_triangular_float64_batched():
    a, b = _triangular(6, False, np.float64, batch=(3,)), _f((3, 6, 2), np.float64)
    assert_onnx_matches_jax(lambda a, b: jsl.solve_triangular(a, b, lower=False, trans=1), a, b,
                            specs=_specs(a, b))


# ---- solve / inv / det / slogdet (getrf + trsm) ------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 5, 16])
def test_solve_sizes(n):
    assert_onnx_matches_jax(jnp.linalg.solve, _general((n, n)), _f((n, 2)))


def test_solve_batched_float64_and_vector_rhs():
    a, b = _general((4, 5, 5), np.float64), _f((4, 5, 3), np.float64)
    assert_onnx_matches_jax(jnp.linalg.solve, a, b, specs=_specs(a, b))
    assert_onnx_matches_jax(jnp.linalg.solve, a[0], b[0, :, 0], specs=_specs(a[0], b[0, :, 0]))


@pytest.mark.parametrize("n", [1, 2, 5, 16])
def test_inv_sizes(n):
    assert_onnx_matches_jax(jnp.linalg.inv, _general((n, n)))


def test_inv_batched():
    assert_onnx_matches_jax(jnp.linalg.inv, _general((2, 3, 4, 4)))


def test_inv_float64_batched():
    a = _general((3, 7, 7), np.float64)
    assert_onnx_matches_jax(jnp.linalg.inv, a, specs=_specs(a))


@pytest.mark.parametrize("n", [4, 5, 16])  # n <= 3 determinants are closed forms, no LAPACK call
def test_det_and_slogdet_sizes(n):
    assert_onnx_matches_jax(lambda a: (jnp.linalg.det(a), *jnp.linalg.slogdet(a)), _general((n, n)))


def test_det_and_slogdet_float64_batched():
    a = _general((2, 3, 6, 6), np.float64)
    assert_onnx_matches_jax(lambda a: (jnp.linalg.det(a), *jnp.linalg.slogdet(a)), a, specs=_specs(a))


def test_singular_matrices_det_zero_slogdet_minus_inf():
    """A zero pivot (LAPACK info > 0) leaves its column unscaled: det is exactly 0, slogdet -inf, like jax.jit."""
    rank_two = np.array([[1, 2, 3, 4], [2, 4, 6, 8], [1, 0, 1, 0], [3, 1, 2, 5]], np.float32)
    rank_two[3] = rank_two[0] + rank_two[2]
    batch = np.stack([rank_two, np.zeros((4, 4), np.float32), _general((4, 4))])
    assert_onnx_matches_jax(lambda a: (jnp.linalg.det(a), *jnp.linalg.slogdet(a)), batch)


def test_dynamic_batch():
    b = jax.export.symbolic_shape("b")[0]
    a = _general((3, 4, 4))
    fn = lambda a: (jnp.linalg.inv(a), jnp.linalg.cholesky(a @ jnp.swapaxes(a, -1, -2)))  # noqa: E731
    assert_onnx_matches_jax(fn, a, specs=[S((b, 4, 4), np.float32)], inputs_for_run=[[a[:1]], [_general((5, 4, 4))]])


# ---- lu / lu_factor (getrf) ---------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 5, 16])
def test_lu_factor_sizes(n):
    assert_onnx_matches_jax(jsl.lu_factor, _general((n, n)))


@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (1, 4), (4, 1)])
def test_lu_rectangular(shape):
    assert_onnx_matches_jax(jsl.lu, _f(shape))


def test_lu_batched_float64():
    """lax.linalg.lu: packed LU, 0-based pivots and the permutation, batched."""
    a = _general((2, 3, 6, 6), np.float64)
    assert_onnx_matches_jax(lax.linalg.lu, a, specs=_specs(a))


def test_lu_pivot_ties_pick_first_row():
    """Equal |a[i, j]| candidates: LAPACK's i?amax takes the first; so must the unrolled argmax."""
    a = np.array([[1, 2, 0], [-1, 3, 1], [1, -1, 2]], np.float32)
    ties = np.array([[2, 1, 1], [-2, 1, 3], [2, 5, 1]], np.float32)
    assert_onnx_matches_jax(jsl.lu_factor, np.stack([a, ties]))
    assert_onnx_matches_jax(jsl.lu, ties)


def test_lu_solve():
    a, b = _general((6, 6)), _f((6, 2))
    assert_onnx_matches_jax(lambda a, b: jsl.lu_solve(jsl.lu_factor(a), b, trans=1), a, b)


# ---- what is refused, and why -----------------------------------------------------------------------------

def _to_onnx_error(fn, *specs) -> str:
    from jaxconv.onnx.convert import program_to_onnx
    from jaxconv.program import trace

    with pytest.raises(UnsupportedError) as info:
        program_to_onnx(trace(fn, list(specs)), None)
    return str(info.value)


def test_matrix_too_large_is_refused_with_reason():
    from jaxconv.onnx.ops.lapack import MAX_LAPACK_SIZE

    n = MAX_LAPACK_SIZE + 1
    message = _to_onnx_error(jnp.linalg.inv, S((n, n), np.float32))
    assert "lapack_sgetrf_ffi" in message
    assert f"{n}x{n}" in message and "jnp.linalg.inv" in message


def test_dynamic_matrix_size_is_refused_with_reason():
    n = jax.export.symbolic_shape("n")[0]
    message = _to_onnx_error(jnp.linalg.cholesky, S((n, n), np.float32))
    assert "lapack_spotrf_ffi" in message and "dynamic matrix size" in message


@pytest.mark.parametrize("fn,target", [
    (jnp.linalg.qr, "lapack_sgeqrf_ffi"),
    (jnp.linalg.eigh, "lapack_ssyevd_ffi"),
    (jnp.linalg.svd, "lapack_sgesdd_ffi"),
])
def test_unsupported_lapack_routines_are_named(fn, target):
    assert target in _to_onnx_error(fn, S((3, 3), np.float32))


@pytest.mark.parametrize("target,named", [
    ("lapack_sgeqrf_ffi", "jnp.linalg.qr"),
    ("lapack_dorgqr_ffi", "jnp.linalg.qr"),
    ("lapack_ssyevd_ffi", "jnp.linalg.eigh"),
    ("lapack_dgesdd_ffi", "jnp.linalg.svd"),
    ("lapack_sgeev_ffi", "jnp.linalg.eig"),
    ("lapack_sgees_ffi", "jax.scipy.linalg.schur"),
    ("lapack_cpotrf_ffi", "complex LAPACK routines are not lowered"),
])
def test_unsupported_reason_names_the_jax_function(target, named):
    from jaxconv.onnx.ops.lapack import unsupported_reason

    assert named in unsupported_reason(target)


@pytest.mark.parametrize("target", ["lapack_spotrf_ffi", "lapack_dtrsm_ffi", "lapack_sgetrf_ffi", "ApproxTopK"])
def test_lowered_targets_have_no_unsupported_reason(target):
    from jaxconv.onnx.ops.lapack import unsupported_reason

    assert unsupported_reason(target) is None


def test_check_reports_size_option_and_dtype_problems():
    """check_lapack_call is what the custom-call preflight consults for LAPACK targets."""
    from jaxconv.onnx.ops.lapack import MAX_LAPACK_SIZE, check_lapack_call
    from jaxconv.stablehlo import ir as hir

    def call(target, *types, **config):
        operands = [hir.Value(hir.TensorType(d, s)) for d, s in types]
        return hir.Op("stablehlo.custom_call", operands, [], {"call_target_name": target,
                                                              "mhlo.backend_config": config}, [])

    n = MAX_LAPACK_SIZE
    assert check_lapack_call(call("lapack_spotrf_ffi", ("float32", (2, n, n)))) is None
    assert f"{n + 1}x{n + 1}" in check_lapack_call(call("lapack_spotrf_ffi", ("float32", (n + 1, n + 1))))
    assert "uplo" in check_lapack_call(call("lapack_spotrf_ffi", ("float32", (3, 3)), uplo=ord("X")))
    assert "expects float64" in check_lapack_call(call("lapack_dgetrf_ffi", ("float32", (3, 3))))
    assert "takes 2 matrix operand(s), got 1" in check_lapack_call(call("lapack_strsm_ffi", ("float32", (3, 3))))
    assert "jnp.linalg.qr" in check_lapack_call(call("lapack_sgeqrf_ffi", ("float32", (3, 3))))


@pytest.mark.parametrize("fn,shapes", [
    (jnp.linalg.cholesky, [(2, 0, 0)]),
    (jsl.lu_factor, [(0, 0)]),
    (jsl.lu, [(0, 3)]),
    (lambda a, b: jsl.solve_triangular(a, b), [(0, 0), (0, 2)]),
])
def test_empty_matrices(fn, shapes):
    assert_onnx_matches_jax(fn, *[np.zeros(s, np.float32) for s in shapes])


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_with_nan_and_inf_matches_lapack(upper):
    """A NaN pivot propagates (LAPACK only stops at a pivot <= 0, and JAX then returns all NaN)."""
    from elementwise_support import check

    nan, inf = np.nan, np.inf
    mats = np.array([[[4, 2, 0], [2, nan, 0], [0, 0, 1]], [[4, 2, 0], [2, -3, 0], [0, 0, 1]],
                     [[nan, 2, 0], [2, 5, 0], [0, 0, 1]], [[4, 2, 0], [inf, 5, 0], [0, 0, 1]],
                     [[4, nan, 0], [2, 5, 0], [0, 0, 1]], [[4, 2, 1], [2, inf, 1], [1, 1, 9]],
                     [[4, 2, 1], [2, 5, 1], [1, 1, 0]]], np.float32)
    check(lambda a: jnp.linalg.cholesky(a, upper=upper), mats, tol=(1e-6, 1e-6))
