"""A lax.scan over a stack of constant layer weights (Flax nn.scan, Haiku layer_stack) is lowered once per
layer: no Loop, each layer's weights constant initializers (ORT prepacks them, the rules see them)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx_ir as ir
from onnx_graphs import op_types

import jaxconv
from jaxconv.onnx import passes
from jaxconv.onnx.ops import control
from lowering_check import assert_onnx_matches_jax, assert_same_floats

RNG = np.random.default_rng(7)
LAYERS, WIDTH = 3, 16
WEIGHTS = (RNG.standard_normal((LAYERS, WIDTH, WIDTH)) / 4).astype(np.float32)
BIASES = (RNG.standard_normal((LAYERS, WIDTH)) / 10).astype(np.float32)


def _layer(x, wb):
    w, b = wb
    return jnp.tanh(x @ w + b), None


def stacked(x):
    return jax.lax.scan(_layer, x, (WEIGHTS, BIASES))[0]


def stacked_with_outputs(x):
    def layer(x, wb):
        y = jnp.tanh(x @ wb[0] + wb[1])
        return y, jnp.sum(y, axis=-1)
    return jax.lax.scan(layer, x, (WEIGHTS, BIASES))


def _edge_inputs() -> np.ndarray:
    x = RNG.standard_normal((4, WIDTH)).astype(np.float32)
    x[1, 0], x[2, 3], x[3, :] = np.nan, np.inf, -0.0
    return x


def _initializer_bytes(model) -> int:
    return sum(ir.serde.deserialize_tensor(t).nbytes for t in model.graph.initializer)


def test_a_scan_over_constant_layers_is_lowered_once_per_layer():
    x = _edge_inputs()
    model = jaxconv.to_onnx(stacked, jax.ShapeDtypeStruct(x.shape, x.dtype))
    ops = op_types(model.graph)
    assert "Loop" not in ops and "Scan" not in ops
    assert ops.count("MatMul") == LAYERS
    initializers = {t.name for t in model.graph.initializer}
    assert all(n.input[1] in initializers for n in model.graph.node if n.op_type == "MatMul")
    assert _initializer_bytes(model) <= WEIGHTS.nbytes + BIASES.nbytes + 64  # each layer's slice, not the stack too
    assert_onnx_matches_jax(stacked, x)


def test_per_layer_outputs_of_an_unrolled_scan_match_jax():
    x = _edge_inputs()
    model = assert_onnx_matches_jax(stacked_with_outputs, x)
    assert "Loop" not in op_types(model.graph)


def test_the_layers_keep_the_numbers_of_the_loop(monkeypatch):
    x = _edge_inputs()
    spec = jax.ShapeDtypeStruct(x.shape, x.dtype)
    from jaxconv.runtimes.onnxrt import OnnxRunner

    unrolled = OnnxRunner(jaxconv.to_onnx(stacked, spec).SerializeToString()).run([x])[0]
    monkeypatch.setattr(control, "UNROLL_MAX_TRIPS", 0)
    looped_model = jaxconv.to_onnx(stacked, spec)
    assert {"Loop", "Scan"} & set(op_types(looped_model.graph))  # a Scan: the loop reads a layer's row a step
    looped = OnnxRunner(looped_model.SerializeToString()).run([x])[0]
    assert_same_floats(unrolled, looped, rtol=1e-6, atol=1e-6)


def test_more_layers_than_the_limit_stay_a_loop(monkeypatch):
    monkeypatch.setattr(control, "UNROLL_MAX_TRIPS", LAYERS - 1)
    model = assert_onnx_matches_jax(stacked, _edge_inputs())
    assert "Loop" in op_types(model.graph) or "Scan" in op_types(model.graph)


def test_a_scan_over_inputs_stays_a_loop():
    """An RNN walks its input sequence, not constants: the Loop (or the RNN op) stays."""
    w = WEIGHTS[0]

    def rnn(xs):
        return jax.lax.scan(lambda h, x: (jnp.tanh(h @ w + x), None), jnp.zeros((WIDTH,), np.float32), xs)[0]

    xs = RNG.standard_normal((5, WIDTH)).astype(np.float32)
    model = assert_onnx_matches_jax(rnn, xs)
    assert {"Loop", "Scan", "RNN"} & set(op_types(model.graph))


def test_a_scan_without_products_stays_a_loop():
    """Unrolling pays where each layer's weights are prepacked for a product; elementwise bodies stay a loop."""
    def decay(x):
        return jax.lax.scan(lambda x, b: (jnp.sin(x) + b, None), x, BIASES)[0]

    model = assert_onnx_matches_jax(decay, _edge_inputs())
    assert {"Loop", "Scan"} & set(op_types(model.graph))


def _graph_with_reshaped(weight: np.ndarray, readers: int, shape: tuple[int, ...] = (0, -1)) -> ir.Graph:
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, 6]))
    w = ir.Value(name="w", const_value=ir.tensor(weight), type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(weight.shape))
    dims = ir.Value(name="shape", const_value=ir.tensor(np.array(shape, np.int64)),
                    type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([len(shape)]))
    reshape = ir.node("Reshape", [w, dims])
    nodes = [reshape, ir.node("MatMul", [x, reshape.outputs[0]])]
    if readers == 2:
        nodes.append(ir.node("Add", [w, w]))
    graph = ir.Graph([x], [n.outputs[0] for n in nodes[1:]], nodes=nodes, initializers=[w, dims], opset_imports={"": 21})
    return graph


def test_a_reshaped_weight_read_once_becomes_an_initializer():
    weight = RNG.standard_normal((6, 2, 3)).astype(np.float32)
    graph = _graph_with_reshaped(weight, readers=1)
    passes.fold_weight_views(graph)
    assert [n.op_type for n in graph] == ["MatMul"]
    folded = graph.node(0).inputs[1].const_value.numpy()
    np.testing.assert_array_equal(folded, weight.reshape(6, 6))
    assert "w" not in graph.initializers


def test_a_weight_read_elsewhere_too_is_not_copied():
    weight = RNG.standard_normal((6, 2, 3)).astype(np.float32)
    graph = _graph_with_reshaped(weight, readers=2)
    passes.fold_weight_views(graph)
    assert [n.op_type for n in graph] == ["Reshape", "MatMul", "Add"]


def test_a_weight_given_broadcast_axes_is_not_folded():
    """[C] -> [1, 1, C] is a broadcast the rules (and ORT's fused norms, which take a 1-D scale) read as [C]."""
    weight = RNG.standard_normal((6,)).astype(np.float32)
    graph = _graph_with_reshaped(weight, readers=1, shape=(1, 6))
    passes.fold_weight_views(graph)
    assert [n.op_type for n in graph] == ["Reshape", "MatMul"]


def test_a_recurrence_whose_hidden_size_equals_its_steps_stays_a_loop():
    """An RNN's recurrent weight [H, H] over T == H steps has as many rows as the loop has trips, but the body
    never takes a row of it by the step index: it is one weight, not a stack of layers (T = H = 16 was
    lowered as 16 copies of the cell)."""
    steps = 16
    wh = (RNG.standard_normal((steps, steps)) / 4).astype(np.float32)
    wx = (RNG.standard_normal((WIDTH, steps)) / 4).astype(np.float32)

    def rnn(xs):
        def cell(h, x):
            h = jnp.tanh(x @ wx + h @ wh)
            return h, h
        return jax.lax.scan(cell, jnp.zeros((xs.shape[1], steps), xs.dtype), xs)[1]

    xs = RNG.standard_normal((steps, 2, WIDTH)).astype(np.float32)
    model = jaxconv.to_onnx(rnn, jax.ShapeDtypeStruct(xs.shape, xs.dtype))
    ops = op_types(model.graph)
    assert ("Loop" in ops or "Scan" in ops) and ops.count("Tanh") <= 1, ops
    assert_onnx_matches_jax(rnn, xs)
