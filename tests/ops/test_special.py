"""The custom calls that carry no computation (shape_assertion, sharding) leave no node (optimization_barrier
is a row in conformance/cases/op_elementwise.py)."""

import jax
import jax.numpy as jnp
import numpy as np
from jax import export

from lowering_check import assert_onnx_matches_jax, onnx_op_types


def test_shape_assertions_are_dropped():
    (b,) = export.symbolic_shape("b")
    spec = jax.ShapeDtypeStruct((b, 3), jnp.float32)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    model = assert_onnx_matches_jax(lambda x: x * 3, x, specs=[spec], inputs_for_run=[[np.ones((7, 3), np.float32)]])
    assert "shape_assertion" not in str(model)
    assert onnx_op_types(model) == ["Mul"]
