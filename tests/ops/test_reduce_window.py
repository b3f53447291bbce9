"""reduce_window: graph structure and refusals (the comparisons are rows in conformance/cases/op_reduce_window.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest
from jax import lax

from lowering_check import assert_onnx_matches_jax, onnx_op_types

RNG = np.random.default_rng(2)


def _f(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def max_pool(x, window, strides, padding):
    """flax.linen.max_pool on NHWC."""
    dims = (1,) + window + (1,)
    st = (1,) + strides + (1,)
    return lax.reduce_window(x, -jnp.inf, lax.max, dims, st, padding)


def _min_with_payload(a, b):
    take = a[0] <= b[0]
    return lax.select(take, a[0], b[0]), lax.select(take, a[1], b[1])


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("window,strides", [((2, 2), (2, 2)), ((3, 3), (2, 2)), ((2, 3), (1, 2))])
def test_max_pool_nhwc(padding, window, strides):
    model = assert_onnx_matches_jax(lambda x: max_pool(x, window, strides, padding), _f((2, 7, 8, 3)))
    branches = [a.g for n in model.graph.node for a in n.attribute if a.type == onnx.AttributeProto.GRAPH]
    assert "MaxPool" in onnx_op_types(model) + [n.op_type for g in branches for n in g.node]


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_cumsum(axis):
    model = assert_onnx_matches_jax(lambda x: jnp.cumsum(x, axis=axis), _f((4, 5, 6)))
    assert "CumSum" in onnx_op_types(model)


@pytest.mark.parametrize("opset", [21, 26])
@pytest.mark.parametrize("axis", [0, 1])
def test_cumprod(axis, opset):
    x = _f((5, 7)) * 0.5 + 1.0
    model = assert_onnx_matches_jax(lambda x: jnp.cumprod(x, axis=axis), x, opset=opset)
    # float products follow XLA's order at every opset (ORT's CumProd associates otherwise: test_cumprod_order)
    assert "CumProd" not in onnx_op_types(model)


def test_cummax_along_dynamic_axis_reports_clearly():
    from jaxconv.errors import UnsupportedError

    n, = jax.export.symbolic_shape("n")
    spec = [jax.ShapeDtypeStruct((3, n), np.float32)]
    with pytest.raises(UnsupportedError, match="dynamic_reduce_window: a cumulative max of float32 along"):
        assert_onnx_matches_jax(lambda x: jax.lax.cummax(x, axis=1), _f((3, 4)), specs=spec)


def test_general_body_over_dynamic_window_reports_clearly():
    from jaxconv.errors import UnsupportedError

    b, = jax.export.symbolic_shape("b")
    spec = jax.ShapeDtypeStruct((b, 6), np.float32)
    f = lambda k, p: lax.reduce_window((k, p), (np.float32(np.inf), np.float32(0)), _min_with_payload,
                                       (2, 1), (1, 1), "VALID")
    with pytest.raises(UnsupportedError, match="reduce_window with this body over a dynamic windowed dimension"):
        assert_onnx_matches_jax(f, _f((3, 6)), _f((3, 6)), specs=[spec, spec])


def positions_from_mask(ids):
    """Hugging Face Flax OPT's position ids: a cumulative sum of ``jnp.ones_like(ids)`` along the sequence."""
    mask = jnp.ones_like(ids)
    return jnp.cumsum(mask, axis=1) * mask - 1 + ids


def test_cumsum_of_a_tensor_broadcast_to_the_input_shape_along_a_symbolic_axis():
    """The window is the input's length s; the scanned tensor is an Expand of 1 to (b, s): its length is
    read from the Expand's shape operand, so the scan is recognised (it was refused before)."""
    b, s = jax.export.symbolic_shape("b, s")
    ids = RNG.integers(0, 50, (2, 7)).astype(np.int32)
    model = assert_onnx_matches_jax(positions_from_mask, ids, specs=[jax.ShapeDtypeStruct((b, s), np.int32)],
                                    inputs_for_run=[(RNG.integers(0, 50, (3, 11)).astype(np.int32),)])
    assert "CumSum" in onnx_op_types(model)
