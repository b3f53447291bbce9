"""The einsum re-planning rule (jaxconv.onnx.rewrites.einsum_order): grouped-query attention's einsums,
which jnp traces with the keys (values) on the left and the score tensor transposed after the split of
its merged axes, computed as ``[b, kv, g*t, s]`` directly; ONNX Runtime's numbers unchanged."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import einsum_order
from lowering_check import assert_same_bits, assert_same_floats, convert_and_run, without_rule

_plain = without_rule(einsum_order)


def _qkv(seed: int = 0, edges: bool = False):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((2, 16, 2, 3, 8)).astype(np.float32)  # b t kv g h
    k = rng.standard_normal((2, 16, 2, 8)).astype(np.float32)  # b s kv h
    v = rng.standard_normal((2, 16, 2, 8)).astype(np.float32)
    if edges:
        q[0, :, 1, 0, :] = -0.0
        k[1, 3, 0, 5] = np.nan
        k[0, 4, 1, 1] = np.inf
        v[1, 2, 1, 3] = -np.inf
        v[0, 5, 0, :] = -0.0
    return q, k, v


def _scores(q, k):
    return jnp.einsum("btkgh,bskh->bkgts", q, k)


def _values(p, v):
    return jnp.einsum("bkgts,bskh->btkgh", p, v)


def _attention(q, k, v):
    s = _scores(q, k)
    s = jnp.tanh(s / 50.0) * 50.0  # Gemma-2's logit soft-cap
    causal = jnp.tril(jnp.ones((16, 16), bool))
    s = jnp.where(causal, s, -1e9)
    return _values(jax.nn.softmax(s, axis=-1), v)


@pytest.mark.parametrize("edges", [False, True])
def test_scores_come_out_in_order_with_the_same_bits(monkeypatch, edges):
    q, k, _ = _qkv(edges=edges)
    ops, got = convert_and_run(_scores, q, k)
    plain_ops, plain = _plain(monkeypatch, _scores, q, k)
    assert plain_ops["Transpose"] == 3 and ops["Transpose"] == 2, (plain_ops, ops)
    assert_same_bits(got, plain)
    assert_same_floats(got[0], jax.jit(_scores)(q, k), 2e-6, 1e-6)


@pytest.mark.parametrize("edges", [False, True])
def test_probabilities_times_values_keep_the_bits(monkeypatch, edges):
    q, _, v = _qkv(edges=edges)
    p = np.random.default_rng(1).random((2, 2, 3, 16, 16)).astype(np.float32)
    if edges:
        p[1, 0, 2, 3, :] = -0.0
    ops, got = convert_and_run(_values, p, v)
    plain_ops, plain = _plain(monkeypatch, _values, p, v)
    assert plain_ops["Transpose"] == 3 and ops["Transpose"] == 2, (plain_ops, ops)
    assert_same_bits(got, plain)
    assert_same_floats(got[0], jax.jit(_values)(p, v), 2e-6, 1e-6)


def test_soft_capped_attention_matches_jit(monkeypatch):
    q, k, v = _qkv(edges=True)
    ops, got = convert_and_run(_attention, q, k, v)
    plain_ops, plain = _plain(monkeypatch, _attention, q, k, v)
    assert ops["Transpose"] < plain_ops["Transpose"], (plain_ops, ops)
    want = jax.jit(_attention)(q, k, v)
    assert_same_floats(got[0], want, 2e-5, 1e-5)
    assert_same_floats(plain[0], want, 2e-5, 1e-5)


@pytest.mark.parametrize("equation", ["bqhd,bkhd->bhqk", "bhqk,bkhd->bqhd", "bij,bjk->bik"])
def test_forms_without_a_saving_are_left_alone(monkeypatch, equation):
    rng = np.random.default_rng(2)
    shapes = {"bqhd,bkhd->bhqk": ((2, 8, 4, 8), (2, 8, 4, 8)), "bhqk,bkhd->bqhd": ((2, 4, 8, 8), (2, 8, 4, 8)),
              "bij,bjk->bik": ((3, 5, 6), (3, 6, 7))}[equation]
    a, b = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    fn = lambda a, b: jnp.einsum(equation, a, b)  # noqa: E731
    ops, got = convert_and_run(fn, a, b)
    plain_ops, plain = _plain(monkeypatch, fn, a, b)
    assert ops == plain_ops
    assert_same_bits(got, plain)


@pytest.mark.parametrize("shape", [(1, 1, 4), (2, 3, 4)])
def test_a_vmapped_weight_first_product_with_unknown_operand_shapes_converts(shape):
    """A doubly vmapped ``W @ v`` (the fuzzer's dense_q): an operand whose shapes the rule cannot read
    (no Transpose before its Reshape) is left alone instead of failing the conversion (an unfinished
    version of the rule raised a TypeError here)."""
    w = (np.random.default_rng(0).standard_normal((4, 4)) * 0.5).astype(np.float32)
    b = (np.random.default_rng(1).standard_normal(4) * 0.1).astype(np.float32)

    def fn(v):
        return jax.vmap(jax.vmap(lambda x: w @ x))(v) + b

    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    _, (got,) = convert_and_run(fn, x)
    assert_same_floats(got, np.asarray(jax.jit(fn)(x)), rtol=1e-6, atol=1e-6)
