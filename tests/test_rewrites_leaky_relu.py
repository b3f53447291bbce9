"""jaxconv.onnx.rewrites.activations: jax.nn.leaky_relu's select as LeakyRelu, which ORT fuses into the Conv
before it. ONNX Runtime's outputs are bit for bit those of the select it replaces, and jax.jit's for every
input but subnormals (jax.jit on the CPU reads them as zeros; neither graph does)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxconv.onnx.rewrites import activations
from lowering_check import assert_same_bits, assert_same_floats, without_rule
from lowering_check import convert_and_run as _convert

_plain = without_rule(activations)
EDGES = np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1e-39, -1e-39, 1e-45, -1e-45, 3e38, -3e38, 1.0, -1.0],
                 np.float32)


def _x(shape=(4, 64)) -> np.ndarray:
    x = (np.random.default_rng(11).standard_normal(shape) * 3).astype(np.float32)
    x.reshape(-1)[:EDGES.size] = EDGES
    return x


def _normal(x: np.ndarray) -> np.ndarray:
    """``x`` with its subnormals set to 1 (jax.jit on the CPU reads them as zeros; ORT does not, with or
    without the rule)."""
    return np.where((x != 0) & (np.abs(x) < np.finfo(np.float32).tiny), np.float32(1), x)


@pytest.mark.parametrize("fn", [
    lambda x: jax.nn.leaky_relu(x, 0.01),
    lambda x: jax.nn.leaky_relu(x, 0.2),
    lambda x: jnp.where(x > 0, x, 0.1 * x),
    lambda x: jnp.where(x >= 0, x, x * 1.5),
], ids=["jax.nn 0.01", "jax.nn 0.2", "x > 0", "slope above one"])
def test_leaky_relu_becomes_one_op_with_the_same_bits(monkeypatch, fn):
    x = _x()
    ops, got = _convert(fn, x)
    assert ops["LeakyRelu"] == 1 and "Where" not in ops
    _, before = _plain(monkeypatch, fn, x)
    assert_same_bits(got, before)
    normal = _normal(x)
    _, got_normal = _convert(fn, normal)
    assert_same_bits(got_normal, [np.asarray(jax.jit(fn)(normal))])


def test_a_negative_slope_with_a_strict_test_stays_a_select():
    """``where(x > 0, x, -0.5 x)`` at +0 is -0: not LeakyRelu's ``x``."""
    fn = lambda x: jnp.where(x > 0, x, -0.5 * x)  # noqa: E731
    x = _normal(_x())
    ops, got = _convert(fn, x)
    assert "LeakyRelu" not in ops
    assert_same_bits(got, [np.asarray(jax.jit(fn)(x))])


def test_a_conv_and_leaky_relu_as_in_a_darknet_block():
    w = (np.random.default_rng(2).standard_normal((3, 3, 8, 16)) * 0.2).astype(np.float32)

    def block(x):
        y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jax.nn.leaky_relu(y, 0.1)

    x = np.random.default_rng(3).standard_normal((2, 16, 16, 8)).astype(np.float32)
    ops, (got,) = _convert(block, x)
    assert ops["LeakyRelu"] == 1
    assert_same_floats(got, np.asarray(jax.jit(block)(x)), rtol=1e-5, atol=1e-5)
