"""The symbolic rule's sink (rewrites.symbolic): an op on two Expands whose inputs already broadcast to
the full shape runs without an Expand after it, so the softmax rule still sees BLOOM's softmax (its
scores plus a mask [b, 1, q, k] plus ALiBi [b, h, 1, k]); jax.jit's numbers with NaN, ±inf, -0.0."""

from __future__ import annotations

import jax
import numpy as np

from lowering_check import assert_same_floats
from lowering_check import convert_and_run as _convert


def _scores_mask_alibi() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    s = rng.standard_normal((2, 4, 8, 8)).astype(np.float32)
    s[0, 0, 0, :] = np.nan
    s[0, 1, 2, 3] = np.inf
    s[1, 2, 3, :] = -np.inf
    s[1, 3, 4, 5] = -0.0
    mask = np.where(np.tril(np.ones((8, 8), bool)), 0.0, -3.4e38).astype(np.float32)[None].repeat(2, 0)
    alibi = rng.standard_normal((2, 4, 8)).astype(np.float32)
    return s, mask, alibi


def _bloom_softmax(s, mask, alibi):
    return jax.nn.softmax(s + (mask[:, None, :, :] + alibi[:, :, None, :]), axis=-1)


def test_softmax_after_a_full_size_broadcast_sum_is_one_softmax():
    args = _scores_mask_alibi()
    ops, (got,) = _convert(_bloom_softmax, *args)
    assert ops["Softmax"] == 1 and ops["Expand"] == 0 and ops["ReduceMax"] == 0, ops
    want = np.asarray(jax.jit(_bloom_softmax)(*args))
    assert np.isnan(want[0, 0, 0]).all() and np.isnan(want[0, 1, 2]).all() and np.isnan(want[1, 2, 3]).all()
    assert_same_floats(got, want, 1e-6, 1e-7)
