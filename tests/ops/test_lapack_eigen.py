"""LAPACK syevd (jnp.linalg.eigh): eigenvectors against jax.jit's after a canonical sign, the default
check end to end, and what is refused (op rows: conformance/cases/op_eigen.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import onnxruntime as ort
import pytest

import jaxconv
from jaxconv.errors import UnsupportedError

S = jax.ShapeDtypeStruct


def canonical(vectors: np.ndarray) -> np.ndarray:
    """Each column flipped so that its entry of largest magnitude (the first on ties) is positive."""
    vectors = np.asarray(vectors)
    lead = np.take_along_axis(vectors, np.argmax(np.abs(vectors), axis=-2)[..., None, :], axis=-2)
    return vectors * np.where(lead < 0, -1, 1)


def _onnx_outputs(fn, *args):
    from jaxconv.onnx.convert import program_to_onnx
    from jaxconv.program import trace

    model = program_to_onnx(trace(fn, [S(a.shape, a.dtype) for a in args]), None)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {i.name: a for i, a in zip(session.get_inputs(), args)})


def _symmetric(rng, shape, dtype):
    a = rng.standard_normal(shape)
    return ((a + np.swapaxes(a, -1, -2)) / 2).astype(dtype)


@pytest.mark.parametrize("shape,dtype", [((1, 1), np.float32), ((2, 2), np.float32), ((5, 5), np.float32),
                                         ((8, 8), np.float32), ((3, 4, 4), np.float32), ((32, 32), np.float32),
                                         ((6, 6), np.float64), ((2, 9, 9), np.float64)])
def test_eigenvectors_match_jax_after_the_canonical_sign(shape, dtype):
    a = _symmetric(np.random.default_rng(sum(shape)), shape, dtype)
    with jax.enable_x64(dtype == np.float64):
        w_ref, v_ref = jax.jit(jnp.linalg.eigh)(a)
        w, v = _onnx_outputs(jnp.linalg.eigh, a)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    scale = np.abs(np.asarray(w_ref)).max()
    np.testing.assert_allclose(w, w_ref, rtol=tol, atol=tol * scale)
    np.testing.assert_allclose(v, canonical(v_ref), atol=50 * tol)
    assert np.array_equal(v, canonical(v)), "the lowering's own vectors carry the canonical sign"


def test_upper_triangle_is_the_only_one_read():
    rng = np.random.default_rng(3)
    a = np.triu(_symmetric(rng, (6, 6), np.float32)) + np.tril(np.full((6, 6), np.nan, np.float32), -1)
    fn = lambda x: jsl.eigh(x, lower=False)  # noqa: E731
    w_ref, v_ref = jax.jit(fn)(a)
    w, v = _onnx_outputs(fn, a)
    np.testing.assert_allclose(w, w_ref, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(v, canonical(v_ref), atol=1e-4)


@pytest.mark.parametrize("n", [2, 4, 26])
def test_nan_matrices_give_what_jax_gives(n):
    """All NaN up to 25x25 (LAPACK's info); from 26x26 on, LAPACK's blocked reduction keeps a[0, 0]."""
    a = _symmetric(np.random.default_rng(n), (n, n), np.float32)
    a[1, 0] = a[0, 1] = np.nan
    w_ref, v_ref = jax.jit(jnp.linalg.eigh)(a)
    w, v = _onnx_outputs(jnp.linalg.eigh, a)
    np.testing.assert_array_equal(w, w_ref)
    np.testing.assert_array_equal(v, canonical(v_ref))


@pytest.mark.parametrize("fn,spec", [
    (jnp.linalg.eigvalsh, "f32[4,4]"),
    (jnp.linalg.eigvalsh, "f32[2,3,3]"),
    (jnp.linalg.eigvalsh, "f64[5,5]"),
    (jnp.linalg.eigvalsh, "f32[32,32]"),
    (lambda a: (lambda w, v: (v * w[..., None, :]) @ jnp.swapaxes(v, -1, -2))(*jnp.linalg.eigh(a)), "f32[2,6,6]"),
    (jnp.linalg.eigh, "f32[5,5]"),
])
def test_default_check_passes(fn, spec):
    """Random, edge-value (NaN, inf, FLT_MAX, subnormals) and example sets all agree with jax.jit."""
    model = jaxconv.to_onnx(fn, spec)
    assert any(n.op_type == "Loop" for n in model.graph.node)


def test_complex_eigh_is_refused_by_name():
    from jaxconv.onnx.convert import program_to_onnx
    from jaxconv.program import trace

    with pytest.raises(UnsupportedError) as info:
        program_to_onnx(trace(jnp.linalg.eigh, [S((3, 3), np.complex64)]), None)
    assert "lapack_cheevd_ffi" in str(info.value) and "jnp.linalg.eigh" in str(info.value)


def test_round_robin_meets_every_pair_once_a_sweep():
    from jaxconv.onnx.ops.lapack_eigen import round_robin_source

    for size in [2, 4, 6, 10]:
        positions, met = np.arange(size), set()
        for _ in range(size - 1):
            met.update(frozenset((int(positions[i]), int(positions[size // 2 + i]))) for i in range(size // 2))
            positions = positions[round_robin_source(size)]
        assert len(met) == size * (size - 1) // 2
        assert np.array_equal(positions, np.arange(size))
