"""A model carries the opset asked for and the IR version that came with it (narrow floats at the oldest
opsets are rows in conformance/cases/op_half_precision.py)."""

import jax.numpy as jnp
import numpy as np
import pytest

from lowering_check import assert_onnx_matches_jax


@pytest.mark.parametrize("opset", [18, 28])
def test_mlp_at_both_ends_of_the_opset_range(opset):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 8), np.float32), rng.standard_normal((8, 3), np.float32)
    model = assert_onnx_matches_jax(lambda x, w: jnp.tanh(x @ w).max(axis=1), x, w, opset=opset)
    assert model.opset_import[0].version == opset


@pytest.mark.parametrize("opset,ir_version", [(18, 8), (21, 10), (23, 11), (24, 12), (25, 13), (26, 13), (28, 14)])
def test_ir_version_is_the_one_that_came_with_the_opset(opset, ir_version):
    model = assert_onnx_matches_jax(lambda x: jnp.tanh(x) * 2, np.linspace(-1, 1, 6, dtype=np.float32), opset=opset)
    assert model.ir_version == ir_version  # onnx's release table (onnx.helper.VERSION_TABLE), which ORT loads
