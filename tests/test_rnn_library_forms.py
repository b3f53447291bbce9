"""RNN cells as the libraries write them reach the RNN rules (jaxconv.onnx.rewrites loops, lstm, gru,
scan_gate_pairs, loop_weight_first): flax's GRUCell with zero biases (one deduplicated constant for r
and z), a stacked LSTM whose last layer returns only its final carry (flax ``nn.RNN(return_carry=True)``),
Equinox's weight-first cells vmapped inside ``lax.scan``, and a reversed scan (``reverse=True``, Keras'
``go_backwards``). Each: the rule fired (op counts), outputs within the converter's tolerance of jax.jit on
inputs with NaN, infinities and -0.0, and where the graph before ran the same kernels, bit for bit with it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from scan_support import convert as _convert
from scan_support import ops as _ops
from scan_support import same_bits as _same_bits
from scan_support import unoptimized as _unoptimized

from jaxconv.onnx.rewrites import gru, loop_weight_first, loops, scan_gate_pairs
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_floats, sequence_inputs

_T, _B, _I, _H = 5, 2, 4, 128  # batch * 2H * H = 65,536: the GRU rule leaves a GRU a Scan where the model
# runs on two threads; these models of small products run on one, where it is the GRU op: tests of the
# Scan's form turn the rule off (_scan_gru)


def _w(rng, *shape, scale=0.1):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _split_gru_step(rng):
    """One step of a GRU that cuts r, z and n from one product each (nnx's, Equinox's, Keras' GRUCell)."""
    wi, wh, b = _w(rng, _I, 3 * _H), _w(rng, _H, 3 * _H), _w(rng, 3 * _H, scale=0.01)

    def step(h, x):
        xr, xz, xn = jnp.split(x @ wi + b, 3, axis=-1)
        hr, hz, hn = jnp.split(h @ wh, 3, axis=-1)
        r, z = jax.nn.sigmoid(xr + hr), jax.nn.sigmoid(xz + hz)
        n = jnp.tanh(xn + r * hn)
        return (1.0 - z) * n + z * h
    return step


def _near_jax(model, fn, shape):
    """ORT's outputs (its optimizations on) within tolerance of jax.jit on normal and edge inputs."""
    run = OnnxRunner(model.SerializeToString())
    for xs in sequence_inputs(shape):
        got, want = run.run([xs]), jax.tree_util.tree_leaves(jax.jit(fn)(xs))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same_floats(g, np.asarray(w), 2e-5, 2e-6)


def _scan_gru(monkeypatch) -> None:
    """A GRU stays a Scan, as where the model runs on two threads (the GRU rule off)."""
    monkeypatch.setattr(gru, "rewrite", lambda *args: 0)


def test_flax_gru_with_zero_biases_runs_r_and_z_through_one_sigmoid(monkeypatch):
    """flax's GRUCell initialises its biases to zeros: r's and z's are one constant after deduplication,
    which ``scan_gate_pairs`` once refused to join with itself (linen_gru: 22 body nodes -> 17)."""
    _scan_gru(monkeypatch)
    rng = np.random.default_rng(0)
    wi = {g: _w(rng, _I, _H) for g in "rzn"}
    wh = {g: _w(rng, _H, _H) for g in "rzn"}
    zero = np.zeros(_H, np.float32)

    def fn(xs):
        def cell(h, x):
            r = jax.nn.sigmoid(x @ wi["r"] + zero + h @ wh["r"])
            z = jax.nn.sigmoid(x @ wi["z"] + zero + h @ wh["z"])
            n = jnp.tanh(x @ wi["n"] + zero + r * (h @ wh["n"] + zero))
            h = (1.0 - z) * n + z * h
            return h, h
        return jax.lax.scan(cell, jnp.zeros((xs.shape[1], _H)), xs)

    x = sequence_inputs((_T, _B, _I))[0]
    model = _convert(fn, x)
    with monkeypatch.context() as patch:
        patch.setattr(scan_gate_pairs, "merge_pairs", lambda *args: 0)
        plain = _convert(fn, x)
    (main, body), (_, plain_body) = _ops(model), _ops(plain)
    assert plain_body["Exp"] == 2 and body["Exp"] == 1 and body["Split"] == 1 and main["Scan"] == 1, (body, plain_body)
    run, run_plain = _unoptimized(model), _unoptimized(plain)
    for xs in sequence_inputs(x.shape):
        _same_bits(run(xs), run_plain(xs))
    _near_jax(model, fn, x.shape)


def _lstm_cell(rng, n_in):
    wx, wh, b = _w(rng, n_in, 4 * _H), _w(rng, _H, 4 * _H), _w(rng, 4 * _H, scale=0.01)

    def cell(carry, x):
        c, h = carry
        i, f, g, o = jnp.split(x @ wx + h @ wh + b, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (c, h), h
    return cell


def test_stacked_lstm_whose_last_layer_returns_its_final_carry_is_two_lstm_ops():
    """flax's 2-layer classifier: the first layer's outputs (batch-major, transposed back) feed a second
    layer that returns only its final carry (a Loop without ys, over a sequence whose rows shape
    inference left unknown): both layers the LSTM op (linen_stacked: one before)."""
    rng = np.random.default_rng(1)
    first, second = _lstm_cell(rng, _I), _lstm_cell(rng, _H)

    def fn(xs):
        zeros = jnp.zeros((xs.shape[1], _H))
        _, ys = jax.lax.scan(first, (zeros, zeros), xs)
        ys = jnp.swapaxes(jnp.swapaxes(ys, 0, 1), 0, 1)  # flax's batch-major outputs, read time-major again
        (c, h), _ = jax.lax.scan(lambda carry, x: (second(carry, x)[0], None), (zeros, zeros), ys)
        return h

    x = sequence_inputs((_T, _B, _I))[0]
    model = _convert(fn, x)
    main, body = _ops(model)
    assert main["If"] == 2 and body["LSTM"] == 2 and main["Loop"] == 0, (main, body)
    _near_jax(model, fn, x.shape)


def _eqx_gru_lstm():
    """eqx.nn.GRUCell then LSTMCell as Equinox writes them (``weight @ x``), vmapped, each in lax.scan."""
    rng = np.random.default_rng(2)
    g_wi, g_wh, g_b, g_bn = _w(rng, 3 * _H, _I), _w(rng, 3 * _H, _H), _w(rng, 3 * _H, scale=0.01), _w(rng, _H)
    l_wi, l_wh, l_b = _w(rng, 4 * _H, _H), _w(rng, 4 * _H, _H), _w(rng, 4 * _H, scale=0.01)

    def gru(x, h):
        igates = jnp.split(g_wi @ x + g_b, 3)
        hgates = jnp.split(g_wh @ h, 3)
        r = jax.nn.sigmoid(igates[0] + hgates[0])
        z = jax.nn.sigmoid(igates[1] + hgates[1])
        n = jnp.tanh(igates[2] + r * (hgates[2] + g_bn))
        return n + z * (h - n)

    def lstm(x, hc):
        h, c = hc
        i, f, g, o = jnp.split(l_wi @ x + l_wh @ h + l_b, 4)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        return jax.nn.sigmoid(o) * jnp.tanh(c), c

    def one(xs):  # one example: xs [T, I]
        def gstep(h, x):
            h = gru(x, h)
            return h, h
        _, hs = jax.lax.scan(gstep, jnp.zeros(_H), xs)

        def lstep(hc, x):
            hc = lstm(x, hc)
            return hc, hc[0]
        _, ys = jax.lax.scan(lstep, (jnp.zeros(_H), jnp.zeros(_H)), hs)
        return ys
    return jax.vmap(one)


def test_equinox_weight_first_cells_in_scans_lose_their_transposes(monkeypatch):
    """vmapped ``W @ h`` in the scan bodies as ``h @ Wᵀ``: no Transpose left in a body, the GRU the GRU op
    and the LSTM the LSTM op (eqx_rnn: 3.1x jax.jit -> 1.05x; with the GRU op on one thread 0.62x), each
    behind its finiteness guard."""
    fn = _eqx_gru_lstm()
    x = np.random.default_rng(3).standard_normal((_B, _T, _I)).astype(np.float32)
    model = _convert(fn, x)
    with monkeypatch.context() as patch:
        patch.setattr(loop_weight_first, "rewrite", lambda *args: 0)
        plain = _convert(fn, x)
    (main, body), (plain_main, plain_body) = _ops(model), _ops(plain)
    assert plain_body["Transpose"] >= 6 and "LSTM" not in plain_body, (plain_main, plain_body)
    assert body["Transpose"] == 0 and body["LSTM"] == 1 and body["GRU"] == 1 and main["If"] == 2, (main, body)
    run = OnnxRunner(model.SerializeToString())
    for xs in sequence_inputs((_T, _B, _I)):
        xs = np.ascontiguousarray(np.swapaxes(xs, 0, 1))  # [B, T, I]
        for g, w in zip(run.run([xs]), jax.tree_util.tree_leaves(jax.jit(fn)(xs))):
            assert_same_floats(g, np.asarray(w), 2e-5, 2e-6)


def test_equinox_gru_scan_is_bit_for_bit_the_weight_first_one(monkeypatch):
    """The GRU alone as a Scan: the products built as ``h @ Wᵀ`` give the bits of ``W @ hᵀ``."""
    _scan_gru(monkeypatch)
    rng = np.random.default_rng(4)
    wi, wh = _w(rng, 3 * _H, _I), _w(rng, 3 * _H, _H)

    def one(xs):
        def step(h, x):
            ir_, iz, in_ = jnp.split(wi @ x, 3)
            hr, hz, hn = jnp.split(wh @ h, 3)
            r, z = jax.nn.sigmoid(ir_ + hr), jax.nn.sigmoid(iz + hz)
            n = jnp.tanh(in_ + r * hn)
            h = n + z * (h - n)
            return h, h
        return jax.lax.scan(step, jnp.zeros(_H), xs)[1]
    fn = jax.vmap(one)
    x = np.random.default_rng(5).standard_normal((_B, _T, _I)).astype(np.float32)
    model = _convert(fn, x)
    with monkeypatch.context() as patch:
        patch.setattr(loop_weight_first, "rewrite", lambda *args: 0)
        plain = _convert(fn, x)
    assert _ops(model)[1]["Transpose"] == 0 and _ops(plain)[1]["Transpose"] >= 3
    run, run_plain = _unoptimized(model), _unoptimized(plain)
    for xs in sequence_inputs((_T, _B, _I)):
        xs = np.ascontiguousarray(np.swapaxes(xs, 0, 1))
        _same_bits(run(xs), run_plain(xs))


def test_reversed_scan_reads_its_rows_reversed_before_the_loop(monkeypatch):
    """``lax.scan(reverse=True)`` slices row ``T - 1 - i`` in step ``i``: the rows reversed once before
    the loop make it the forward form, so the LSTM rule takes it (keras_rnn's backward LSTM)."""
    cell = _lstm_cell(np.random.default_rng(6), _I)

    def fn(xs):
        zeros = jnp.zeros((xs.shape[1], _H))
        (c, h), ys = jax.lax.scan(cell, (zeros, zeros), xs, reverse=True)
        return ys, h

    x = sequence_inputs((_T, _B, _I))[0]
    model = _convert(fn, x)
    with monkeypatch.context() as patch:
        patch.setattr(loops, "_reversed_steps", lambda *args: 0)
        plain = _convert(fn, x)
    (main, body), (_, plain_body) = _ops(model), _ops(plain)
    assert body["LSTM"] == 1 and "LSTM" not in plain_body, (main, body, plain_body)
    _near_jax(model, fn, x.shape)


def test_unrolled_gru_body_cuts_every_steps_gates_with_one_split(monkeypatch):
    """``lax.scan(unroll=4)`` (nnx.RNN's ``unroll``): the Slices of the gates in steps 2-4 read a product
    of a value made in the body, whose shape ``body_shapes`` now follows through the Slices before it, so
    every step's gates are one Split and their sigmoids' negations go into the weights (nnx_gru: only the
    first step's were)."""
    from jaxconv.onnx.rewrites import _scan_body, unrolled_bodies

    step = _split_gru_step(np.random.default_rng(7))

    def fn(xs):
        def cell(h, x):
            h = step(h, x)
            return h, h
        return jax.lax.scan(cell, jnp.zeros((xs.shape[1], _H)), xs, unroll=4)

    x = sequence_inputs((8, _B, _I))[0]
    monkeypatch.setattr(unrolled_bodies, "rewrite", lambda graph: 0)  # the k copies, not one step
    model = _convert(fn, x)
    with monkeypatch.context() as patch:
        patch.setattr(_scan_body, "_sliced_shape", lambda *args: None)
        plain = _convert(fn, x)
    (main, body), (_, plain_body) = _ops(model), _ops(plain)
    assert plain_body["Slice"] >= 9 and plain_body["Neg"] >= 6, plain_body
    assert main["Scan"] == 1 and body["Slice"] == 0 and body["Neg"] == 0 and body["Exp"] == 4, (main, body)
    run, run_plain = _unoptimized(model), _unoptimized(plain)
    for xs in sequence_inputs(x.shape):
        _same_bits(run(xs), run_plain(xs))
    _near_jax(model, fn, x.shape)


def test_gru_cutting_its_gates_from_one_product_runs_r_and_z_through_one_sigmoid(monkeypatch):
    """nnx's, Equinox's and Keras' GRUCell cut r, z and n from one product (a Split in three): r's and z's
    parts of each Split as one part, their sums and sigmoid once, then a Split (nnx_gru: 22 nodes a
    step -> 19)."""
    step = _split_gru_step(np.random.default_rng(8))

    def fn(xs):
        def cell(h, x):
            return step(h, x), h
        return jax.lax.scan(cell, jnp.zeros((xs.shape[1], _H)), xs)

    x = sequence_inputs((_T, _B, _I))[0]
    model = _convert(fn, x)
    with monkeypatch.context() as patch:
        patch.setattr(scan_gate_pairs, "merge_pairs", lambda *args: 0)
        plain = _convert(fn, x)
    (main, body), (_, plain_body) = _ops(model), _ops(plain)
    assert plain_body["Exp"] == 2 and body["Exp"] == 1 and body["Div"] == 1, (body, plain_body)
    assert sum(body.values()) == sum(plain_body.values()) - 3 and main["Scan"] == 1, (body, plain_body)
    run, run_plain = _unoptimized(model), _unoptimized(plain)
    for xs in sequence_inputs(x.shape):
        _same_bits(run(xs), run_plain(xs))
    _near_jax(model, fn, x.shape)
