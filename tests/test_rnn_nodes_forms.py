"""The RNN cells people write, as the LSTM op or a Scan (jaxconv.onnx.rewrites.lstm / loops): haiku's
LSTM (one Linear over ``concat([x, h])``, forget bias + 1, via ``hk.dynamic_unroll``), the same cell
written in plain jax, flax's ``nn.RNN`` over batch-major inputs, and haiku's GRU; each keeps
jax.jit's numbers, NaN and inf inputs included.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxconv
from jaxconv.onnx import rewrites
from jaxconv.runtimes.onnxrt import OnnxRunner

T, B, N_IN, H = 6, 3, 5, 8
NAN, INF = float("nan"), float("inf")


@pytest.fixture
def fired(monkeypatch):
    """How often each rewrite fired in the last conversion."""
    counts: dict[str, int] = {}
    real = rewrites.apply

    def apply(model, opset):
        got = real(model, opset)
        counts.clear()
        counts.update(got)
        return got

    monkeypatch.setattr(rewrites, "apply", apply)
    return counts


def _same(got, want, rtol=2e-5, atol=2e-6):
    want = np.asarray(want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def _check(fn, x: np.ndarray) -> list[str]:
    """Convert ``fn`` of one sequence, compare with jax.jit on ``x`` and on ``x`` with NaN / inf
    entries; returns the main graph's ops."""
    model = jaxconv.to_onnx(fn, jax.ShapeDtypeStruct(x.shape, x.dtype), check=False)
    runner = OnnxRunner(model.SerializeToString())
    jitted = jax.jit(fn)
    cases = [x]
    for val in (NAN, INF, -INF):
        odd = x.copy()
        odd[(1,) * x.ndim] = val
        cases.append(odd)
    odd = x.copy()
    odd[(2,) * (x.ndim - 1)][:2] = (-INF, -INF)
    cases.append(odd)
    for case in cases:
        for g, w in zip(runner.run([case]), jax.tree_util.tree_leaves(jitted(case))):
            _same(g, w)
    return [n.op_type for n in model.graph.node]


def _params(rng: np.random.Generator, tree):
    return jax.tree_util.tree_map(lambda p: jnp.asarray(rng.standard_normal(np.shape(p)).astype(np.float32) / 3),
                                  tree)


def test_haiku_form_lstm_in_plain_jax_is_the_lstm_op(fired):
    # haiku's LSTM cell: gates (i, g, f, o) from one product of [x, h], forget bias + 1
    rng = np.random.default_rng(0)
    w = rng.standard_normal((N_IN + H, 4 * H)).astype(np.float32) / 3
    b = rng.standard_normal(4 * H).astype(np.float32) / 10

    def fn(xs):
        def cell(state, x):
            h, c = state
            i, g, f, o = jnp.split(jnp.concatenate([x, h], axis=-1) @ w + b, 4, axis=-1)
            f = jax.nn.sigmoid(f + 1)
            c = f * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h

        zeros = jnp.zeros((xs.shape[1], H))
        return jax.lax.scan(cell, (zeros, zeros), xs)

    ops = _check(fn, rng.standard_normal((T, B, N_IN)).astype(np.float32))
    assert fired["lstm"] == 1 and ops == ["ReduceSumSquare", "Less", "If"], ops


def test_haiku_lstm_is_the_lstm_op(fired):
    hk = pytest.importorskip("haiku")

    def f(x):
        core = hk.LSTM(H)
        return hk.dynamic_unroll(core, x, core.initial_state(B))

    t = hk.without_apply_rng(hk.transform(f))
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((T, B, N_IN)).astype(np.float32)
    params = _params(rng, t.init(jax.random.PRNGKey(0), xs))
    ops = _check(lambda x: t.apply(params, x), xs)
    assert fired["lstm"] == 1 and ops == ["ReduceSumSquare", "Less", "If"], ops


def test_haiku_gru_is_the_gru_op(fired):
    """Haiku's GRU over small steps is ONNX's GRU op (``rewrites/gru.py``), behind the finiteness guard that
    runs the exact Scan where an input is not finite; its input product is no longer a MatMul of its own."""
    hk = pytest.importorskip("haiku")

    def f(x):
        core = hk.GRU(H)
        return hk.dynamic_unroll(core, x, core.initial_state(B))

    t = hk.without_apply_rng(hk.transform(f))
    rng = np.random.default_rng(2)
    xs = rng.standard_normal((T, B, N_IN)).astype(np.float32)
    params = _params(rng, t.init(jax.random.PRNGKey(0), xs))
    ops = _check(lambda x: t.apply(params, x), xs)
    assert fired["gru"] == 1 and ops == ["ReduceSumSquare", "Less", "If"], ops


@pytest.mark.parametrize("cell_name", ["LSTMCell", "OptimizedLSTMCell"])
def test_flax_rnn_of_lstm_cells_is_the_lstm_op(cell_name, fired):
    nn = pytest.importorskip("flax.linen")
    rnn = nn.RNN(getattr(nn, cell_name)(features=H))  # batch-major: transposes around the scan
    rng = np.random.default_rng(3)
    x = rng.standard_normal((B, T, N_IN)).astype(np.float32)
    params = _params(rng, rnn.init(jax.random.PRNGKey(0), x))
    ops = _check(lambda v: rnn.apply(params, v), x)
    assert fired["lstm"] == 1 and ops.count("If") == 1 and "Scan" not in ops, ops
