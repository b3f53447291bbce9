"""jaxconv.onnx.rewrites.attention_heads: q, k and v projected head-major by one MatMul with the weight laid
out per head instead of ``x @ W``, a Reshape and a Transpose; jax.jit's numbers, ONNX Runtime's bit for
bit the same as without the rule."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxconv
from jaxconv.compare import compare
from jaxconv.onnx import rewrites
from jaxconv.onnx.rewrites import attention_heads
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_onnx_matches_jax

B, T, H, DH = 2, 5, 2, 4
D = H * DH
_RNG = np.random.default_rng(4)
WQ, WK, WV = (_RNG.standard_normal((D, D)).astype(np.float32) for _ in range(3))
BIAS = _RNG.standard_normal(D).astype(np.float32)


@pytest.fixture(autouse=True)
def _heads_on_one_thread_models(monkeypatch):
    """These models are small enough to record one intra-op thread, where the rule stays off by default."""
    monkeypatch.setattr(rewrites, "HEADS_ON_ONE_THREAD", True)


def _layer(bias: bool):
    def fn(x):
        def heads(w, c=None):
            y = x @ w if c is None else x @ w + c
            return y.reshape(x.shape[0], x.shape[1], H, DH).transpose(0, 2, 1, 3)

        q, k, v = heads(WQ), heads(WK, BIAS if bias else None), heads(WV)
        p = jax.nn.softmax(jnp.einsum("bhqd,bhkd->bhqk", q, k) / 2.0, axis=-1)
        o = jnp.einsum("bhqk,bhkd->bhqd", p, v)
        return o.transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[1], D)

    return fn


def _edge_inputs():
    x = _RNG.standard_normal((B, T, D)).astype(np.float32)
    out = []
    for value in (np.nan, np.inf, -np.inf, -0.0, np.finfo(np.float32).max, -np.finfo(np.float32).max):
        e = x.copy()
        e[1, 2, 3] = value
        out.append([e])
    zeros = np.zeros_like(x)
    zeros[0] = -0.0
    return x, out + [[zeros]]


@pytest.mark.parametrize("bias", [False, True], ids=["plain", "bias"])
def test_heads_projected_head_major(monkeypatch, bias):
    fn = _layer(bias)
    x, edges = _edge_inputs()
    model = assert_onnx_matches_jax(fn, x, inputs_for_run=edges, rtol=1e-5, atol=1e-6)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Transpose") == 2 and ops.count("Unsqueeze") == 1, ops  # k's last two axes, the output
    jaxconv.to_onnx(fn, x, check=True)
    got = OnnxRunner(model.SerializeToString())
    monkeypatch.setattr(attention_heads, "rewrite", lambda graph: 0)
    plain = jaxconv.to_onnx(fn, x, check=False)
    assert [n.op_type for n in plain.graph.node].count("Transpose") == 4
    plain_runner = OnnxRunner(plain.SerializeToString())
    for (inputs,) in [[x], *edges]:
        a, b = got.run([inputs])[0], plain_runner.run([inputs])[0]
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def test_symbolic_sizes():
    fn = _layer(True)
    model = jaxconv.to_onnx(fn, "f32[b,t,8]", check=True)
    assert [n.op_type for n in model.graph.node].count("Transpose") == 2
    runner = OnnxRunner(model.SerializeToString())
    for b, t in [(1, 1), (3, 7)]:
        x = _RNG.standard_normal((b, t, D)).astype(np.float32)
        result = compare("out", np.asarray(jax.jit(fn)(x)), runner.run([x])[0])  # the converter's tolerance
        assert result.ok, (b, t, result.max_abs, result.note)


def test_weights_from_inputs_and_other_splits_are_left_alone():
    x, _ = _edge_inputs()

    def weight_input(x, w):  # the weight is not a constant
        y = (x @ w).reshape(B, T, H, DH).transpose(0, 2, 1, 3)
        return jnp.einsum("bhqd,bhkd->bhqk", y, y)

    def other_perm(x):  # heads last: not a head split
        y = (x @ WQ).reshape(B, T, H, DH).transpose(0, 3, 1, 2)
        return y * 2.0

    for fn, args in ((weight_input, (x, WQ)), (other_perm, (x,))):
        model = assert_onnx_matches_jax(fn, *args)
        assert "Unsqueeze" not in [n.op_type for n in model.graph.node], fn.__name__


def test_heads_stay_batch_first_in_models_that_run_on_one_thread(monkeypatch):
    """Off where the model records one intra-op thread (head-major products cost 1.02-1.08x the CPU time
    there); on where its products are big enough for two (a [1024, 256] x [256, 256] projection)."""
    monkeypatch.setattr(rewrites, "HEADS_ON_ONE_THREAD", False)
    small = jaxconv.to_onnx(_layer(False), jax.ShapeDtypeStruct((B, T, D), jnp.float32), check=False)
    assert dict((p.key, p.value) for p in small.metadata_props).get("jaxconv.intra_op_threads") == "1"
    assert [n.op_type for n in small.graph.node].count("Transpose") == 4  # q, k, v and the output: batch first

    r = np.random.default_rng(9)
    w = [(r.standard_normal((256, 256)) / 16).astype(np.float32) for _ in range(3)]

    def big(x):
        q, k, v = (y.reshape(8, 128, 4, 64).transpose(0, 2, 1, 3) for y in (x @ w[0], x @ w[1], x @ w[2]))
        p = jax.nn.softmax(jnp.einsum("bhqd,bhkd->bhqk", q, k) / 8.0, axis=-1)
        return jnp.einsum("bhqk,bhkd->bhqd", p, v).transpose(0, 2, 1, 3).reshape(8, 128, 256)

    x = r.standard_normal((8, 128, 256)).astype(np.float32)
    model = assert_onnx_matches_jax(big, x, rtol=1e-5, atol=1e-5)
    assert "jaxconv.intra_op_threads" not in dict((p.key, p.value) for p in model.metadata_props)
    assert any(len(i.dims) >= 3 for i in model.graph.initializer), "no per-head weight: the rule did not fire"
