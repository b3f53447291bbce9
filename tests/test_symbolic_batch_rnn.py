"""RNN cells exported with a symbolic batch (``f32[b, t, i]``) become ORT's RNN ops as with a static one
(jaxconv.onnx.rewrites gru, lstm):

- Keras' GRU slices its gates' columns with the batch's rows kept whole, the bound read from ``Shape`` of the
  model's input: the rule reads those rows as the batch (``gru._slice_ends``);
- the GRU op runs where the call's batch keeps each step's products small (a test of ``Shape`` in its If), the
  Scan elsewhere: a symbolic batch may be large at run time (``gru._small_batch_test``);
- a GRU after an LSTM reads the LSTM op's output through its guard's If, whose shape the rules now give with
  the symbolic batch's name (``lstm._take_place``, ``symbolic.inferred_shape``);
- a GRU after a layer that stays a Loop (Keras' SimpleRNN) reads that Loop's rows, which the symbolic dims
  analysis works out through its body (``symbolic._Shapes._loop``);
- the model records its thread count by size with the LSTM op in it (``thread_count._sized_later``).

The numbers are jax.jit's within the converter's tolerance, at batches on both sides of the GRU's bound and on
inputs with NaN, infinities and -0.0."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest

import jaxconv
from jaxconv.onnx import thread_count
from jaxconv.onnx.rewrites import gru
from jaxconv.runtimes.onnxrt import OnnxRunner
from keras_support import jax_keras
from lowering_check import assert_same_floats, op_counts

_T, _I = 6, 8


def _w(rng, *shape, scale=0.3):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _keras_gru(hidden: int, seed: int = 0, width: int = _I):
    """Keras' GRU (reset_after): the input projection over the batch-major sequence, gate columns sliced."""
    rng = np.random.default_rng(seed)

    wx, wh = _w(rng, width, 3 * hidden), _w(rng, hidden, 3 * hidden, scale=0.1)
    bx, bh = _w(rng, 3 * hidden, scale=0.1), _w(rng, 3 * hidden, scale=0.1)

    def layer(x):
        gxs = jnp.transpose(x @ wx + bx, (1, 0, 2))

        def cell(h, gx):
            gh = h @ wh + bh
            z = jax.nn.sigmoid(gx[:, :hidden] + gh[:, :hidden])
            r = jax.nn.sigmoid(gx[:, hidden:2 * hidden] + gh[:, hidden:2 * hidden])
            n = jnp.tanh(gx[:, 2 * hidden:] + r * gh[:, 2 * hidden:])
            h = z * h + (1 - z) * n
            return h, h

        _, ys = jax.lax.scan(cell, jnp.zeros((x.shape[0], hidden)), gxs)
        return jnp.transpose(ys, (1, 0, 2))
    return layer


def _lstm(hidden: int):
    """An LSTM whose gates' input part is projected over the batch-major sequence before the scan."""
    rng = np.random.default_rng(1)
    wx, wh, b = _w(rng, _I, 4 * hidden), _w(rng, hidden, 4 * hidden, scale=0.1), _w(rng, 4 * hidden, scale=0.1)

    def layer(x):
        gxs = jnp.transpose(x @ wx + b, (1, 0, 2))

        def cell(carry, gx):
            h, c = carry
            g = gx + h @ wh
            i, f = jax.nn.sigmoid(g[:, :hidden]), jax.nn.sigmoid(g[:, hidden:2 * hidden])
            u, o = jnp.tanh(g[:, 2 * hidden:3 * hidden]), jax.nn.sigmoid(g[:, 3 * hidden:])
            c = f * c + i * u
            h = o * jnp.tanh(c)
            return (h, c), h

        zeros = jnp.zeros((x.shape[0], hidden))
        _, ys = jax.lax.scan(cell, (zeros, zeros), gxs)
        return jnp.transpose(ys, (1, 0, 2))
    return layer


def _stacked(hidden: int):
    """An LSTM layer, then a Keras GRU over its outputs joined with its input (keras_rnn's stack)."""
    lstm, gru_layer = _lstm(hidden), _keras_gru(hidden, seed=2, width=_I + hidden)
    return lambda x: gru_layer(jnp.concatenate([x, lstm(x)], axis=-1))


def _simple_rnn(hidden: int):
    """Keras' SimpleRNN: ``tanh(x W + h U + b)``, no RNN op of ORT's for it here (it stays a Scan)."""
    rng = np.random.default_rng(3)
    wx, wh, b = _w(rng, _I, hidden), _w(rng, hidden, hidden, scale=0.1), _w(rng, hidden, scale=0.1)

    def layer(x):
        def cell(h, xt):
            h = jnp.tanh(xt @ wx + h @ wh + b)
            return h, h

        _, ys = jax.lax.scan(cell, jnp.zeros((x.shape[0], hidden)), jnp.transpose(x, (1, 0, 2)))
        return jnp.transpose(ys, (1, 0, 2))
    return layer


def _symbolic(fn) -> onnx.ModelProto:
    spec = jax.ShapeDtypeStruct(jax.export.symbolic_shape(f"b, {_T}, {_I}"), np.float32)
    return jaxconv.to_onnx(fn, spec, check=False)


def _ops(model: onnx.ModelProto) -> collections.Counter:
    return op_counts(model.graph)  # bodies and branches too


def _inputs(batch: int) -> list[np.ndarray]:
    x = np.random.default_rng(batch).standard_normal((batch, _T, _I)).astype(np.float32)
    x[0, 0, :2] = -0.0
    nan, inf = x.copy(), x.copy()
    nan[-1, 2, 3] = np.nan
    inf[0, 4, 1] = -np.inf
    return [x, nan, inf]


def _assert_jax_numbers(fn, model: onnx.ModelProto, batches: list[int]) -> None:
    runner = OnnxRunner(model.SerializeToString())
    for batch in batches:
        for x in _inputs(batch):
            (got,) = runner.run([x])
            assert_same_floats(got, np.asarray(jax.jit(fn)(x)), 2e-5, 2e-5)


@pytest.mark.parametrize("hidden", [16, 128])
def test_a_keras_gru_with_a_symbolic_batch_is_the_gru_op(hidden):
    fn = _keras_gru(hidden)
    model = _symbolic(fn)
    assert _ops(model)["GRU"] == 1, _ops(model)
    bound = gru._batch_bound(hidden)
    (branch,) = [n for n in model.graph.node if n.op_type == "If"]
    made = {o: n.op_type for n in model.graph.node for o in n.output}
    assert made[branch.input[0]] == "And" and "Shape" in made.values()  # finite, and the batch below the bound
    assert bound > 3
    _assert_jax_numbers(fn, model, [1, 3, bound] if bound < 64 else [1, 3])  # at the bound: the Scan


def test_the_scan_runs_where_the_batch_is_at_the_bound():
    """A batch at the bound takes the exact branch: the Scan (checked by the op the If runs: its output is the
    Scan's where ORT's GRU op would differ in its last bits; here both agree with jax.jit)."""
    fn = _keras_gru(128)
    model = _symbolic(fn)
    (branch,) = [n for n in model.graph.node if n.op_type == "If"]
    else_ops = [n.op_type for a in branch.attribute if a.name == "else_branch" for n in a.g.node]
    then_ops = [n.op_type for a in branch.attribute if a.name == "then_branch" for n in a.g.node]
    assert "Scan" in else_ops and "GRU" in then_ops, (then_ops, else_ops)


def test_a_gru_over_an_lstm_with_a_symbolic_batch_is_two_ops():
    fn = _stacked(_I)
    model = _symbolic(fn)
    ops = _ops(model)
    assert ops["LSTM"] == 1 and ops["GRU"] == 1, ops
    _assert_jax_numbers(fn, model, [1, 3])


def test_a_gru_over_a_scan_with_a_symbolic_batch_is_the_op():
    """keras_stacked's SimpleRNN then GRU: the GRU's sequence is the first layer's Loop output, whose rows the
    symbolic dims analysis now reads through the Loop's body (``symbolic._Shapes._loop``)."""
    rnn, gru_layer = _simple_rnn(16), _keras_gru(16, seed=4, width=16)
    fn = lambda x: gru_layer(rnn(x))  # noqa: E731
    model = _symbolic(fn)
    assert _ops(model)["GRU"] == 1, _ops(model)
    _assert_jax_numbers(fn, model, [1, 3])


def test_the_lstm_model_records_one_thread_for_a_small_batch():
    """H 32: at the record's batch of 128 the LSTM op's steps gain from a second thread, so the count is
    recorded by size: one thread at 2, ORT's default where a step's product is large (as a static batch)."""
    model = _symbolic(_stacked(32)).SerializeToString()
    assert thread_count.recorded(model, [(2, _T, _I)]) == 1
    large = 1 + thread_count.LSTM_ONE_THREAD_MULTIPLIES // (32 * 4 * 32)  # B H 4H / 2 multiplies a step
    assert thread_count.recorded(model, [(large, _T, _I)]) is None
    assert thread_count.recorded(model, [(large - 1, _T, _I)]) == 1
    keys = {p.key for p in onnx.load_from_string(model).metadata_props}
    assert thread_count.BY_SIZE_KEY in keys, keys


def test_keras_lstm_then_gru_with_a_symbolic_batch_are_the_ops():
    """keras.layers: a bidirectional LSTM, then a GRU over its outputs (keras_rnn), on Keras' JAX backend: the
    GRU's gate columns are sliced with the rows' bound read from the model input's ``Shape``, and it reads the
    LSTM ops' outputs through their guards."""
    keras = jax_keras()
    keras.utils.set_random_seed(0)
    layers = keras.layers
    net = keras.Sequential([keras.Input((_T, _I)), layers.Bidirectional(layers.LSTM(16, return_sequences=True)),
                            layers.GRU(16, return_sequences=True), layers.Dense(3)])
    fn = lambda x: net(x, training=False)  # noqa: E731
    model = _symbolic(fn)
    ops = _ops(model)
    assert ops["LSTM"] == 2 and ops["GRU"] == 1, ops  # Scans in the exact branches only
    _assert_jax_numbers(fn, model, [1, 3])


def test_keras_simple_rnn_then_grus_with_a_symbolic_batch_are_gru_ops():
    """keras.layers (keras_stacked): an Embedding, SimpleRNN, a GRU over its sequence, a GRU keeping its final
    state. The SimpleRNN's Loop runs a counted number of steps (``loops.trip_count``): its rows are the GRU's."""
    keras = jax_keras()
    keras.utils.set_random_seed(1)
    layers = keras.layers
    net = keras.Sequential([keras.Input((_T,), dtype="int32"), layers.Embedding(20, _I),
                            layers.SimpleRNN(16, return_sequences=True), layers.GRU(16, return_sequences=True),
                            layers.GRU(16), layers.Dense(2)])
    fn = lambda ids: net(ids, training=False)  # noqa: E731
    spec = jax.ShapeDtypeStruct(jax.export.symbolic_shape(f"b, {_T}"), np.int32)
    model = jaxconv.to_onnx(fn, spec, check=False)
    assert _ops(model)["GRU"] == 2, _ops(model)
    runner = OnnxRunner(model.SerializeToString())
    for batch in (1, 3):
        ids = np.random.default_rng(batch).integers(0, 20, (batch, _T)).astype(np.int32)
        (got,) = runner.run([ids])
        assert_same_floats(got, np.asarray(jax.jit(fn)(ids)), 2e-5, 2e-5)
