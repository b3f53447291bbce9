"""jaxconv.onnx.rewrites.kv_broadcast: grouped-query attention's repeated key/value heads left to the
MatMul's broadcast; ONNX Runtime's outputs bit for bit those without the rule (NaN, +-inf and -0.0
included) and within tolerance of jax.jit's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import kv_broadcast
from lowering_check import assert_same_bits, assert_same_floats, without_rule
from lowering_check import convert_and_run as _convert

_plain = without_rule(kv_broadcast)


def _attention(q, k, v, scale_first=True):
    """Grouped-query attention as HF Flax writes it: q [B, T, H, D], k and v [B, S, n, D]."""
    g = q.shape[2] // k.shape[2]
    k, v = jnp.repeat(k, g, axis=2), jnp.repeat(v, g, axis=2)
    scale = np.float32(np.sqrt(q.shape[-1]))
    if scale_first:
        scores = jnp.einsum("bqhd,bkhd->bhqk", q / scale, k)
    else:
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / scale
    weights = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v)


def _inputs(heads: int, kv_heads: int, special: bool) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(7)
    q = rng.standard_normal((2, 8, heads, 32)).astype(np.float32)
    k = rng.standard_normal((2, 8, kv_heads, 32)).astype(np.float32)
    v = rng.standard_normal((2, 8, kv_heads, 32)).astype(np.float32)
    if special:
        k[0, 1, 0, 3], k[1, 2, -1, 0] = np.nan, np.inf
        v[0, 3, -1, 5], v[1, 0, 0, 1], v[1, 4, 0, 2] = -np.inf, -0.0, np.nan
        q[1, 5, -1, 4], q[0, 0, 0, 0] = -0.0, -np.inf
    return q, k, v


@pytest.mark.parametrize("heads,kv_heads", [(4, 1), (4, 2), (6, 3)])
@pytest.mark.parametrize("special", [False, True])
def test_repeated_heads_broadcast(monkeypatch, heads, kv_heads, special):
    q, k, v = _inputs(heads, kv_heads, special)
    ops, (got,) = _convert(_attention, q, k, v)
    plain_ops, (plain,) = _plain(monkeypatch, _attention, q, k, v)
    assert plain_ops["Gather"] == 2 and ops["Gather"] == 0, (ops, plain_ops)
    assert ops["MatMul"] == plain_ops["MatMul"] == 2
    assert_same_bits([got], [plain])
    _assert_close(got, np.asarray(jax.jit(_attention)(q, k, v)))


def _assert_close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    assert_same_floats(got[finite], want[finite], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_scale_after_product(monkeypatch, kv_heads):
    """The scale after the product: with groups, ORT no longer fuses it as FusedMatMul's alpha (a product
    by 1/sqrt(d)) and divides, as jax.jit does; within tolerance of jax.jit either way."""
    def fn(q, k, v):
        return _attention(q, k, v, scale_first=False)

    q, k, v = _inputs(4, kv_heads, True)
    ops, (got,) = _convert(fn, q, k, v)
    plain_ops, (plain,) = _plain(monkeypatch, fn, q, k, v)
    assert plain_ops["Gather"] == 2 and ops["Gather"] == 0, (ops, plain_ops)
    want = np.asarray(jax.jit(fn)(q, k, v))
    _assert_close(got, want)
    _assert_close(plain, want)
    if kv_heads == 1:
        assert_same_bits([got], [plain])


def test_other_gathers_stay(monkeypatch):
    """Heads repeated in another order ([0, 1, 0, 1]: jnp.tile) are not groups: the Gather stays."""
    def tiled(q, k, v):
        k, v = jnp.tile(k, (1, 1, 2, 1)), jnp.tile(v, (1, 1, 2, 1))
        return _attention(q, k, v)

    q, k, v = _inputs(4, 2, False)
    ops, (got,) = _convert(tiled, q, k, v)
    plain_ops, (plain,) = _plain(monkeypatch, tiled, q, k, v)
    assert ops == plain_ops
    assert_same_bits([got], [plain])
