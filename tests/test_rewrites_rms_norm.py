"""jaxconv.onnx.rewrites.rms_norm: an RMS norm over the last axis in the form ORT fuses into one kernel
(SimplifiedLayerNormalization in its optimized graph); jax.jit's numbers kept within the converter's
tolerance (rows with NaN, infinities, -0.0, squares that overflow, tiny values), other forms left alone."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import rms_norm
from lowering_check import assert_same_floats

D = 32
_W = (1 + 0.1 * np.random.default_rng(21).standard_normal(D)).astype(np.float32)
_W[3] = -0.5  # a negative weight: zeros change sign


def _rows() -> np.ndarray:
    x = np.random.default_rng(22).standard_normal((2, 8, D)).astype(np.float32)
    x[0, 0] *= 1e20  # squares overflow: the row is zeros of x's (and w's) signs
    x[0, 1] = -0.0
    x[0, 2] = 0.0
    x[0, 3, 4] = np.nan
    x[0, 4, 5] = np.inf
    x[0, 5, 6] = -np.inf
    x[0, 6] *= 1e-30  # squares underflow: x / sqrt(eps)
    x[1, 0] += 1e4
    x[1, 1] = 3e38  # near FLT_MAX: the sums overflow too
    x[1, 2] = np.float32(3.4e38) * np.sign(x[1, 2])
    return x


def _hf(x, w=_W, eps=1e-6):  # transformers' Flax Llama/Mistral RMSNorm
    var = jnp.power(x, 2).mean(-1, keepdims=True)
    y = x * (1 / jnp.sqrt(var + eps))
    return y if w is None else w * y


def _rsqrt(x, w=_W, eps=1e-6):
    y = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if w is None else y * w


def _div(x, w=_W, eps=1e-6):
    y = x / jnp.sqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + eps)
    return y if w is None else y * w


def _pow(x, w=_W, eps=1e-6):  # keras-hub's Llama: ops.power(x, 2) with a float exponent of x's rank
    var = jnp.mean(jnp.power(x, jnp.full((1, 1, 1), 2.0, jnp.float32)), axis=-1, keepdims=True)
    y = x * (1.0 / jnp.sqrt(var + eps))
    return y if w is None else y * w


def _ort(model_bytes: bytes, inputs: list[np.ndarray]) -> tuple[collections.Counter, list[np.ndarray]]:
    """(ORT's optimized graph's op types, its outputs), one thread."""
    import tempfile

    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as d:
        opts = ort.SessionOptions()
        opts.optimized_model_filepath = f"{d}/opt.onnx"
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 3
        s = ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
        ops = collections.Counter(n.op_type for n in onnx.load(f"{d}/opt.onnx").graph.node)
    return ops, s.run(None, {i.name: a for i, a in zip(s.get_inputs(), inputs)})


def _convert(fn, x):
    import jaxconv

    model = jaxconv.to_onnx(fn, jax.ShapeDtypeStruct(x.shape, x.dtype), check=False)
    ops = collections.Counter(n.op_type for n in model.graph.node)
    fused, outs = _ort(model.SerializeToString(), [x])
    return ops, fused, outs


@pytest.mark.parametrize("form", [_hf, _rsqrt, _div, _pow])
@pytest.mark.parametrize("weight", [True, False])
def test_rms_norm_is_fused_by_ort(monkeypatch, form, weight):
    fn = (lambda x: form(x)) if weight else (lambda x: form(x, None))
    x = _rows()
    ops, fused, (got,) = _convert(fn, x)
    assert ops["Pow"] == 1 and ops["Div"] == 1 and ops["Mul"] == 1 and ops["Reciprocal"] == 0, ops
    assert fused["SimplifiedLayerNormalization"] == 1 and fused["Sqrt"] == 0, fused
    want = np.asarray(jax.jit(fn)(x))
    assert np.isnan(want[0, 3]).all() and np.isnan(want[0, 4, 5]) and (want[0, 4, :5] == 0).all() and (want[0, 0] == 0).all()
    assert_same_floats(got, want, 1e-5, 1e-6)
    with monkeypatch.context() as patch:
        patch.setattr(rms_norm, "rewrite", lambda graph: 0)
        plain_ops, plain_fused, _ = _convert(fn, x)
    if form is not _pow or not weight:  # Pow, then a Div and a weight once folded: ORT fuses it as it is
        assert plain_fused["SimplifiedLayerNormalization"] == 0 and plain_fused["Sqrt"] == 1, plain_fused


def _other_values(x):
    y = x * 2.0
    return x / jnp.sqrt(jnp.mean(y * y, axis=-1, keepdims=True) + 1e-6) * _W


def _not_last_axis(x):
    return x / jnp.sqrt(jnp.mean(x * x, axis=1, keepdims=True) + 1e-6)


def _root_read_again(x):
    r = jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6)
    return x / r * _W, r


@pytest.mark.parametrize("fn", [_other_values, _not_last_axis, _root_read_again])
def test_other_forms_stay(fn):
    x = _rows()
    ops, fused, got = _convert(fn, x)
    assert ops["Pow"] == 0 and fused["SimplifiedLayerNormalization"] == 0, (ops, fused)
    for a, w in zip(got, jax.tree_util.tree_leaves(jax.jit(fn)(x))):
        assert_same_floats(a, np.asarray(w), 1e-5, 1e-6)


_P = np.random.default_rng(24).standard_normal((D, 16)).astype(np.float32)


@pytest.mark.parametrize("form", [_hf, _pow])
def test_rms_norm_without_a_weight_is_fused_on_a_symbolic_batch(form):
    """The Mul by ones that makes a norm without a weight ORT's fusable form survives the later passes of a
    model with symbolic sizes (which drop Muls by ones elsewhere), as on a static batch."""
    import jaxconv

    def fn(x):
        return form(x, None) @ _P

    x = _rows()
    for spec in ("f32[2,8,32]", "f32[b,8,32]"):
        model = jaxconv.to_onnx(fn, spec, check=False)
        fused, (got,) = _ort(model.SerializeToString(), [x])
        assert fused["SimplifiedLayerNormalization"] == 1 and fused["Sqrt"] == 0, (spec, fused)
        assert_same_floats(got, np.asarray(jax.jit(fn)(x)), 1e-5, 1e-5)


def _wide_rows(d: int) -> np.ndarray:
    x = np.random.default_rng(25).standard_normal((2, 4, d)).astype(np.float32)
    x[0, 0] = 0.1  # a constant row: the worst case of a sum taken in one pass
    x[0, 1, 7] = np.nan
    x[0, 2, 9] = np.inf
    x[1, 0] *= 1e-30
    x[1, 1] = -0.0
    return x


@pytest.mark.parametrize("d", [4096, 4100])  # 4100: the last block padded
@pytest.mark.parametrize("form", [_rsqrt, _hf])
def test_a_wide_norm_summed_in_blocks_is_fused(form, d):
    """At 4096 columns the lowering sums each row in blocks of 256 (XLA's order): ORT fuses one mean only, so
    the blocks become one ReduceMean (2.1x jax.jit -> 0.9x on [16, 64, 4096], one thread); the fused kernel's
    one-pass sum within 1e-5 of float64 on a constant row (the blocks: 1.3e-7)."""
    w = (1 + 0.1 * np.random.default_rng(26).standard_normal(d)).astype(np.float32)
    fn = lambda x: form(x, w)  # noqa: E731
    x = _wide_rows(d)
    ops, fused, (got,) = _convert(fn, x)
    assert ops["ReduceSum"] == 0 and ops["ReduceMean"] == 1 and ops["Pow"] == 1, ops
    assert fused["SimplifiedLayerNormalization"] == 1, fused
    assert_same_floats(got, np.asarray(jax.jit(fn)(x)), 2e-5, 1e-6)
    x64 = x[0, 0].astype(np.float64)
    exact = x64 / np.sqrt(np.mean(x64 * x64) + 1e-6) * w
    assert np.max(np.abs(got[0, 0] - exact) / np.abs(exact)) < 1e-5


def test_a_norm_wider_than_the_fused_limit_keeps_its_blocks():
    from jaxconv.onnx.rewrites import _norm_match

    d = 2 * _norm_match.MAX_FUSED_ROW
    x = np.random.default_rng(27).standard_normal((1, 2, d)).astype(np.float32)
    ops, fused, (got,) = _convert(lambda x: _rsqrt(x, None), x)
    assert ops["ReduceSum"] >= 2 and fused["SimplifiedLayerNormalization"] == 0, (ops, fused)
    assert_same_floats(got, np.asarray(jax.jit(lambda x: _rsqrt(x, None))(x)), 1e-5, 1e-6)
