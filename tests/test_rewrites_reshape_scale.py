"""The Reshape-pair rule (rewrites.reshape_scale): a batch-only dot_general (RoFormer's rotary
``einsum("bslh,...sh->bslh")``) loses the Reshapes around its Mul, and jax.jit's numbers stay bit for bit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxconv.onnx.rewrites import reshape_scale
from lowering_check import assert_same_floats
from lowering_check import convert_and_run as _convert


def _rotary(x, cos):
    return jnp.einsum("bslh,sh->bslh", x, cos) * 2.0 + 1.0


def _inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 8, 3, 4)).astype(np.float32)
    cos = rng.standard_normal((8, 4)).astype(np.float32)
    x[0, 0, 0, :3] = [np.nan, np.inf, -0.0]
    cos[1, :2] = [-0.0, np.inf]
    x[1, 1, 2, 1] = 0.0  # 0 * inf
    return x, cos


def test_batch_only_dot_general_loses_its_reshapes_and_keeps_the_bits(monkeypatch):
    fired: list[int] = []
    real = reshape_scale.rewrite
    monkeypatch.setattr(reshape_scale, "rewrite", lambda graph: fired.append(real(graph)) or fired[-1])
    x, cos = _inputs()
    ops, (got,) = _convert(_rotary, x, cos)
    assert sum(fired) == 1
    want = jax.jit(_rotary)(x, cos)
    assert np.isnan(want[1, 1, 2, 1]) and np.isnan(want[0, 0, 0, 0])
    assert_same_floats(got, want, 0, 0)
    monkeypatch.setattr(reshape_scale, "rewrite", lambda graph: 0)
    plain, _ = _convert(_rotary, x, cos)
    assert sum(ops.values()) < sum(plain.values())


def test_regrouping_follows_the_reshape():
    assert reshape_scale._regrouped([64, 32, 2, 4], [64, 32, 1, 8], [64, 32, 1, 1]) == [64, 32, 1, 1]
    assert reshape_scale._regrouped([6, 4], [24], [24]) == [6, 4]
    assert reshape_scale._regrouped([6, 4], [24], [1]) == [1, 1]
    assert reshape_scale._regrouped([6, 4], [2, 12], [2, 1]) is None  # a group only partly broadcast
    assert reshape_scale._regrouped([2, 3], [3, 2], [3, 1]) is None
