"""jaxconv.onnx.rewrites.scan_rows on RNN cells: node counts that follow from the graph without the
rule (one input projection, the sigmoid's negations in the weights, one sigmoid over the gates that
share it) and the numbers of that graph bit for bit where ONNX Runtime does not fuse ops of its own
(NaN, infinities, -0.0 and huge inputs included), jax.jit's within tolerance where it does."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
import pytest

import jaxconv
from conformance.nets import gru, lstm
from jaxconv.onnx.rewrites import gru as gru_rule
from jaxconv.onnx.rewrites import scan_rows
from lowering_check import assert_same_floats

_T, _B, _I, _H = 5, 2, 4, 128  # batch * 2H * H = 65,536: the GRU rule leaves the GRU a Scan on two threads


@pytest.fixture(autouse=True)
def _gru_scans(monkeypatch):
    """GRU cells stay Scans, as in a model that runs on two threads (the GRU rule off): these models of
    small products run on one, where the GRU rule makes them the GRU op, and the tests read the Scan."""
    monkeypatch.setattr(gru_rule, "rewrite", lambda *args: 0)


def _w(rng, *shape, scale=0.1):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _inputs(shape) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    plain = rng.standard_normal(shape).astype(np.float32)
    edges = plain.copy()
    edges[1, 0, 0], edges[2, 1, 1], edges[3, 0, 2], edges[0] = np.nan, np.inf, -np.inf, -0.0
    huge = plain * np.float32(3e37)
    return [plain, edges, np.full(shape, -0.0, np.float32), huge]


def _convert(fn, x, rule: bool):
    with pytest.MonkeyPatch.context() as patch:
        if not rule:
            patch.setattr(scan_rows, "rewrite", lambda graph: 0)
        return jaxconv.to_onnx(fn, jax.ShapeDtypeStruct(x.shape, x.dtype), check=False)


def _session(model: onnx.ModelProto, fuse: bool) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    if not fuse:  # ORT's own fusions (a MatMul and an Add as a Gemm, x * (1 / y) as x / y) round differently
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _same_bits(got, want):
    """Bit for bit, but for the sign of a NaN (negating a NaN before Exp can flip the NaN it gives)."""
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_array_equal(g[~np.isnan(g)].view(np.uint32), w[~np.isnan(w)].view(np.uint32))


def _check(fn, x):
    """(model with the rule, model without); outputs compared on every input set."""
    model, plain = _convert(fn, x, True), _convert(fn, x, False)
    exact, exact_plain, fused = _session(model, False), _session(plain, False), _session(model, True)
    name = exact.get_inputs()[0].name
    for xs in _inputs(x.shape):
        _same_bits(exact.run(None, {name: xs}), exact_plain.run(None, {name: xs}))
        want = jax.tree_util.tree_leaves(jax.jit(fn)(xs))
        for g, w in zip(fused.run(None, {name: xs}), want):
            assert_same_floats(g, np.asarray(w), 2e-5, 2e-6)
    onnx.checker.check_model(model, full_check=True)
    return model, plain


def _scan(graph: onnx.GraphProto) -> tuple[onnx.GraphProto, onnx.NodeProto]:
    """(the graph holding the one Scan, the Scan), If branches searched."""
    for node in graph.node:
        if node.op_type == "Scan":
            return graph, node
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                try:
                    return _scan(a.g)
                except LookupError:
                    pass
    raise LookupError("no Scan")


def _ops(graph: onnx.GraphProto) -> collections.Counter:
    return collections.Counter(n.op_type for n in graph.node)


def _body(model: onnx.ModelProto) -> onnx.GraphProto:
    return _scan(model.graph)[1].attribute[[a.name for a in _scan(model.graph)[1].attribute].index("body")].g


def test_gru_reads_one_projection_before_its_scan():
    rng = np.random.default_rng(0)
    p = {"wx": _w(rng, _I, 3 * _H), "wh": _w(rng, _H, 2 * _H), "whn": _w(rng, _H, _H),
         "b": _w(rng, 3 * _H, scale=0.01), "out": _w(rng, _H, 3)}

    def fn(xs):
        h, hs = gru(p, xs, jnp.zeros((xs.shape[1], _H)))
        return hs @ p["out"], h

    x = _inputs((_T, _B, _I))[0]
    model, plain = _check(fn, x)
    body, plain_body = _ops(_body(model)), _ops(_body(plain))
    # the main graph keeps its three nodes: the projection of every gate, the Scan, the output product
    assert [n.op_type for n in model.graph.node] == [n.op_type for n in plain.graph.node] == ["MatMul", "Scan", "MatMul"]
    # in the body the Neg goes into the weights and the sigmoid's two Slices are one Split
    assert plain_body["Neg"] == 1 and plain_body["Slice"] == 2, plain_body
    assert body["Neg"] == 0 and body["Slice"] == 0 and body["Split"] == plain_body["Split"] + 1, body
    assert sum(body.values()) == sum(plain_body.values()) - plain_body["Neg"] - plain_body["Slice"] + 1


@pytest.mark.parametrize("order", ["ifgo", "igfo"], ids=["jax", "haiku"])
def test_lstm_gates_that_share_the_sigmoid_run_it_once(order):
    """The exact Scan behind the LSTM op's guard (it runs for non-finite inputs): the three sigmoid
    gates' negations go into the weights and one sigmoid runs over their columns."""
    rng = np.random.default_rng(1)
    hidden = 16
    wx, wh, b, out = _w(rng, _I, 4 * hidden), _w(rng, hidden, 4 * hidden), _w(rng, 4 * hidden), _w(rng, hidden, 3)

    def fn(xs):
        if order == "ifgo":
            return lstm({"wx": wx, "wh": wh, "b": b, "out": out}, xs)

        def cell(state, x):  # haiku's order, its forget gate without the + 1
            h, c = state
            i, g, f, o = jnp.split(x @ wx + h @ wh + b, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h

        zeros = jnp.zeros((xs.shape[1], hidden))
        return jax.lax.scan(cell, (zeros, zeros), xs)

    x = _inputs((_T, _B, _I))[0]
    model, plain = _check(fn, x)
    body, plain_body = _ops(_body(model)), _ops(_body(plain))
    gates = plain_body["Exp"]
    assert gates == 3 and plain_body["Neg"] == 3, plain_body
    sigmoid = 3  # Exp, Add, Div
    cuts = plain_body["Slice"] + plain_body["Split"]  # one Split of the gates, or a Slice each
    assert cuts in (1, 4), plain_body
    # two Splits: the gates, then the sigmoid's result into its three gates
    assert body["Exp"] == 1 and body["Neg"] == 0 and body["Split"] == 2 and body["Slice"] == 0, body
    assert sum(body.values()) == sum(plain_body.values()) - plain_body["Neg"] - (gates - 1) * sigmoid - cuts + 2


def test_gates_behind_different_ops_stay_apart():
    """sigmoid(f + 1) (haiku's forget bias) is not the other gates' chain: those two share one sigmoid."""
    rng = np.random.default_rng(2)
    hidden = 16
    wx, wh, b = _w(rng, _I, 4 * hidden), _w(rng, hidden, 4 * hidden), _w(rng, 4 * hidden)

    def fn(xs):
        def cell(state, x):
            h, c = state
            i, g, f, o = jnp.split(x @ wx + h @ wh + b, 4, axis=-1)
            c = jax.nn.sigmoid(f + 1) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h

        zeros = jnp.zeros((xs.shape[1], hidden))
        return jax.lax.scan(cell, (zeros, zeros), xs)

    model, plain = _check(fn, _inputs((_T, _B, _I))[0])
    assert _ops(_body(plain))["Exp"] == 3 and _ops(_body(model))["Exp"] == 2, _ops(_body(model))


def test_a_sum_of_three_is_one_node_but_not_where_an_add_reads_a_product():
    """``(x + b) + h`` is one Sum; in ``tanh(x @ wx + h @ wh + b)`` the Add of ``h @ wh`` stays an Add
    (ONNX Runtime runs it inside the MatMul) and so does the bias's."""
    rng = np.random.default_rng(4)
    b, w = _w(rng, 2, 1, _I), _w(rng, _I, _I, scale=0.5)

    def shifted(xs):
        def cell(h, x):
            y = x + b
            h = jnp.tanh(y[0] + y[1] + h)
            return h, h
        return jax.lax.scan(cell, jnp.zeros((xs.shape[1], _I)), xs)

    def recurrent(xs):
        def cell(h, x):
            h = jnp.tanh(x + h @ w + b[0])
            return h, h
        return jax.lax.scan(cell, jnp.zeros((xs.shape[1], _I)), xs)

    x = _inputs((_T, _B, _I))[0]
    model, plain = _check(shifted, x)
    body, plain_body = _ops(_body(model)), _ops(_body(plain))
    assert body["Sum"] == 1 and body["Add"] == plain_body["Add"] - 2, body
    model, plain = _check(recurrent, x)
    assert _ops(_body(model))["Sum"] == 0 and _ops(_body(model)) == _ops(_body(plain))


@pytest.mark.parametrize("cell_name", ["LSTMCell", "GRUCell"])
def test_flax_cells_fold_every_negation(cell_name):
    """flax's cells (one Dense per gate, the bias a reshaped constant in the body): each sigmoid's Neg
    goes into its gate's weights and bias, and the gates share one sigmoid."""
    nn = pytest.importorskip("flax.linen")
    hidden = 128
    cell = getattr(nn, cell_name)(features=hidden)
    x = _inputs((_T, _B, _I))[0]
    carry = cell.initialize_carry(jax.random.PRNGKey(0), x[0].shape)
    params = cell.init(jax.random.PRNGKey(0), carry, x[0])
    rng = np.random.default_rng(5)
    params = jax.tree_util.tree_map(lambda p: jnp.asarray(_w(rng, *np.shape(p), scale=0.3)), params)

    def fn(xs):
        c0 = jax.tree_util.tree_map(jnp.zeros_like, carry)
        return jax.lax.scan(lambda c, v: cell.apply(params, c, v), c0, xs)

    model, plain = _check(fn, x)
    body, plain_body = _ops(_body(model)), _ops(_body(plain))
    assert plain_body["Neg"] == plain_body["Exp"] > 1 and body["Neg"] == 0, (plain_body, body)
    # the gates' sigmoids run once over their columns side by side (scan_gate_pairs.merge_pairs), cut by a
    # Split a pair merged; each merge drops one gate's product, its bias's and the product's Adds, its
    # Exp, Add and Div, for the Split; and a Sum of three (two Adds of no product) is one node fewer
    assert body["Exp"] == 1 and body["Split"] == plain_body["Exp"] - 1, (plain_body, body)
    # and a bias Add of a row (flax's reshaped bias) runs once before the Scan, over every row
    hoisted = _ops(_scan(model.graph)[0])["Add"] - _ops(_scan(plain.graph)[0])["Add"]
    fewer = plain_body["Neg"] + 5 * body["Split"] + body["Sum"] + hoisted
    assert sum(body.values()) == sum(plain_body.values()) - fewer, (plain_body, body, hoisted)
