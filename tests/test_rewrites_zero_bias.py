"""jaxconv.onnx.rewrites.zero_bias: an Add of a constant of zeros goes where it does not broadcast, as
XLA drops it; jax.jit's numbers kept, NaN, infinities and the sign of -0.0 included."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import zero_bias
from lowering_check import assert_same_floats, without_rule
from lowering_check import convert_and_run as _convert


def _rows() -> np.ndarray:
    x = np.random.default_rng(3).standard_normal((6, 8)).astype(np.float32)
    x[1] = -0.0
    x[2, 3] = np.nan
    x[3, 1] = np.inf
    x[4, 2] = -np.inf
    x[5, 0] = 0.0
    return x


_W = (np.random.default_rng(4).standard_normal((8, 8)) / 3).astype(np.float32)
_ZEROS = np.zeros(8, np.float32)


_plain = without_rule(zero_bias)


@pytest.mark.parametrize("form", ["x+0", "0+x", "x-0", "x+(-0)"])
def test_zero_add_goes_and_keeps_minus_zero_as_jit(monkeypatch, form):
    """tanh keeps -0.0; jax.jit's x + 0 is x (XLA drops it), so -0.0 comes out, as it now does here."""
    zeros = -_ZEROS if form == "x+(-0)" else _ZEROS
    fn = {"x+0": lambda x: jnp.tanh(x) + zeros, "0+x": lambda x: zeros + jnp.tanh(x),
          "x-0": lambda x: jnp.tanh(x) - zeros, "x+(-0)": lambda x: jnp.tanh(x) + zeros}[form]
    x = _rows()
    ops, (got,) = _convert(fn, x)
    want = np.asarray(jax.jit(fn)(x))
    assert np.signbit(want[1]).all(), "jax.jit keeps -0.0 through x + 0"
    assert_same_floats(got, want, 0, 0)
    plain_ops, _ = _plain(monkeypatch, fn, x)
    op = "Sub" if form == "x-0" else "Add"
    assert ops[op] == plain_ops[op] - 1, (ops, plain_ops)


def test_dense_zero_bias_goes(monkeypatch):
    """A Dense layer's zero bias after its MatMul, and a LayerNorm's zero offset: both Adds go."""
    def fn(x):
        y = x @ _W + _ZEROS
        mu = jnp.mean(y, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(y - mu), axis=-1, keepdims=True)
        return (y - mu) * jax.lax.rsqrt(var + 1e-5) + _ZEROS

    x = _rows()
    ops, (got,) = _convert(fn, x, bodies=True)  # the norm is one op; its exact branch holds the Adds
    assert_same_floats(got, jax.jit(fn)(x), 2e-5, 2e-6)
    plain_ops, (plain,) = _plain(monkeypatch, fn, x, bodies=True)
    assert ops["Add"] == plain_ops["Add"] - 2, (ops, plain_ops)
    np.testing.assert_array_equal(got, plain)  # the same values, NaN included (zeros of either sign)


@pytest.mark.parametrize("bias", [np.r_[np.zeros(7), 1e-30].astype(np.float32), np.full(8, 1e-45, np.float32)],
                         ids=["one-nonzero", "subnormal"])
def test_nonzero_bias_stays(monkeypatch, bias):
    """Not all zeros (a subnormal too, which XLA flushes but ONNX Runtime adds): the Add stays."""
    fn = lambda x: jnp.tanh(x) + bias  # noqa: E731
    x = _rows()
    ops, (got,) = _convert(fn, x)
    plain_ops, (plain,) = _plain(monkeypatch, fn, x)
    assert ops == plain_ops
    np.testing.assert_array_equal(got.view(np.uint32), plain.view(np.uint32))


def test_broadcasting_zero_add_stays():
    """x[:, :1] + zeros(8) is a broadcast: the result is bigger than x, so something must make it."""
    fn = lambda x: x[:, :1] + _ZEROS  # noqa: E731
    x = _rows()
    _, (got,) = _convert(fn, x)
    assert got.shape == (6, 8)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(jax.jit(fn)(x)))
    np.testing.assert_array_equal(got[~np.isnan(got)], np.asarray(jax.jit(fn)(x))[~np.isnan(got)])


def test_zeros_minus_x_stays():
    """0 - x is a negation, not x."""
    fn = lambda x: _ZEROS - jnp.tanh(x)  # noqa: E731
    x = _rows()
    ops, (got,) = _convert(fn, x)
    assert_same_floats(got, jax.jit(fn)(x), 0, 0)
    assert ops["Sub"] + ops["Neg"] == 1, ops


def test_zero_add_as_graph_output(monkeypatch):
    """An Add that is a graph output becomes an Identity (the output keeps its name), -0.0 kept as by jax.jit."""
    x = _rows()
    fn = lambda x: (jnp.tanh(x) + _ZEROS, x + _ZEROS)  # noqa: E731
    ops, outs = _convert(fn, x)
    for got, want in zip(outs, jax.jit(fn)(x)):
        assert_same_floats(got, want, 0, 0)
    plain_ops, _ = _plain(monkeypatch, fn, x)
    assert ops["Add"] == plain_ops["Add"] - 2, (ops, plain_ops)


def test_zeros_computed_from_constants_go():
    """An optimizer's first step: Adam's moment ``b1 * m + (1 - b1) * g`` with the state ``m`` zeros, closed
    over (a jax array, so the product is traced). XLA folds ``0.9 * m`` and drops the Add (a -0.0 gradient
    stays -0.0); so does the graph: no Add, jax.jit's bits."""
    m = jnp.zeros((6, 8), jnp.float32)

    def fn(g):
        return (0.9 * m + 0.1 * g) * np.float32(3.0)

    g = _rows()
    ops, (got,) = _convert(fn, g)
    want = np.asarray(jax.jit(fn)(g))
    assert np.signbit(want[1]).all()  # the premise: jax.jit keeps -0.0
    assert ops["Add"] == 0, ops
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
