"""The written model holds no initializer that no node reads: a rule that replaces an If or a Loop leaves
its old body's nodes reading the weights, and onnx_ir's dead-code pass counts those reads."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnx_ir as ir

import jaxconv
from jaxconv.onnx.passes import drop_unread_initializers
from jaxconv.runtimes.onnxrt import OnnxRunner

_RNG = np.random.default_rng(0)
_H = 32


def _w(*shape):
    return (_RNG.standard_normal(shape) * 0.1).astype(np.float32)


def _haiku_style_lstm(w, b, x, h, c):
    """One Linear on ``[x, h]``, the gates i, g, f, o, a forget bias of 1 (Haiku's LSTM)."""
    z = jnp.concatenate([x, h], -1) @ w + b
    i, g, f, o = jnp.split(z, 4, -1)
    c = jax.nn.sigmoid(f + 1) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    return jax.nn.sigmoid(o) * jnp.tanh(c), c


def _unrolled_two_layers():
    """Two LSTM layers with a ReLU between, unrolled in Python (Haiku's DeepRNN under static_unroll)."""
    w0, w1, b = _w(16 + _H, 4 * _H), _w(2 * _H, 4 * _H), _w(4 * _H)

    def fn(xs):
        state = [jnp.zeros((xs.shape[1], _H), jnp.float32)] * 4
        outs = []
        for x in xs:
            h0, c0 = _haiku_style_lstm(w0, b, x, state[0], state[1])
            h1, c1 = _haiku_style_lstm(w1, b, jax.nn.relu(h0), state[2], state[3])
            state = [h0, c0, h1, c1]
            outs.append(h1)
        return jnp.stack(outs)

    return fn


def _read_names(graph: onnx.GraphProto) -> set[str]:
    names = {o.name for o in graph.output}
    for node in graph.node:
        names.update(node.input)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                names |= _read_names(attr.g)
    return names


def _ops(graph: onnx.GraphProto) -> set[str]:
    ops = {n.op_type for n in graph.node}
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                ops |= _ops(attr.g)
    return ops


def test_an_unrolled_lstm_made_lstm_ops_keeps_no_unread_weight():
    fn = _unrolled_two_layers()
    xs = _RNG.standard_normal((8, 4, 16)).astype(np.float32)
    model = jaxconv.to_onnx(fn, xs)
    assert "LSTM" in _ops(model.graph)
    read = _read_names(model.graph)
    assert [i.name for i in model.graph.initializer if i.name not in read] == []
    (got,) = OnnxRunner(model.SerializeToString()).run([xs])
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(xs)), rtol=1e-5, atol=1e-6)


def test_a_weight_read_only_in_a_detached_body_is_dropped_and_one_read_in_a_branch_stays():
    x = ir.Value(name="x", shape=ir.Shape([2]), type=ir.TensorType(ir.DataType.FLOAT))
    kept, gone = (ir.Value(name=n, const_value=ir.tensor(np.ones(2, np.float32))) for n in ("kept", "gone"))
    branch_add = ir.node("Add", [x, kept])
    branch = ir.Graph([], [branch_add.outputs[0]], nodes=[branch_add])
    cond = ir.Value(name="cond", shape=ir.Shape([]), type=ir.TensorType(ir.DataType.BOOL))
    other = ir.node("Identity", [x])
    if_node = ir.node("If", [cond], {"then_branch": branch,
                                     "else_branch": ir.Graph([], [other.outputs[0]], nodes=[other])})
    detached_add = ir.node("Add", [x, gone])
    ir.Graph([], [detached_add.outputs[0]], nodes=[detached_add])  # a body no node holds any more
    graph = ir.Graph([x, cond], [if_node.outputs[0]], nodes=[if_node], initializers=[kept, gone])
    assert drop_unread_initializers(graph) == 1
    assert list(graph.initializers) == ["kept"]
