"""A GRU cell in lax.scan becomes the ONNX GRU op (jaxconv.onnx.rewrites.gru), with the exact Loop
kept for non-finite inputs; every variant keeps jax.jit's numbers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jaxconv
from gru_support import N_IN, B, H, T, assert_runs_like_jit, gru_inputs, op_types_with_branches
from jaxconv.onnx.rewrites import gru


@pytest.fixture
def gru_on(monkeypatch):
    monkeypatch.setattr(gru, "ENABLED", True)


def _weights(seed: int = 0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((N_IN, 3 * H)).astype(np.float32) / 3,
            rng.standard_normal((H, 2 * H)).astype(np.float32) / 3,
            rng.standard_normal((H, H)).astype(np.float32) / 3,
            rng.standard_normal(3 * H).astype(np.float32) / 10)


def _gru(z_first: bool = False, swapped_update: bool = False):
    wx, wh, whn, b = _weights()

    def fn(xs, h0):
        def cell(h, x):
            gx = x @ wx + b
            a, c = jnp.split(jax.nn.sigmoid(gx[..., :2 * H] + h @ wh), 2, axis=-1)
            z, r = (a, c) if z_first else (c, a)
            n = jnp.tanh(gx[..., 2 * H:] + (r * h) @ whn)
            h = z * n + (1 - z) * h if swapped_update else (1 - z) * n + z * h
            return h, h

        return lax.scan(cell, h0, xs)

    return fn


@pytest.mark.parametrize("z_first", [False, True])
def test_gru_scan_becomes_the_gru_op_with_an_exact_fallback(z_first, gru_on):
    fn = _gru(z_first=z_first)
    model = jaxconv.to_onnx(fn, f"f32[{T},{B},{N_IN}]", f"f32[{B},{H}]", check=False)
    assert "GRU" in op_types_with_branches(model) and "Scan" in op_types_with_branches(model)  # the loop stays for non-finite inputs
    assert_runs_like_jit(model, fn, [gru_inputs(0), gru_inputs(1), gru_inputs(2, nonfinite=True)])


@pytest.mark.parametrize("z_first", [False, True])
def test_haikus_update_is_the_gru_op_with_z_negated(z_first):
    # h' = z * n + (1 - z) * h (hk.GRU): ONNX's z is 1 - z = sigmoid(-a), its weights and bias negated
    fn = _gru(z_first=z_first, swapped_update=True)
    model = jaxconv.to_onnx(fn, f"f32[{T},{B},{N_IN}]", f"f32[{B},{H}]", check=False)
    assert "GRU" in op_types_with_branches(model) and "Scan" in op_types_with_branches(model)
    assert_runs_like_jit(model, fn, [gru_inputs(0), gru_inputs(1), gru_inputs(2, nonfinite=True)])


def test_gru_rule_is_off_by_default_where_orts_products_would_thread():
    # batch 512 x 2H x H = 65,536 multiplies a step: ORT would split each product over its threads, and
    # a product of 537 MFLOP beside the scan gives the model two threads (thread_count)
    big = np.full((1024, 1024), 1 / 1024, np.float32)
    gru_fn = _gru()

    def fn(xs, h0, x):
        return gru_fn(xs, h0), x @ big

    model = jaxconv.to_onnx(fn, f"f32[{T},512,{N_IN}]", f"f32[512,{H}]", "f32[256,1024]", check=False)
    assert "GRU" not in op_types_with_branches(model) and "Scan" in op_types_with_branches(model)
