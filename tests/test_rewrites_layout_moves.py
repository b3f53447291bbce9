"""jaxconv.onnx.rewrites.layout: the activation ops other rules make are layout-blind; a move that
transposes a residual operand (a stream that starts at the model's input, x + conv(x)) is made where every
move after it leaves fewer Transposes to run, and not made where it would add one; ONNX Runtime's
outputs within tolerance of jax.jit's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
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


_W16 = [(_RNG.standard_normal((3, 3, 8, 16)) / 9).astype(np.float32), (_RNG.standard_normal((1, 1, 8, 8)) / 3).astype(np.float32),
        (_RNG.standard_normal((3, 3, 16, 8)) / 9).astype(np.float32), (_RNG.standard_normal((1, 1, 24, 8)) / 5).astype(np.float32)]


def silu_and_excite(x):
    """EfficientNet's block: SiLU (x read twice), a squeeze-excite scale from a kept-dims spatial mean."""
    h = jax.nn.silu(_conv(x, _WS[0]))
    s = jax.nn.sigmoid(h.mean((1, 2), keepdims=True))
    return _conv(h * s, _WS[1])


def split_halves(x):
    """CSPDarknet's cross-stage block: the channels split in halves, one through convs, concatenated back."""
    a, b = jnp.split(jax.nn.leaky_relu(_conv(x, _W16[0]), 0.1), 2, axis=-1)
    b = b + jax.nn.leaky_relu(_conv(b, _W16[1]), 0.1)
    return _conv(jnp.concatenate([a, b], -1), _W16[2])


_DENSE = [(_RNG.standard_normal((3, 3, c, 4)) / 9).astype(np.float32) for c in (8, 12)]
_DENSE_OUT = (_RNG.standard_normal((1, 1, 16, 8)) / 4).astype(np.float32)


def dense_block(x):
    """DenseNet's block: each layer's features concatenated to the running ones, read by the next layer too."""
    for w in _DENSE:
        x = jnp.concatenate([x, _conv(jax.nn.relu(x * 0.5 + 0.1), w)], -1)
    return _conv(x, _DENSE_OUT)


@pytest.mark.parametrize("fn", [silu_and_excite, split_halves, dense_block], ids=["silu+excite", "split", "dense"])
def test_conv_blocks_stay_nchw(fn, monkeypatch):
    x = _image(5)
    ops, (got,) = _convert(fn, x)
    assert ops["Transpose"] <= 3, ops  # at the input (DenseNet's read twice there: one each) and the output
    assert_same_floats(got, np.asarray(jax.jit(fn)(x)), 1e-5, 1e-5)
    monkeypatch.setattr(layout, "_rejoining", lambda graph, out: False)
    monkeypatch.setattr(layout, "_each_meets_transpose", lambda uses, perm: False)
    monkeypatch.setattr(layout, "MAX_TRIALS", 0)
    monkeypatch.setattr(layout, "_sink_through_split", lambda graph, perm, split: False)
    before, _ = _convert(fn, x)
    assert before["Transpose"] >= ops["Transpose"] + 2, before
