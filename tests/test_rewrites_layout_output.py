"""The layout rule at a graph output: a mean pool's zero-sign fix (``Sum(v, +0.0)``) lets the Transposes
through, and the NCHW->NHWC Transpose after the layers cancels the NHWC->NCHW one a model's output
asks for, the output taking its name, before the max pools' guard (an If) would come between them
(HF Flax ResNet's and RegNet's pooled output: two Transposes)."""

from __future__ import annotations

import jax
import numpy as np
from jax import lax

from jaxconv.onnx.rewrites import layout
from lowering_check import assert_same_bits, assert_same_floats
from lowering_check import convert_and_run as _convert

_RNG = np.random.default_rng(0)
_W = _RNG.standard_normal((3, 3, 4, 8)).astype(np.float32)
_W2 = _RNG.standard_normal((3, 3, 8, 8)).astype(np.float32)


def _conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _pooled_nchw(x):
    y = lax.reduce_window(jax.nn.relu(_conv(x, _W)), -np.inf, lax.max, (1, 3, 3, 1), (1, 1, 1, 1), "SAME")
    y = jax.nn.relu(_conv(y, _W2))
    mean = lax.reduce_window(y, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4.0
    return mean.transpose(0, 3, 1, 2)


def _input() -> np.ndarray:
    x = _RNG.standard_normal((2, 6, 6, 4)).astype(np.float32)
    x[0, 0, 0, 0], x[1, 3, 3, 1], x[1, 5, 5, 2], x[0, 2, 4, 3] = np.nan, np.inf, -0.0, -np.inf
    return x


def test_the_transposes_around_a_pooled_output_cancel(monkeypatch):
    x = _input()
    ops, got = _convert(_pooled_nchw, x)
    assert ops["Transpose"] == 1 and ops["If"] == 1  # the input's; the pool's guard
    assert_same_floats(got[0], jax.jit(_pooled_nchw)(x), 1e-5, 1e-5)
    monkeypatch.setattr(layout, "_output_as", lambda graph, back, x: False)
    plain_ops, plain = _convert(_pooled_nchw, x)
    assert plain_ops["Transpose"] == 3
    assert_same_bits(got, plain)


def test_an_input_transposed_back_to_the_output_keeps_its_transposes():
    """``x.T.T`` as the output: the input cannot take the output's name, so nothing moves."""
    def fn(x):
        return jax.nn.relu(x.transpose(0, 3, 1, 2)).transpose(0, 2, 3, 1)

    x = _input()
    ops, (got,) = _convert(fn, x)
    assert_same_floats(got, jax.jit(fn)(x), 0, 0)
