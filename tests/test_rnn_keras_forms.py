"""RNN cells as Keras writes them reach the RNN rules (jaxconv.onnx.rewrites gru, lstm).

Keras' GRU projects the whole batch-major sequence before the scan (``x @ kernel + bias`` on ``[batch,
steps, width]``, transposed to time-major, the steps scanned): the rules read that projection
(``gru._outer_product``) and the op runs on the sequence transposed once (keras_rnn: 1.65x jax.jit ->
0.85x). Without ``return_sequences`` the scan keeps only its final state (a Loop without ys): the GRU op
too (a stacked Keras GRU: 1.35x -> 0.56x). Each: the op in the finite branch, outputs within the
converter's tolerance of jax.jit on inputs with NaN, infinities and -0.0."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scan_support import ops as _ops

import jaxconv
from jaxconv.runtimes.onnxrt import OnnxRunner
from keras_support import jax_keras
from lowering_check import assert_same_floats, sequence_inputs

_B, _T, _I, _H = 2, 5, 4, 16


def _w(rng, *shape, scale=0.3):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _keras_gru(bias_after_transpose: bool = False, final_only: bool = False):
    """Keras' GRU (reset_after, gates z, r, h): the input projection over [batch, steps, width] first."""
    rng = np.random.default_rng(0)
    wx, wh, bx, bh = _w(rng, _I, 3 * _H), _w(rng, _H, 3 * _H), _w(rng, 3 * _H, scale=0.1), _w(rng, 3 * _H, scale=0.1)

    def fn(x):
        gxs = jnp.transpose(x @ wx, (1, 0, 2)) + bx if bias_after_transpose else jnp.transpose(x @ wx + bx, (1, 0, 2))

        def cell(h, gx):
            gh = h @ wh + bh
            z = jax.nn.sigmoid(gx[:, :_H] + gh[:, :_H])
            r = jax.nn.sigmoid(gx[:, _H:2 * _H] + gh[:, _H:2 * _H])
            n = jnp.tanh(gx[:, 2 * _H:] + r * gh[:, 2 * _H:])
            h = z * h + (1 - z) * n
            return h, h

        if final_only:
            return jax.lax.scan(lambda h, gx: (cell(h, gx)[0], None), jnp.zeros((x.shape[0], _H)), gxs)[0]
        _, ys = jax.lax.scan(cell, jnp.zeros((x.shape[0], _H)), gxs)
        return jnp.transpose(ys, (1, 0, 2))
    return fn


def _projected_lstm():
    """An LSTM whose gates' input part is projected over the batch-major sequence before the scan."""
    rng = np.random.default_rng(1)
    wx, wh, b = _w(rng, _I, 4 * _H), _w(rng, _H, 4 * _H), _w(rng, 4 * _H, scale=0.1)

    def fn(x):
        gxs = jnp.transpose(x @ wx + b, (1, 0, 2))

        def cell(carry, gx):
            c, h = carry
            i, f, g, o = jnp.split(gx + h @ wh, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (c, h), h

        zeros = jnp.zeros((x.shape[0], _H))
        _, ys = jax.lax.scan(cell, (zeros, zeros), gxs)
        return ys
    return fn


def _batch_major_inputs():
    """sequence_inputs' time-major edge cases, made batch-major."""
    return [np.ascontiguousarray(np.swapaxes(xs, 0, 1)) for xs in sequence_inputs((_T, _B, _I))]


def _assert_near_jax(model, fn):
    run = OnnxRunner(model.SerializeToString())
    for x in _batch_major_inputs():
        got, want = run.run([x]), jax.tree_util.tree_leaves(jax.jit(fn)(x))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same_floats(g, np.asarray(w), 2e-5, 2e-6)


@pytest.mark.parametrize("make, op", [
    (_keras_gru, "GRU"),
    (lambda: _keras_gru(bias_after_transpose=True), "GRU"),
    (lambda: _keras_gru(final_only=True), "GRU"),
    (_projected_lstm, "LSTM"),
], ids=["gru", "gru-bias-after-transpose", "gru-final-state", "lstm"])
def test_projection_over_the_batch_major_sequence_is_the_rnn_op(make, op):
    fn = make()
    model = jaxconv.to_onnx(fn, f"f32[{_B},{_T},{_I}]", check=False)
    main, body = _ops(model)
    assert main["If"] == 1 and body[op] == 1 and main["Scan"] == 0 and main["Loop"] == 0, (main, body)
    assert main["MatMul"] == 0, main  # the projection is the op's own, its MatMul only in the exact branch
    _assert_near_jax(model, fn)


def test_projection_read_per_batch_row_stays_a_scan():
    """A bias that differs between batch rows is no bias of the op: the scan stays, numbers kept."""
    rng = np.random.default_rng(2)
    wx, wh = _w(rng, _I, 3 * _H), _w(rng, _H, 3 * _H)
    per_row = _w(rng, _B, 1, 3 * _H)

    def fn(x):
        gxs = jnp.transpose(x @ wx + per_row, (1, 0, 2))

        def cell(h, gx):
            gh = h @ wh
            z = jax.nn.sigmoid(gx[:, :_H] + gh[:, :_H])
            r = jax.nn.sigmoid(gx[:, _H:2 * _H] + gh[:, _H:2 * _H])
            n = jnp.tanh(gx[:, 2 * _H:] + r * gh[:, 2 * _H:])
            return z * h + (1 - z) * n, h

        return jax.lax.scan(cell, jnp.zeros((x.shape[0], _H)), gxs)[1]

    model = jaxconv.to_onnx(fn, f"f32[{_B},{_T},{_I}]", check=False)
    main, body = _ops(model)
    assert body["GRU"] == 0 and main["Scan"] == 1, (main, body)
    _assert_near_jax(model, fn)


def test_keras_gru_layer_is_the_gru_op():
    """keras.layers.GRU itself, on Keras' JAX backend (keras_rnn's second layer)."""
    keras = jax_keras()
    keras.utils.set_random_seed(0)
    layer = keras.layers.GRU(_H, return_sequences=True)
    layer.build((None, _T, _I))
    rng = np.random.default_rng(3)
    for v in layer.weights:  # non-zero biases, so both land in the op's slots
        v.assign(_w(rng, *v.shape))
    fn = lambda x: layer(x)  # noqa: E731
    model = jaxconv.to_onnx(fn, f"f32[{_B},{_T},{_I}]", check=False)
    main, body = _ops(model)
    assert main["If"] == 1 and body["GRU"] == 1 and main["Scan"] == 0, (main, body)
    _assert_near_jax(model, fn)


def test_keras_stacked_gru_whose_last_layer_keeps_its_final_state_is_two_gru_ops():
    """keras.layers.GRU(return_sequences=True) then GRU(): the second scan has no ys."""
    keras = jax_keras()
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((_T, _I)), keras.layers.GRU(_H, return_sequences=True),
                              keras.layers.GRU(_H)])
    fn = lambda x: model(x, training=False)  # noqa: E731
    onnx_model = jaxconv.to_onnx(fn, f"f32[{_B},{_T},{_I}]", check=False)
    main, body = _ops(onnx_model)
    assert main["If"] == 2 and body["GRU"] == 2 and main["Scan"] == 0, (main, body)
    _assert_near_jax(onnx_model, fn)


def _elman_cell(rng, n_in):
    wx, wh, b = _w(rng, n_in, _H), _w(rng, _H, _H), _w(rng, _H, scale=0.1)
    return lambda h, x: (jnp.tanh(x @ wx + b + h @ wh),) * 2


def test_stacked_scan_reads_the_previous_layers_rows_transposed_twice():
    """Keras' stacked SimpleRNN: the second layer scans the first's outputs transposed to batch-major and
    back, projected by its kernel; shape inference leaves their row count unknown, and it is still the
    first scan's steps (``loops._rows``), so the second Scan reads its rows as a scan input instead of a
    Slice of the whole sequence at each step (a Keras SimpleRNN pair: 1.88x -> 1.16x jax.jit)."""
    rng = np.random.default_rng(4)
    first, second = _elman_cell(rng, _I), _elman_cell(rng, _H)

    def fn(x):
        h0 = jnp.zeros((x.shape[0], _H))
        _, ys = jax.lax.scan(first, h0, jnp.transpose(x, (1, 0, 2)))
        ys = jnp.transpose(jnp.transpose(ys, (1, 0, 2)), (1, 0, 2))
        _, zs = jax.lax.scan(second, h0, ys)
        return zs[-1]

    model = jaxconv.to_onnx(fn, f"f32[{_B},{_T},{_I}]", check=False)
    main, body = _ops(model)
    assert main["Scan"] == 2 and main["Loop"] == 0, main
    assert body["Slice"] == 0 and body["Clip"] == 0, body  # no row read by index in either body
    _assert_near_jax(model, fn)
