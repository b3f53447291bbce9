"""Recurrences whose step convolves (a ConvLSTM cell) run unrolled up to 32 steps
(jaxconv.onnx.rewrites.loops): ORT runs the convolutions of the main graph in its blocked layout, not
those of a Scan's body (Haiku's Conv2DLSTM, 8 steps: 1.40x -> 0.84x jax.jit). Outputs within tolerance of jax.jit, zero signs
included, on inputs with NaN, infinities and -0.0; longer sequences stay a Scan."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from scan_support import convert, ops

from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_floats, sequence_inputs

_B, _S, _C, _F = 2, 6, 3, 4


def _conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _conv_lstm():
    """flax's ConvLSTMCell: gates from a convolution of the input and one of the hidden state."""
    rng = np.random.default_rng(0)
    wi = (rng.standard_normal((3, 3, _C, 4 * _F)) * 0.3).astype(np.float32)
    wh = (rng.standard_normal((3, 3, _F, 4 * _F)) * 0.3).astype(np.float32)
    b = (rng.standard_normal(4 * _F) * 0.1).astype(np.float32)

    def step(carry, x):
        c, h = carry
        i, g, f, o = jnp.split(_conv(x, wi) + _conv(h, wh) + b, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (c, h), h

    def fn(xs):  # [T, B, S, S, C]
        zeros = jnp.zeros((xs.shape[1], _S, _S, _F), xs.dtype)
        return lax.scan(step, (zeros, zeros), xs)[1]

    return fn


@pytest.mark.parametrize("steps", [8, 32])
def test_a_conv_lstm_runs_unrolled(steps):
    fn = _conv_lstm()
    shape = (steps, _B, _S, _S, _C)
    model = convert(fn, np.zeros(shape, np.float32))
    main, body = ops(model)
    assert main["Scan"] == main["Loop"] == 0 and not body, (main, body)
    assert main["Conv"] == 2 * steps, main
    run = OnnxRunner(model.SerializeToString())
    for xs in sequence_inputs(shape):
        assert_same_floats(run.run([xs])[0], jax.jit(fn)(xs), rtol=1e-5, atol=1e-6)


def test_a_longer_conv_recurrence_stays_a_scan():
    model = convert(_conv_lstm(), np.zeros((33, _B, _S, _S, _C), np.float32))
    assert ops(model)[0]["Scan"] == 1
