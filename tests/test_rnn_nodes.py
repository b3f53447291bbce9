"""The benchmark's LSTM and GRU scans in few ONNX nodes (jaxconv.onnx.rewrites.lstm / loops), with
jax.jit's numbers, NaN and inf inputs included.

The LSTM becomes ``If(ReduceSumSquare(xs) < inf)`` choosing ORT's LSTM op or the exact Scan, then the
output projection: four nodes, as jax2onnx writes it. The GRU stays a Scan between its input and
output projections: three nodes.
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxconv
from jaxconv.runtimes.onnxrt import OnnxRunner

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))

import bench_models  # noqa: E402

NAN, INF = float("nan"), float("inf")


def _ops(model) -> list[str]:
    return [n.op_type for n in model.graph.node]


def _same(got, want, rtol=2e-5, atol=2e-6):
    want = np.asarray(want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.fixture(scope="module")
def bench_lstm():
    m = bench_models.build("lstm")
    return m, jaxconv.to_onnx(m.fn, *m.specs, check=False)


@pytest.fixture(scope="module")
def bench_gru():
    m = bench_models.build("gru")
    return m, jaxconv.to_onnx(m.fn, *m.specs, check=False)


def test_bench_lstm_is_four_nodes(bench_lstm):
    m, model = bench_lstm
    assert _ops(model) == ["ReduceSumSquare", "Less", "If", "MatMul"]
    branch = model.graph.node[2]
    fast = next(a.g for a in branch.attribute if a.name == "then_branch")
    assert [n.op_type for n in fast.node].count("LSTM") == 1
    runner = OnnxRunner(model.SerializeToString())
    for g, w in zip(runner.run(list(m.inputs)), jax.jit(m.fn)(*m.inputs)):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-4, atol=2e-5)


def test_bench_gru_is_a_scan_between_products(bench_gru):
    m, model = bench_gru
    # xs @ wx for every gate (scan_rows: the bias and the gate split stay in the body), the recurrence, hs @ out
    assert _ops(model) == ["MatMul", "Scan", "MatMul"]
    runner = OnnxRunner(model.SerializeToString())
    for g, w in zip(runner.run(list(m.inputs)), jax.jit(m.fn)(*m.inputs)):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-4, atol=2e-5)


def _odd_inputs(xs: np.ndarray) -> dict[str, np.ndarray]:
    """Sequences with NaN, +inf, -inf, both infinities in one row (NaN inside jax's x @ w) and a
    finite value whose square overflows."""
    cases = {}
    for name, val in (("nan", NAN), ("+inf", INF), ("-inf", -INF), ("huge", 3e30)):
        for t in (0, xs.shape[0] - 1):
            odd = xs.copy()
            odd[t, 1, 2] = val
            cases[f"{name}@{t}"] = odd
    odd = xs.copy()
    odd[3, 0, 0], odd[3, 0, 1] = INF, -INF
    cases["+inf-inf"] = odd
    odd = xs.copy()
    odd[3, 0, 0], odd[3, 0, 1] = -INF, -INF  # -inf * w0 + -inf * w1 is NaN where w0, w1 differ in sign
    cases["-inf pair"] = odd
    odd = xs.copy()
    odd[5, 2, :] = INF
    cases["+inf row"] = odd
    return cases


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_bench_rnns_keep_nan_and_inf(kind, bench_lstm, bench_gru):
    m, model = bench_lstm if kind == "lstm" else bench_gru
    runner = OnnxRunner(model.SerializeToString())
    jitted = jax.jit(m.fn)
    for name, xs in _odd_inputs(m.inputs[0]).items():
        want = jitted(xs)
        for g, w in zip(runner.run([xs]), want):
            try:
                _same(g, w, rtol=1e-4, atol=2e-5)
            except AssertionError as e:
                raise AssertionError(f"{kind}, {name}: {e}") from None


def _lstm_cell(hidden: int, n_in: int, seed: int):
    rng = np.random.default_rng(seed)
    wx = rng.standard_normal((n_in, 4 * hidden)).astype(np.float32) / 3
    wh = rng.standard_normal((hidden, 4 * hidden)).astype(np.float32) / 3
    b = rng.standard_normal(4 * hidden).astype(np.float32) / 10

    def cell(carry, x):
        h, c = carry
        i, f, g, o = jnp.split(x @ wx + h @ wh + b, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    return cell


def test_lstm_with_state_inputs_guards_each_of_them():
    hidden, n_in, steps, batch = 8, 5, 6, 3
    cell = _lstm_cell(hidden, n_in, 1)

    def fn(xs, h0, c0):
        return jax.lax.scan(cell, (h0, c0), xs)

    model = jaxconv.to_onnx(fn, f"f32[{steps},{batch},{n_in}]", f"f32[{batch},{hidden}]",
                            f"f32[{batch},{hidden}]", check=False)
    ops = _ops(model)
    assert ops.count("ReduceSumSquare") == 3 and ops.count("If") == 1 and "Loop" not in ops, ops
    runner = OnnxRunner(model.SerializeToString())
    jitted = jax.jit(fn)
    rng = np.random.default_rng(2)
    for where in ("x", "h0", "c0"):
        for val in (NAN, INF, -INF, None):
            xs = rng.standard_normal((steps, batch, n_in)).astype(np.float32)
            h0, c0 = (rng.standard_normal((batch, hidden)).astype(np.float32) for _ in range(2))
            if val is not None:
                target = {"x": xs, "h0": h0, "c0": c0}[where]
                target[(1,) * target.ndim] = val
            want = jax.tree_util.tree_leaves(jitted(xs, h0, c0))
            for g, w in zip(runner.run([xs, h0, c0]), want):
                _same(g, w)


def test_lstm_of_constants_needs_no_guard():
    hidden, n_in, steps, batch = 8, 5, 6, 3
    cell = _lstm_cell(hidden, n_in, 3)
    seq = np.random.default_rng(4).standard_normal((steps, batch, n_in)).astype(np.float32)
    h0 = np.random.default_rng(5).standard_normal((batch, hidden)).astype(np.float32)

    def fn(scale):
        (h, c), hs = jax.lax.scan(cell, (h0, jnp.zeros_like(h0)), seq)
        return hs * scale, h

    model = jaxconv.to_onnx(fn, "f32[]", check=False)
    ops = _ops(model)
    assert "LSTM" in ops and "If" not in ops and "Scan" not in ops, ops
    runner = OnnxRunner(model.SerializeToString())
    scale = np.float32(-2.0)
    for g, w in zip(runner.run([scale]), jax.jit(fn)(scale)):
        np.testing.assert_allclose(g, np.asarray(w), rtol=2e-5, atol=2e-6)
