"""jaxconv.onnx.rewrites.loop_fission: stacked recurrent layers in one scan step (a lax.scan step that runs
layer 1's cell then layer 2's, hk.DeepRNN under hk.static_unroll) split into one Loop a layer, which the
LSTM and GRU rules then take; a ReLU between the layers run once on the stacked rows. Each: the rule
fired (op counts), ONNX Runtime's outputs within tolerance of jax.jit on inputs with NaN, infinities and
-0.0, and, with the LSTM and GRU rules off, bit for bit those without the rule (NaN signs aside: the
scan rules fold a sigmoid's negation into the weights, split or not). Layers that feed back into earlier
ones, and a loop whose condition reads its state, stay one Loop.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from scan_support import convert, ops

from jaxconv.onnx.rewrites import gru, loop_fission, loops, lstm
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_bits, assert_same_floats, sequence_inputs

_T, _B, _I, _H = 6, 2, 4, 16


def _w(rng, *shape, scale=0.3):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _lstm(rng, n_in):
    """jax's (i, f, g, o) LSTM cell, carry (c, h)."""
    wx, wh, b = _w(rng, n_in, 4 * _H), _w(rng, _H, 4 * _H), _w(rng, 4 * _H, scale=0.1)

    def cell(carry, x):
        c, h = carry
        i, f, g, o = jnp.split(x @ wx + h @ wh + b, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (c, h), h
    return cell


def _gru(rng, n_in):
    """A GRU that cuts r, z and n from one product each."""
    wi, wh, b = _w(rng, n_in, 3 * _H), _w(rng, _H, 3 * _H), _w(rng, 3 * _H, scale=0.1)

    def cell(h, x):
        xr, xz, xn = jnp.split(x @ wi + b, 3, axis=-1)
        hr, hz, hn = jnp.split(h @ wh, 3, axis=-1)
        r, z = jax.nn.sigmoid(xr + hr), jax.nn.sigmoid(xz + hz)
        h = (1.0 - z) * jnp.tanh(xn + r * hn) + z * h
        return h, h
    return cell


def _tanh_rnn(rng, n_in):
    wx, wh, b = _w(rng, n_in, _H), _w(rng, _H, _H), _w(rng, _H, scale=0.1)
    return lambda h, x: jnp.tanh(x @ wx + h @ wh + b)


def _zeros(xs):
    return jnp.zeros((xs.shape[1], _H), xs.dtype)


def _runs(model):
    return OnnxRunner(model.SerializeToString()).run


def _check(monkeypatch, fn, shape=(_T, _B, _I), bits=True, also_off=()):
    """``fn``'s ONNX: (op types of its main graph, of its subgraphs); its outputs within tolerance of
    jax.jit and, the LSTM and GRU rules off (and the ``(module, name)`` functions of ``also_off``), bit
    for bit those without the rule, on edge inputs."""
    inputs = sequence_inputs(shape)
    model = convert(fn, inputs[0])
    run = _runs(model)
    for xs in inputs:
        got, want = run([xs]), jax.tree_util.tree_leaves(jax.jit(fn)(xs))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same_floats(g, np.asarray(w), 2e-5, 2e-6)
    if bits:
        with monkeypatch.context() as patch:
            patch.setattr(lstm, "rewrite", lambda *args: 0)
            patch.setattr(gru, "rewrite", lambda *args: 0)
            for module, name in also_off:
                patch.setattr(module, name, lambda *args: 0)
            split = _runs(convert(fn, inputs[0]))
            patch.setattr(loop_fission, "rewrite", lambda *args: 0)
            whole = _runs(convert(fn, inputs[0]))
        for xs in inputs:
            assert_same_bits(split([xs]), whole([xs]), nan_signs=False)
    return ops(model)


def test_two_stacked_lstm_cells_in_one_scan_step_are_two_lstm_ops(monkeypatch):
    """Layer 2 reads layer 1's new h in the same step; the scan returns both final carries and layer 2's
    outputs: two Loops, each the LSTM op (the step's scan was one Scan)."""
    rng = np.random.default_rng(0)
    first, second = _lstm(rng, _I), _lstm(rng, _H)

    def fn(xs):
        def step(carry, x):
            s1, h1 = first(carry[0], x)
            s2, h2 = second(carry[1], h1)
            return (s1, s2), h2
        z = _zeros(xs)
        return jax.lax.scan(step, ((z, z), (z, z)), xs)

    main, body = _check(monkeypatch, fn)
    assert body["LSTM"] == 2 and main["Scan"] + main["Loop"] == 0, (main, body)


def test_a_relu_between_the_layers_runs_once_on_the_stacked_rows(monkeypatch):
    """``jax.nn.relu`` between the layers (hk.DeepRNN's ``[LSTM, relu, LSTM]``) runs between the Loops on
    every row at once, so layer 2's input projection leaves its Loop and the LSTM rule takes it."""
    rng = np.random.default_rng(1)
    first, second = _lstm(rng, _I), _lstm(rng, _H)

    def fn(xs):
        def step(carry, x):
            s1, h1 = first(carry[0], x)
            s2, h2 = second(carry[1], jax.nn.relu(h1))
            return (s1, s2), h2
        z = _zeros(xs)
        return jax.lax.scan(step, ((z, z), (z, z)), xs)[1]

    main, body = _check(monkeypatch, fn)
    assert body["LSTM"] == 2 and main["Relu"] == 1 and "Relu" not in body, (main, body)


def test_an_lstm_then_a_gru_are_an_lstm_op_and_a_gru_op(monkeypatch):
    """Both layers' outputs stacked (``ys = (h1, h2)``): layer 1's scan output is also what layer 2 reads."""
    rng = np.random.default_rng(2)
    first, second = _lstm(rng, _I), _gru(rng, _H)

    def fn(xs):
        def step(carry, x):
            s1, h1 = first(carry[0], x)
            s2, h2 = second(carry[1], h1)
            return (s1, s2), (h1, h2)
        z = _zeros(xs)
        return jax.lax.scan(step, ((z, z), z), xs)

    main, body = _check(monkeypatch, fn)
    assert body["LSTM"] == 1 and body["GRU"] == 1 and main["Scan"] + main["Loop"] == 0, (main, body)


def test_two_stacked_gru_cells_are_two_gru_ops_in_a_valid_model(monkeypatch):
    """GRU on GRU: the GRU rule matches each Loop again just before it replaces it, so layer 2 reads
    layer 1's new outputs after layer 1's Loop moved into its If's exact branch (onnx.checker passes:
    jaxconv's checked conversion)."""
    import jaxconv

    rng = np.random.default_rng(10)
    first, second = _gru(rng, _I), _gru(rng, _H)

    def fn(xs):
        def step(carry, x):
            a, h1 = first(carry[0], x)
            b, h2 = second(carry[1], h1)
            return (a, b), h2
        z = _zeros(xs)
        return jax.lax.scan(step, (z, z), xs)

    main, body = _check(monkeypatch, fn)
    assert body["GRU"] == 2 and main["Scan"] + main["Loop"] == 0, (main, body)
    jaxconv.to_onnx(fn, jax.ShapeDtypeStruct((_T, _B, _I), np.float32))


def test_a_reversed_scan_of_two_layers_is_split_too(monkeypatch):
    """``reverse=True``: each Loop reads its rows in the reversed order, the values between them by step."""
    rng = np.random.default_rng(3)
    first, second = _lstm(rng, _I), _lstm(rng, _H)

    def fn(xs):
        def step(carry, x):
            s1, h1 = first(carry[0], x)
            s2, h2 = second(carry[1], h1)
            return (s1, s2), h2
        z = _zeros(xs)
        (_, (c2, _)), ys = jax.lax.scan(step, ((z, z), (z, z)), xs, reverse=True)
        return ys, c2

    main, body = _check(monkeypatch, fn)
    assert body["LSTM"] == 2, (main, body)


def _hk_lstm(rng, n_in):
    """hk.LSTM: one Linear over ``concat([x, h])``, gates (i, g, f, o), a forget bias of 1; state (h, c)."""
    w, b = _w(rng, n_in + _H, 4 * _H), _w(rng, 4 * _H, scale=0.1)

    def cell(x, state):
        h, c = state
        i, g, f, o = jnp.split(jnp.concatenate([x, h], axis=-1) @ w + b, 4, axis=-1)
        c = jax.nn.sigmoid(f + 1.0) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return h, (h, c)
    return cell


def test_haiku_deep_rnn_under_static_unroll_is_two_lstm_ops(monkeypatch):
    """hk.DeepRNN([LSTM, relu, LSTM]) under hk.static_unroll: a Python loop over the steps, which
    ``unrolled_steps`` folds into one Loop of both layers (the zoo's hk_deeprnn: one Scan before). The
    bits are compared with ``loops``' split of ``concat([x, h]) @ w`` off, which rounds differently and
    reaches layer 2 only once it is a Loop of its own."""
    rng = np.random.default_rng(4)
    first, second = _hk_lstm(rng, _I), _hk_lstm(rng, _H)

    def fn(xs):
        z = _zeros(xs)
        s1, s2, ys = (z, z), (z, z), []
        for t in range(xs.shape[0]):
            h1, s1 = first(xs[t], s1)
            h2, s2 = second(jax.nn.relu(h1), s2)
            ys.append(h2)
        return jnp.stack(ys), s1[1]

    main, body = _check(monkeypatch, fn, also_off=[(loops, "_split_concat_products")])
    assert body["LSTM"] == 2 and main["Scan"] + main["Loop"] == 0, (main, body)


def test_initial_states_with_edge_values_keep_the_numbers(monkeypatch):
    """The initial states are inputs: NaN, infinities, -0.0 and the largest floats in them reach each
    Loop's carries as they are (the LSTM op's guard sends them down the exact Loops)."""
    rng = np.random.default_rng(5)
    first, second = _lstm(rng, _I), _lstm(rng, _H)

    def fn(xs, h0):
        def step(carry, x):
            s1, h1 = first(carry[0], x)
            s2, h2 = second(carry[1], h1)
            return (s1, s2), h2
        return jax.lax.scan(step, ((h0, h0), (h0 * 0.5, h0)), xs)

    xs = sequence_inputs((_T, _B, _I))[0]
    states = [np.zeros((_B, _H), np.float32), np.full((_B, _H), -0.0, np.float32)]
    edge = np.zeros((_B, _H), np.float32)
    edge[0, :5] = [np.nan, np.inf, -np.inf, 3.4e38, -3.4e38]
    states.append(edge)
    spec = [jax.ShapeDtypeStruct(xs.shape, xs.dtype), jax.ShapeDtypeStruct((_B, _H), np.float32)]
    import jaxconv

    model = jaxconv.to_onnx(fn, *spec, check=False)
    main, body = ops(model)
    assert body["LSTM"] == 2, (main, body)
    with monkeypatch.context() as patch:
        patch.setattr(lstm, "rewrite", lambda *args: 0)
        split = _runs(jaxconv.to_onnx(fn, *spec, check=False))
        patch.setattr(loop_fission, "rewrite", lambda *args: 0)
        whole = _runs(jaxconv.to_onnx(fn, *spec, check=False))
    run = _runs(model)
    for h0 in states:
        want = jax.tree_util.tree_leaves(jax.jit(fn)(xs, h0))
        for g, w in zip(run([xs, h0]), want):
            assert_same_floats(g, np.asarray(w), 2e-5, 2e-6)
        assert_same_bits(split([xs, h0]), whole([xs, h0]), nan_signs=False)


def _three_tanh_layers(reverse=False):
    rng = np.random.default_rng(6)
    cells = [_tanh_rnn(rng, _I), _tanh_rnn(rng, _H), _tanh_rnn(rng, _H)]

    def fn(xs):
        def step(carry, x):
            a = cells[0](carry[0], x)
            b = cells[1](carry[1], a)
            c = cells[2](carry[2], b)
            return (a, b, c), (c, a)
        z = _zeros(xs)
        return jax.lax.scan(step, (z, z, z), xs, reverse=reverse)
    return fn


def test_three_tanh_layers_stay_one_loop(monkeypatch):
    """No layer is a gated cell that an RNN rule could make one op: three Loops would run three times
    the steps for no gain (1.05-1.20x the CPU time of one, T 16-64, H 32-64), so the step stays one."""
    main, body = _check(monkeypatch, _three_tanh_layers(), bits=False)
    assert main["Scan"] == 1, (main, body)


def test_three_tanh_layers_split_into_three_loops_when_asked(monkeypatch):
    """``SPLIT_UNGATED``: each layer its own Loop (forward and reversed), each of layers 2 and 3 with its
    input projection before it, the same bits."""
    monkeypatch.setattr(loop_fission, "SPLIT_UNGATED", True)
    for reverse in (False, True):
        main, body = _check(monkeypatch, _three_tanh_layers(reverse))
        assert main["Scan"] == 3 and main["MatMul"] == 3 and body["MatMul"] == 3, (main, body)


def test_a_lstm_between_tanh_layers_shares_a_loop_with_neither(monkeypatch):
    """tanh layer, LSTM, tanh layer: the LSTM stands alone (the LSTM op); each tanh layer is a Loop."""
    rng = np.random.default_rng(7)
    first, second, third = _tanh_rnn(rng, _I), _lstm(rng, _H), _tanh_rnn(rng, _H)

    def fn(xs):
        def step(carry, x):
            a = first(carry[0], x)
            s, b = second(carry[1], a)
            c = third(carry[2], b)
            return (a, s, c), c
        z = _zeros(xs)
        return jax.lax.scan(step, (z, (z, z), z), xs)

    main, body = _check(monkeypatch, fn)
    assert body["LSTM"] == 1 and main["Scan"] == 2, (main, body)


def test_layers_that_feed_back_stay_one_loop(monkeypatch):
    """Layer 1 reads layer 2's last h: one cycle of carries, one Loop."""
    rng = np.random.default_rng(8)
    first, second = _lstm(rng, _I + _H), _lstm(rng, _H)

    def fn(xs):
        def step(carry, x):
            s1, h1 = first(carry[0], jnp.concatenate([x, carry[1][1]], axis=-1))
            s2, h2 = second(carry[1], h1)
            return (s1, s2), h2
        z = _zeros(xs)
        return jax.lax.scan(step, ((z, z), (z, z)), xs)

    main, body = _check(monkeypatch, fn, bits=False)
    assert main["Scan"] == 1 and "LSTM" not in body, (main, body)


def test_a_loop_whose_condition_reads_its_state_stays_one_loop(monkeypatch):
    """A while_loop that stops when layer 2's state grows: no fixed trip count, one Loop."""
    rng = np.random.default_rng(9)
    first, second = _lstm(rng, _I), _lstm(rng, _H)

    def fn(xs):
        def cond(carry):
            return (carry[0] < xs.shape[0]) & (jnp.sum(carry[2][1]) < 1e3)

        def body(carry):
            t, s1, s2 = carry
            s1, h1 = first(s1, xs[t])
            s2, _ = second(s2, h1)
            return t + 1, s1, s2
        z = _zeros(xs)
        return jax.lax.while_loop(cond, body, (0, (z, z), (z, z)))[2]

    main, body = _check(monkeypatch, fn, bits=False)
    assert main["Loop"] == 1 and "LSTM" not in body, (main, body)
