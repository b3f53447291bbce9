"""jaxconv.onnx.rewrites.unrolled_steps: the straight-line copies of a recurrence step (a Python loop over
time steps, lax.scan(unroll=True)) folded into one Loop, which the scan rules then read; ONNX Runtime's
outputs bit for bit those without the rule (NaN, infinities and -0.0 in the inputs) and jax.jit's within
tolerance, and copies that differ left alone."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import lowering_check as lc
from jaxconv.onnx.rewrites import unrolled_steps
from lowering_check import assert_same_bits, assert_same_floats, convert_and_run, sequence_inputs

_I, _H = 4, 8
_plain = lc.without_rule(unrolled_steps)


def _weights(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return ((rng.standard_normal((_I, _H)) * 0.5).astype(np.float32),
            (rng.standard_normal((_H, _H)) * 0.3).astype(np.float32),
            np.array([0.1, -0.2, 3.4e38, -3.4e38, 0.0, -0.0, 0.5, 1.0], np.float32))


def _cell(w, u, b):
    def step(h, x):
        h = jnp.tanh(x @ w + h @ u + b)
        return h, h
    return step


def _python_loop(xs):
    """``for t in range(T): h = cell(h, xs[:, t])`` over a batch-major sequence, stacked on axis 1."""
    step = _cell(*_weights())
    h = jnp.zeros((xs.shape[0], _H), xs.dtype)
    ys = []
    for t in range(xs.shape[1]):
        h, y = step(h, xs[:, t])
        ys.append(y)
    return jnp.stack(ys, 1), h


def _scan_unrolled(xs):
    return jax.lax.scan(_cell(*_weights()), jnp.zeros((xs.shape[1], _H), xs.dtype), xs, unroll=True)


def _final_state(xs):
    """Only the last state is read (no per-step output)."""
    step = _cell(*_weights())
    h = jnp.zeros((xs.shape[1], _H), xs.dtype)
    for t in range(xs.shape[0]):
        h, _ = step(h, xs[t])
    return h


def _check(monkeypatch, fn, inputs: list[np.ndarray], bits: bool = True) -> None:
    for x in inputs:
        ops, got = convert_and_run(fn, x)
        assert ops["MatMul"] <= 2 and (ops["Scan"] + ops["Loop"] + ops["GRU"] + ops["RNN"]) == 1, ops
        plain_ops, want = _plain(monkeypatch, fn, x)
        assert plain_ops["Tanh"] >= 6 and plain_ops["Scan"] + plain_ops["Loop"] == 0, plain_ops
        if bits:
            assert_same_bits(got, want)
        expected = jax.tree_util.tree_leaves(jax.jit(fn)(x))
        for g, e in zip(got, expected):
            assert_same_floats(g, np.asarray(e), rtol=1e-5, atol=1e-6)


def test_python_loop_over_batch_major_steps(monkeypatch):
    seqs = [np.ascontiguousarray(np.swapaxes(x, 0, 1)) for x in sequence_inputs([7, 2, _I])]
    _check(monkeypatch, _python_loop, seqs)


def test_fully_unrolled_scan(monkeypatch):
    _check(monkeypatch, _scan_unrolled, sequence_inputs([6, 3, _I]))


def test_final_state_only(monkeypatch):
    _check(monkeypatch, _final_state, sequence_inputs([6, 2, _I]), bits=False)


def test_too_few_steps_stay_unrolled():
    ops, _ = convert_and_run(_scan_unrolled, sequence_inputs([unrolled_steps.MIN_STEPS - 1, 2, _I])[0])
    assert ops["Scan"] + ops["Loop"] == 0 and ops["Tanh"] == unrolled_steps.MIN_STEPS - 1


def test_copies_that_differ_stay_unrolled():
    """A step with other weights is no copy of the others: nothing folds, the numbers are jax.jit's."""
    w, u, b = _weights()
    other = _cell(w, u * 0.5, b)
    step = _cell(w, u, b)

    def fn(xs):
        h = jnp.zeros((xs.shape[1], _H), xs.dtype)
        for t in range(xs.shape[0]):
            h, _ = (other if t == 3 else step)(h, xs[t])
        return h

    x = sequence_inputs([6, 2, _I])[0]
    ops, got = convert_and_run(fn, x)
    assert ops["Scan"] + ops["Loop"] == 0 and ops["Tanh"] == 6
    assert_same_floats(got[0], np.asarray(jax.jit(fn)(x)), rtol=1e-5, atol=1e-6)


def test_a_loop_over_stacked_layer_weights_stays_unrolled():
    """``for i in range(L): x = gelu(x @ w[i]) + x`` with the stack an input: the rows are layers'
    weights (each multiplies the state), not a sequence, and a Loop would hide the layers from the rules
    that read the main graph (attention, layer norm)."""
    def fn(x, w):
        for i in range(w.shape[0]):
            x = jax.nn.gelu(x @ w[i]) + x
        return x

    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 16, _H)).astype(np.float32)
    w = (rng.standard_normal((6, _H, _H)) * 0.4).astype(np.float32)
    ops, got = convert_and_run(fn, x, w)
    assert ops["Scan"] + ops["Loop"] == 0 and ops["MatMul"] == 6, ops
    assert_same_floats(got[0], np.asarray(jax.jit(fn)(x, w)), rtol=1e-5, atol=1e-6)


def test_a_recurrence_whose_weights_are_inputs_folds(monkeypatch):
    """Weights passed in (not constants) that every step shares: still a recurrence over the rows of xs."""
    def fn(xs, w, u):
        h = jnp.zeros((xs.shape[1], _H), xs.dtype)
        for t in range(xs.shape[0]):
            h = jnp.tanh(xs[t] @ w + h @ u)
        return h

    w, u, _ = _weights(1)
    xs = sequence_inputs([6, 2, _I])[0]
    ops, got = convert_and_run(fn, xs, w, u)
    assert ops["Scan"] + ops["Loop"] + ops["RNN"] == 1 and ops["Tanh"] <= 1, ops
    _, want = _plain(monkeypatch, fn, xs, w, u)
    assert_same_bits(got, want)
    assert_same_floats(got[0], np.asarray(jax.jit(fn)(xs, w, u)), rtol=1e-5, atol=1e-6)


def test_copies_that_read_their_own_results_stay_unrolled():
    """A long cumprod lowers to an associative scan whose later levels read the earlier levels' rows: the copies
    match, but a Loop in their place would read its own output (the graph had a cycle)."""
    x = (1 + np.random.default_rng(2).standard_normal((4, 300)) * 0.01).astype(np.float32)
    ops, got = convert_and_run(lambda v: jnp.cumprod(v, axis=-1), x)
    assert ops["Loop"] + ops["Scan"] == 0
    assert_same_floats(got[0], np.asarray(jax.jit(lambda v: jnp.cumprod(v, axis=-1))(x)), rtol=1e-5, atol=1e-6)
