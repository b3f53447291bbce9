"""A scan over a symbolic batch lowers as the static one does: jax writes its row reads as
``real_dynamic_slice`` and its row writes through ``dynamic_broadcast_in_dim``; both are read as the plain
forms, so the Loop becomes a Scan with no index arithmetic or ScatterND in its body. Also jax's
``dynamic_slice`` on a symbolic shape (clamped starts) and a ``dynamic_reshape`` that only drops unit axes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from onnx_graphs import all_nodes, op_types

import jaxconv
from jaxconv.runtimes.onnxrt import OnnxRunner

_W = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32) * 0.3


def _rnn(xs):
    def cell(h, x):
        h = jnp.tanh(h @ _W + x)
        return h, h * 2.0

    return jax.lax.scan(cell, jnp.zeros_like(xs[0]), xs)


def _scan_body_ops(model) -> list[str]:
    scans = [n for n in all_nodes(model.graph) if n.op_type in ("Scan", "Loop")]
    assert len(scans) == 1, op_types(model.graph)
    assert scans[0].op_type == "Scan"
    return [n.op_type for n in scans[0].attribute[0].g.node]


@pytest.mark.parametrize("spec", ["f32[12,b,16]", "f32[12,8,16]"])
def test_a_scan_over_a_symbolic_batch_is_a_scan_whose_body_is_the_cell(spec):
    model = jaxconv.to_onnx(_rnn, spec, check=False)
    assert sorted(_scan_body_ops(model)) == ["Add", "MatMul", "Mul", "Tanh"]
    assert "ScatterND" not in [n.op_type for n in all_nodes(model.graph)]
    runner = OnnxRunner(model.SerializeToString())
    for batch in (1, 5):
        xs = np.random.default_rng(batch).standard_normal((12, batch, 16)).astype(np.float32)
        if spec == "f32[12,8,16]" and batch != 8:
            continue
        for got, want in zip(runner.run([xs]), jax.jit(_rnn)(xs)):
            np.testing.assert_allclose(got, np.asarray(want), rtol=2e-6, atol=2e-6)


def test_a_reversed_scan_over_a_symbolic_batch_keeps_the_order():
    def fn(xs):
        return jax.lax.scan(lambda c, x: (c * 0.5 + x, c + x), jnp.zeros_like(xs[0]), xs, reverse=True)

    model = jaxconv.to_onnx(fn, "f32[9,b,3]", check=False)
    assert "ScatterND" not in [n.op_type for n in all_nodes(model.graph)]
    xs = np.random.default_rng(2).standard_normal((9, 4, 3)).astype(np.float32)
    for got, want in zip(OnnxRunner(model.SerializeToString()).run([xs]), jax.jit(fn)(xs)):
        np.testing.assert_array_equal(got, np.asarray(want))


@pytest.mark.parametrize("start", [0, 3, 6, 7, 100, -1, -100])
def test_a_dynamic_slice_of_a_symbolic_shape_clamps_its_start_as_jax_does(start):
    def fn(x, i):
        return jax.lax.dynamic_slice(x, (i, 0), (2, x.shape[1]))

    model = jaxconv.to_onnx(fn, "f32[8,b]", "i32[]", check=False)
    x = np.arange(8 * 3, dtype=np.float32).reshape(8, 3)
    i = np.int32(start)
    got = OnnxRunner(model.SerializeToString()).run([x, i])[0]
    np.testing.assert_array_equal(got, np.asarray(jax.jit(fn)(x, i)))


def test_a_dynamic_slice_along_a_symbolic_axis_clamps_to_its_run_time_size():
    def fn(x, i):
        return jax.lax.dynamic_slice_in_dim(x, i, 3, axis=0)

    model = jaxconv.to_onnx(fn, "f32[n,4]", "i32[]", check=False)
    runner = OnnxRunner(model.SerializeToString())
    for n, start in ((5, 4), (9, 4), (9, -2), (3, 1)):
        x = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        got = runner.run([x, np.int32(start)])[0]
        np.testing.assert_array_equal(got, np.asarray(jax.jit(fn)(x, np.int32(start))))


def test_a_reshape_that_drops_a_unit_axis_of_a_symbolic_shape_is_a_squeeze():
    def fn(x):
        return (x[:, :1, :] + 1.0).reshape(x.shape[0], x.shape[2]) * 2.0

    model = jaxconv.to_onnx(fn, "f32[b,3,5]", check=False)
    producer = {o: n for n in model.graph.node for o in n.output}
    scale = producer[model.graph.output[0].name]
    assert scale.op_type == "Mul"
    assert [producer[i].op_type for i in scale.input if i in producer] == ["Squeeze"]
    x = np.random.default_rng(3).standard_normal((4, 3, 5)).astype(np.float32)
    np.testing.assert_array_equal(OnnxRunner(model.SerializeToString()).run([x])[0], np.asarray(jax.jit(fn)(x)))


_WX = np.random.default_rng(7).standard_normal((6, 16)).astype(np.float32) * 0.3


def _projected_rnn(xs):
    def cell(h, x):
        h = jnp.tanh(x @ _WX + h @ _W)
        return h, h

    return jax.lax.scan(cell, jnp.zeros((xs.shape[1], 16), xs.dtype), xs)[1]


def test_the_input_projection_of_a_scan_over_a_symbolic_batch_runs_once_before_it():
    model = jaxconv.to_onnx(_projected_rnn, "f32[12,b,6]", check=False)
    assert _scan_body_ops(model).count("MatMul") == 1  # h @ W; x @ Wx over every step before the Scan
    assert [n.op_type for n in model.graph.node].count("MatMul") == 1
    runner = OnnxRunner(model.SerializeToString())
    for batch in (1, 4):
        xs = np.random.default_rng(batch).standard_normal((12, batch, 6)).astype(np.float32)
        np.testing.assert_allclose(runner.run([xs])[0], np.asarray(jax.jit(_projected_rnn)(xs)), rtol=2e-6, atol=2e-6)


def _lstm_and_gru_ops(model) -> list[str]:
    return [t for t in op_types(model.graph) if t in ("LSTM", "GRU")]


@pytest.mark.parametrize("spec", ["f32[20,b,16]", "f32[20,3,16]"])
def test_an_lstm_scan_over_a_symbolic_batch_is_the_lstm_op(spec):
    from conformance.nets import lstm_cell

    rng = np.random.default_rng(8)
    wx, wh = (rng.standard_normal(s).astype(np.float32) / 4 for s in ((16, 128), (32, 128)))
    b = rng.standard_normal(128).astype(np.float32) / 10

    def fn(xs):
        zeros = jnp.zeros((xs.shape[1], 32))
        (h, _), hs = jax.lax.scan(lstm_cell(wx, wh, b), (zeros, zeros), xs)
        return hs, h

    model = jaxconv.to_onnx(fn, spec, check=False)
    assert _lstm_and_gru_ops(model) == ["LSTM"]
    runner = OnnxRunner(model.SerializeToString())
    for batch in ((1, 5) if "b" in spec else (3,)):
        xs = np.random.default_rng(batch).standard_normal((20, batch, 16)).astype(np.float32)
        for got, want in zip(runner.run([xs]), jax.jit(fn)(xs)):
            np.testing.assert_allclose(got, np.asarray(want), rtol=2e-5, atol=2e-6)
        xs[3, 0, 2] = np.nan  # the exact Scan behind the op's finiteness guard
        for got, want in zip(runner.run([xs]), jax.jit(fn)(xs)):
            np.testing.assert_array_equal(np.isnan(got), np.isnan(np.asarray(want)))


def test_a_gru_scan_over_a_symbolic_batch_is_the_gru_op():
    from conformance.nets import gru

    rng = np.random.default_rng(9)
    # hidden 8: small enough at a symbolic batch weighed at 128 rows for ORT's GEMM to stay on one thread
    p = {"wx": rng.standard_normal((8, 24)).astype(np.float32) / 3, "wh": rng.standard_normal((8, 16)).astype(np.float32) / 3,
         "whn": rng.standard_normal((8, 8)).astype(np.float32) / 3, "b": rng.standard_normal(24).astype(np.float32) / 10}

    def fn(xs):
        return gru(p, xs, jnp.zeros((xs.shape[1], 8)))[1]

    model = jaxconv.to_onnx(fn, "f32[12,b,8]", check=False)
    assert _lstm_and_gru_ops(model) == ["GRU"]
    runner = OnnxRunner(model.SerializeToString())
    for batch in (1, 4):
        xs = np.random.default_rng(batch).standard_normal((12, batch, 8)).astype(np.float32)
        np.testing.assert_allclose(runner.run([xs])[0], np.asarray(jax.jit(fn)(xs)), rtol=2e-5, atol=2e-6)


def _flax_rnn(bidirectional: bool):
    import flax.linen as nn

    class Model(nn.Module):
        @nn.compact
        def __call__(self, x, lengths):
            if bidirectional:
                rnn = nn.Bidirectional(nn.RNN(nn.LSTMCell(16)), nn.RNN(nn.LSTMCell(16)))
            else:
                rnn = nn.RNN(nn.LSTMCell(16))
            return rnn(x, seq_lengths=lengths)

    model = Model()
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 12, 8)), jnp.full((1,), 12, jnp.int32))
    return lambda x, lengths: model.apply(params, x, lengths)


@pytest.mark.parametrize("bidirectional", [False, True], ids=["rnn", "bidirectional"])
def test_flax_lstms_over_a_symbolic_batch_are_lstm_ops(bidirectional):
    """flax's nn.RNN stacks its carries too (rows nothing reads: dropped), and its reversed direction flips
    the sequence by the lengths (a GatherND, whose shape the symbolic rule follows)."""
    fn = _flax_rnn(bidirectional)
    model = jaxconv.to_onnx(fn, "f32[b,12,8]", "i32[b]", check=False)
    assert _lstm_and_gru_ops(model) == ["LSTM"] * (1 + bidirectional)
    # sizes are read from the inputs, not from tensors computed only to be measured
    assert {n.input[0] for n in all_nodes(model.graph) if n.op_type == "Shape"} <= {"x", "lengths"}
    runner = OnnxRunner(model.SerializeToString())
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 12, 8)).astype(np.float32)
        lengths = np.array([12, 5, 9][:batch], np.int32)
        np.testing.assert_allclose(runner.run([x, lengths])[0], np.asarray(jax.jit(fn)(x, lengths)), rtol=2e-5, atol=2e-6)


def test_an_lstm_op_s_initial_state_over_a_symbolic_batch_is_typed(caplog):
    """The initial state the LSTM op reads (``h0`` given, Unsqueezed to ``[1, b, h]``) carries its type: a
    value with a shape and no type is left out of the saved graph's value_info with a warning (fuzz seed 80808)."""
    from conformance.nets import lstm_cell

    rng = np.random.default_rng(8)
    wx, wh = (rng.standard_normal(s).astype(np.float32) / 4 for s in ((16, 128), (32, 128)))
    b = rng.standard_normal(128).astype(np.float32) / 10

    def fn(xs, h0):
        (h, _), hs = jax.lax.scan(lstm_cell(wx, wh, b), (h0, jnp.tanh(h0)), xs)
        return hs, h

    with caplog.at_level("WARNING"):
        model = jaxconv.to_onnx(fn, "f32[20,b,16]", "f32[b,32]", check=False)
    assert _lstm_and_gru_ops(model) == ["LSTM"]
    assert not [r for r in caplog.records if "type" in r.getMessage() and "not known" in r.getMessage()]
    initial = [n.input[5] for n in all_nodes(model.graph) if n.op_type == "LSTM"][0]
    typed = {v.name: v.type.tensor_type.elem_type for g in _graphs(model.graph) for v in g.value_info}
    assert typed.get(initial) == 1, initial  # float32
    runner = OnnxRunner(model.SerializeToString())
    for batch in (1, 4):
        xs = np.random.default_rng(batch).standard_normal((20, batch, 16)).astype(np.float32)
        h0 = np.random.default_rng(batch + 1).standard_normal((batch, 32)).astype(np.float32)
        for got, want in zip(runner.run([xs, h0]), jax.jit(fn)(xs, h0)):
            np.testing.assert_allclose(got, np.asarray(want), rtol=2e-5, atol=2e-6)


def _graphs(graph):
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _graphs(attr.g)
