"""The sum-pooling rule (rewrites.sum_pool): a reduce_window sum's one-channel Conv of ones becomes a
depthwise Conv over the channels, and a mean pool (that sum divided by the window's size) one
AveragePool, with jax.jit's numbers (NaN, infinities, -0) and ORT's bits kept."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
from jax import lax

import jaxconv
from jaxconv.onnx.rewrites import sum_pool
from lowering_check import assert_same_bits, assert_same_floats
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
    monkeypatch.setattr(sum_pool, "_average", lambda graph, conv: 0)  # the depthwise form itself
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


def _mean(x, padding="VALID", count=4.0):
    return lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), padding) / count


_W = np.random.default_rng(1).standard_normal((3, 3, 16, 16)).astype(np.float32)


def _conv(x):
    return lax.conv_general_dilated(x, _W, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _conv_mean_conv(x):
    """Between convolutions with 16 channels: ORT runs the pool in its blocked layout."""
    return _conv(_mean(jax.nn.relu(_conv(x))))


def _with_and_without(monkeypatch, fn, x):
    ops, got = _convert(fn, x)
    with monkeypatch.context() as patch:
        patch.setattr(sum_pool, "_average", lambda graph, conv: 0)
        plain_ops, plain = _convert(fn, x)
    return ops, got, plain_ops, plain


def test_a_mean_pool_is_one_average_pool_with_the_conv_s_bits(monkeypatch):
    x = _input()
    ops, got, plain_ops, plain = _with_and_without(monkeypatch, _mean, x)
    assert ops["AveragePool"] == 1 and ops["Conv"] == ops["Div"] == ops["Sum"] == 0, ops
    assert plain_ops["Conv"] == 1 and plain_ops["Div"] == 1, plain_ops
    assert_same_bits(got, plain)
    want = jax.jit(_mean)(x)
    assert want[1, 1, 1, 5] == 0 and not np.signbit(want[1, 1, 1, 5])  # 0.0 + (-0.0) ... = +0.0
    assert_same_floats(got[0], want, 1e-5, 1e-6)  # ORT adds a window in another order than XLA


def test_a_mean_pool_between_convs_keeps_the_bits(monkeypatch):
    x = _input()
    ops, got, plain_ops, plain = _with_and_without(monkeypatch, _conv_mean_conv, x)
    assert ops["AveragePool"] == 1 and ops["Conv"] == 2 and ops["Div"] == 0, ops
    assert_same_bits(got, plain)
    assert_same_floats(got[0], jax.jit(_conv_mean_conv)(x), 1e-4, 1e-4)


def test_a_padded_mean_pool_counts_the_padding():
    """``nn.avg_pool(padding="SAME")`` divides every window by its full size, padding included."""
    def fn(x):
        return _mean(x[:, :7, :7], "SAME")

    x = _input()
    ops, (got,) = _convert(fn, x)
    assert ops["AveragePool"] == 1, ops
    assert_same_floats(got, jax.jit(fn)(x), 1e-5, 1e-6)


def test_a_sum_divided_by_another_count_stays_a_conv():
    def fn(x):
        return _mean(x, count=3.0)

    x = _input()
    ops, (got,) = _convert(fn, x)
    assert ops["AveragePool"] == 0 and ops["Conv"] == 1, ops
    assert_same_floats(got, jax.jit(fn)(x), 1e-5, 1e-6)
