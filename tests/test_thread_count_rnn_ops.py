"""The thread record of models with ORT's RNN ops: an LSTM op of small steps (at most
``LSTM_ONE_THREAD_MULTIPLIES``) is weighed as its products, so a model of small products records one
thread, and a GRU scan beside it becomes the GRU op (the rule takes the op above MLAS's line only where
the model records one thread); a big LSTM op still leaves the model to ORT's threads. Numbers against
jax.jit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx

import jaxconv
from conformance.nets import lstm_cell
from jaxconv.onnx import thread_count
from jaxconv.runtimes.onnxrt import OnnxRunner

_RNG = np.random.default_rng(21)


def _w(*shape):
    return (_RNG.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)


def _lstm_cell(width, hidden):
    return lstm_cell(_w(width, 4 * hidden), _w(hidden, 4 * hidden), _w(1, 4 * hidden)[0])


def _gru_cell(width, hidden):
    """Equinox's GRUCell, batched: the update is ``n + z * (h - n)``."""
    wx, wh, b = _w(width, 3 * hidden), _w(hidden, 3 * hidden), _w(1, 3 * hidden)[0]

    def cell(h, x):
        gx, gh = x @ wx + b, h @ wh
        r = jax.nn.sigmoid(gx[:, :hidden] + gh[:, :hidden])
        z = jax.nn.sigmoid(gx[:, hidden:2 * hidden] + gh[:, hidden:2 * hidden])
        n = jnp.tanh(gx[:, 2 * hidden:] + r * gh[:, 2 * hidden:])
        h = n + z * (h - n)
        return h, h

    return cell


def _lstm(batch, hidden, width=32):
    cell = _lstm_cell(width, hidden)

    def fn(xs):
        zeros = jnp.zeros((batch, hidden), jnp.float32)
        return jax.lax.scan(cell, (zeros, zeros), xs)[1]

    return fn


def _gru_then_lstm(batch, hidden, width=32):
    gru, lstm = _gru_cell(width, hidden), _lstm_cell(hidden, hidden)

    def fn(xs):
        zeros = jnp.zeros((batch, hidden), jnp.float32)
        hs = jax.lax.scan(gru, zeros, xs)[1]
        return jax.lax.scan(lstm, (zeros, zeros), hs)[1]

    return fn


def _ops(model: onnx.ModelProto) -> set[str]:
    found = set()

    def walk(graph):
        for node in graph.node:
            found.add(node.op_type)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g)

    walk(model.graph)
    return found


def _converted(fn, steps, batch, width=32):
    model = jaxconv.to_onnx(fn, f"f32[{steps},{batch},{width}]", check=False)
    xs = np.random.default_rng(3).standard_normal((steps, batch, width)).astype(np.float32)
    got = OnnxRunner(model.SerializeToString()).run([xs])[0]
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(xs)), rtol=2e-5, atol=2e-6)
    return model, {p.key: p.value for p in model.metadata_props}.get(thread_count.THREADS_KEY)


def test_a_small_lstm_op_records_one_thread():
    model, record = _converted(_lstm(batch=4, hidden=128), steps=64, batch=4)  # 4 * 512 * 128 multiplies a step
    assert "LSTM" in _ops(model)
    assert 4 * 512 * 128 <= thread_count.LSTM_ONE_THREAD_MULTIPLIES
    assert record == "1"


def test_a_big_lstm_op_records_nothing():
    model, record = _converted(_lstm(batch=16, hidden=256), steps=16, batch=16)  # 16 * 1024 * 256 a step
    assert "LSTM" in _ops(model)
    assert record is None


def test_a_gru_scan_before_a_small_lstm_becomes_the_gru_op_on_one_thread():
    # the GRU's steps (4 * 256 * 128 multiplies) are above MLAS's line: the op only where the model
    # records one thread, which needs the LSTM op weighed and the GRU's sequence's steps known
    model, record = _converted(_gru_then_lstm(batch=4, hidden=128), steps=64, batch=4)
    assert {"GRU", "LSTM"} <= _ops(model)
    assert record == "1"
