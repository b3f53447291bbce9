"""Node-count rewrites on the forms real models produce (Flax's LayerNorm, causal masks with a symbolic
length): each fires and keeps jax.jit's numbers."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np

import jaxconv
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_floats
from lowering_check import convert_and_run as _convert


def _same(got: np.ndarray, want, rtol: float = 2e-6, atol: float = 1e-6) -> None:
    assert_same_floats(got, want, rtol, atol)


def test_flax_style_layer_norm_on_3d_input_keeps_dims_in_the_reductions():
    """Means of a [b, t, d] input divided by a [1, 1] count: the Unsqueezes go into keepdims=1."""
    def fn(x):
        mu = jnp.mean(x, -1)
        var = jnp.maximum(jnp.mean(x * x, -1) - mu * mu, 0.0)
        return (x - mu[..., None]) * jax.lax.rsqrt(var + 1e-6)[..., None]

    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5, 8)).astype(np.float32)
    x[0, 0] = -0.0
    x[1, 2, 3] = np.nan
    x[2, 4, 1] = np.inf
    ops, (got,) = _convert(fn, x)
    assert ops["Unsqueeze"] == 0, ops
    _same(got, jax.jit(fn)(x), rtol=1e-5)


def test_causal_mask_over_a_symbolic_length_is_one_range_and_no_broadcasts(monkeypatch):
    """jnp.tril over a symbolic t: one Shape -> Range, no Gather/Concat round trip, no Unsqueeze/Expand of
    the mask, no int32 <-> int64 Cast pairs; the numbers at several lengths are jax.jit's. (masked_softmax,
    off here, adds a Cast and a Where of its own.)"""
    from jaxconv.onnx.rewrites import masked_softmax

    monkeypatch.setattr(masked_softmax, "rewrite", lambda graph: 0)
    def fn(x):
        t = x.shape[1]
        logits = jnp.einsum("btd,bsd->bts", x, x)
        logits = jnp.where(jnp.tril(jnp.ones((t, t), bool)), logits, -jnp.inf)
        return jax.nn.softmax(logits, axis=-1)

    model = jaxconv.to_onnx(fn, "f32[2,t,8]", check=False)
    ops = collections.Counter(n.op_type for n in model.graph.node)
    assert ops["Range"] == 1 and ops["Gather"] == 0 and ops["Concat"] == 0 and ops["Expand"] == 0, ops
    assert ops["Cast"] <= 1 and ops["Where"] == 1, ops
    runner = OnnxRunner(model.SerializeToString())
    rng = np.random.default_rng(0)
    for t in (1, 5, 17):
        x = rng.standard_normal((2, t, 8)).astype(np.float32)
        (got,) = runner.run([x])
        _same(got, jax.jit(fn)(x), rtol=1e-5)


def test_integer_add_of_zero_goes():
    def fn(i):
        return i + jnp.zeros_like(i), i[:, None] + jnp.zeros((1, 3), jnp.int32)

    i = np.array([0, 3, -2, 7], np.int32)
    ops, got = _convert(fn, i)
    assert ops["Add"] == 0 and ops["Expand"] == 1, ops  # the broadcast stays, made by its Expand
    for g, w in zip(got, jax.jit(fn)(i)):
        np.testing.assert_array_equal(g, np.asarray(w))


def test_attention_mask_from_bools_is_one_not():
    """Flax's attention mask: bools cast to float and compared with 0, negated twice, then selected on."""
    def fn(ids, logits):
        keep = (ids > 0)[:, None, :] & (ids > 0)[:, :, None]
        mask = keep.astype(jnp.float32)
        return jnp.where(mask[:, None] != 0, logits, jnp.finfo(jnp.float32).min)

    rng = np.random.default_rng(0)
    ids = np.array([[3, 1, 0, 0], [2, 0, 5, 1]], np.int32)
    logits = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    logits[0, 0, 0, 0] = -0.0
    ops, (got,) = _convert(fn, ids, logits)
    assert ops["Cast"] == 0 and ops["Equal"] == 0 and ops["Not"] + ops["Xor"] <= 1, ops
    _same(got, jax.jit(fn)(ids, logits))
