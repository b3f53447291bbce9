"""jaxconv.onnx.rewrites.kv_broadcast: grouped-query attention's repeated key/value heads left to the
MatMul's broadcast; ONNX Runtime's outputs bit for bit those without the rule (NaN, +-inf and -0.0
included) and within tolerance of jax.jit's."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxconv
from jaxconv.onnx.rewrites import kv_broadcast
from jaxconv.runtimes.onnxrt import OnnxRunner
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


def _ops_of(model) -> collections.Counter:
    return collections.Counter(n.op_type for n in model.graph.node)


@pytest.mark.parametrize("heads,kv_heads", [(4, 1), (4, 2), (6, 3)])
@pytest.mark.parametrize("width", [32, 8])
def test_symbolic_batch_and_short_rows(monkeypatch, heads, kv_heads, width):
    """jnp.repeat's own form (Unsqueeze, Expand, Reshape), which ``repeat_gathers`` leaves where the batch is
    symbolic or the rows are short: the copies go too, and the symbolic graph is the static one."""
    specs = [f"f32[b,8,{h},{width}]" for h in (heads, kv_heads, kv_heads)]
    model = jaxconv.to_onnx(_attention, *specs, check=False)
    static = jaxconv.to_onnx(_attention, *[s.replace("b", "2") for s in specs], check=False)
    assert _ops_of(model) == _ops_of(static)
    assert not {"Expand", "Gather", "Shape"} & set(_ops_of(model)), _ops_of(model)
    runner = OnnxRunner(model.SerializeToString())
    with monkeypatch.context() as patch:
        patch.setattr(kv_broadcast, "rewrite", lambda *args, **kw: 0)
        plain = jaxconv.to_onnx(_attention, *specs, check=False)
    assert _ops_of(plain)["Expand"] + _ops_of(plain)["Gather"] == 2, _ops_of(plain)
    plain_runner = OnnxRunner(plain.SerializeToString())
    for batch in (1, 3):
        rng = np.random.default_rng(batch)
        q, k, v = (rng.standard_normal((batch, 8, h, width)).astype(np.float32) for h in (heads, kv_heads, kv_heads))
        k[0, 1, 0, 3], v[-1, 3, -1, 5], q[0, 0, 0, 0] = np.nan, -np.inf, -0.0
        got = runner.run([q, k, v])
        assert_same_bits(got, plain_runner.run([q, k, v]))
        _assert_close(got[0], np.asarray(jax.jit(_attention)(q, k, v)))


def test_heads_repeated_by_indexing(monkeypatch):
    """``k[:, :, [0, 0, 1, 1]]``: a Gather whose indices are clamped by constant arithmetic, still a repeat."""
    idx = np.repeat(np.arange(2), 2)

    def indexed(q, k, v):
        return _attention(q, k[:, :, idx], v[:, :, idx])

    q, k, v = _inputs(4, 2, True)
    ops, (got,) = _convert(indexed, q, k, v)
    plain_ops, (plain,) = _plain(monkeypatch, indexed, q, k, v)
    assert plain_ops["Gather"] == 2 and ops["Gather"] == 0, (ops, plain_ops)
    assert_same_bits([got], [plain])
    _assert_close(got, np.asarray(jax.jit(indexed)(q, k, v)))


@pytest.mark.parametrize("batch", ["2", "b"])
def test_heads_split_by_a_reshape(monkeypatch, batch):
    """Keys and values that arrive flat and are split into heads: the clean-up merges that Reshape with the
    repeat's Unsqueeze, so the repeat reads a Reshape; the copies go, and no Reshape-Squeeze pair is left."""
    def flat(q, k, v):
        b = k.shape[0]
        return _attention(q, k.reshape(b, 8, 2, 32), v.reshape(b, 8, 2, 32))

    specs = [f"f32[{batch},8,4,32]", f"f32[{batch},8,64]", f"f32[{batch},8,64]"]
    model = jaxconv.to_onnx(flat, *specs, check=False)
    ops = _ops_of(model)
    assert ops["Gather"] == ops["Expand"] == ops["Squeeze"] == 0, ops
    with monkeypatch.context() as patch:
        patch.setattr(kv_broadcast, "rewrite", lambda *args, **kw: 0)
        plain = jaxconv.to_onnx(flat, *specs, check=False)
    assert _ops_of(plain)["Expand"] + _ops_of(plain)["Gather"] == 2, _ops_of(plain)
    q, k, v = _inputs(4, 2, True)
    k, v = k.reshape(2, 8, 64), v.reshape(2, 8, 64)
    got = OnnxRunner(model.SerializeToString()).run([q, k, v])
    assert_same_bits(got, OnnxRunner(plain.SerializeToString()).run([q, k, v]))
    _assert_close(got[0], np.asarray(jax.jit(flat)(q, k, v)))


@pytest.mark.parametrize("batch", ["2", "b"])
def test_heads_with_their_unit_axis_as_input(monkeypatch, batch):
    """Keys and values given with the unit axis the repeat expands (``[B, S, n, 1, D]``): a graph input, so the
    rule squeezes that axis itself before the product."""
    def unit(q, k, v):
        b, s, n, _, d = k.shape
        return _attention(q, jnp.broadcast_to(k, (b, s, n, 2, d)).reshape(b, s, 2 * n, d),
                          jnp.broadcast_to(v, (b, s, n, 2, d)).reshape(b, s, 2 * n, d))

    q, k, v = _inputs(4, 2, True)
    k, v = k[:, :, :, None], v[:, :, :, None]
    specs = [f"f32[{batch},8,4,32]", f"f32[{batch},8,2,1,32]", f"f32[{batch},8,2,1,32]"]
    ops, (got,) = _convert(unit, q, k, v, specs=specs)
    plain_ops, (plain,) = _plain(monkeypatch, unit, q, k, v, specs=specs)
    assert plain_ops["Expand"] + plain_ops["Gather"] == 2 and ops["Expand"] == ops["Gather"] == 0, (ops, plain_ops)
    assert_same_bits([got], [plain])
    _assert_close(got, np.asarray(jax.jit(unit)(q, k, v)))


@pytest.mark.parametrize("heads,kv_heads", [(4, 1), (4, 2), (6, 3)])
def test_any_length(monkeypatch, heads, kv_heads):
    """Keys, values and queries of a symbolic length (a model exported for any length, and any batch): the
    copies go; the scores' Reshape back (two symbolic sizes after the heads) takes its tail from a Shape."""
    specs = [f"f32[b,s,{h},32]" for h in (heads, kv_heads, kv_heads)]
    model = jaxconv.to_onnx(_attention, *specs, check=False)
    with monkeypatch.context() as patch:
        patch.setattr(kv_broadcast, "rewrite", lambda *args, **kw: 0)
        plain = jaxconv.to_onnx(_attention, *specs, check=False)
    assert _ops_of(plain)["Expand"] + _ops_of(plain)["Gather"] == 2, _ops_of(plain)
    assert _ops_of(model)["Expand"] + _ops_of(model)["Gather"] == 0, _ops_of(model)
    runner, plain_runner = OnnxRunner(model.SerializeToString()), OnnxRunner(plain.SerializeToString())
    for batch, length in ((1, 1), (2, 5), (3, 17)):
        rng = np.random.default_rng(length)
        q, k, v = (rng.standard_normal((batch, length, h, 32)).astype(np.float32) for h in (heads, kv_heads, kv_heads))
        k[0, 0, 0, 3], v[-1, -1, -1, 5], q[0, 0, 0, 0] = np.nan, -np.inf, -0.0
        got = runner.run([q, k, v])
        assert_same_bits(got, plain_runner.run([q, k, v]))
        _assert_close(got[0], np.asarray(jax.jit(_attention)(q, k, v)))
