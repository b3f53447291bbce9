"""jaxconv.onnx.rewrites.layout: the activation ops other rules make are layout-blind; a move that
transposes a residual operand (a stream that starts at the model's input, x + conv(x)) is made where every
move after it leaves fewer Transposes to run, and not made where it would add one; ONNX Runtime's
outputs within tolerance of jax.jit's."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxconv.onnx.rewrites import layout
from lowering_check import assert_same_floats
from lowering_check import convert_and_run as _convert

_RNG = np.random.default_rng(3)
_WS = [(_RNG.standard_normal((3, 3, 8, 8)) / 9).astype(np.float32) for _ in range(3)]


def _conv(x, w):
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def residual_from_input(x):
    for w in _WS:
        x = x + jax.nn.relu(_conv(x, w))
    return x


def residual_of_another_input(x, y):
    return y + _conv(x, _WS[0])


def _image(seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((2, 9, 7, 8)).astype(np.float32)
    x[0, 1, 2, :3] = [np.nan, np.inf, -np.inf]
    x[1, 0, 0, 0] = -0.0
    return x


def test_a_residual_stream_from_the_input_stays_nchw():
    x = _image(0)
    ops, (got,) = _convert(residual_from_input, x)
    assert ops["Transpose"] == 2, ops  # the input's and the output's (6 before: each Conv's pair)
    assert_same_floats(got, np.asarray(jax.jit(residual_from_input)(x)), 1e-5, 1e-5)


def test_a_move_that_adds_a_transpose_is_not_made():
    x, y = _image(1), _image(2)
    ops, (got,) = _convert(residual_of_another_input, x, y)
    assert ops["Transpose"] == 2, ops  # x into the Conv, the Conv's output back
    assert_same_floats(got, np.asarray(jax.jit(residual_of_another_input)(x, y)), 1e-5, 1e-5)


@pytest.mark.parametrize("trials", [0])
def test_without_trials_the_stream_keeps_each_convs_transposes(trials, monkeypatch):
    monkeypatch.setattr(layout, "MAX_TRIALS", trials)
    ops, _ = _convert(residual_from_input, _image(0))
    assert ops["Transpose"] > 2, ops


@pytest.mark.parametrize("act", [jax.nn.gelu, jax.nn.leaky_relu, jax.nn.hard_swish], ids=["gelu", "leaky_relu", "hard_swish"])
def test_the_activations_the_rules_make_are_layout_blind(act):
    """Gelu, LeakyRelu and HardSwish (made by ``activations`` before ``layout``) let the Transposes through."""
    def fn(x):
        return _conv(act(_conv(x, _WS[0])), _WS[1])
    x = _image(4)
    ops, (got,) = _convert(fn, x)
    assert ops["Transpose"] == 2, ops
    assert_same_floats(got, np.asarray(jax.jit(fn)(x)), 1e-5, 1e-5)
