"""A short scan that is unrolled (loops.to_scan: at most 4 steps of a wide state) whose body holds
initializers of its own (symbolic's Split sizes, from a jnp.split of the state's product): each
unrolled copy reads them from the outer graph. The model passed onnx.checker neither before
('Nodes in a graph must be topologically sorted, however input split_sizes_0 ...')."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest

import jaxconv
from jaxconv.runtimes.onnxrt import OnnxRunner

H, B, N_IN = 32, 32, 4  # a 32 x 32 state: 1,024 elements, wide enough to unroll


def _fn(split: bool):
    rng = np.random.default_rng(0)
    wx = (rng.standard_normal((N_IN, 3 * H)) / 2).astype(np.float32)
    wh = (rng.standard_normal((H, H)) / 6).astype(np.float32)
    b = (rng.standard_normal(3 * H) / 5).astype(np.float32)

    def cell(h, x):
        gx = x @ wx + b  # a row's projection, cut in three: one Split in the body
        a, c, d = jnp.split(gx, 3, axis=-1) if split else (gx[:, :H], gx[:, H:2 * H], gx[:, 2 * H:])
        h = jnp.tanh(a + h @ wh) * jax.nn.sigmoid(c) + h * d
        return h, h

    return lambda xs, h0: jax.lax.scan(cell, h0, xs)


@pytest.mark.parametrize("steps", [2, 3, 4])
@pytest.mark.parametrize("split", [True, False])
def test_an_unrolled_body_reads_its_own_initializers_from_outside(steps, split):
    fn = _fn(split)
    model = jaxconv.to_onnx(fn, f"f32[{steps},{B},{N_IN}]", f"f32[{B},{H}]", check=False)
    onnx.checker.check_model(model, full_check=True)
    assert not {n.op_type for n in model.graph.node} & {"Loop", "Scan"}  # unrolled
    rng = np.random.default_rng(steps)
    xs = rng.standard_normal((steps, B, N_IN)).astype(np.float32)
    h0 = rng.standard_normal((B, H)).astype(np.float32)
    xs[0, 0, :2] = [-0.0, np.nan]
    xs[1, 1, 0] = np.inf
    got = OnnxRunner(model.SerializeToString()).run([xs, h0])
    want = [np.asarray(w) for w in jax.tree_util.tree_leaves(jax.jit(fn)(xs, h0))]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
