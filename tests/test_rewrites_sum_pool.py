"""The sum-pooling rule (rewrites.sum_pool): a reduce_window sum's one-channel Conv of ones becomes a
depthwise Conv over the channels, with jax.jit's numbers (NaN, infinities, -0) kept."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
from jax import lax

import jaxconv
from jaxconv.onnx.rewrites import sum_pool
from lowering_check import assert_same_floats
from lowering_check import convert_and_run as _convert


def _avg_pool(x):
    """nn.avg_pool over NHWC: the window sum, then the division."""
    s = lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    return jax.nn.relu(s / 4.0) + jnp.ones((16,), jnp.float32)


def _input() -> np.ndarray:
    x = np.random.default_rng(0).standard_normal((2, 8, 8, 16)).astype(np.float32)
    x[0, 0, 0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    x[1, 2:4, 2:4, 5] = -0.0  # a window of -0 alone: the sum is -0
    x[1, 4, 4, 6], x[1, 4, 5, 6] = np.inf, -np.inf
    return x


def test_sum_pool_runs_as_a_depthwise_conv_and_keeps_jit_numbers(monkeypatch):
    fired: list[int] = []
    real = sum_pool.rewrite
    monkeypatch.setattr(sum_pool, "rewrite", lambda graph: fired.append(real(graph)) or fired[-1])
    x = _input()
    model = jaxconv.to_onnx(_avg_pool, jax.ShapeDtypeStruct(x.shape, x.dtype), check=False)
    assert fired == [1]
    groups = [a.i for n in model.graph.node if n.op_type == "Conv" for a in n.attribute if a.name == "group"]
    assert groups == [16]
    _, (got,) = _convert(_avg_pool, x)
    want = jax.jit(_avg_pool)(x)
    assert np.isnan(want[0, 0, 0, 0]) and np.isposinf(want[0, 0, 0, 1]) and np.isnan(want[1, 2, 2, 6])
    assert_same_floats(got, want, 1e-6, 0)  # ORT's Conv adds a window in another order than XLA
    monkeypatch.setattr(sum_pool, "rewrite", lambda graph: 0)
    _, (plain,) = _convert(_avg_pool, x)
    assert_same_floats(got, plain, 0, 0)  # the rule itself changes no bit


def test_sum_pool_without_a_channel_axis_is_left_alone():
    def fn(x):  # [N, H, W]: one plane per example, nothing to group
        return lax.reduce_window(x, 0.0, lax.add, (1, 2, 2), (1, 2, 2), "VALID")

    x = _input()[..., 0]
    model = jaxconv.to_onnx(fn, jax.ShapeDtypeStruct(x.shape, x.dtype), check=False)
    assert all(
        a.i == 1 for n in model.graph.node if n.op_type == "Conv" for a in n.attribute if a.name == "group"
    )
    _, (got,) = _convert(fn, x)
    assert_same_floats(got, jax.jit(fn)(x), 1e-6, 0)
    assert onnx.checker.check_model(model) is None
