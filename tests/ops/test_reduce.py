"""reduce: what rows cannot say (the comparisons are rows in conformance/cases/op_reduce.py).

Refusals name their op; long float32 sums also check XLA's own accuracy.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from lowering_check import assert_onnx_matches_jax

RNG = np.random.default_rng(1)


def _min_with_payload(a, b):
    take = a[0] <= b[0]
    return lax.select(take, a[0], b[0]), lax.select(take, a[1], b[1])


def test_integer_bitwise_over_dynamic_dim_reports_clearly():
    from jaxconv.errors import UnsupportedError

    b, = jax.export.symbolic_shape("b")
    spec = [jax.ShapeDtypeStruct((b, 6), np.int32)]
    x = RNG.integers(-50, 50, size=(3, 6)).astype(np.int32)
    with pytest.raises(UnsupportedError, match="int32 xor reduction over a dynamic dimension"):
        assert_onnx_matches_jax(lambda x: lax.reduce(x, np.int32(0), lax.bitwise_xor, (0,)), x, specs=spec)


def test_general_body_over_dynamic_dim_reports_clearly():
    from jaxconv.errors import UnsupportedError

    b, = jax.export.symbolic_shape("b")
    spec = jax.ShapeDtypeStruct((b, 6), np.float32)
    f = lambda k, p: lax.reduce((k, p), (np.float32(np.inf), np.float32(0)), _min_with_payload, (0,))  # noqa: E731
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    with pytest.raises(UnsupportedError, match="variadic reduce with 2 results with a general body over a dynamic"):
        assert_onnx_matches_jax(f, x, x, specs=[spec, spec])


@pytest.mark.parametrize("shape,axis", [((100000,), 0), ((3, 20000), 1), ((20000, 3), 0), ((4, 64, 64), (1, 2)),
                                        ((64, 64, 4), (0, 1)), ((3, 1000, 5), 1)], ids=str)
def test_long_float32_sums_match_xla_accuracy(shape, axis):
    """ONNX Runtime's ReduceSum drifts on long sums (1e5 x 0.1 = 9998.74); XLA's gives 10000.0."""
    x = np.full(shape, 0.1, np.float32)
    expected = np.asarray(jax.jit(lambda x: jnp.sum(x, axis=axis))(x))
    np.testing.assert_allclose(expected, x.astype(np.float64).sum(axis), rtol=1e-6)
    assert_onnx_matches_jax(lambda x: (jnp.sum(x, axis=axis), jnp.mean(x, axis=axis, keepdims=True)), x,
                            rtol=1e-6, atol=0.0)
