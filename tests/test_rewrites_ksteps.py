"""A Loop body of k copies of one recurrence step (``lax.scan(unroll=k)``, ``nnx.RNN(unroll=k)``,
``nn.RNN(unroll=k)``) folded into one step over k times the trips (``unrolled_bodies``), so that the LSTM
and GRU rules read it. Each: the rule fired, the RNN op is there (absent without the rule), the outputs
bit for bit those of the graph without the rule (the RNN rules off in both, ORT's own optimizations off)
and within the converter's tolerance of jax.jit on inputs with NaN, infinities and -0.0."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scan_support import convert as _convert
from scan_support import ops as _ops
from scan_support import same_bits as _same_bits
from scan_support import unoptimized as _unoptimized

from jaxconv.onnx.rewrites import gru, lstm, unrolled_bodies
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_floats, sequence_inputs

_B, _I, _H = 3, 5, 24


def _w(rng, *shape, scale=0.3):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _lstm_step():
    rng = np.random.default_rng(2)
    wx, wh, b = _w(rng, _I, 4 * _H), _w(rng, _H, 4 * _H), _w(rng, 4 * _H, scale=0.1)

    def step(carry, x):
        h, c = carry
        i, f, g, o = jnp.split(x @ wx + h @ wh + b, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h
    return step


def _converted(monkeypatch, fn, x, rule: bool, rnn: bool):
    """(the model, how many bodies the rule folded) with the rule and the RNN rules on or off."""
    folded = []
    with monkeypatch.context() as patch:
        rewrite = unrolled_bodies.rewrite
        patch.setattr(unrolled_bodies, "rewrite", lambda g: folded.append(rewrite(g) if rule else 0) or folded[-1])
        if not rnn:
            patch.setattr(lstm, "rewrite", lambda g: 0)
            patch.setattr(gru, "rewrite", lambda g: 0)
        return _convert(fn, x), sum(folded)


def _inputs(x, batch_major: bool):
    if not batch_major:
        return sequence_inputs(x.shape)
    return [s.transpose(1, 0, 2).copy() for s in sequence_inputs((x.shape[1], x.shape[0], *x.shape[2:]))]


def _check(monkeypatch, fn, x, op: str, folds: int = 1, batch_major: bool = False):
    model, count = _converted(monkeypatch, fn, x, rule=True, rnn=True)
    plain, _ = _converted(monkeypatch, fn, x, rule=False, rnn=True)
    assert count == folds
    (main, body), (plain_main, plain_body) = _ops(model), _ops(plain)
    assert main[op] + body[op] == folds and plain_main[op] + plain_body[op] == 0, (main, body, plain_body)
    exact, _ = _converted(monkeypatch, fn, x, rule=True, rnn=False)
    exact_plain, _ = _converted(monkeypatch, fn, x, rule=False, rnn=False)
    assert sum(_ops(exact)[1].values()) < sum(_ops(exact_plain)[1].values())
    run, run_plain, near = _unoptimized(exact), _unoptimized(exact_plain), OnnxRunner(model.SerializeToString())
    for xs in _inputs(x, batch_major):
        _same_bits(run(xs), run_plain(xs))
        got, want = near.run([xs]), jax.tree_util.tree_leaves(jax.jit(fn)(xs))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same_floats(g, np.asarray(w), 3e-5, 3e-6)


@pytest.mark.parametrize("unroll,steps,reverse", [(2, 16, False), (4, 16, False), (3, 16, False), (3, 10, False),
                                                  (4, 10, False), (4, 16, True), (3, 10, True)])
def test_scan_unrolled_k_steps_is_one_lstm(unroll, steps, reverse, monkeypatch):
    """``lax.scan(lstm_step, ..., unroll=k)``, T a multiple of k or not (the last T mod k steps after the
    Loop stay as they are), forward and reversed."""
    step = _lstm_step()

    def fn(xs):
        zeros = jnp.zeros((xs.shape[1], _H), xs.dtype)
        (h, c), ys = jax.lax.scan(step, (zeros, zeros), xs, unroll=unroll, reverse=reverse)
        return ys, h, c

    _check(monkeypatch, fn, sequence_inputs((steps, _B, _I))[0], "LSTM")


def test_stacked_output_that_is_no_state(monkeypatch):
    """A step whose output is computed from the state (not the state itself): folded, stacked as the Concat
    stacked it (no RNN op: the step is no cell)."""
    rng = np.random.default_rng(4)
    wx, wh, wo = _w(rng, _I, _H), _w(rng, _H, _H), _w(rng, _H, 2)

    def fn(xs):
        def step(h, x):
            h = jnp.tanh(x @ wx + h @ wh)
            return h, h @ wo
        return jax.lax.scan(step, jnp.ones((xs.shape[1], _H), xs.dtype), xs, unroll=4)

    x = sequence_inputs((16, _B, _I))[0]
    model, count = _converted(monkeypatch, fn, x, rule=True, rnn=True)
    plain, _ = _converted(monkeypatch, fn, x, rule=False, rnn=True)
    assert count == 1 and sum(_ops(model)[1].values()) < sum(_ops(plain)[1].values())
    run, run_plain, near = _unoptimized(model), _unoptimized(plain), OnnxRunner(model.SerializeToString())
    for xs in sequence_inputs(x.shape):
        _same_bits(run(xs), run_plain(xs))
        for g, w in zip(near.run([xs]), jax.tree_util.tree_leaves(jax.jit(fn)(xs))):
            assert_same_floats(g, np.asarray(w), 3e-5, 3e-6)


def test_nnx_rnn_unrolled_gru_is_one_gru(monkeypatch):
    nnx = pytest.importorskip("flax.nnx")
    rnn = nnx.RNN(nnx.GRUCell(_I, _H, rngs=nnx.Rngs(0)), unroll=4)
    graphdef, state = nnx.split(rnn)

    def fn(xs):  # batch-major, as nnx.RNN reads it
        return nnx.merge(graphdef, state, copy=True)(xs)  # copy: nnx.RNN bumps its carry RngCount

    x = sequence_inputs((16, _B, _I))[0].transpose(1, 0, 2).copy()
    _check(monkeypatch, fn, x, "GRU", batch_major=True)


def test_linen_rnn_unrolled_lstm_is_one_lstm(monkeypatch):
    nn = pytest.importorskip("flax.linen")
    rnn = nn.RNN(nn.LSTMCell(_H), unroll=2)
    x = sequence_inputs((12, _B, _I))[0].transpose(1, 0, 2).copy()
    params = rnn.init(jax.random.PRNGKey(0), x)
    _check(monkeypatch, lambda xs: rnn.apply(params, xs), x, "LSTM", batch_major=True)
