"""Data movement lowerings: graph structure (the comparisons are rows in conformance/cases/op_shape.py)."""

from __future__ import annotations

import jax
import numpy as np

from conformance.cases.op_shape import data
from lowering_check import assert_onnx_matches_jax, onnx_op_types


def test_dynamic_update_slice_kv_cache():
    """A decode step writing one position of a [batch, time, heads, dim] cache."""
    def step(cache, kv, pos):
        return jax.lax.dynamic_update_slice(cache, kv[:, None], (0, pos, 0, 0))

    cache = data((2, 8, 3, 4), "float32")
    kv = data((2, 3, 4), "float32", 1)
    model = assert_onnx_matches_jax(step, cache, kv, np.int32(5),
                                    inputs_for_run=[[cache, kv, np.int32(7)], [cache, kv, np.int32(9)]])
    assert "ScatterND" in onnx_op_types(model)
