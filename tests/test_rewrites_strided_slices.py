"""The strided-slice rule (rewrites.strided_slices): ``x[..., ::2]`` and ``x[..., 1::2]`` (an interleaved
rotary embedding: RoFormer, GPT-J) as one Split of pairs, with the Unsqueezes and Reshapes around the
pair folded (rewrites.squeezes.reshape_chains); jax.jit's numbers bit for bit (NaN, ±inf, -0.0)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxconv.onnx.rewrites import strided_slices
from lowering_check import assert_same_floats
from lowering_check import convert_and_run as _convert


def _rotate_pairs(x):
    return jnp.stack([-x[..., 1::2], x[..., ::2]], axis=-1).reshape(x.shape)


def _heads(last: int = 8) -> np.ndarray:
    x = np.random.default_rng(0).standard_normal((2, 5, 3, last)).astype(np.float32)
    x[0, 0, 0, :5] = [np.nan, np.inf, -np.inf, -0.0, 0.0]
    x[1, 4, 2, 3:] = [0.0, -0.0, np.nan, -np.inf, np.inf][: last - 3]
    return x


def test_rotate_pairs_is_one_split(monkeypatch):
    x = _heads()
    ops, (got,) = _convert(_rotate_pairs, x)
    assert ops["Slice"] == 0 and ops["Split"] == 1 and ops["Unsqueeze"] == 0, ops
    assert_same_floats(got, jax.jit(_rotate_pairs)(x), 0, 0)
    monkeypatch.setattr(strided_slices, "rewrite", lambda graph: 0)
    plain_ops, (plain,) = _convert(_rotate_pairs, x)
    assert plain_ops["Slice"] == 2, plain_ops
    np.testing.assert_array_equal(got.view(np.uint32), plain.view(np.uint32))


def test_one_parity_or_an_odd_axis_stays():
    def fn(x, y):
        return x[..., ::2] * 2.0, y[..., 1::2] - y[..., ::2][..., :3]

    x, y = _heads(), _heads(7)
    ops, got = _convert(fn, x, y)
    assert ops["Split"] == 0 and ops["Slice"] >= 3, ops
    for g, w in zip(got, jax.jit(fn)(x, y)):
        assert_same_floats(g, w, 0, 0)
