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


# ---- symbolic sizes: the lowering computes the Reshape targets at run time (Shape, ReduceProd, Concat)

_SIZES = [dict(b=2, t=16, s=16), dict(b=1, t=5, s=9), dict(b=3, t=9, s=4)]
_TINY = dict(b=2, t=1, s=1)  # one-row products: ORT's vector path may round the sums otherwise
_EDGES = (np.nan, np.inf, -np.inf, -0.0, 3e38, -3e38, 1e-40)
# against jax.jit: no subnormals (XLA on the CPU flushes them) and no +-3e38, whose sums reach inf - inf or not by
# the order the kernels add in (ORT's on AVX-512 and XLA's differ); the same bits as the plain graph holds them all
_JIT_EDGES = _EDGES[:4]


def _specs(*shapes):
    from jax import export

    syms = dict(zip("bts", export.symbolic_shape("b, t, s")))
    return [jax.ShapeDtypeStruct(tuple(syms.get(d, d) for d in shape), np.float32) for shape in shapes]


def _arrays(sizes, *shapes, edges=(), seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for shape in shapes:
        a = rng.standard_normal([sizes.get(d, d) for d in shape]).astype(np.float32)
        if edges:  # one edge value in every third row of the last axis
            flat = a.reshape(-1, a.shape[-1])
            for row, value in zip(range(0, flat.shape[0], 3), edges):
                flat[row, row % flat.shape[1]] = value
        out.append(a)
    return out


def _convert(monkeypatch, fn, specs):
    """(op counts, runner) with the rule and without it."""
    import collections

    import jaxconv
    from jaxconv.runtimes.onnxrt import OnnxRunner

    made = []
    for on in (True, False):
        with monkeypatch.context() as patch:
            if not on:
                patch.setattr(einsum_order, "rewrite", lambda graph: 0)
            model = jaxconv.to_onnx(fn, *specs, check=False)
        ops = collections.Counter(n.op_type for n in model.graph.node)
        made.append((ops, OnnxRunner(model.SerializeToString())))
    return made


def _check(monkeypatch, fn, shapes, edges):
    (ops, runner), (plain_ops, plain) = _convert(monkeypatch, fn, _specs(*shapes))
    assert ops["Transpose"] < plain_ops["Transpose"], (plain_ops, ops)
    assert sum(ops.values()) < sum(plain_ops.values()), (plain_ops, ops)
    for sizes in _SIZES:
        args = _arrays(sizes, *shapes, edges=_EDGES if edges else ())
        assert_same_bits(runner.run(args), plain.run(args))
        args = _arrays(sizes, *shapes, edges=_JIT_EDGES if edges else ())
        assert_same_floats(runner.run(args)[0], jax.jit(fn)(*args), 2e-6, 1e-6)
    args = _arrays(_TINY, *shapes)
    assert_same_floats(runner.run(args)[0], jax.jit(fn)(*args), 2e-6, 1e-6)
    return ops


@pytest.mark.parametrize("edges", [False, True])
def test_symbolic_scores_come_out_in_order_with_the_same_bits(monkeypatch, edges):
    ops = _check(monkeypatch, _scores, [("b", "t", 2, 3, 8), ("b", "s", 2, 8)], edges)
    assert ops["Transpose"] == 2 and ops["ReduceProd"] == 0, ops


@pytest.mark.parametrize("edges", [False, True])
def test_symbolic_probabilities_times_values_keep_the_bits(monkeypatch, edges):
    ops = _check(monkeypatch, _values, [("b", 2, 3, "t", "s"), ("b", "s", 2, 8)], edges)
    assert ops["Transpose"] == 2 and ops["ReduceProd"] == 0, ops


def _values_left(p, v):
    """Flax NNX's form: ``v[b, s, h, d]`` times ``p[1, b, h, t, s]`` (a group of one, first) with the
    values on the left, the result transposed twice and merged back to ``[b, t, h*d]``."""
    out = jax.lax.dot_general(v, p, (((1,), (4,)), ((0, 2), (1, 2))))  # [b, h, d, 1, t]
    out = jnp.transpose(jnp.transpose(out, (3, 0, 4, 1, 2)), (1, 2, 3, 0, 4))  # [b, t, h, 1, d]
    return out.reshape(out.shape[0], out.shape[1], -1)


@pytest.mark.parametrize("edges", [False, True])
def test_values_on_the_left_with_a_group_of_one(monkeypatch, edges):
    ops = _check(monkeypatch, _values_left, [(1, "b", 4, "t", "s"), ("b", "s", 4, 8)], edges)
    assert ops["Transpose"] == 2, ops  # the values' [b, h, s, d] and the result's [b, t, h, d]


def test_static_values_on_the_left_are_left_to_the_runtime(monkeypatch):
    """Static, the probabilities' Transpose is a swap of their last two axes once ``transposes`` drops the
    axis of length 1, which ONNX Runtime folds into its MatMul (keras-hub Llama measured 1.02-1.05x the
    CPU time re-planned): no plan moves fewer elements, and the chain stays."""
    p, v = _arrays(_SIZES[0], (1, "b", 4, "t", "s"), ("b", "s", 4, 8), edges=_EDGES)
    ops, got = convert_and_run(_values_left, p, v)
    plain_ops, plain = _plain(monkeypatch, _values_left, p, v)
    assert ops == plain_ops
    assert_same_bits(got, plain)


def test_nnx_attention_with_symbolic_lengths(monkeypatch):
    nnx = pytest.importorskip("flax.nnx")

    def attention(q, k, v, mask):
        return nnx.dot_product_attention(q, k, v, mask=mask > 0)

    shapes = [("b", "t", 4, 8), ("b", "s", 4, 8), ("b", "s", 4, 8), ("b", 1, "t", "s")]
    (ops, runner), (plain_ops, plain) = _convert(monkeypatch, attention, _specs(*shapes))
    assert ops["Transpose"] < plain_ops["Transpose"], (plain_ops, ops)
    for sizes in _SIZES:
        args = _arrays(sizes, *shapes, edges=_EDGES)
        args[3] = np.where(args[3] > -1.5, 1.0, 0.0).astype(np.float32)  # a mask; one query sees no key
        args[3][0, 0, 0, :] = 0.0
        assert_same_bits(runner.run(args), plain.run(args))
        args[:3] = _arrays(sizes, *shapes[:3], edges=_JIT_EDGES, seed=1)
        assert_same_floats(runner.run(args)[0], jax.jit(attention)(*args), 2e-5, 1e-5)


@pytest.mark.parametrize("equation", ["bqhd,bkhd->bhqk", "bhqk,bkhd->bqhd"])
def test_symbolic_forms_without_a_saving_are_left_alone(monkeypatch, equation):
    shapes = {"bqhd,bkhd->bhqk": (("b", "t", 4, 8), ("b", "s", 4, 8)),
              "bhqk,bkhd->bqhd": (("b", 4, "t", "s"), ("b", "s", 4, 8))}[equation]
    fn = lambda a, b: jnp.einsum(equation, a, b)  # noqa: E731
    (ops, runner), (plain_ops, plain) = _convert(monkeypatch, fn, _specs(*shapes))
    assert ops == plain_ops
    args = _arrays(_SIZES[1], *shapes)
    assert_same_bits(runner.run(args), plain.run(args))
