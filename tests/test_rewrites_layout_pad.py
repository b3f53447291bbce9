"""The layout rule through a Pad (Keras' ZeroPadding2D before a Conv, in NHWC): the Transpose moves
through it with the pads moved to the NCHW axes, so the conv layers keep NCHW (Keras ResNet: 8 -> 2
Transposes), and the numbers are the same bits."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxconv.onnx.rewrites import early_transposes, layout
from lowering_check import assert_same_bits, assert_same_floats
from lowering_check import convert_and_run as _convert

_RNG = np.random.default_rng(0)
_W1 = _RNG.standard_normal((3, 3, 4, 8)).astype(np.float32)
_W2 = _RNG.standard_normal((3, 3, 8, 8)).astype(np.float32)


def _conv(x, w):
    return lax.conv_general_dilated(x, w, (2, 2), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _padded_convs(x):
    y = jax.nn.relu(_conv(jnp.pad(x, ((0, 0), (1, 2), (3, 0), (0, 0))), _W1))
    return _conv(jnp.pad(y, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=0.5), _W2)


def test_pads_between_nhwc_convs_keep_nchw(monkeypatch):
    x = _RNG.standard_normal((2, 12, 12, 4)).astype(np.float32)
    x[0, 0, 0, 0], x[1, 5, 5, 1], x[1, 7, 7, 2] = np.nan, np.inf, -0.0
    ops, got = _convert(_padded_convs, x)
    assert ops["Transpose"] == 2, ops  # the input's and the output's
    assert_same_floats(got[0], jax.jit(_padded_convs)(x), 1e-4, 1e-4)
    monkeypatch.setattr(layout, "_sink_through_pad", lambda graph, t, use: False)
    monkeypatch.setattr(early_transposes, "rewrite", lambda graph: 0)  # which moves a Transpose before a Pad too
    plain_ops, plain = _convert(_padded_convs, x)
    assert plain_ops["Transpose"] > 2, plain_ops
    assert_same_bits(got, plain)
