"""Recurrences unrolled at trace time (a Python loop over time steps, ``hk.static_unroll``) over a symbolic batch.

On a static batch the rule ``unrolled_steps`` folds the step copies back into one Loop, which the scan rules
make a Scan or an LSTM op. On a symbolic batch jax writes each copy's row read ``x[:, t]`` as a gather whose
slice sizes name the batch (a Slice whose bounds are computed from ``Shape`` and clamped constants), and each
copy computes its broadcasts' run-time shapes: the rule saw no rows and left every copy (Haiku's DeepRNN, two
LSTM layers over 64 steps: 3,090 nodes against 65 static). Found by the fuzzer's symbolic-batch programs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from onnx_graphs import all_nodes, op_types

import jaxconv
from jaxconv.runtimes.onnxrt import OnnxRunner

_R = np.random.default_rng(0)
_D, _H = 6, 8
_WX = (_R.standard_normal((_D, 4 * _H)) * 0.4).astype(np.float32)
_WH = (_R.standard_normal((_H, 4 * _H)) * 0.4).astype(np.float32)
_WCAT = [(_R.standard_normal((d + _H, 4 * _H)) * 0.3).astype(np.float32) for d in (_D, _H)]


def _lstm(h, c, x, wx, wh):
    i, f, g, o = jnp.split(x @ wx + h @ wh, 4, axis=-1)
    c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    return jax.nn.sigmoid(o) * jnp.tanh(c), c


def _batch_major_loop(xs):
    """A Python loop over the steps of ``xs`` [b, T, D], reading ``xs[:, t]``; the outputs stacked on axis 1.
    The first step reads the zero cell state as a ``[1, 1]`` broadcast: the Loop starts it at ``[b, H]``."""
    h = c = jnp.zeros((xs.shape[0], _H), xs.dtype)
    ys = []
    for t in range(xs.shape[1]):
        h, c = _lstm(h, c, xs[:, t], _WX, _WH)
        ys.append(h)
    return jnp.stack(ys, axis=1)


def _deep_rnn(xs):
    """``hk.static_unroll`` of two stacked LSTMs in Haiku's form (``concat([x, h]) @ W``, forget bias 1),
    time-major ``xs`` [T, b, D]: both layers' states in one step, the top layer's outputs stacked."""
    state = [(jnp.zeros((xs.shape[1], _H)), jnp.zeros((xs.shape[1], _H))) for _ in _WCAT]
    ys = []
    for t in range(xs.shape[0]):
        x = xs[t]
        for k, w in enumerate(_WCAT):
            h, c = state[k]
            i, g, f, o = jnp.split(jnp.concatenate([x, h], -1) @ w, 4, axis=-1)
            c = jax.nn.sigmoid(f + 1) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            state[k] = (h, c)
            x = jax.nn.relu(h) if k == 0 else h
        ys.append(x)
    return jnp.stack(ys)


def _inputs(shape, seed):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    if seed % 2:
        x.reshape(-1)[[0, 3, 7]] = [np.nan, np.inf, -0.0]
    return x


def _matches_jit(fn, model, shapes):
    runner = OnnxRunner(model.SerializeToString())
    for seed, shape in enumerate(shapes):
        x = _inputs(shape, seed)
        got, want = runner.run([x])[0], np.asarray(jax.jit(fn)(x))
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6, equal_nan=True)


@pytest.mark.parametrize("spec", ["f32[b,7,6]", "f32[3,7,6]"])
def test_a_python_loop_over_steps_of_a_symbolic_batch_folds_into_one_lstm(spec):
    model = jaxconv.to_onnx(_batch_major_loop, spec, check=False)
    ops = op_types(model.graph)
    assert ops.count("LSTM") == 1, ops
    assert len(list(all_nodes(model.graph))) < 60, ops
    _matches_jit(_batch_major_loop, model, [(b, 7, 6) for b in ((1, 3, 5) if "b" in spec else (3, 3))])


def test_haikus_static_unroll_of_two_layers_over_a_symbolic_batch_is_two_lstm_ops():
    model = jaxconv.to_onnx(_deep_rnn, "f32[9,b,6]", check=False)
    ops = op_types(model.graph)
    assert ops.count("LSTM") == 2, ops
    assert len(list(all_nodes(model.graph))) < 120, ops
    _matches_jit(_deep_rnn, model, [(9, b, 6) for b in (1, 2, 5)])



def _scan_unrolled(xs, reverse=False, unroll=2):
    """``lax.scan`` of an LSTM cell with ``unroll=k`` over time-major ``xs`` [T, b, D]."""
    wx, wh = jnp.asarray(_WX, xs.dtype), jnp.asarray(_WH, xs.dtype)

    def step(hc, x):
        h, c = _lstm(*hc, x, wx, wh)
        return (h, c), h

    zeros = jnp.zeros((xs.shape[1], _H), xs.dtype)
    return jax.lax.scan(step, (zeros, zeros), xs, unroll=unroll, reverse=reverse)[1]


@pytest.mark.parametrize("reverse", [False, True])
def test_a_scan_unrolled_by_k_over_a_symbolic_batch_folds_into_one_lstm(reverse):
    """``lax.scan(..., unroll=2)``: a Loop whose body runs two copies of the cell, each reading its row of the
    trip's ``[1, 2, b, D]``; the copies fold into one step (``unrolled_bodies``) and the LSTM op takes it."""
    def fn(xs):
        return _scan_unrolled(xs, reverse)

    model = jaxconv.to_onnx(fn, "f32[8,b,6]", check=False)
    ops = op_types(model.graph)
    assert ops.count("LSTM") == 1 and ops.count("MatMul") <= 2, ops
    _matches_jit(fn, model, [(8, b, 6) for b in (1, 2, 5)])


def test_steps_left_over_by_unroll_stay_beside_the_folded_loop_over_a_symbolic_batch():
    def fn(xs):
        return _scan_unrolled(xs, unroll=3)

    model = jaxconv.to_onnx(fn, "f32[10,b,6]", check=False)
    assert op_types(model.graph).count("LSTM") == 1, op_types(model.graph)
    _matches_jit(fn, model, [(10, b, 6) for b in (1, 4)])


def test_a_reversed_scan_unrolled_by_k_in_bfloat16_reads_its_stacked_rows_back_in_their_shape():
    """In bfloat16 the copies' outputs are stacked through Casts: the folded Loop stacks the rows themselves
    (``[1, b, H]``), and their reversal is read back as ``[T / k, k, b, H]`` (it was rank 5: not a model)."""
    def fn(xs):
        return _scan_unrolled(xs.astype(jnp.bfloat16), reverse=True).astype(jnp.float32)

    model = jaxconv.to_onnx(fn, "f32[8,b,6]", check=False)
    runner = OnnxRunner(model.SerializeToString())
    for b in (1, 3):
        x = _inputs((8, b, 6), 2)
        np.testing.assert_allclose(runner.run([x])[0], np.asarray(jax.jit(fn)(x)), rtol=2e-2, atol=2e-2)


_BIAS_INF = np.full(4 * _H, 0.1, np.float32)
_BIAS_INF[3] = np.inf  # the LSTM op takes finite weights only: this cell stays a Scan


def _lstm_scan_exact(xs):
    def step(hc, x):
        i, f, g, o = jnp.split(x @ _WX + hc[0] @ _WH + _BIAS_INF, 4, axis=-1)
        c = 1 / (1 + jnp.exp(-f)) * hc[1] + 1 / (1 + jnp.exp(-i)) * jnp.tanh(g)
        h = 1 / (1 + jnp.exp(-o)) * jnp.tanh(c)
        return (h, c), h

    zeros = jnp.zeros((xs.shape[1], _H), xs.dtype)
    return jax.lax.scan(step, (zeros, zeros), xs)[1]


def _scan_body_ops(model) -> list[str]:
    scans = [n for n in all_nodes(model.graph) if n.op_type == "Scan"]
    assert len(scans) == 1, op_types(model.graph)
    return sorted(n.op_type for n in scans[0].attribute[0].g.node)


def test_the_gate_rules_reach_a_scan_over_a_symbolic_batch():
    """``scan_rows``' gate rules read the Scan body's shapes with the batch named: the sigmoids' negations go
    into the weights and the three sigmoids run once, as in the static graph's body."""
    symbolic = jaxconv.to_onnx(_lstm_scan_exact, "f32[6,b,6]", check=False)
    static = jaxconv.to_onnx(_lstm_scan_exact, "f32[6,3,6]", check=False)
    assert _scan_body_ops(symbolic) == _scan_body_ops(static)
    assert "Neg" not in _scan_body_ops(symbolic) and _scan_body_ops(symbolic).count("Exp") == 1
    _matches_jit(_lstm_scan_exact, symbolic, [(6, b, 6) for b in (1, 3)])
