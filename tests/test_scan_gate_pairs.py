"""jaxconv.onnx.rewrites.scan_gate_pairs and scan_gates on gates made by separate projections (flax's GRUCell and LSTMCell:
one Dense per gate) and on weights cut in the body (haiku's GRU): the gates that share their sigmoid
run it once, a sigmoid's negation goes into sliced weights. Outputs are compared bit for bit with the
graph the rule does not touch (ONNX Runtime's graph optimizations off: on, it fuses ``x * (1 / y)`` into
``x / y`` in one graph and not the other) and with jax.jit within the converter's tolerance, on inputs
with NaN, infinities and -0.0."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scan_support import convert as _convert
from scan_support import ops as _ops
from scan_support import same_bits as _same_bits
from scan_support import unoptimized as _unoptimized

from jaxconv.onnx.rewrites import gru as gru_rule
from jaxconv.onnx.rewrites import scan_gate_pairs, scan_rows
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_floats, sequence_inputs

_T, _B, _I, _H = 5, 2, 4, 128  # batch * 2H * H = 65,536: the GRU rule leaves it a Scan on two threads


@pytest.fixture(autouse=True)
def _gru_scans(monkeypatch):
    """GRU cells stay Scans, as in a model that runs on two threads (the GRU rule off): these models of
    small products run on one, where the GRU rule makes them the GRU op, and the tests read the Scan."""
    monkeypatch.setattr(gru_rule, "rewrite", lambda *args: 0)


def _w(rng, *shape, scale=0.1):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _flax_form_gru():
    rng = np.random.default_rng(0)
    wi = {g: _w(rng, _I, _H) for g in "rzn"}
    wh = {g: _w(rng, _H, _H) for g in "rzn"}
    bi = {g: _w(rng, _H, scale=0.01) for g in "rzn"}
    bhn = _w(rng, _H, scale=0.01)

    def fn(xs):
        def cell(h, x):
            r = jax.nn.sigmoid(x @ wi["r"] + bi["r"] + h @ wh["r"])
            z = jax.nn.sigmoid(x @ wi["z"] + bi["z"] + h @ wh["z"])
            n = jnp.tanh(x @ wi["n"] + bi["n"] + r * (h @ wh["n"] + bhn))
            h = (1.0 - z) * n + z * h
            return h, h
        return jax.lax.scan(cell, jnp.zeros((xs.shape[1], _H)), xs)
    return fn


def _haiku_form_gru():
    rng = np.random.default_rng(1)
    wi, wh, b = _w(rng, _I, 3 * _H), _w(rng, _H, 3 * _H), _w(rng, 3 * _H, scale=0.01)

    def fn(xs):
        def cell(h, x):
            gx = x @ wi
            zr = jax.nn.sigmoid(gx[:, :2 * _H] + h @ wh[:, :2 * _H] + b[:2 * _H])
            z, r = jnp.split(zr, 2, axis=-1)
            a = jnp.tanh(gx[:, 2 * _H:] + (r * h) @ wh[:, 2 * _H:] + b[2 * _H:])
            h = (1.0 - z) * h + z * a
            return h, h
        return jax.lax.scan(cell, jnp.zeros((xs.shape[1], _H)), xs)
    return fn


def _flax_form_lstm():
    rng = np.random.default_rng(2)
    wi = {g: _w(rng, _I, _H) for g in "ifgo"}
    wh = {g: _w(rng, _H, _H) for g in "ifgo"}
    b = {g: _w(rng, _H, scale=0.01) for g in "ifgo"}

    def fn(xs):
        def cell(carry, x):
            c, h = carry
            pre = {g: x @ wi[g] + b[g] + h @ wh[g] for g in "ifgo"}
            i, f, o = (jax.nn.sigmoid(pre[g]) for g in "ifo")
            c = f * c + i * jnp.tanh(pre["g"])
            h = o * jnp.tanh(c)
            return (c, h), h
        zeros = jnp.zeros((xs.shape[1], _H))
        return jax.lax.scan(cell, (zeros, zeros), xs)
    return fn


def _check(fn, plain_rule, monkeypatch):
    """The graph with the rules and with ``plain_rule`` (a module attribute path) off: their ops; the
    outputs the same bits (ORT's optimizations off) and within tolerance of jax.jit (on)."""
    x = sequence_inputs((_T, _B, _I))[0]
    model = _convert(fn, x)
    with monkeypatch.context() as patch:
        patch.setattr(*plain_rule, lambda *args: 0)
        plain = _convert(fn, x)
    run, run_plain, run_opt = _unoptimized(model), _unoptimized(plain), OnnxRunner(model.SerializeToString())
    for xs in sequence_inputs(x.shape):
        _same_bits(run(xs), run_plain(xs))
        for g, w in zip(run_opt.run([xs]), jax.tree_util.tree_leaves(jax.jit(fn)(xs))):
            assert_same_floats(g, np.asarray(w), 2e-5, 2e-6)
    return _ops(model), _ops(plain)


def test_flax_form_gru_runs_r_and_z_through_one_sigmoid(monkeypatch):
    (main, body), (plain_main, plain_body) = _check(_flax_form_gru(), (scan_gate_pairs, "merge_pairs"), monkeypatch)
    assert plain_body["Exp"] == 2 and plain_main["MatMul"] == 3, (plain_main, plain_body)
    # r's and z's sums as one (their projections before the Scan one product), one sigmoid, one Split
    assert body["Exp"] == 1 and body["Div"] == 1 and body["Split"] == 1 and main["MatMul"] == 2, (main, body)
    assert sum(body.values()) == sum(plain_body.values()) - 4 and main["Scan"] == 1, (body, plain_body)


def test_flax_form_lstm_gates_share_one_sigmoid_in_the_exact_scan(monkeypatch):
    # the LSTM op runs finite inputs; the exact Scan behind its guard runs the others (NaN, inf)
    (main, body), (plain_main, plain_body) = _check(_flax_form_lstm(), (scan_gate_pairs, "merge_pairs"), monkeypatch)
    assert plain_body["Exp"] == 3 and body["Exp"] == 1, (body, plain_body)
    assert main["LSTM"] == plain_main["LSTM"], main


def test_haiku_form_negation_goes_into_weights_cut_in_the_body(monkeypatch):
    (main, body), (plain_main, plain_body) = _check(_haiku_form_gru(), (scan_rows, "rewrite"), monkeypatch)
    assert plain_body["Neg"] == 1 and body["Neg"] == 0 and body["Exp"] == 1, (body, plain_body)


def test_flax_linen_gru_cell():
    nn = pytest.importorskip("flax.linen")

    class Model(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.RNN(nn.GRUCell(_H))(x)

    inputs = [np.ascontiguousarray(a.transpose(1, 0, 2)) for a in sequence_inputs((_T, _B, _I))]  # batch first
    x = inputs[0]
    params = Model().init(jax.random.PRNGKey(0), x)

    def fn(x):
        return Model().apply(params, x)

    model = _convert(fn, x)
    main, body = _ops(model)
    assert body["Exp"] == 1 and main["MatMul"] == 2 and main["Scan"] == 1, (main, body)
    run = OnnxRunner(model.SerializeToString())
    for xs in inputs:
        assert_same_floats(run.run([xs])[0], np.asarray(jax.jit(fn)(xs)), 2e-5, 2e-6)
