"""Two exact rules: a Mul by ones that only broadcasts (jaxconv.onnx.rewrites.unit_scale: a LayerNorm
with its initial all-ones scale) and an integer range check as Clip == x
(jaxconv.onnx.rewrites.range_checks: jnp.take's index test); jax.jit's numbers kept, NaN and -0 too."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import layer_norm, range_checks, unit_scale
from lowering_check import assert_same_floats, without_unit_muls
from lowering_check import convert_and_run as _convert


def _rows() -> np.ndarray:
    x = np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32)
    x[1] = -0.0
    x[2, 3] = np.nan
    x[3, 1] = np.inf
    return x


def _norm(scale):
    def fn(x):
        mu = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.maximum(jnp.mean(x * x, axis=-1, keepdims=True) - mu * mu, 0.0)
        return (x - mu) * (jax.lax.rsqrt(var + 1e-6) * scale)
    return fn


def test_ones_scale_mul_goes_and_numbers_stay(monkeypatch):
    monkeypatch.setattr(layer_norm, "rewrite", lambda graph, opset: 0)  # else the norm is one op either way
    fn = _norm(np.ones(8, np.float32))
    x = _rows()
    ops, (got,) = _convert(fn, x)
    assert_same_floats(got, jax.jit(fn)(x), 2e-6, 1e-6)
    without_unit_muls(monkeypatch)
    plain_ops, (plain,) = _convert(fn, x)
    assert ops["Mul"] == plain_ops["Mul"] - 1, (ops, plain_ops)
    np.testing.assert_array_equal(got.view(np.uint32), plain.view(np.uint32))


@pytest.mark.parametrize("scale", [np.full(8, 2.0, np.float32), np.r_[np.ones(7), 1.5].astype(np.float32)],
                         ids=["twos", "one-not-one"])
def test_other_scales_keep_their_mul(monkeypatch, scale):
    fn = _norm(scale)
    x = _rows()
    ops, (got,) = _convert(fn, x)
    assert_same_floats(got, jax.jit(fn)(x), 2e-6, 1e-6)
    monkeypatch.setattr(unit_scale, "rewrite", lambda graph: 0)
    plain_ops, _ = _convert(fn, x)
    assert ops == plain_ops


def test_ones_mul_whose_broadcast_is_the_result_stays():
    """x[:, :1] * ones(8) is a broadcast nobody repeats: the Mul (or an Expand) must stay."""
    fn = lambda x: x[:, :1] * jnp.ones(8, jnp.float32)  # noqa: E731
    x = _rows()
    _, (got,) = _convert(fn, x)
    assert got.shape == (5, 8)
    assert_same_floats(got, jax.jit(fn)(x), 0, 0)


def _in_range(i):
    return (i >= -3) & (i <= 7)


@pytest.mark.parametrize("dtype", [np.int32, np.int64], ids=str)
def test_range_check_becomes_clip_equal(monkeypatch, dtype):
    i = np.array([-2**31 + 1, -4, -3, 0, 7, 8, 2**31 - 1], dtype)
    with jax.enable_x64(dtype == np.int64):
        ops, (got,) = _convert(_in_range, i)
        want = np.asarray(jax.jit(_in_range)(i))
        monkeypatch.setattr(range_checks, "rewrite", lambda graph: 0)
        plain_ops, _ = _convert(_in_range, i)
    np.testing.assert_array_equal(got, want)
    assert ops["Clip"] == 1 and ops["Equal"] == 1 and ops["And"] == 0, ops
    assert plain_ops["And"] == 1, plain_ops


def test_float_and_empty_ranges_are_left_alone():
    x = np.array([np.nan, -0.0, 1.0, 9.0], np.float32)
    ops, (got,) = _convert(lambda v: (v >= 0.0) & (v <= 7.0), x)
    np.testing.assert_array_equal(got, [False, True, True, False])
    assert ops["Clip"] == 0, ops
    i = np.array([0, 5, 9], np.int32)
    fn = lambda v: (v >= 6) & (v <= 2)  # noqa: E731
    ops, (got,) = _convert(fn, i)
    np.testing.assert_array_equal(got, np.asarray(jax.jit(fn)(i)))
