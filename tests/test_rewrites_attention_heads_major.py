"""jaxconv.onnx.rewrites.attention_heads, heads first: an attention block whose every reader of the heads
treats the two leading axes as batch axes is computed as ``[h, b, t, dh]`` and merged back by a
``[1, 2, 0, 3]`` Transpose; jax.jit's numbers (NaN, infinities, -0.0 and FLT_MAX in q, k and v, at places
the mask keeps and drops; where a score sums products beyond FLT_MAX, which float32 order overflows
depends on the CPU: there a number must be jax.jit's or float64's), ONNX Runtime's bit for bit those of
the ``[b, h, t, dh]`` layout and of the graph without the rule."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxconv
from jaxconv.onnx import rewrites
from jaxconv.onnx.rewrites import attention_heads
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_onnx_matches_jax, assert_same_bits

B, T, H, DH = 2, 5, 2, 4
D = H * DH
_RNG = np.random.default_rng(11)
WQ, WK, WV, WO = (_RNG.standard_normal((D, D)).astype(np.float32) for _ in range(4))
BIAS = _RNG.standard_normal(D).astype(np.float32)
_LOWEST = float(np.finfo(np.float32).min)


@pytest.fixture(autouse=True)
def _heads_on_one_thread_models(monkeypatch):
    """These models are small enough to record one intra-op thread, where the rule stays off by default."""
    monkeypatch.setattr(rewrites, "HEADS_ON_ONE_THREAD", True)


def _heads(x, w, c=None):
    y = x @ w if c is None else x @ w + c
    return y.reshape(x.shape[0], x.shape[1], H, DH).transpose(0, 2, 1, 3)


def _attention(mask: str):
    """A layer as the benchmark transformer and Flax write it: q, k, v split into heads, scaled scores,
    a causal mask (-inf or finfo.min fill), a padding bias (Hugging Face's Flax BERT) or none."""

    def layer(x, keep):
        q, k, v = _heads(x, WQ), _heads(x, WK, BIAS), _heads(x, WV)
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(DH)
        causal = jnp.tril(jnp.ones((x.shape[1], x.shape[1]), bool))
        if mask == "causal":
            s = jnp.where(causal, s, -jnp.inf)
        elif mask == "causal_lowest":
            s = jnp.where(causal, s, _LOWEST)
        elif mask == "padding":
            s = s + jnp.where(keep[:, None, None, :], 0.0, _LOWEST).astype(s.dtype)
        o = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)
        return o.transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[1], D) @ WO

    if mask == "padding":
        return layer
    return lambda x: layer(x, None)


def _edge_xs() -> list[np.ndarray]:
    """Inputs whose rows carry NaN, +-inf, -0.0 and +-FLT_MAX into q, k and v: at time 1 (a key the
    causal mask drops for query 0) and at the last time (dropped for every other query)."""
    x = _RNG.standard_normal((B, T, D)).astype(np.float32)
    out = [x]
    big = np.finfo(np.float32).max
    for value in (np.nan, np.inf, -np.inf, -0.0, big, -big):
        for place in ((1, 1, 3), (0, T - 1, 0)):
            e = x.copy()
            e[place] = value
            out.append(e)
    zeros = np.zeros_like(x)
    zeros[0] = -0.0
    out.append(zeros)
    return out


def _sums_beyond_range(x: np.ndarray, heads_mixed: bool = False) -> np.ndarray:
    """[b, t, D]: the output elements of queries one of whose scores adds finite products whose magnitudes
    sum beyond FLT_MAX (bounded with |x| and the weights' magnitudes, so q scaled by at most 1 and k with
    or without the bias stay below it; with ``heads_mixed``, every element of such a query). Whether a
    float32 sum of them overflows, turning the query's softmax to NaN, depends on the order it adds them
    in, which differs between XLA and MLAS and between CPUs. Other sums have one huge term at most."""
    a = np.where(np.isfinite(x), np.abs(x.astype(np.float64)), 0.0)  # inf and NaN: the same in any order
    q = _heads(a, np.abs(WQ.astype(np.float64)))
    k = _heads(a, np.abs(WK.astype(np.float64)), np.abs(BIAS.astype(np.float64)))
    rows = (np.einsum("bhqd,bhkd->bhqk", q, k) > np.finfo(np.float32).max).any(-1).transpose(0, 2, 1)
    if heads_mixed:
        rows = np.repeat(rows.any(-1, keepdims=True), H, axis=-1)
    return np.repeat(rows, DH, axis=-1)


def _assert_matches_jax(fn, xs, *extra, heads_mixed: bool = False):
    """The ONNX of ``fn`` (returned) gives jax.jit's numbers on ``[x, *extra]`` for each x: NaN places
    included, except in the queries whose sums may overflow in one order and not another
    (``_sums_beyond_range``); there an element may be NaN on either side, and a number in the artifact is
    within tolerance of jax.jit's or of the float64 result."""
    from jaxconv.references import float64_outputs

    order_free = [x for x in xs[1:] if not _sums_beyond_range(x, heads_mixed).any()]
    model = assert_onnx_matches_jax(fn, xs[0], *extra, inputs_for_run=[[x, *extra] for x in order_free],
                                    rtol=1e-5, atol=1e-6)
    runner = OnnxRunner(model.SerializeToString())
    for x in xs[1:]:
        open_ = _sums_beyond_range(x, heads_mixed)
        if not open_.any():
            continue
        got, want = runner.run([x, *extra])[0], np.asarray(jax.jit(fn)(x, *extra))
        wide = np.asarray(float64_outputs(fn, [x, *extra], [x, *extra])[0][0])
        np.testing.assert_array_equal(np.isnan(got[~open_]), np.isnan(want[~open_]))
        np.testing.assert_allclose(got[~open_], want[~open_], rtol=1e-5, atol=1e-6)
        number = open_ & ~np.isnan(got)
        with np.errstate(all="ignore"):
            close = [np.isclose(got, r, rtol=1e-5, atol=1e-6) for r in (want, wide)]
        assert (close[0] | close[1])[number].all(), (got[number], want[number], wide[number])
    return model


def _perms(model) -> list[list[int]]:
    return [list(a.ints) for n in model.graph.node if n.op_type == "Transpose" for a in n.attribute
            if a.name == "perm"]


def _runs(model, inputs):
    runner = OnnxRunner(model.SerializeToString())
    return [runner.run(list(args))[0] for args in inputs]




def _keep() -> np.ndarray:
    keep = np.ones((B, T), bool)
    keep[0, 3:] = False  # batch 0: the last two keys padded
    return keep


@pytest.mark.parametrize("mask", ["causal", "causal_lowest", "padding", "none"])
def test_heads_first_keeps_jax_numbers_and_bits(monkeypatch, mask):
    fn = _attention(mask)
    extra = (_keep(),) if mask == "padding" else ()
    xs = _edge_xs()
    runs = [[x, *extra] for x in xs]
    model = _assert_matches_jax(fn, xs, *extra, heads_mixed=True)  # the output's @ WO mixes the heads
    perms = _perms(model)
    assert perms.count([1, 2, 0, 3]) == 1 and [0, 2, 1, 3] not in perms, perms  # the merge, heads first
    assert perms.count([1, 0, 2, 3]) == (1 if mask == "padding" else 0), perms  # the bias [b, 1, 1, t] moved
    got = _runs(model, runs)
    monkeypatch.setattr(attention_heads, "_block", lambda graph, start, splits: None)
    batch_first = jaxconv.to_onnx(fn, xs[0], *extra, check=False)
    assert [1, 2, 0, 3] not in _perms(batch_first)
    assert_same_bits(got, _runs(batch_first, runs))
    monkeypatch.setattr(attention_heads, "rewrite", lambda graph: 0)
    plain = jaxconv.to_onnx(fn, xs[0], *extra, check=False)
    assert _perms(plain).count([0, 2, 1, 3]) >= 3
    assert_same_bits(got, _runs(plain, runs))


@pytest.mark.parametrize("scale", ["div", "mul"])
def test_query_scaled_before_its_transpose(monkeypatch, scale):
    """Flax BERT scales q between the head split and the Transpose: the same op by the same scalar after
    the product per head; a padding mask [b, 1, 1, L] (finfo.min bias) moved heads first."""

    def fn(x, keep):
        y = (x @ WQ).reshape(x.shape[0], x.shape[1], H, DH)
        y = y / np.float32(np.sqrt(DH)) if scale == "div" else y * np.float32(0.3)
        q, k, v = y.transpose(0, 2, 1, 3), _heads(x, WK, BIAS), _heads(x, WV)
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) + jnp.where(keep[:, None, None, :], 0.0, _LOWEST)
        o = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)
        return o.transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[1], D)

    xs, keep = _edge_xs(), _keep()
    runs = [[x, keep] for x in xs]
    model = _assert_matches_jax(fn, xs, keep)
    assert _perms(model).count([1, 2, 0, 3]) == 1 and [0, 2, 1, 3] not in _perms(model), _perms(model)
    got = _runs(model, runs)
    monkeypatch.setattr(attention_heads, "rewrite", lambda graph: 0)
    plain = jaxconv.to_onnx(fn, xs[0], keep, check=False)
    assert _perms(plain).count([0, 2, 1, 3]) >= 3
    assert_same_bits(got, _runs(plain, runs))


def test_probabilities_round_trip(monkeypatch):
    """Hugging Face's Flax attention moves the probabilities through Transposes and Reshapes that give
    them back: read directly, heads first."""

    def fn(x):
        q, k, v = _heads(x, WQ), _heads(x, WK), _heads(x, WV)
        s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), jnp.einsum("bhqd,bhkd->bhqk", q, k), _LOWEST)
        p = jax.nn.softmax(s, axis=-1).transpose(1, 0, 2, 3).reshape(H, 1, B * T * T)
        p = p.reshape(H, B, T, T).transpose(1, 0, 2, 3)
        o = jnp.einsum("bhqk,bhkd->bhqd", p, v)
        return o.transpose(0, 2, 1, 3).reshape(B, T, D)

    xs = _edge_xs()
    model = _assert_matches_jax(fn, xs)
    perms = _perms(model)
    assert perms == [[0, 1, 3, 2], [1, 2, 0, 3]], perms
    got = _runs(model, [[x] for x in xs])
    monkeypatch.setattr(attention_heads, "_round_trip", lambda value: [])
    assert [1, 2, 0, 3] not in _perms(jaxconv.to_onnx(fn, xs[0], check=False))  # the trip is what it read
    monkeypatch.setattr(attention_heads, "rewrite", lambda graph: 0)
    plain = jaxconv.to_onnx(fn, xs[0], check=False)  # (later rules drop the trip)
    assert_same_bits(got, _runs(plain, [[x] for x in xs]))


def test_nan_key_dropped_by_the_mask():
    """A NaN key (its own input) the causal mask drops for query 0: that query's output stays finite, the
    later queries' are NaN, as jax.jit gives them."""

    def fn(x, xk):
        q, k, v = _heads(x, WQ), _heads(xk, WK, BIAS), _heads(x, WV)
        s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), jnp.einsum("bhqd,bhkd->bhqk", q, k) / 2.0, -jnp.inf)
        o = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)
        return o.transpose(0, 2, 1, 3).reshape(B, T, D)

    x = _edge_xs()[0]
    xk = _RNG.standard_normal((B, T, D)).astype(np.float32)
    xk[0, 1, 2] = np.nan
    model = jaxconv.to_onnx(fn, x, xk, check=True)
    assert [1, 2, 0, 3] in _perms(model)
    got = OnnxRunner(model.SerializeToString()).run([x, xk])[0]
    want = np.asarray(jax.jit(fn)(x, xk))
    assert np.isfinite(want[0, 0]).all() and np.isnan(want[0, 1:]).all() and np.isfinite(want[1]).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_symbolic_sizes():
    fn = _attention("causal")
    model = jaxconv.to_onnx(fn, "f32[b,t,8]", check=True)
    assert [1, 2, 0, 3] in _perms(model)
    runner = OnnxRunner(model.SerializeToString())
    for b, t in [(1, 1), (3, 7)]:
        x = _RNG.standard_normal((b, t, D)).astype(np.float32)
        np.testing.assert_allclose(runner.run([x])[0], np.asarray(jax.jit(fn)(x)), rtol=1e-5, atol=1e-5)


def test_readers_across_heads_keep_batch_first():
    """Scores read across the heads (a sum over them), a bias with batch and head axes, the heads
    returned: the layout stays ``[b, h, t, dh]``."""
    xs = _edge_xs()

    def head_sum(x):
        q, k = _heads(x, WQ), _heads(x, WK)
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k)
        o = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), _heads(x, WV))
        return o.transpose(0, 2, 1, 3).reshape(B, T, D), s.sum(axis=1)

    def full_bias(x, bias):
        q, k = _heads(x, WQ), _heads(x, WK)
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) + bias
        o = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), _heads(x, WV))
        return o.transpose(0, 2, 1, 3).reshape(B, T, D)

    def heads_out(x):
        q, k = _heads(x, WQ), _heads(x, WK)
        return jnp.einsum("bhqd,bhkd->bhqk", q, k)

    bias = _RNG.standard_normal((B, H, T, T)).astype(np.float32)
    for fn, extra in ((head_sum, ()), (full_bias, (bias,)), (heads_out, ())):
        model = assert_onnx_matches_jax(fn, xs[0], *extra, inputs_for_run=[[x, *extra] for x in xs[1:4]],
                                        rtol=1e-5, atol=1e-5)
        assert [1, 2, 0, 3] not in _perms(model), fn.__name__
        assert "Unsqueeze" in [n.op_type for n in model.graph.node], fn.__name__  # batch first instead
