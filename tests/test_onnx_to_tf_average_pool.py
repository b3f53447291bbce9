"""The tf-ops translator on a mean pool, which the ONNX lowering gives as one AveragePool
(rewrites.sum_pool): TF's average pooling over the zero-padded input, jax.jit's numbers kept."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax import lax

from lowering_check import assert_same_floats

pytest.importorskip("tensorflow")


@pytest.mark.parametrize("padding", ["VALID", "SAME"])
def test_a_mean_pool_translates_with_jit_numbers(padding):
    from jaxconv.program import trace
    from jaxconv.tf.onnx_to_tf import for_program

    def fn(x):
        return lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), padding) / 4.0

    x = np.random.default_rng(0).standard_normal((2, 7, 7, 8)).astype(np.float32)
    x[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    x[1, 2:4, 2:4, 5] = -0.0
    model, function, _ = for_program(trace(fn, [jax.ShapeDtypeStruct(x.shape, x.dtype)]))
    assert "AveragePool" in [n.op_type for n in model.graph.node]
    got = function(x)["output_0"].numpy()
    assert_same_floats(got, jax.jit(fn)(x), 1e-5, 1e-6)
