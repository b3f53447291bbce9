"""Householder QR (LAPACK geqrf + orgqr): the default check end to end, a program using Q and R, and what
stays refused (the element comparisons are rows in conformance/cases/op_qr.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest

import jaxconv
from jaxconv.errors import TraceError, UnsupportedError

S = jax.ShapeDtypeStruct


def _custom_calls(model) -> list[str]:
    return [n.op_type for n in model.graph.node if "custom" in n.op_type.lower()]


@pytest.mark.parametrize("fn,spec", [
    (jnp.linalg.qr, "f32[5,3]"),
    (lambda a: jnp.linalg.qr(a, mode="complete"), "f32[3,5]"),
    (lambda a: jnp.linalg.qr(a, mode="r"), "f64[2,4,4]"),
    (lambda a: jsl.qr(a, mode="economic"), "f32[2,6,4]"),
])
def test_default_check_passes_with_edge_values(fn, spec):
    """to_onnx runs its default check (random and NaN / inf / huge / subnormal input sets) against jax.jit."""
    reports: list = []
    model = jaxconv.to_onnx(fn, spec, report_to=reports)
    assert reports and not _custom_calls(model)


def _least_squares(a, b):
    q, r = jnp.linalg.qr(a)
    return jsl.solve_triangular(r, q.T @ b, lower=False)


def test_least_squares_through_q_and_r_matches_jax():
    model = jaxconv.to_onnx(_least_squares, "f32[8,3]", "f32[8,2]")  # the default check compares with jax.jit
    import onnxruntime as ort

    rng = np.random.default_rng(3)
    a = rng.standard_normal((8, 3)).astype(np.float32)
    b = rng.standard_normal((8, 2)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString())
    names = [i.name for i in session.get_inputs()]
    (got,) = session.run(None, dict(zip(names, [a, b])))
    np.testing.assert_allclose(got, np.asarray(jax.jit(_least_squares)(a, b)), rtol=1e-4, atol=1e-5)


def test_householder_product_alone_passes_the_check():
    jaxconv.to_onnx(jax.lax.linalg.householder_product, "f32[2,5,4]", "f32[2,3]")


def test_pivoted_qr_is_refused_when_traced():
    """jax.export itself refuses geqp3 (no compatibility guarantee for its custom call)."""
    with pytest.raises(TraceError) as info:
        jaxconv.to_onnx(lambda a: jsl.qr(a, pivoting=True), "f32[3,3]")
    message = str(info.value)
    assert "Cannot serialize code with custom calls whose targets have no compatibility guarantees" in message


def test_pivoted_qr_refusal_names_the_routine_and_the_jax_function():
    with pytest.raises(TraceError) as info:
        jaxconv.to_onnx(lambda a: jsl.qr(a, pivoting=True), "f32[3,3]")
    message = str(info.value)
    assert "@lapack_sgeqp3_ffi: pivoted QR (LAPACK geqp3, from jax.scipy.linalg.qr(pivoting=True))" in message
    assert "jax.export refuses it for every target" in message
    assert "\n" not in message


def test_pivoted_qr_target_names_the_jax_function():
    from jaxconv.onnx.ops.lapack import unsupported_reason

    reason = unsupported_reason("lapack_sgeqp3_ffi")
    assert reason == "pivoted QR (LAPACK geqp3, from jax.scipy.linalg.qr(pivoting=True)) has no ONNX lowering"


@pytest.mark.parametrize("target", ["lapack_cgeqrf_ffi", "lapack_zungqr_ffi"])
def test_complex_qr_stays_refused(target):
    from jaxconv.onnx.ops.lapack import unsupported_reason

    reason = unsupported_reason(target)
    assert reason.startswith("complex ") and "jnp.linalg.qr" in reason
    assert reason.endswith("complex LAPACK routines are not lowered beyond getrf, potrf, trsm")


def _to_onnx_error(fn, *specs) -> str:
    from jaxconv.onnx.convert import program_to_onnx
    from jaxconv.program import trace

    with pytest.raises(UnsupportedError) as info:
        program_to_onnx(trace(fn, list(specs)), None)
    return str(info.value)


def test_complex_qr_is_refused_with_its_message():
    message = _to_onnx_error(jnp.linalg.qr, S((3, 3), np.complex64))
    assert "lapack_cgeqrf_ffi" in message and "complex Householder QR" in message


def test_matrix_too_large_is_refused_with_reason():
    from jaxconv.onnx.ops.lapack import MAX_LAPACK_SIZE

    rows = MAX_LAPACK_SIZE + 1
    message = _to_onnx_error(jnp.linalg.qr, S((rows, 2), np.float32))
    assert "lapack_sgeqrf_ffi" in message and f"{rows}x2" in message and "jnp.linalg.qr" in message


def test_dynamic_matrix_size_is_refused_with_reason():
    n = jax.export.symbolic_shape("n")[0]
    message = _to_onnx_error(jnp.linalg.qr, S((n, n), np.float32))
    assert "lapack_sgeqrf_ffi" in message and "dynamic matrix size" in message
