"""The unit-scale rule (rewrites.unit_scale) on a head mask of ones computed from constants (Hugging Face
BERT: ``einsum("...hqk,h->...hqk", probs, head_mask)`` with no mask given): the Mul and the two
Transposes around it go, with jax.jit's numbers (NaN, ±inf, -0.0)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from lowering_check import assert_same_floats, without_unit_muls
from lowering_check import convert_and_run as _convert


def _heads(p, ids):
    mask = jnp.where(jnp.isnan(jnp.ones((2, 4))), 0.0, jnp.ones((2, 4)))[1].astype(p.dtype)  # computed ones
    return jnp.einsum("bhqk,h->bhqk", p, mask) @ jnp.ones((6, 3), p.dtype) + ids[:, None, None, :1]


def _probs() -> np.ndarray:
    p = np.random.default_rng(0).standard_normal((2, 4, 5, 6)).astype(np.float32)
    p[0, 1, 2, :4] = [np.nan, np.inf, -np.inf, -0.0]
    p[1, 3, 4, :] = -0.0
    return p


def test_head_mask_of_ones_goes(monkeypatch):
    p, ids = _probs(), np.arange(6, dtype=np.float32).reshape(2, 3)
    ops, (got,) = _convert(_heads, p, ids)
    assert ops["Transpose"] == 0 and ops["Mul"] == 0, ops
    assert_same_floats(got, jax.jit(_heads)(p, ids), 1e-6, 1e-6)
    without_unit_muls(monkeypatch)
    plain_ops, (plain,) = _convert(_heads, p, ids)
    assert plain_ops["Mul"] == 1, plain_ops
    assert_same_floats(got, plain, 0, 0)
