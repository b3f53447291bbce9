"""Rewrites that follow symbolic dimensions (jaxconv.onnx.rewrites.symbolic, keepdims): each fires on
a function converted with a symbolic dimension and keeps jax.jit's numbers at several sizes."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnx_ir as ir
import pytest

import jaxconv
from jaxconv.onnx import rewrites
from jaxconv.runtimes.onnxrt import OnnxRunner

D, HEADS = 16, 2


def _weights():
    rng = np.random.default_rng(1)
    return (rng.standard_normal((D, 3 * D)).astype(np.float32) / 4,
            rng.standard_normal((D, D)).astype(np.float32) / 4,
            1 + rng.standard_normal(D).astype(np.float32) / 10)


def _attention(x):
    wqkv, wo, g = _weights()
    b, t, _ = x.shape
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    x = (x - mu) / jnp.sqrt(var + 1e-5) * g
    split = lambda y: y.reshape(b, t, HEADS, D // HEADS).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = (split(y) for y in jnp.split(x @ wqkv, 3, axis=-1))
    logits = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(D // HEADS)
    logits = jnp.where(jnp.tril(jnp.ones((t, t), bool)), logits, -jnp.inf)
    out = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(logits, axis=-1), v)
    return out.transpose(0, 2, 1, 3).reshape(b, t, D) @ wo


def _ops(model: onnx.ModelProto) -> collections.Counter:
    return collections.Counter(n.op_type for n in model.graph.node)


def _convert_without(fn, spec: str, *rules: str) -> onnx.ModelProto:
    saved = {r: getattr(rewrites, r).rewrite for r in rules}
    try:
        for r in rules:
            setattr(getattr(rewrites, r), "rewrite", lambda graph, **kwargs: 0)
        return jaxconv.to_onnx(fn, spec, check=False)
    finally:
        for r, f in saved.items():
            setattr(getattr(rewrites, r), "rewrite", f)


def test_attention_with_a_symbolic_length_has_no_full_size_broadcasts():
    model = jaxconv.to_onnx(_attention, f"f32[3,t,{D}]", check=False)
    ops = _ops(model)
    before = _ops(_convert_without(_attention, f"f32[3,t,{D}]", "symbolic", "keepdims"))
    # the scale, the -inf fill and the mask are broadcast by Div/Where, not by Expands of [3, 2, t, t]
    assert ops["Expand"] == 0 < before["Expand"]
    # q, k, v: one Split of the projection (symbolic), then one MatMul per part (split_matmul)
    assert ops["Split"] == 0 and ops["Slice"] == 0 and ops["MatMul"] >= 3
    assert ops["Unsqueeze"] < before["Unsqueeze"]  # means keep their axis (keepdims=1)
    assert sum(ops.values()) < sum(before.values())
    runner = OnnxRunner(model.SerializeToString())
    for t in (1, 5, 12):
        x = np.random.default_rng(t).standard_normal((3, t, D)).astype(np.float32)
        (got,) = runner.run([x])
        np.testing.assert_allclose(got, jax.jit(_attention)(x), rtol=2e-5, atol=2e-6)


def test_dense_layer_on_a_3d_input_is_one_matmul():
    w = np.random.default_rng(0).standard_normal((D, 8)).astype(np.float32)

    def fn(x):
        return x @ w

    model = jaxconv.to_onnx(fn, f"f32[2,t,{D}]", check=False)
    assert _ops(model)["MatMul"] == 1 and _ops(model)["Reshape"] == 0
    runner = OnnxRunner(model.SerializeToString())
    for t in (1, 7):
        x = np.random.default_rng(t).standard_normal((2, t, D)).astype(np.float32)
        np.testing.assert_allclose(runner.run([x])[0], jax.jit(fn)(x), rtol=1e-5, atol=1e-6)


def test_heads_merged_into_a_dense_layer_reshape_once():
    w = np.random.default_rng(0).standard_normal((D, 8)).astype(np.float32)

    def fn(x):  # [b, t, heads, d/heads] -> [b, t, d] @ w
        return x.reshape(x.shape[0], x.shape[1], D) @ w

    model = jaxconv.to_onnx(fn, f"f32[2,t,{HEADS},{D // HEADS}]", check=False)
    assert _ops(model)["Reshape"] == 1 and _ops(model)["MatMul"] == 1
    x = np.random.default_rng(3).standard_normal((2, 5, HEADS, D // HEADS)).astype(np.float32)
    (got,) = OnnxRunner(model.SerializeToString()).run([x])
    np.testing.assert_allclose(got, jax.jit(fn)(x), rtol=1e-5, atol=1e-6)


def _ir_model(text: str) -> ir.Model:
    return ir.from_proto(onnx.parser.parse_model(text))


def test_expand_that_enlarges_the_output_stays():
    # y = x[t,1] + Expand(c, [t,4]): the Expand sets the output's last dim
    text = """<ir_version: 10, opset_import: ["" : 21]>
    g (float[t,1] x) => (float[t,4] y) <float c = {2.}, int64[1] four = {4}>
    { s = Shape(x)
    n = Slice(s, zero, one)
    shp = Concat<axis=0>(n, four)
    e = Expand(c, shp)
    y = Add(x, e) }"""
    text = text.replace("<float c = {2.}, int64[1] four = {4}>",
                        "<float c = {2.}, int64[1] four = {4}, int64[1] zero = {0}, int64[1] one = {1}>")
    model = _ir_model(text)
    rewrites.symbolic.rewrite(model.graph)
    add = next(n for n in model.graph if n.op_type == "Add")
    assert add.inputs[1].producer().op_type == "Expand"
    x = np.arange(3, dtype=np.float32).reshape(3, 1)
    (got,) = OnnxRunner(ir.to_proto(model).SerializeToString()).run([x])
    np.testing.assert_array_equal(got, np.broadcast_to(x + 2, (3, 4)))


def test_expand_to_the_other_operands_shape_goes():
    text = """<ir_version: 10, opset_import: ["" : 21]>
    g (float[t,4] x) => (float[t,4] y) <float c = {2.}>
    { s = Shape(x)
    e = Expand(c, s)
    y = Mul(x, e) }"""
    model = _ir_model(text)
    assert rewrites.symbolic.rewrite(model.graph) >= 1
    mul = next(n for n in model.graph if n.op_type == "Mul")
    assert mul.inputs[1].const_value is not None
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    (got,) = OnnxRunner(ir.to_proto(model).SerializeToString()).run([x])
    np.testing.assert_array_equal(got, x * 2)


@pytest.mark.parametrize("keepdims_consumer", [True, False])
def test_unsqueezed_sum_keeps_its_axis_and_zero_sign(keepdims_consumer):
    def fn(x):
        s = jnp.sum(x, axis=-1, keepdims=True)
        return x - s if keepdims_consumer else s

    x = np.array([[-0.0, -0.0, -0.0], [1.0, -1.0, 0.5], [np.nan, 1.0, 2.0]], np.float32)
    model = jaxconv.to_onnx(fn, "f32[3,3]", check=False)
    assert _ops(model)["Unsqueeze"] == 0
    (got,) = OnnxRunner(model.SerializeToString()).run([x])
    want = np.asarray(jax.jit(fn)(x))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(want)], want[~np.isnan(want)])
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_shared_projection_into_heads_is_matmul_then_one_reshape():
    rng = np.random.default_rng(0)
    wq, wk = (rng.standard_normal((D, D)).astype(np.float32) for _ in range(2))

    def fn(x):  # q and k heads from one [b, t, d] input (Flax's DenseGeneral)
        q = jnp.einsum("btd,dhk->bthk", x, wq.reshape(D, HEADS, D // HEADS))
        k = jnp.einsum("btd,dhk->bthk", x, wk.reshape(D, HEADS, D // HEADS))
        return q * k

    model = jaxconv.to_onnx(fn, f"f32[2,5,{D}]", check=False)
    ops = _ops(model)
    before = _ops(_convert_without(fn, f"f32[2,5,{D}]", "symbolic"))
    assert ops["MatMul"] == 2 and ops["Reshape"] == 2 < before["Reshape"]
    x = rng.standard_normal((2, 5, D)).astype(np.float32)
    (got,) = OnnxRunner(model.SerializeToString()).run([x])
    np.testing.assert_allclose(got, jax.jit(fn)(x), rtol=1e-4, atol=1e-5)


def test_variance_from_two_means_keeps_the_reduced_axis():
    def fn(x):  # Flax's LayerNorm statistics: var = max(0, E[x^2] - E[x]^2)
        mean = jnp.mean(x, axis=-1)
        var = jnp.maximum(0.0, jnp.mean(x * x, axis=-1) - mean * mean)
        return (x - mean[..., None]) * jax.lax.rsqrt(var[..., None] + 1e-6)

    x = np.array([[1.0, 2.0, 4.0], [-0.0, -0.0, -0.0], [3.0, 3.0, 3.0], [np.nan, 1.0, 0.0]], np.float32)
    model = jaxconv.to_onnx(fn, "f32[4,3]", check=False)
    assert _ops(model)["Unsqueeze"] < _ops(_convert_without(fn, "f32[4,3]", "keepdims"))["Unsqueeze"]
    (got,) = OnnxRunner(model.SerializeToString()).run([x])
    want = np.asarray(jax.jit(fn)(x))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.signbit(got[want == 0]), np.signbit(want[want == 0]))


_ROUTER = np.random.default_rng(5).standard_normal((D, 4)).astype(np.float32)


def _routing(x):
    """A mixture of experts' routing (keras-hub Mixtral's): the top 2 of 4 experts per token, their
    weights renormalized, spread back over the experts by one-hot products."""
    top, idx = jax.lax.top_k(jax.nn.softmax(x @ _ROUTER, axis=-1), 2)
    top = top / top.sum(-1, keepdims=True)
    return (jax.nn.one_hot(idx, 4) * top[..., None]).sum(-2)


def test_top_k_keeps_the_symbolic_rows():
    """TopK's outputs have its input's shape but for the axis cut to k: the one-hot products after it need
    no Expands to run-time shapes, and the symbolic graph is the static one."""
    model = jaxconv.to_onnx(_routing, f"f32[b,8,{D}]", check=False)
    assert _ops(model) == _ops(jaxconv.to_onnx(_routing, f"f32[2,8,{D}]", check=False))
    assert _ops(model)["Expand"] == _ops(model)["Shape"] == 0, _ops(model)
    runner = OnnxRunner(model.SerializeToString())
    for b in (1, 3):
        x = np.random.default_rng(b).standard_normal((b, 8, D)).astype(np.float32)
        x[0, 0, 0], x[-1, 1, 2], x[0, 2] = np.nan, np.inf, -0.0
        got, = runner.run([x])
        want = np.asarray(jax.jit(_routing)(x))
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


_TOKENS = np.random.default_rng(6).standard_normal((50, D)).astype(np.float32)
_POSITIONS = np.random.default_rng(7).standard_normal((32, D)).astype(np.float32)
_ANGLES = np.arange(32, dtype=np.float32)[:, None] / (100.0 ** (np.arange(D // 2, dtype=np.float32) / (D // 2)))
_ROTARY_TABLE = np.concatenate([np.sin(_ANGLES), np.cos(_ANGLES)], axis=-1)  # [32, D]: sin | cos


def _positions(ids):
    """Hugging Face's learned positions: ``arange(t)`` broadcast over the batch, looked up in a table."""
    b, t = ids.shape
    pos = jnp.broadcast_to(jnp.arange(t)[None], (b, t))
    return jnp.take(_TOKENS, ids, axis=0) + jnp.take(_POSITIONS, pos, axis=0)


def _rotated(ids):
    """Llama's rotary embedding from a table looked up by broadcast positions, cut into sin and cos."""
    x = jnp.take(_TOKENS, ids, axis=0)
    b, t = ids.shape
    sin, cos = jnp.split(jnp.take(_ROTARY_TABLE, jnp.broadcast_to(jnp.arange(t)[None], (b, t)), axis=0), 2, -1)
    sin, cos = jnp.concatenate([sin, sin], -1), jnp.concatenate([cos, cos], -1)
    half = D // 2
    turned = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + turned * sin


@pytest.mark.parametrize("fn", [_positions, _rotated])
def test_positions_broadcast_over_the_batch_are_looked_up_once(fn):
    """A lookup (Gather) of indices broadcast over the batch is the broadcast of the lookup, and a Split
    along an axis they are not broadcast on is too: the Expand of the positions goes, the table lookup
    folds to a constant, and the symbolic graph is the static one."""
    model = jaxconv.to_onnx(fn, "i32[b,12]", check=False)
    ops, static = _ops(model), _ops(jaxconv.to_onnx(fn, "i32[2,12]", check=False))
    # the ids' range check drops an axis by a Reshape on a static batch, a Squeeze on a symbolic one; the
    # symbolic table is [1, 12, D], a half of the rotated [b, 12, D] or less, so the rotary rule folds its Neg
    negs = collections.Counter({"Neg": static["Neg"] - ops["Neg"]})
    assert ops - collections.Counter({"Squeeze": 1}) == static - collections.Counter({"Reshape": 1}) - negs, (ops, static)
    assert ops["Neg"] == 0, ops
    assert ops["Expand"] == ops["Shape"] == 0, ops
    runner = OnnxRunner(model.SerializeToString())
    for b in (1, 3):
        ids = np.random.default_rng(b).integers(0, 50, (b, 12)).astype(np.int32)
        got, = runner.run([ids])
        np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(ids)), rtol=1e-6, atol=1e-6)
