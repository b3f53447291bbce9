"""onnxscript's Reshape -> MatMul -> Reshape rule checks shapes only: it dropped the flattening of a
dot_general's free dims ([h, b, k, d] -> [h, b * k, d]) before a MatMul with a batched rhs ([h, d, 1]),
and ONNX broadcasting then paired the rhs's batch with the lhs's second dim: head 1's scores took head 0's
query when b == h (found by the fuzzer: norm_two_pass+dense_k+..+scores/f16/value, minimised)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from tests.lowering_check import assert_onnx_matches_jax


@pytest.mark.parametrize("b, h", [(2, 2), (3, 3), (1, 2), (2, 1), (2, 3)])
def test_batched_rhs_keeps_its_batch(b, h):
    r = np.random.default_rng(b * 10 + h)
    k = r.standard_normal((b, h, 5, 2)).astype(np.float32)
    q = r.standard_normal((h, 1, 2)).astype(np.float32)

    def fn(k, q):  # [h, b, 5, 1]: batch h, the lhs's free dims b and 5
        return lax.dot_general(k, q, (((3,), (2,)), ((1,), (0,))))

    assert_onnx_matches_jax(fn, k, q)


def test_scores_of_a_broadcast_query():
    r = np.random.default_rng(7)
    q = r.standard_normal((1, 2, 1, 2)).astype(np.float16)
    k = r.standard_normal((2, 2, 32, 2)).astype(np.float16)
    assert_onnx_matches_jax(lambda q, k: jnp.einsum("bhqd,bhkd->bhqk", q * (1 / np.sqrt(2)), k), q, k)


def test_two_dimensional_rhs_still_loses_its_reshapes():
    """A Dense over [b, t, d] (rhs without batch dims) is still one MatMul, no Reshape."""
    r = np.random.default_rng(0)
    x = r.standard_normal((2, 3, 4)).astype(np.float32)
    w = r.standard_normal((4, 5)).astype(np.float32)
    model = assert_onnx_matches_jax(lambda x: x @ w, x)
    assert [n.op_type for n in model.graph.node] == ["MatMul"]
