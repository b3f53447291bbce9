"""jaxconv.onnx.rewrites.weighted_sums: a sum over rows weighted by one number a row (masked mean pooling,
attention pooling) as a MatMul; ONNX Runtime's outputs within tolerance of jax.jit's (NaN, infinities
and -0.0 in the rows, weights of 0)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxconv
from jaxconv.onnx.rewrites import weighted_sums
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_floats, op_counts, without_rule
from lowering_check import convert_and_run as _convert

_plain = without_rule(weighted_sums)


def masked_mean(h, mask):
    """A sentence encoder's pooling: the mean of the rows its mask keeps."""
    m = mask[..., None].astype(h.dtype)
    return (h * m).sum(1) / jnp.maximum(m.sum(1), 1.0)


def attention_pool(h, scores):
    return jnp.sum(jax.nn.softmax(scores, -1)[..., None] * h, axis=-2, keepdims=True)


def _rows(*shape: int, seed: int = 0) -> np.ndarray:
    h = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    h[0, 1, ..., :3] = [np.nan, np.inf, -np.inf]
    h[-1, 2, ...] = -0.0
    return h


def _mask(b: int, t: int) -> np.ndarray:
    mask = np.random.default_rng(b * t).random((b, t)) < 0.7
    mask[0, 1] = False  # the NaN/inf row masked: NaN either way (0 * inf)
    mask[-1, :] = False
    mask[-1, 2] = True  # a row of -0.0 alone
    return mask


@pytest.mark.parametrize("t", [5, 64, 256])
def test_a_masked_mean_is_a_matmul(t, monkeypatch):
    h, mask = _rows(3, t, 24), _mask(3, t)
    ops, (got,) = _convert(masked_mean, h, mask)
    assert ops["MatMul"] == 1 and ops["ReduceSum"] == 1, ops  # the mask's count stays a ReduceSum
    want = np.asarray(jax.jit(masked_mean)(h, mask))
    assert_same_floats(got, want, 1e-5, 1e-6)
    plain_ops, _ = _plain(monkeypatch, masked_mean, h, mask)
    assert plain_ops["MatMul"] == 0 and plain_ops["ReduceSum"] == 2, plain_ops


def test_attention_pooling_keeps_its_axis():
    h, s = _rows(2, 3, 16, 8), np.random.default_rng(1).standard_normal((2, 3, 16)).astype(np.float32)
    ops, (got,) = _convert(attention_pool, h, s)
    assert ops["MatMul"] == 1, ops
    assert_same_floats(got, np.asarray(jax.jit(attention_pool)(h, s)), 1e-5, 1e-6)


def test_a_symbolic_batch():
    model = jaxconv.to_onnx(masked_mean, "f32[b,40,16]", "bool[b,40]", check=False)
    assert op_counts(model.graph)["MatMul"] == 1
    for b in (1, 4):
        h, mask = _rows(b, 40, 16, seed=b), _mask(b, 40)
        (got,) = OnnxRunner(model.SerializeToString()).run([h, mask])
        assert_same_floats(got, np.asarray(jax.jit(masked_mean)(h, mask)), 1e-5, 1e-6)


@pytest.mark.parametrize("case", ["long", "full weights"])
def test_other_sums_stay(case):
    if case == "long":  # summed in blocks by the lowering, for its accuracy
        fn, args = masked_mean, (_rows(2, 300, 8), _mask(2, 300))
    else:
        def fn(h, w):
            return (h * w).sum(1)
        args = (_rows(2, 6, 8), np.random.default_rng(2).standard_normal((2, 6, 8)).astype(np.float32))
    ops, (got,) = _convert(fn, *args)
    assert ops["MatMul"] == 0, ops
    assert_same_floats(got, np.asarray(jax.jit(fn)(*args)), 1e-5, 1e-6)
