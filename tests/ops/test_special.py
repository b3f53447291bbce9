"""optimization_barrier and the custom calls that carry no computation (shape_assertion, sharding)."""

import jax
import jax.numpy as jnp
import numpy as np
from jax import export

from lowering_check import assert_onnx_matches_jax, onnx_op_types


def test_optimization_barrier_passes_values_through():
    def f(x, y):
        a, b = jax.lax.optimization_barrier((x * 2, y + 1))
        return a - b

    assert_onnx_matches_jax(f, np.arange(4, dtype=np.float32), np.ones(4, np.float32))


def test_shape_assertions_are_dropped():
    (b,) = export.symbolic_shape("b")
    spec = jax.ShapeDtypeStruct((b, 3), jnp.float32)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    model = assert_onnx_matches_jax(lambda x: x * 3, x, specs=[spec], inputs_for_run=[[np.ones((7, 3), np.float32)]])
    assert "shape_assertion" not in str(model)
    assert onnx_op_types(model) == ["Mul"]
