"""A Where whose condition is one constant everywhere (rewrites.where_consts) is the operand it chooses:
jnp.var's ``ddof`` guard in every keras-hub layer norm goes, with jax.jit's numbers (NaN, ±inf, -0.0)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxconv.onnx.rewrites import where_consts
from lowering_check import assert_same_floats
from lowering_check import convert_and_run as _convert


def _rows() -> np.ndarray:
    return np.array([[np.nan, 1.0, 2.0, 3.0, 4.0, 5.0], [np.inf, 0.0, 1.0, 2.0, 3.0, 4.0],
                     [-0.0, -0.0, -0.0, -0.0, -0.0, -0.0], [1.5, -2.0, 1e30, -1e30, 3.0, 0.25]], np.float32)


def _var(x):
    return jnp.var(x, axis=-1, keepdims=True) * -1.0  # the sign of a zero variance shows


def test_var_guard_where_goes(monkeypatch):
    x = _rows()
    ops, (got,) = _convert(_var, x)
    assert ops["Where"] == 0, ops
    want = np.asarray(jax.jit(_var)(x))
    assert np.isnan(want[:2]).all() and np.signbit(want[2]).all()
    assert_same_floats(got, want, 1e-6, 0)
    monkeypatch.setattr(where_consts, "_constant_choice", lambda *a: False)
    plain_ops, (plain,) = _convert(_var, x)
    assert plain_ops["Where"] == 1, plain_ops
    assert_same_floats(got, plain, 0, 0)


def test_where_that_broadcasts_its_choice_or_mixes_stays():
    def fn(x):
        every = jnp.where(np.ones(6, bool), x[:, :1], x)  # the choice is [4, 1]: the Where broadcasts it
        mixed = jnp.where(np.arange(6) % 2 == 0, x, -x)
        return every, mixed

    x = _rows()
    ops, got = _convert(fn, x)
    assert ops["Where"] >= 1, ops
    for g, w in zip(got, jax.jit(fn)(x)):
        assert_same_floats(g, np.asarray(w), 0, 0)


def test_attention_mask_from_a_padding_mask_of_ones_goes(monkeypatch):
    """keras-hub's padding mask given as ``jnp.ones_like(ids)``: the mask is all True, computed from
    constants at run time ([2, 1, 1, 8], more than a few elements); both Wheres of the masked softmax go."""

    def fn(scores, ids):
        valid = jnp.ones_like(ids)[:, None, None, :] > 0
        p = jax.nn.softmax(jnp.where(valid, scores, -1e9), axis=-1)
        return jnp.where(valid, p, 0.0)

    rng = np.random.default_rng(1)
    scores = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    scores[0, 0, 0, :2] = [np.nan, np.inf]
    scores[1, 2, 3, :] = -np.inf
    ids = np.arange(16, dtype=np.int32).reshape(2, 8)
    ops, (got,) = _convert(fn, scores, ids)
    assert ops["Where"] == 0, ops
    assert_same_floats(got, jax.jit(fn)(scores, ids), 1e-6, 1e-7)
    monkeypatch.setattr(where_consts, "_constant_choice", lambda *a: False)
    plain_ops, (plain,) = _convert(fn, scores, ids)
    assert plain_ops["Where"] == 2, plain_ops
    assert_same_floats(got, plain, 0, 0)
