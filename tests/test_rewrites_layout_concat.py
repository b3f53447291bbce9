"""The layout rule through a Concat whose every operand is the same Transpose: a rotary embedding applied
per head with ``jax.vmap`` (Equinox's multi-head attention with RoPE) moves each half to heads-first on
its own; the Transposes go after the Concat as one, the rotary rule then folds the Neg into the sine
table (it counts live readers: the Transposes moved past stay as dead nodes until the clean-up), and the
numbers are the same bits."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxconv.onnx.rewrites import layout
from lowering_check import assert_same_bits, assert_same_floats
from lowering_check import convert_and_run as _convert

_T, _D = 16, 8
_ANGLES = np.outer(np.arange(_T), 1.0 / 100 ** (np.arange(_D // 2) / (_D // 2))).astype(np.float32)
_COS = np.cos(np.concatenate([_ANGLES, _ANGLES], -1))
_SIN = np.sin(np.concatenate([_ANGLES, _ANGLES], -1))


def _rope(x):
    """One head's rotary embedding, ``x`` [t, d]."""
    a, b = jnp.split(x, 2, axis=-1)
    return x * _COS + jnp.concatenate([-b, a], axis=-1) * _SIN


def _per_head(x):
    """``x`` [b, t, h, d] to [b, h, t, d], each head rotated on its own (vmapped over the heads' axis)."""
    return jax.vmap(jax.vmap(_rope, in_axes=1, out_axes=0))(x)


def test_transposed_halves_concatenated_move_as_one(monkeypatch):
    x = np.random.default_rng(0).standard_normal((2, _T, 3, _D)).astype(np.float32)
    x[0, 0, 0, :3] = [np.nan, np.inf, -0.0]
    ops, got = _convert(_per_head, x)
    monkeypatch.setattr(layout, "_sink_through_concat", lambda graph, perm, concat: False)
    plain_ops, plain = _convert(_per_head, x)
    assert ops["Transpose"] == 1 and ops["Neg"] == 0, ops
    assert plain_ops["Transpose"] > 1 and plain_ops["Neg"] == 1, plain_ops
    assert_same_bits(got, plain)
    assert_same_floats(got[0], np.asarray(jax.jit(_per_head)(x)), 1e-6, 1e-6)  # XLA fuses the multiply-adds


def test_a_concat_of_one_transposed_operand_stays():
    """Only one operand transposed: moving the Transpose would need another on the other operand."""
    def fn(x, y):
        return jnp.concatenate([jnp.transpose(x, (0, 2, 1)), y], axis=1)

    x = np.random.default_rng(1).standard_normal((2, 4, 5)).astype(np.float32)
    y = np.random.default_rng(2).standard_normal((2, 3, 4)).astype(np.float32)
    ops, (got,) = _convert(fn, x, y)
    assert ops["Transpose"] == 1 and ops["Concat"] == 1, ops
    assert_same_floats(got, np.asarray(jax.jit(fn)(x, y)), 0, 0)
