"""The Squeeze/Unsqueeze rule (jaxconv.onnx.rewrites.squeezes): jnp.take's index checks and an attention
mask's outer product lose the shape steps that cancel; jax.jit's numbers kept (out-of-range and
negative indices, NaN, -0)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxconv.onnx.rewrites import gather_fill, squeezes
from lowering_check import assert_same_floats
from lowering_check import convert_and_run as _convert


def _table() -> np.ndarray:
    table = np.random.default_rng(0).standard_normal((10, 6)).astype(np.float32)
    table[2] = -0.0
    table[3, 1] = np.nan
    table[4, 2] = -np.inf
    return table


def _take(ids):
    return jnp.take(_table(), ids, axis=0)  # nn.Embed's lookup: fill mode, NaN rows out of range


def _ids() -> np.ndarray:
    return np.array([[0, 2, 3, 4, 9], [-1, -10, -11, 10, 12345], [2, 2, 3, -8, 5]], np.int32)


def test_take_loses_three_shape_steps_and_keeps_jit_numbers(monkeypatch):
    """With the lookup's own index test in place (gather_fill, which replaces that test by one Clip, is off)."""
    monkeypatch.setattr(gather_fill, "rewrite", lambda graph: 0)
    ids = _ids()
    ops, (got,) = _convert(_take, ids)
    want = jax.jit(_take)(ids)
    assert np.isnan(want[1, 2:]).all() and np.signbit(want[0, 1]).all()  # the cases that matter are here
    assert_same_floats(got, want, 0, 0)
    monkeypatch.setattr(squeezes, "rewrite", lambda graph: 0)
    monkeypatch.setattr(squeezes, "reshape_chains", lambda graph: 0)
    plain_ops, _ = _convert(_take, ids)
    shape_steps = ops["Squeeze"] + ops["Unsqueeze"]
    assert shape_steps == plain_ops["Squeeze"] + plain_ops["Unsqueeze"] - 3, (ops, plain_ops)
    assert ops["Squeeze"] == 0, ops


def _mask(ids):
    valid = ids > 0
    return jnp.expand_dims(valid[..., :, None] & valid[..., None, :], axis=-3)  # nn.make_attention_mask


def test_attention_mask_unsqueezes_merge(monkeypatch):
    ids = _ids()
    ops, (got,) = _convert(_mask, ids)
    np.testing.assert_array_equal(got, jax.jit(_mask)(ids))
    assert ops["Unsqueeze"] == 2 and ops["And"] == 1, ops
    monkeypatch.setattr(squeezes, "rewrite", lambda graph: 0)
    monkeypatch.setattr(squeezes, "reshape_chains", lambda graph: 0)
    plain_ops, _ = _convert(_mask, ids)
    assert plain_ops["Unsqueeze"] == 3, plain_ops


def test_unsqueeze_lift_skips_operands_of_different_rank():
    """x[:, :, None] & y (y of rank 3 already) is left alone: the rule needs two Unsqueezed operands."""
    rng = np.random.default_rng(2)
    x = rng.random((3, 4)) > 0.5
    y = rng.random((3, 4, 5)) > 0.5
    fn = lambda x, y: jnp.expand_dims(x[:, :, None] & y, 1)  # noqa: E731
    ops, (got,) = _convert(fn, x, y)
    np.testing.assert_array_equal(got, jax.jit(fn)(x, y))


def _keras_rotary(x, cos, sin):
    """keras-hub's RotaryEmbedding: rotate_half as a stack on axis -2 reshaped back."""
    x1, x2 = jnp.split(x, 2, axis=-1)
    half = jnp.reshape(jnp.stack((-x2, x1), axis=-2), x.shape)
    return x * cos + half * sin


def test_stack_reshaped_back_is_a_concat(monkeypatch):
    """The stack's two Unsqueezes and its Reshape go (a Concat of the halves), and the rotary rule then folds
    the Neg into the sine table: the same bits as without the rule, jax.jit's numbers."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 6, 3, 8)).astype(np.float32)
    x[0, 0, 0, :3] = [np.nan, np.inf, -0.0]
    angles = rng.standard_normal((1, 6, 1, 8)).astype(np.float32)
    fn = lambda x: _keras_rotary(x, np.cos(angles), np.sin(angles))  # noqa: E731
    ops, got = _convert(fn, x)
    with monkeypatch.context() as patch:
        patch.setattr(squeezes, "_stacked_concat", lambda graph, node: 0)
        plain_ops, plain = _convert(fn, x)
    assert ops["Unsqueeze"] == 0 and ops["Neg"] == 0 and ops["Concat"] == 1, ops
    assert plain_ops["Unsqueeze"] == 2 and plain_ops["Concat"] == 1, plain_ops
    assert len(got) == 1 and got[0].view(np.uint32).tolist() == plain[0].view(np.uint32).tolist()
    assert_same_floats(got[0], np.asarray(jax.jit(fn)(x)), 1e-6, 1e-6)


def test_a_stack_kept_as_a_new_axis_stays():
    """stack on the last axis reshaped to interleave (Gemma's layout change) is no Concat of the halves."""
    x = np.random.default_rng(4).standard_normal((2, 6, 8)).astype(np.float32)
    fn = lambda x: jnp.reshape(jnp.stack(jnp.split(x, 2, axis=-1), axis=-1), x.shape) * 2.0  # noqa: E731
    ops, (got,) = _convert(fn, x)
    assert ops["Concat"] == 1 and ops["Unsqueeze"] == 2, ops
    assert_same_floats(got, np.asarray(jax.jit(fn)(x)), 0, 0)
