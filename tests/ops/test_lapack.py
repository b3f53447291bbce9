"""LAPACK custom calls: what is refused, and why (the comparisons are rows in conformance/cases/op_lapack.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.errors import UnsupportedError

S = jax.ShapeDtypeStruct


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


@pytest.mark.parametrize("fn,target,shape", [
    (jnp.linalg.eig, "lapack_sgeev_ffi", (3, 3)),
    (jnp.linalg.svd, "lapack_sgesdd_ffi", (3, 4)),  # full_matrices=True of a rectangular matrix
])
def test_unsupported_lapack_routines_are_named(fn, target, shape):
    assert target in _to_onnx_error(fn, S(shape, np.float32))


@pytest.mark.parametrize("target,named", [
    ("lapack_sgeqp3_ffi", "jax.scipy.linalg.qr(pivoting=True)"),
    ("lapack_cgeqrf_ffi", "complex LAPACK routines are not lowered"),
    ("lapack_cheevd_ffi", "jnp.linalg.eigh"),
    ("lapack_zgesdd_ffi", "jnp.linalg.svd"),
    ("lapack_sgeev_ffi", "jnp.linalg.eig"),
    ("lapack_sgees_ffi", "jax.scipy.linalg.schur"),
    ("lapack_cpotrf_ffi", "complex LAPACK routines are not lowered"),
])
def test_unsupported_reason_names_the_jax_function(target, named):
    from jaxconv.onnx.ops.lapack import unsupported_reason

    assert named in unsupported_reason(target)


@pytest.mark.parametrize("target", ["lapack_spotrf_ffi", "lapack_dtrsm_ffi", "lapack_sgetrf_ffi", "ApproxTopK",
                                    "lapack_sgesdd_ffi", "lapack_dgesdd_ffi"])
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
    assert "pivoting=True" in check_lapack_call(call("lapack_sgeqp3_ffi", ("float32", (3, 3))))


@pytest.mark.parametrize("fn", [jnp.linalg.inv, lambda a: jax.lax.linalg.lu(a)[0],
                                lambda a: jnp.linalg.solve(a, jnp.ones(2, a.dtype))])
def test_a_pivot_beyond_one_over_flt_min_scales_by_a_flushed_reciprocal(fn):
    """Found by the fuzzer: LAPACK runs under XLA's flush to zero, so 1 / FLT_MAX (subnormal) is 0 and the
    update of [[FLT_MAX, inf], [1, 1]] meets 0 x inf: jax.jit's inv is all NaN (the artifact had 0 and -0)."""
    from lowering_check import assert_onnx_matches_jax

    a = np.array([[np.finfo(np.float32).max, np.inf], [1.0, 1.0]], np.float32)
    lu = np.asarray(jax.jit(lambda a: jax.lax.linalg.lu(a)[0])(a))
    assert lu[1, 0] == 0 and np.isnan(lu[1, 1])  # the premise: the multiplier 1 / FLT_MAX was flushed
    assert_onnx_matches_jax(fn, a)
