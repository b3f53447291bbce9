"""Complex scatter-multiply: spectral estimates that scale part of a complex spectrum, end to end."""

from __future__ import annotations

import jax.numpy as jnp
import jax.scipy.signal as signal
import numpy as np
import pytest

import jaxconv
from jaxconv.errors import UnsupportedError


@pytest.mark.parametrize("name, fn, specs", [
    ("welch", lambda x: signal.welch(x, nperseg=32)[1], ("f32[256]",)),
    ("csd", lambda x, y: signal.csd(x, y, nperseg=32)[1], ("f32[256]", "f32[256]")),
    ("complex_at_multiply", lambda x: jnp.abs((x + 1j * x[::-1]).at[2:5].multiply(x[0] + 2j)), ("f32[8]",)),
])
def test_default_check_passes(name, fn, specs):
    """The default check (random and edge-value input sets) compares every output with jax.jit."""
    model = jaxconv.to_onnx(fn, *specs)  # raises on a mismatch
    assert any(n.op_type == "ScatterND" for n in model.graph.node)


def test_welch_numbers_match_jax():
    import jax
    import onnxruntime as ort

    fn = lambda x: signal.welch(x, nperseg=64)[1]  # noqa: E731
    x = np.random.default_rng(3).standard_normal(512).astype(np.float32)
    model = jaxconv.to_onnx(fn, "f32[512]", check=False)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x})[0]
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(x)), rtol=1e-5, atol=1e-12)


def test_multiply_at_an_index_array_is_refused_with_the_reason():
    fn = lambda x: jnp.real((x + 0j).at[jnp.array([1, 3])].multiply(2 + 1j))  # noqa: E731
    with pytest.raises(UnsupportedError, match="complex scatter-multiply at indices that may repeat"):
        jaxconv.to_onnx(fn, "f32[8]")
