"""Symbolic-size rules around an encoder's embeddings and layer norms: the symbolic rule follows shapes
through CumSum (RoBERTa's position ids from the padding mask) and reads ``x`` for a float ``Mul(x, ones)``
that only broadcasts (a layer norm's scale of ones); where_consts picks the operand of jnp.var's ``ddof``
guard (a Where of a constant condition) of a symbolic shape. Each graph's numbers are those of the graph
without the change, bit for bit (NaN, ±inf, -0.0 in the inputs), and jax.jit's."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import jaxconv
from jaxconv.onnx.rewrites import layer_norm, rms_norm, symbolic, where_consts
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_bits, assert_same_floats, op_counts

TABLE = np.random.default_rng(4).standard_normal((40, 8)).astype(np.float32)
TABLE[3] = [np.nan, np.inf, -np.inf, -0.0, 0.0, 3.4e38, -3.4e38, 1e-42]
ONES = np.ones(8, np.float32)


def _x(s: int) -> np.ndarray:
    x = np.random.default_rng(s).standard_normal((2, s, 8)).astype(np.float32)
    x[0, 0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    x[1, -1, :] = -0.0
    return x


def _ids(s: int) -> np.ndarray:
    ids = np.random.default_rng(s).integers(2, 30, (2, s)).astype(np.int32)
    ids[1, s // 2:] = 1  # padding
    return ids


def _positions(ids, x):
    """RoBERTa's position ids: the running count of real tokens, 1 (the pad id) on padding."""
    keep = (ids != 1).astype(np.int32)
    pos = jnp.cumsum(keep, axis=1) * keep + 1
    y = x + jnp.take(jnp.asarray(TABLE), pos, axis=0)
    return y - jnp.mean(y, axis=-1, keepdims=True)


def _scaled_norm(x):
    """A layer norm whose scale is ones (as initialized), the scale applied to ``rsqrt(var)`` first."""
    d = x - jnp.mean(x, axis=-1, keepdims=True)
    inv = ONES * lax.rsqrt(jnp.mean(d * d, axis=-1, keepdims=True) + 1e-5)
    return inv * d


def _variance(x):
    return jnp.var(x, axis=-1, keepdims=True) * 2.0


def _ops(model) -> collections.Counter:
    return op_counts(model.graph)  # the If branches of a norm's overflow guard too


def _check(fn, model, plain, inputs) -> None:
    runner, plain_runner = OnnxRunner(model.SerializeToString()), OnnxRunner(plain.SerializeToString())
    for args in inputs:
        got = runner.run(list(args))
        assert_same_bits(got, plain_runner.run(list(args)))
        assert_same_floats(got[0], jax.jit(fn)(*args), 1e-5, 1e-5)  # a mean's sums: XLA adds in its own order


def test_shapes_follow_a_cumsum(monkeypatch):
    specs = ("i32[2,s]", "f32[2,s,8]")
    model = jaxconv.to_onnx(_positions, *specs, check=False)
    with monkeypatch.context() as patch:
        patch.setattr(symbolic, "_SAME_SHAPE", symbolic._SAME_SHAPE - {"CumSum"})
        plain = jaxconv.to_onnx(_positions, *specs, check=False)
    assert _ops(plain)["Expand"] >= 1
    assert _ops(model)["Expand"] == 0
    _check(_positions, model, plain, [(_ids(s), _x(s)) for s in (1, 6, 17)])


def test_a_scale_of_ones_goes(monkeypatch):
    """(With layer_norm off: it makes this norm one op, the scale of ones its scale.)"""
    monkeypatch.setattr(layer_norm, "rewrite", lambda *args: 0)
    inputs = [(_x(s),) for s in (1, 5, 12)]
    model = jaxconv.to_onnx(_scaled_norm, "f32[2,s,8]", check=False)
    assert _ops(model)["Pow"] == 1  # without the ones the norm is rms_norm's form of ``d``
    runner = OnnxRunner(model.SerializeToString())
    for args in inputs:
        assert_same_floats(runner.run(list(args))[0], jax.jit(_scaled_norm)(*args), 1e-5, 1e-5)
    with monkeypatch.context() as patch:  # the same graph but for the Mul: the same bits
        patch.setattr(rms_norm, "rewrite", lambda *args: 0)
        model = jaxconv.to_onnx(_scaled_norm, "f32[2,s,8]", check=False)
        patch.setattr(symbolic, "_broadcast_source", m_expand_input)
        plain = jaxconv.to_onnx(_scaled_norm, "f32[2,s,8]", check=False)
    assert _ops(model)["Mul"] < _ops(plain)["Mul"]
    _check(_scaled_norm, model, plain, inputs)


def m_expand_input(value, keep_unit_muls=False):
    """The symbolic rule's reading before the scale of ones: an Expand's input only."""
    node = value.producer() if value is not None else None
    return node.inputs[0] if node is not None and node.op_type == "Expand" else None


def test_the_variance_guard_of_a_symbolic_shape_goes(monkeypatch):
    model = jaxconv.to_onnx(_variance, "f32[2,s,8]", check=False)
    with monkeypatch.context() as patch:
        patch.setattr(where_consts, "rewrite", lambda *args: 0)
        plain = jaxconv.to_onnx(_variance, "f32[2,s,8]", check=False)
    assert _ops(plain)["Where"] >= 1
    assert _ops(model)["Where"] == 0
    _check(_variance, model, plain, [(_x(s),) for s in (1, 3, 9)])


def test_a_constant_choice_that_broadcasts_stays():
    def fn(x, y):  # the chosen operand [2, s, 1] is broadcast by the other [8]: the Where keeps its shape
        return jnp.where(jnp.zeros((), bool), y, x)

    model = jaxconv.to_onnx(fn, "f32[2,s,1]", "f32[8]", check=False)
    runner = OnnxRunner(model.SerializeToString())
    for s in (1, 4):
        x, y = _x(s)[..., :1], np.arange(8, dtype=np.float32)
        assert_same_bits(runner.run([x, y]), [np.asarray(jax.jit(fn)(x, y))])


def _head_mask(p):
    """Hugging Face's head mask of ones on attention probabilities (an einsum: a Mul by ``[h, 1, 1]``
    between Transposes)."""
    return jnp.einsum("...hqk,h->...hqk", p, jnp.ones(4, np.float32)) * 3.0


def test_a_head_mask_of_ones_and_its_reshapes_go(monkeypatch):
    specs = ("f32[2,4,s,s]",)
    model = jaxconv.to_onnx(_head_mask, *specs, check=False)
    with monkeypatch.context() as patch:
        patch.setattr(symbolic, "_unit_mul", lambda *args: False)
        plain = jaxconv.to_onnx(_head_mask, *specs, check=False)
    assert _ops(plain)["Mul"] == 2  # the mask's Mul by ones, then * 3
    assert _ops(model)["Mul"] == 1
    assert _ops(model)["Reshape"] == _ops(model)["Transpose"] == 0
    inputs = []
    for s in (1, 3, 7):
        p = np.random.default_rng(s).standard_normal((2, 4, s, s)).astype(np.float32)
        p[0, 1, 0, :] = [np.nan, np.inf, -np.inf, -0.0, 1e-42, 3.4e38, -3.4e38][:s]
        inputs.append((p,))
    _check(_head_mask, model, plain, inputs)


def _one_pass_norm(y):
    """A layer norm over the last axis with Flax's one-pass variance, unscaled."""
    mean = jnp.mean(y, axis=-1, keepdims=True)
    var = jnp.maximum(0.0, jnp.mean(y * y, axis=-1, keepdims=True) - mean * mean)
    return (y - mean) * lax.rsqrt(var + 1e-6)


_PATCH = np.random.default_rng(5).standard_normal((4, 4, 3, 8)).astype(np.float32) * 0.2  # HWIO
_CLS = np.random.default_rng(6).standard_normal((1, 1, 8)).astype(np.float32)


def _patch_embedding_norm(x):
    """A ViT's start on a symbolic batch (Hugging Face's Flax ViT): patches by a strided conv, a class token
    concatenated, a layer norm with Flax's one-pass variance."""
    y = lax.conv_general_dilated(x, jnp.asarray(_PATCH), (4, 4), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    y = y.reshape(y.shape[0], -1, 8)
    y = jnp.concatenate([jnp.broadcast_to(jnp.asarray(_CLS), (x.shape[0], 1, 8)), y], axis=1)
    return _one_pass_norm(y)


def test_shapes_follow_a_conv_and_a_concat(monkeypatch):
    model = jaxconv.to_onnx(_patch_embedding_norm, "f32[b,16,16,3]", check=False)
    with monkeypatch.context() as patch:
        patch.setattr(symbolic, "_WINDOWED", frozenset())
        patch.setattr(symbolic._Shapes, "_concat", lambda self, node: None)
        plain = jaxconv.to_onnx(_patch_embedding_norm, "f32[b,16,16,3]", check=False)
    assert _ops(plain)["Expand"] >= 2 and _ops(plain)["LayerNormalization"] == 0
    assert _ops(model)["LayerNormalization"] == 1
    assert _ops(model)["Expand"] == 1  # the class token's, to the batch
    inputs = []
    for b in (1, 3):
        x = np.random.default_rng(b).standard_normal((b, 16, 16, 3)).astype(np.float32)
        x[0, 0, 0, :3] = [np.nan, np.inf, -0.0]
        inputs.append((x,))
    runner = OnnxRunner(model.SerializeToString())
    for args in inputs:
        assert_same_floats(runner.run(list(args))[0], jax.jit(_patch_embedding_norm)(*args), 1e-5, 1e-5)


_EMBED = np.random.default_rng(7).standard_normal((12, 8)).astype(np.float32)


def _shifted_embedding_norm(ids):
    """BART's decoder start on a symbolic batch: the ids shifted right (two scatters), looked up, normed."""
    shifted = jnp.zeros_like(ids).at[:, 1:].set(ids[:, :-1]).at[:, 0].set(2)
    y = jnp.take(jnp.asarray(_EMBED), shifted, axis=0)
    return _one_pass_norm(y)


def test_shapes_follow_a_scatter_cut_back_from_its_pad(monkeypatch):
    model = jaxconv.to_onnx(_shifted_embedding_norm, "i32[b,6]", check=False)
    with monkeypatch.context() as patch:
        patch.setattr(symbolic._Shapes, "_unpadded", lambda *args: None)
        plain = jaxconv.to_onnx(_shifted_embedding_norm, "i32[b,6]", check=False)
    assert _ops(plain)["LayerNormalization"] == 0 and _ops(plain)["Expand"] >= 2
    assert _ops(model)["LayerNormalization"] == 1
    runner = OnnxRunner(model.SerializeToString())
    for b in (1, 3):
        ids = np.random.default_rng(b).integers(0, 12, (b, 6)).astype(np.int32)
        assert_same_floats(runner.run([ids])[0], jax.jit(_shifted_embedding_norm)(ids), 1e-5, 1e-5)


def _flat_norm(x):
    """OPT's feed-forward input on a symbolic batch: [b, s, d] flattened to [b * s, d], then a layer norm."""
    y = x.reshape(-1, x.shape[-1]) * 2.0
    return _one_pass_norm(y)


def test_a_product_of_symbolic_sizes_is_named_once(monkeypatch):
    model = jaxconv.to_onnx(_flat_norm, "f32[b,5,8]", check=False)
    with monkeypatch.context() as patch:  # without products: b * 5 is a new size at each of its uses
        patch.setattr(symbolic, "_product", lambda over, under: over[0] if len(over) == 1 and not under else None)
        plain = jaxconv.to_onnx(_flat_norm, "f32[b,5,8]", check=False)
    assert _ops(plain)["LayerNormalization"] == 0
    assert _ops(model)["LayerNormalization"] == 1 and _ops(model)["Expand"] == 0
    runner = OnnxRunner(model.SerializeToString())
    for b in (1, 3):
        x = _x(5)[:1].repeat(b, axis=0) * np.float32(b)
        assert_same_floats(runner.run([x])[0], jax.jit(_flat_norm)(x), 1e-5, 1e-5)


def _reversed_mask_norm(ids, x):
    """wav2vec2's padding mask on a symbolic batch: a cumulative sum taken from the end (x[:, ::-1] twice)
    selects the frames, then a layer norm."""
    keep = jnp.flip(jnp.cumsum(jnp.flip(ids, axis=-1), axis=-1), axis=-1) > 0
    y = jnp.where(keep[..., None], x, 0.0)
    return _one_pass_norm(y)


def test_shapes_follow_a_reversed_axis():
    model = jaxconv.to_onnx(_reversed_mask_norm, "i32[b,6]", "f32[b,6,8]", check=False)
    assert _ops(model)["LayerNormalization"] == 1 and _ops(model)["Expand"] == 0
    runner = OnnxRunner(model.SerializeToString())
    for b in (1, 3):
        ids = np.random.default_rng(b).integers(0, 2, (b, 6)).astype(np.int32)
        x = _x(6)[:1].repeat(b, axis=0)
        assert_same_floats(runner.run([ids, x])[0], jax.jit(_reversed_mask_norm)(ids, x), 1e-5, 1e-5)
