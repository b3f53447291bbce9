"""A GRU-cell scan above ORT's one-thread GEMM line becomes the GRU op where the model runs on one
thread (its small products outweigh the rest: ``thread_count``), and the model records that thread,
so the op's kernel never runs on two (where it costs 2.4-4x its one-thread CPU time). Beside a big
product, or an LSTM op (which records ORT's threads), it stays a Scan. Numbers are jax.jit's, NaN,
inf and -0.0 inputs included (the exact Loop runs for non-finite ones)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnx_ir as ir
import pytest

import jaxconv
from gru_support import assert_runs_like_jit, op_types_with_branches
from jaxconv.onnx import thread_count
from jaxconv.onnx.rewrites import gru as gru_rule


def _w(rng, *shape, scale=None):
    return (rng.standard_normal(shape) * (scale or 1 / np.sqrt(shape[0]))).astype(np.float32)


def _gru(n_in: int, hidden: int, seed: int = 0):
    """The benchmark GRU's cell (scripts/bench_models.py: reset before the product), from a zero state."""
    rng = np.random.default_rng(seed)
    wx, wh, whn, b = _w(rng, n_in, 3 * hidden), _w(rng, hidden, 2 * hidden), _w(rng, hidden, hidden), _w(
        rng, 3 * hidden, scale=0.1)

    def cell(h, x):
        gx = x @ wx + b
        r, z = jnp.split(jax.nn.sigmoid(gx[..., :2 * hidden] + h @ wh), 2, axis=-1)
        n = jnp.tanh(gx[..., 2 * hidden:] + (r * h) @ whn)
        h = (1 - z) * n + z * h
        return h, h

    def fn(xs):
        return jax.lax.scan(cell, jnp.zeros((xs.shape[1], hidden), jnp.float32), xs)

    return fn


def _inputs(shape, seed, edge=None):
    rng = np.random.default_rng(seed)
    xs = rng.standard_normal(shape).astype(np.float32)
    xs[0, 0, :2] = [-0.0, 0.0]
    if edge is not None:
        xs[edge] = np.array([np.nan, np.inf, -np.inf], np.float32)[seed % 3]
    return [xs]


def _recorded(model: onnx.ModelProto) -> str | None:
    return {p.key: p.value for p in model.metadata_props}.get(thread_count.THREADS_KEY)


@pytest.mark.parametrize("steps, batch, n_in, hidden", [
    (6, 32, 4, 32),  # 65,536 multiplies a step: on the line
    (5, 2, 8, 128),  # flax's and haiku's zoo GRUs: 65,536 and 131,072
    (6, 3, 16, 256),  # 393,216: under gru.ONE_THREAD_LIMIT (524,288)
])
def test_a_gru_above_the_line_is_the_gru_op_where_the_model_runs_on_one_thread(steps, batch, n_in, hidden):
    fn = _gru(n_in, hidden)
    model = jaxconv.to_onnx(fn, f"f32[{steps},{batch},{n_in}]", check=False)
    assert "GRU" in op_types_with_branches(model) and "Scan" in op_types_with_branches(model)
    assert _recorded(model) == "1"
    shape = (steps, batch, n_in)
    edges = (None, (1, 0, 2), (steps - 1, batch - 1, 0), (0, 1, 1))
    assert_runs_like_jit(model, fn, [_inputs(shape, seed, edge) for seed, edge in enumerate(edges)])


def test_above_the_one_thread_limit_it_stays_a_scan():
    """The benchmark GRU's batch and width (32x the line): a plain ORT session (every core) would run
    the op slower than the Scan, whatever the model records."""
    assert 16 * 2 * 256 * 256 >= gru_rule.ONE_THREAD_LIMIT
    fn = _gru(16, 256)
    model = jaxconv.to_onnx(fn, "f32[6,16,16]", check=False)
    ops = op_types_with_branches(model)
    assert "GRU" not in ops and "Scan" in ops
    assert_runs_like_jit(model, fn, [_inputs((6, 16, 16), 0), _inputs((6, 16, 16), 1, (2, 3, 4))])


def test_beside_a_big_product_it_stays_a_scan_and_records_nothing():
    fn = _gru(16, 256)
    big = np.full((1024, 1024), 1 / 1024, np.float32)  # 537 MFLOP against 6 steps x 1.2

    def both(xs, x):
        return fn(xs), x @ big

    model = jaxconv.to_onnx(both, "f32[6,3,16]", "f32[256,1024]", check=False)
    assert "GRU" not in op_types_with_branches(model) and "Scan" in op_types_with_branches(model)
    assert _recorded(model) is None


def test_beside_a_big_lstm_op_it_stays_a_scan():
    # the LSTM op's steps (9 * 512 * 128 multiplies) are above thread_count.LSTM_ONE_THREAD_MULTIPLIES: it
    # leaves the model to ORT's threads, so the GRU (9 * 256 * 128, above MLAS's line) stays a Scan; beside
    # a small LSTM op it becomes the GRU op (tests/test_thread_count_rnn_ops.py)
    from conformance.nets import lstm_cell

    rng = np.random.default_rng(3)
    hidden = 128
    gru = _gru(8, hidden)
    lstm = lstm_cell(_w(rng, 8, 4 * hidden), _w(rng, hidden, 4 * hidden), _w(rng, 4 * hidden, scale=0.1))

    def both(xs):
        zeros = jnp.zeros((xs.shape[1], hidden), jnp.float32)
        return gru(xs), jax.lax.scan(lstm, (zeros, zeros), xs)[1]

    model = jaxconv.to_onnx(both, "f32[5,9,8]", check=False)
    ops = op_types_with_branches(model)
    assert 9 * 512 * 128 > thread_count.LSTM_ONE_THREAD_MULTIPLIES
    assert "LSTM" in ops and "GRU" not in ops and _recorded(model) is None
    assert_runs_like_jit(model, both, [_inputs((5, 9, 8), 0), _inputs((5, 9, 8), 1, (2, 3, 4))])


def _gru_op_graph(steps: int, batch: int, hidden: int, op: str = "GRU") -> ir.Graph:
    gates = 3 if op == "GRU" else 4
    x = ir.Value(name="x", shape=ir.Shape([steps, batch, 16]), type=ir.TensorType(ir.DataType.FLOAT))
    w = ir.Value(name="w", const_value=ir.tensor(np.zeros((1, gates * hidden, 16), np.float32)))
    r = ir.Value(name="r", const_value=ir.tensor(np.zeros((1, gates * hidden, hidden), np.float32)))
    node = ir.node(op, [x, w, r], {"hidden_size": hidden}, num_outputs=2)
    return ir.Graph([x], [node.outputs[0]], nodes=[node], initializers=[w, r])


def test_the_gru_op_is_weighed_as_its_products():
    # all steps' input projection at once ([1024, 16] x [16, 768]), then each step's [16, 256] x [256, 768],
    # which saves nothing on a second thread and pays for waking it
    cost, saving = thread_count.weigh(_gru_op_graph(64, 16, 256))
    tc = thread_count
    assert cost == pytest.approx(65 * tc.WAKE_SECONDS)
    assert saving == pytest.approx(tc.SECOND_THREAD_SAVES * 2.0 * 64 * 16 * 16 * 768 / tc.CORE_FLOPS)
    assert thread_count.recommend_graph(_gru_op_graph(64, 16, 256)) == 1
    assert thread_count.recommend_graph(_gru_op_graph(64, 16, 256, "LSTM")) is None  # threads its steps
