"""The Reshape-pair rule (rewrites.reshape_scale): axes regrouped to be scaled and ungrouped again lose the
Reshapes around their Mul, and jax.jit's numbers stay bit for bit."""

from __future__ import annotations

import jax
import numpy as np

from jaxconv.onnx.rewrites import reshape_scale
from lowering_check import assert_same_floats
from lowering_check import convert_and_run as _convert

_SCALE = np.random.default_rng(1).standard_normal(8).astype(np.float32)
_SCALE[1:3] = [-0.0, np.inf]


def _grouped_scale(x):
    """Heads regrouped with their features to be scaled per position, then heads-first for attention."""
    return ((x.reshape(2, 8, 12) * _SCALE[None, :, None]).reshape(2, 8, 3, 4) + 1.0).transpose(0, 2, 1, 3)


def _inputs() -> np.ndarray:
    x = np.random.default_rng(0).standard_normal((2, 8, 3, 4)).astype(np.float32)
    x[0, 0, 0, :3] = [np.nan, np.inf, -0.0]
    x[1, 1, 2, 1] = 0.0  # 0 * -0.0
    x[0, 2, 1, 0] = 0.0  # 0 * inf
    return x


def test_regrouped_scale_loses_its_reshapes_and_keeps_the_bits(monkeypatch):
    fired: list[int] = []
    real = reshape_scale.rewrite
    monkeypatch.setattr(reshape_scale, "rewrite", lambda graph: fired.append(real(graph)) or fired[-1])
    x = _inputs()
    ops, (got,) = _convert(_grouped_scale, x)
    assert sum(fired) == 1 and ops["Reshape"] == 0, ops
    want = jax.jit(_grouped_scale)(x)
    assert np.isnan(want[0, 0, 0, 0]) and np.isnan(want[0, 1, 2, 0])  # NaN itself; 0 * inf
    assert_same_floats(got, want, 0, 0)
    monkeypatch.setattr(reshape_scale, "rewrite", lambda graph: 0)
    plain, _ = _convert(_grouped_scale, x)
    assert plain["Reshape"] == 2, plain


def test_regrouping_follows_the_reshape():
    assert reshape_scale._regrouped([64, 32, 2, 4], [64, 32, 1, 8], [64, 32, 1, 1]) == [64, 32, 1, 1]
    assert reshape_scale._regrouped([6, 4], [24], [24]) == [6, 4]
    assert reshape_scale._regrouped([6, 4], [24], [1]) == [1, 1]
    assert reshape_scale._regrouped([6, 4], [2, 12], [2, 1]) is None  # a group only partly broadcast
    assert reshape_scale._regrouped([2, 3], [3, 2], [3, 1]) is None
