"""The GRU rule by size: a GRU-cell scan whose per-step products ORT's GEMM runs on one thread
(batch x 2H x H under 65,536 multiplies) becomes the GRU op by default; a larger one too where the model
runs on one thread (tests/test_gru_threads.py), else it stays a Scan. Numbers are jax.jit's, NaN, inf and
-0.0 inputs included (the exact Loop runs for non-finite ones)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxconv
from gru_support import assert_runs_like_jit, op_types_with_branches
from jaxconv.onnx.rewrites import gru


def _params(n_in: int, hidden: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    w = lambda *s: (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)  # noqa: E731
    return {"wx": w(n_in, 3 * hidden), "wh": w(hidden, 2 * hidden), "whn": w(hidden, hidden),
            "b": (rng.standard_normal(3 * hidden) / 10).astype(np.float32)}


def _fn(n_in: int, hidden: int):
    """The benchmark's GRU (scripts/bench_models.py): the reset applied before the product ``whn``."""
    p = _params(n_in, hidden)

    def cell(h, x):
        gx = x @ p["wx"] + p["b"]
        r, z = jnp.split(jax.nn.sigmoid(gx[..., :2 * hidden] + h @ p["wh"]), 2, axis=-1)
        n = jnp.tanh(gx[..., 2 * hidden:] + (r * h) @ p["whn"])
        h = (1 - z) * n + z * h
        return h, h

    def fn(xs, h0):
        return jax.lax.scan(cell, h0, xs)

    return fn


def _inputs(steps, batch, n_in, hidden, seed, edge=None):
    rng = np.random.default_rng(seed)
    xs = (rng.standard_normal((steps, batch, n_in)) * 2).astype(np.float32)
    h0 = rng.standard_normal((batch, hidden)).astype(np.float32)
    xs[0, 0, :3] = [-0.0, 0.0, -0.0]
    h0[0, :2] = [-0.0, 0.0]
    if edge is not None:
        xs[edge] = np.array([np.nan, np.inf, -np.inf], np.float32)[seed % 3]
    return [xs, h0]


@pytest.mark.parametrize("steps, batch, n_in, hidden", [(6, 3, 5, 8), (9, 16, 7, 32), (5, 1, 4, 64)])
def test_a_gru_whose_products_run_on_one_thread_is_the_gru_op_by_default(steps, batch, n_in, hidden):
    assert not gru.ENABLED
    fn = _fn(n_in, hidden)
    model = jaxconv.to_onnx(fn, f"f32[{steps},{batch},{n_in}]", f"f32[{batch},{hidden}]", check=False)
    assert "GRU" in op_types_with_branches(model) and "Scan" in op_types_with_branches(model)  # the exact loop stays for non-finite inputs
    edges = (None, None, (1, 0, 2), (steps - 1, batch - 1, 0), (0, 0, 1))
    assert_runs_like_jit(model, fn, [_inputs(steps, batch, n_in, hidden, seed, edge) for seed, edge in enumerate(edges)])


@pytest.mark.parametrize("batch, hidden, op", [
    (31, 32, True),  # 63,488 multiplies a step in the [batch, H] x [H, 2H] product
    (32, 32, False),  # 65,536: ORT splits it over two threads
    (1, 181, True),  # 65,522
    (1, 182, False),  # 66,248
    (16, 256, False),  # the benchmark GRU
])
def test_the_line_is_orts_one_thread_gemm(batch, hidden, op):
    specs = f"f32[6,{batch},4]", f"f32[{batch},{hidden}]", "f32[256,1024]"
    model = jaxconv.to_onnx(_beside_a_big_product(_fn(4, hidden)), *specs, check=False)
    assert ("GRU" in op_types_with_branches(model)) is op
    assert "Scan" in op_types_with_branches(model)


def _beside_a_big_product(fn):
    """``fn`` beside a product of 537 MFLOP, which gives the model ORT's threads (thread_count)."""
    big = np.full((1024, 1024), 1 / 1024, np.float32)

    def both(xs, h0, x):
        return fn(xs, h0), x @ big

    return both


def test_enabled_forces_the_gru_op_at_every_size(monkeypatch):
    monkeypatch.setattr(gru, "ENABLED", True)
    model = jaxconv.to_onnx(_fn(4, 182), "f32[6,1,4]", "f32[1,182]", check=False)
    assert "GRU" in op_types_with_branches(model)


def test_flax_gru_cell_of_a_small_size_is_the_gru_op_by_default():
    nn = pytest.importorskip("flax.linen")
    hidden, n_in, batch, steps = 16, 6, 4, 7
    cell = nn.GRUCell(features=hidden)
    params = cell.init(jax.random.PRNGKey(0), jnp.zeros((batch, hidden)), jnp.zeros((batch, n_in)))
    leaves, tree = jax.tree_util.tree_flatten(params)
    rng = np.random.default_rng(5)
    params = jax.tree_util.tree_unflatten(tree, [rng.standard_normal(np.shape(x)).astype(np.float32) / 3
                                                 for x in leaves])

    def fn(xs, h0):
        return jax.lax.scan(lambda h, x: cell.apply(params, h, x), h0, xs)

    model = jaxconv.to_onnx(fn, f"f32[{steps},{batch},{n_in}]", f"f32[{batch},{hidden}]", check=False)
    assert "GRU" in op_types_with_branches(model)
    assert_runs_like_jit(model, fn, [_inputs(steps, batch, n_in, hidden, seed, edge)
                                     for seed, edge in enumerate((None, (3, 2, 1)))])
