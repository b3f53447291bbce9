"""LAPACK gesdd (jnp.linalg.svd): singular vectors against jax.jit's after a canonical sign, the default check
end to end, and what is refused (op rows: conformance/cases/op_svd.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnxruntime as ort
import pytest

import jaxconv
from jaxconv.errors import UnsupportedError

S = jax.ShapeDtypeStruct


def canonical(u: np.ndarray, vt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each pair (column i of u, row i of vt) flipped together so that the column's entry of largest
    magnitude (the first on ties) is positive."""
    u, vt = np.asarray(u), np.asarray(vt)
    lead = np.take_along_axis(u, np.argmax(np.abs(u), axis=-2)[..., None, :], axis=-2)
    sign = np.where(lead < 0, -1, 1)
    return u * sign, vt * np.swapaxes(sign, -1, -2)


def _onnx_outputs(fn, *args):
    from jaxconv.onnx.convert import program_to_onnx
    from jaxconv.program import trace

    model = program_to_onnx(trace(fn, [S(a.shape, a.dtype) for a in args]), None)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {i.name: a for i, a in zip(session.get_inputs(), args)})


def _reduced(a):
    return jnp.linalg.svd(a, full_matrices=False)


def _low_rank(rng, shape, rank):
    *batch, m, n = shape
    return rng.standard_normal((*batch, m, rank)) @ rng.standard_normal((*batch, rank, n))


@pytest.mark.parametrize("shape,dtype", [
    ((1, 1), np.float32), ((2, 2), np.float32), ((5, 5), np.float32), ((8, 8), np.float32),
    ((7, 3), np.float32), ((3, 7), np.float32), ((1, 5), np.float32), ((6, 1), np.float32),
    ((2, 3, 6, 4), np.float32), ((32, 32), np.float32), ((6, 6), np.float64), ((2, 9, 4), np.float64),
    ((3, 8), np.float64),
])
def test_singular_vectors_match_jax_after_the_canonical_sign(shape, dtype):
    a = np.random.default_rng(sum(shape)).standard_normal(shape).astype(dtype)
    with jax.enable_x64(dtype == np.float64):
        u_ref, s_ref, vt_ref = jax.jit(_reduced)(a)
        u, s, vt = _onnx_outputs(_reduced, a)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    scale = np.abs(np.asarray(s_ref)).max()
    np.testing.assert_allclose(s, s_ref, rtol=tol, atol=tol * scale)
    u_ref, vt_ref = canonical(u_ref, vt_ref)
    np.testing.assert_allclose(u, u_ref, atol=50 * tol)
    np.testing.assert_allclose(vt, vt_ref, atol=50 * tol)
    assert np.array_equal(u, canonical(u, vt)[0]), "the lowering's own vectors carry the canonical sign"


def test_full_matrices_of_a_square_matrix_match_jax():
    a = np.random.default_rng(4).standard_normal((5, 5)).astype(np.float32)
    u_ref, s_ref, vt_ref = jax.jit(jnp.linalg.svd)(a)
    u, s, vt = _onnx_outputs(jnp.linalg.svd, a)
    np.testing.assert_allclose(s, s_ref, rtol=2e-5)
    for got, want in zip((u, vt), canonical(u_ref, vt_ref)):
        np.testing.assert_allclose(got, want, atol=1e-4)


@pytest.mark.parametrize("shape,rank", [((6, 5), 2), ((4, 7), 3), ((5, 5), 1)])
def test_rank_deficient_matrices_keep_the_vectors_of_their_nonzero_values(shape, rank):
    """The vectors of the nonzero singular values match; those of the zero ones are any orthonormal
    completion, finite, and pinv (which multiplies them by 0) matches."""
    a = _low_rank(np.random.default_rng(rank), shape, rank).astype(np.float32)
    u_ref, s_ref, vt_ref = jax.jit(_reduced)(a)
    u, s, vt = _onnx_outputs(_reduced, a)
    np.testing.assert_allclose(s, s_ref, atol=2e-5 * s_ref[0])
    u_ref, vt_ref = canonical(u_ref, vt_ref)
    np.testing.assert_allclose(u[:, :rank], u_ref[:, :rank], atol=1e-4)
    np.testing.assert_allclose(vt[:rank], vt_ref[:rank], atol=1e-4)
    assert np.isfinite(u).all() and np.isfinite(vt).all()
    pinv_ref = np.asarray(jax.jit(jnp.linalg.pinv)(a))
    np.testing.assert_allclose(_onnx_outputs(jnp.linalg.pinv, a)[0], pinv_ref,
                               atol=1e-4 * np.abs(pinv_ref).max())
    assert _onnx_outputs(jnp.linalg.matrix_rank, a)[0] == rank == jax.jit(jnp.linalg.matrix_rank)(a)


def test_zero_matrix_gives_identity_vectors_as_jax_does():
    a = np.zeros((4, 3), np.float32)
    for got, want in zip(_onnx_outputs(_reduced, a), jax.jit(_reduced)(a)):
        np.testing.assert_array_equal(got, np.asarray(want))


def test_non_finite_matrices_give_what_jax_gives():
    """A NaN: everything NaN (LAPACK's info, JAX's fill). An infinity: NaN values; a 1x1 matrix keeps
    LAPACK's vectors (u, vt) = (-1, 1), up to the pair's sign."""
    a = np.array([[[np.nan]], [[np.inf]], [[-np.inf]], [[-3.0]]], np.float32)
    b = np.random.default_rng(0).standard_normal((3, 4, 4)).astype(np.float32)
    b[0, 1, 2], b[1, 3, 3], b[2, 0, 0], b[2, 1, 1] = np.nan, np.nan, np.nan, np.inf
    for x in (a, b):
        u_ref, s_ref, vt_ref = jax.jit(_reduced)(x)
        u, s, vt = _onnx_outputs(_reduced, x)
        np.testing.assert_array_equal(s, s_ref)
        for got, want in zip((u, vt), canonical(u_ref, vt_ref)):
            np.testing.assert_array_equal(got, want)
    values = lambda x: jnp.linalg.svd(x, compute_uv=False)  # noqa: E731
    c = np.random.default_rng(1).standard_normal((5, 5)).astype(np.float32)
    c[2, 3] = -np.inf  # with vectors, LAPACK never returns from this one
    np.testing.assert_array_equal(_onnx_outputs(values, c)[0], jax.jit(values)(c))


@pytest.mark.parametrize("shape,where", [((1, 1), 0), ((1, 4), 0), ((1, 4), 2), ((5, 1), 0), ((5, 1), 3),
                                         ((3, 1), [0, 2])])
@pytest.mark.parametrize("infinity", [np.inf, -np.inf])
def test_a_vector_holding_an_infinity_gives_lapacks_vectors(shape, where, infinity):
    """NaN values; the vectors of LAPACK's first reflector: e_0 when only the first entry is infinite,
    else NaN for the long factor."""
    a = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    a.reshape(-1)[where] = infinity
    u_ref, s_ref, vt_ref = jax.jit(_reduced)(a)
    u, s, vt = _onnx_outputs(_reduced, a)
    np.testing.assert_array_equal(s, s_ref)
    for got, want in zip((u, vt), canonical(u_ref, vt_ref)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("diagonal", [[2, 3, 2, 3], [1, 1, 1], [-2, 2, 1, -1], [4, 1, 4, 1, 4],
                                      [1, 2, 1, 2, 1, 2], [2, 2, 3, 3, 3], [0, 5, 0, 5, 0], [3, 1] * 16])
def test_equal_singular_values_come_in_lapacks_order(diagonal):
    """gesdd sorts three times (dbdsqr: the last smallest to the end; dlasdq: the first smallest to the
    front; dbdsdc: the first largest to the front): diag(2, 3, 2, 3) gives the columns 3, 1, 0, 2 (not a
    stable sort's 1, 3, 0, 2); from 26 columns on only dbdsdc's sort."""
    a = np.diag(np.array(diagonal, np.float32))
    u_ref, s_ref, vt_ref = jax.jit(_reduced)(a)
    u, s, vt = _onnx_outputs(_reduced, a)
    np.testing.assert_array_equal(s, s_ref)
    for got, want in zip((u, vt), canonical(u_ref, vt_ref)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("fn,specs", [
    (_reduced, ["f32[4,3]"]),
    (_reduced, ["f32[3,5]"]),
    (_reduced, ["f32[1,1]"]),
    (_reduced, ["f32[1,4]"]),
    (_reduced, ["f32[5,1]"]),
    (_reduced, ["f32[2,2]"]),
    (_reduced, ["f32[2,3,3]"]),
    (_reduced, ["f64[5,5]"]),
    (_reduced, ["f32[8,8]"]),
    (jnp.linalg.svd, ["f32[4,4]"]),
    (lambda a: jnp.linalg.svd(a, compute_uv=False), ["f32[3,6,6]"]),
    (jnp.linalg.pinv, ["f32[4,3]"]),
    (jnp.linalg.pinv, ["f32[3,6]"]),
    (lambda a: jnp.linalg.norm(a, ord=2), ["f32[5,5]"]),
    (lambda a: jnp.linalg.norm(a, ord="nuc"), ["f32[3,4]"]),
    (jnp.linalg.cond, ["f32[4,4]"]),
    (jnp.linalg.matrix_rank, ["f32[6,4]"]),
    (lambda a, b: jnp.linalg.lstsq(a, b)[0], ["f32[5,3]", "f32[5,2]"]),
])
def test_default_check_passes(fn, specs):
    """Random, edge-value (NaN, inf, FLT_MAX, subnormals) and example sets all agree with jax.jit, the
    vectors under the canonical sign (``ok (vector signs)``)."""
    model = jaxconv.to_onnx(fn, *specs)
    assert any(n.op_type == "Loop" for n in model.graph.node)


def test_full_matrices_of_a_rectangular_matrix_are_refused_naming_the_fix():
    from jaxconv.onnx.convert import program_to_onnx
    from jaxconv.program import trace

    with pytest.raises(UnsupportedError) as info:
        program_to_onnx(trace(jnp.linalg.svd, [S((4, 3), np.float32)]), None)
    message = str(info.value)
    assert "lapack_sgesdd_ffi" in message and "4x3" in message
    assert "jnp.linalg.svd(a, full_matrices=False)" in message
    assert "\n" not in message


def test_complex_svd_is_refused_by_name():
    from jaxconv.onnx.convert import program_to_onnx
    from jaxconv.program import trace

    with pytest.raises(UnsupportedError) as info:
        program_to_onnx(trace(_reduced, [S((3, 3), np.complex64)]), None)
    assert "lapack_cgesdd_ffi" in str(info.value) and "jnp.linalg.svd" in str(info.value)


def test_check_names_the_mode():
    from jaxconv.onnx.ops.lapack_svd import check_svd_call
    from jaxconv.stablehlo import ir as hir

    def call(shape, mode):
        operand = hir.Value(hir.TensorType("float32", shape))
        attrs = {"call_target_name": "lapack_sgesdd_ffi", "mhlo.backend_config": {"mode": ord(mode)}}
        return hir.Op("stablehlo.custom_call", [operand], [], attrs, [])

    assert check_svd_call(call((2, 5, 3), "S")) is None
    assert check_svd_call(call((3, 3), "A")) is None
    assert "full_matrices=False" in check_svd_call(call((5, 3), "A"))
    assert "mode='X'" in check_svd_call(call((3, 3), "X"))
