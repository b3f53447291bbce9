"""jaxconv.onnx.rewrites.rms_norm with a weight computed from constants (Gemma's ``(1 + w) * norm``): the
weight folded into ORT's SimplifiedLayerNormalization, not a Mul of its own after it; outputs bit for bit
those of the norm with a weight of ones and the Mul after it (rows with NaN, infinities, -0.0, squares
that overflow), and within tolerance of jax.jit's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_rewrites_rms_norm import D, _convert, _rows

from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites import rms_norm
from lowering_check import assert_same_bits, assert_same_floats

_W = (0.1 * np.random.default_rng(23).standard_normal(D)).astype(np.float32)
_W[5] = -1.5  # 1 + w negative: zeros change sign


def _w():
    return jnp.asarray(_W)  # a jax array: 1 + w is an add in the program, as with Gemma's parameters


def _gemma(x):  # transformers' Flax Gemma RMSNorm
    var = jnp.power(x, 2).mean(-1, keepdims=True)
    return (1 + _w()) * (x / jnp.sqrt(var + 1e-6))


def _gemma_after(x):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * (_w() + 1)


def _gemma_row(x):  # the weight as [1, 1, D]: ORT fuses only a 1-D scale, so the rule writes it 1-D
    var = jnp.power(x, 2).mean(-1, keepdims=True)
    return (1 + _w().reshape(1, 1, D)) * (x / jnp.sqrt(var + 1e-6))


@pytest.mark.parametrize("fn", [_gemma, _gemma_after, _gemma_row])
def test_computed_weight_is_fused(monkeypatch, fn):
    x = _rows()
    ops, fused, (got,) = _convert(fn, x)
    assert ops["Pow"] == 1 and ops["Mul"] == 1, ops
    assert fused["SimplifiedLayerNormalization"] == 1 and fused["Mul"] == 0, fused
    with monkeypatch.context() as patch:  # the weight not evaluated: a Mul by ones in the norm, its own Mul
        patch.setattr(rms_norm.constants, "evaluate", lambda value, depth=0: m.const(value))
        plain_ops, plain_fused, (plain,) = _convert(fn, x)
    assert plain_fused["SimplifiedLayerNormalization"] == 1 and plain_fused["Mul"] == 1, plain_fused
    assert_same_bits([got], [plain])
    want = np.asarray(jax.jit(fn)(x))
    assert np.isnan(want[0, 3]).all() and (want[0, 0] == 0).all()
    assert_same_floats(got, want, 1e-5, 1e-6)
