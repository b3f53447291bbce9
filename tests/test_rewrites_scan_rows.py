"""jaxconv.onnx.rewrites.scan_rows: a Scan body's per-row work (a row's scale, a sigmoid's negation)
done before the Scan; ONNX Runtime's outputs bit for bit those without the rule but
for NaN signs (NaN, infinities and -0.0 in the inputs), jax.jit's within tolerance, and scans that do not match left alone."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest

import jaxconv
from conformance.nets import gru
from jaxconv.onnx.rewrites import gru as gru_rule
from jaxconv.onnx.rewrites import scan_rows
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_floats, sequence_inputs

_T, _B, _I, _H = 5, 2, 4, 128  # batch * 2H * H = 65,536: the GRU rule leaves it a Scan on two threads


@pytest.fixture(autouse=True)
def _gru_scans(monkeypatch):
    """GRU cells stay Scans, as in a model that runs on two threads (the GRU rule off): these models of
    small products run on one, where the GRU rule makes them the GRU op, and the tests read the Scan."""
    monkeypatch.setattr(gru_rule, "rewrite", lambda *args: 0)


def _params(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    w = lambda *s, scale=0.1: (rng.standard_normal(s) * scale).astype(np.float32)  # noqa: E731
    return {"wx": w(_I, 3 * _H), "wh": w(_H, 2 * _H), "whn": w(_H, _H), "b": w(3 * _H, scale=0.01),
            "out": w(_H, 3)}


def _gru_model():
    p = _params()

    def fn(xs):
        h, hs = gru(p, xs, jnp.zeros((xs.shape[1], _H)))
        return hs @ p["out"], h

    return fn


def _convert(fn, x, monkeypatch=None):
    if monkeypatch is not None:
        monkeypatch.setattr(scan_rows, "rewrite", lambda graph: 0)
    model = jaxconv.to_onnx(fn, jax.ShapeDtypeStruct(x.shape, x.dtype), check=False)
    if monkeypatch is not None:
        monkeypatch.undo()
    return model


def _ops(model: onnx.ModelProto) -> tuple[collections.Counter, collections.Counter]:
    """(op types of the main graph, op types of its Scan bodies)."""
    main = collections.Counter(n.op_type for n in model.graph.node)
    body: collections.Counter = collections.Counter()
    for n in model.graph.node:
        if n.op_type == "Scan":
            body.update(b.op_type for a in n.attribute if a.type == onnx.AttributeProto.GRAPH for b in a.g.node)
    return main, body


def _same_bits(got, plain):
    """Bit for bit, but for the sign of a NaN (negating a NaN before Exp can flip the NaN it gives)."""
    for g, p in zip(got, plain):
        g, p = np.asarray(g), np.asarray(p)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(p))
        np.testing.assert_array_equal(g[~np.isnan(g)].view(np.uint32), p[~np.isnan(p)].view(np.uint32))


def _check(fn, x, monkeypatch):
    """Converted with and without the rule: (ops with, ops without); outputs compared on every input set."""
    model, plain = _convert(fn, x), _convert(fn, x, monkeypatch)
    run, run_plain = OnnxRunner(model.SerializeToString()), OnnxRunner(plain.SerializeToString())
    for xs in sequence_inputs(x.shape):
        got = run.run([xs])
        _same_bits(got, run_plain.run([xs]))
        for g, w in zip(got, jax.tree_util.tree_leaves(jax.jit(fn)(xs))):
            assert_same_floats(g, np.asarray(w), 2e-5, 2e-6)
    return _ops(model), _ops(plain)


def test_gru_negation_leaves_the_body_and_its_bias_and_gate_split_stay(monkeypatch):
    fn = _gru_model()
    x = sequence_inputs((_T, _B, _I))[0]
    (main, body), (plain_main, plain_body) = _check(fn, x, monkeypatch)
    assert plain_body["Neg"] == 1 and plain_body["Split"] == 1 and plain_body["Slice"] == 2, plain_body
    # the Neg left (into the weights); the sigmoid's r and z halves are one Split instead of two Slices
    assert body["Neg"] == 0 and body["Split"] == 2 and body["Slice"] == 0 and body["Exp"] == 1, body
    assert sum(body.values()) == sum(plain_body.values()) - 2, (body, plain_body)
    # one projection of every gate before the Scan (the r|z columns negated), the bias added in the
    # body before the gate split: no node before the Scan but that MatMul
    assert main == plain_main and main["MatMul"] == 2 and main["Add"] == 0, main
    jaxconv.to_onnx(fn, jax.ShapeDtypeStruct(x.shape, x.dtype), check=True)


def test_negated_scan_input_without_a_projection_is_one_neg_before_the_scan(monkeypatch):
    w = (np.random.default_rng(1).standard_normal((_I, _I)) / 2).astype(np.float32)

    def fn(xs):
        def cell(h, x):
            h = jax.nn.sigmoid(x + h @ w) * h + x
            return h, h
        return jax.lax.scan(cell, jnp.ones((xs.shape[1], _I)), xs)

    x = sequence_inputs((_T, _B, _I))[0]
    (main, body), (plain_main, plain_body) = _check(fn, x, monkeypatch)
    # the row is also read by the last Add: it is neither hoisted nor negated; the sum is
    assert plain_body["Neg"] == 1 and body["Neg"] == 1, body

    def fn2(xs):
        def cell(h, x):
            h = jax.nn.sigmoid(x + h @ w) * h
            return h, h
        return jax.lax.scan(cell, jnp.ones((xs.shape[1], _I)), xs)

    (main, body), (plain_main, plain_body) = _check(fn2, x, monkeypatch)
    assert body["Neg"] == 0 and main["Neg"] == 1 and plain_main["Neg"] == 0, (main, body)


def test_neg_read_by_other_than_exp_stays(monkeypatch):
    """tanh(-(x + h @ w)): the sign of a zero reaches the output, so the Neg is not folded."""
    w = (np.random.default_rng(2).standard_normal((_I, _I)) / 2).astype(np.float32)

    def fn(xs):
        def cell(h, x):
            h = jnp.tanh(-(x + h @ w))
            return h, h
        return jax.lax.scan(cell, jnp.zeros((xs.shape[1], _I)), xs)

    x = sequence_inputs((_T, _B, _I))[0]
    (main, body), (_, plain_body) = _check(fn, x, monkeypatch)
    assert body["Neg"] == 1 and main["Neg"] == 0, (main, body)


@pytest.mark.parametrize("bias_shape", [(_I,), (1, _I), (_B, _I)], ids=["vector", "row", "per-batch"])
def test_row_bias_leaves_the_body(monkeypatch, bias_shape):
    b = np.random.default_rng(4).standard_normal(bias_shape).astype(np.float32)

    def fn(xs):
        def cell(h, x):
            h = jnp.tanh(x * b + h)
            return h, h
        return jax.lax.scan(cell, jnp.zeros((xs.shape[1], _I)), xs)

    x = sequence_inputs((_T, _B, _I))[0]
    (main, body), (plain_main, plain_body) = _check(fn, x, monkeypatch)
    assert plain_body["Mul"] == 1 and body["Mul"] == 0 and main["Mul"] == 1, (main, body)


def test_bias_that_broadcasts_the_row_stays(monkeypatch):
    """A constant of more elements than the row (the row broadcast to [2, B, I]) stays in the body."""
    b = np.random.default_rng(4).standard_normal((2, 1, _I)).astype(np.float32)

    def fn(xs):
        def cell(h, x):
            y = x + b
            h = jnp.tanh(y[0] + y[1] + h)
            return h, h
        return jax.lax.scan(cell, jnp.zeros((xs.shape[1], _I)), xs)

    x = sequence_inputs((_T, _B, _I))[0]
    (main, body), (plain_main, plain_body) = _check(fn, x, monkeypatch)
    # nothing before the Scan; in the body the two Adds after the bias's are one Sum
    assert main == plain_main and body["Add"] == plain_body["Add"] - 2 and body["Sum"] == 1, (body, plain_body)


@pytest.mark.parametrize("cut", [(3, 3), (3, 4), (0, 3)], ids=["consecutive", "gap", "from-zero-twice"])
def test_slices_of_a_body_value_merge_only_when_they_cut_it_into_pieces(monkeypatch, cut):
    w = (np.random.default_rng(5).standard_normal((_I, 2 * _I)) / 2).astype(np.float32)

    def fn(xs):
        def cell(h, x):
            g = jnp.tanh(h @ w)  # [B, 2I], a shape the Loop's body does not state
            h = jnp.tanh(x + g[:, cut[0]:].sum(axis=1, keepdims=True) * g[:, :cut[1]].sum(axis=1, keepdims=True))
            return h, h
        return jax.lax.scan(cell, jnp.ones((xs.shape[1], _I)), xs)

    x = sequence_inputs((_T, _B, _I))[0]
    (main, body), (plain_main, plain_body) = _check(fn, x, monkeypatch)
    merged = cut[0] == cut[1]
    assert body["Split"] == plain_body["Split"] + merged, (body, plain_body)
    assert body["Slice"] == plain_body["Slice"] - 2 * merged, (body, plain_body)


def test_scalar_constant_row_op_keeps_its_rank():
    """``lax.map(lambda r: r * 2 + 1, x)``: the hoisted Mul's scalar constant stays a scalar initializer
    (it became a [1] tensor declared as a scalar, which onnx.checker refused)."""
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)
    x[0, 0], x[1, 1], x[2, 2] = np.nan, np.inf, -0.0
    fn = lambda a: jax.lax.map(lambda r: r * 2.0 + 1.0, a)  # noqa: E731
    model = jaxconv.to_onnx(fn, x)
    hoisted = [i for i in model.graph.initializer if i.name.endswith("_rows")]
    assert hoisted and all(list(i.dims) == [] for i in hoisted)
    (got,) = OnnxRunner(model.SerializeToString()).run([x])
    assert_same_floats(got, np.asarray(jax.jit(fn)(x)), rtol=1e-6, atol=0)
