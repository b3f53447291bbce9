"""The LSTM and GRU rules (jaxconv.onnx.rewrites lstm, gru) on two cases they once got wrong.

- One RNN scan feeding another (two ``lax.scan`` layers, the second reading the first's outputs): the GRU
  rule matched every Loop before it replaced one, so the second match read the first Loop's output after
  it had moved into its If's exact branch, and the graph failed ``onnx.checker`` (not topologically
  sorted). Every stack of LSTM and GRU layers must convert (checked) and each layer become its op.
- An initial state with more rows than the sequence (``zeros((2, H))`` over a batch of 1, broadcast by the
  cell's sum): the RNN ops take their batch from the sequence, so the output had 1 row, not 2. Such a
  scan stays a Loop; a state of the sequence's batch still becomes the op.

Each: the rule fired or not (op counts), outputs within the converter's tolerance of jax.jit on inputs with
NaN, infinities and -0.0 (same shapes, NaN places and zero signs).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from onnx_graphs import op_types

import jaxconv
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_floats

_T, _B, _D, _H = 6, 2, 5, 16  # batch * 2H * H = 1,024: the GRU rule makes the GRU op at any thread count


def _w(rng, *shape, scale=0.3):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _lstm_fused(rng, d):
    """jax's own LSTM: one product, (i, f, g, o) columns, carry (h, c)."""
    wx, wh, b = _w(rng, d, 4 * _H), _w(rng, _H, 4 * _H), _w(rng, 4 * _H, scale=0.1)

    def step(hc, x):
        i, f, g, o = jnp.split(x @ wx + hc[0] @ wh + b, 4, axis=-1)
        c = jax.nn.sigmoid(f) * hc[1] + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h
    return step, lambda h, c: (h, c)


def _lstm_flax(rng, d):
    """flax.linen.LSTMCell: one Dense per gate, carry (c, h)."""
    gates = {g: (_w(rng, d, _H), _w(rng, _H, _H), _w(rng, _H, scale=0.1)) for g in "ifgo"}

    def pre(g, x, h):
        wi, wh, b = gates[g]
        return x @ wi + (h @ wh + b)

    def step(ch, x):
        c, h = ch
        c = jax.nn.sigmoid(pre("f", x, h)) * c + jax.nn.sigmoid(pre("i", x, h)) * jnp.tanh(pre("g", x, h))
        h = jax.nn.sigmoid(pre("o", x, h)) * jnp.tanh(c)
        return (c, h), h
    return step, lambda h, c: (c, h)


def _lstm_haiku(rng, d):
    """hk.LSTM: ``concat([x, h]) @ w``, columns (i, g, f, o), the forget gate's bias 1, carry (h, c)."""
    w, b = _w(rng, d + _H, 4 * _H), _w(rng, 4 * _H, scale=0.1)

    def step(hc, x):
        i, g, f, o = jnp.split(jnp.concatenate([x, hc[0]], -1) @ w + b, 4, axis=-1)
        c = jax.nn.sigmoid(f + 1) * hc[1] + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h
    return step, lambda h, c: (h, c)


def _gru_fused(rng, d):
    """One product for r and z, reset before the recurrent product (ONNX's default form)."""
    wx, wh, un, b = _w(rng, d, 3 * _H), _w(rng, _H, 2 * _H), _w(rng, _H, _H), _w(rng, 3 * _H, scale=0.1)

    def step(h, x):
        gx = x @ wx + b
        r, z = jnp.split(jax.nn.sigmoid(gx[..., :2 * _H] + h @ wh), 2, axis=-1)
        n = jnp.tanh(gx[..., 2 * _H:] + (r * h) @ un)
        h = (1 - z) * n + z * h
        return h, h
    return step, lambda h, c: h


def _gru_flax(rng, d):
    """flax.linen.GRUCell: one Dense per gate, reset after the recurrent product."""
    (ir, iz, in_), (hr, hz, hn) = (_w(rng, d, _H) for _ in range(3)), (_w(rng, _H, _H) for _ in range(3))
    bir, biz, bin_, bhn = (_w(rng, _H, scale=0.1) for _ in range(4))

    def step(h, x):
        r, z = jax.nn.sigmoid(x @ ir + bir + h @ hr), jax.nn.sigmoid(x @ iz + biz + h @ hz)
        n = jnp.tanh(x @ in_ + bin_ + r * (h @ hn + bhn))
        h = (1 - z) * n + z * h
        return h, h
    return step, lambda h, c: h


def _gru_haiku(rng, d):
    """hk.GRU: z and r columns, ``(1 - z) * h + z * n``."""
    wx, wh, un, b = _w(rng, d, 3 * _H), _w(rng, _H, 2 * _H), _w(rng, _H, _H), _w(rng, 3 * _H, scale=0.1)

    def step(h, x):
        gx = x @ wx + b
        z, r = jnp.split(jax.nn.sigmoid(gx[..., :2 * _H] + h @ wh), 2, axis=-1)
        n = jnp.tanh(gx[..., 2 * _H:] + (r * h) @ un)
        h = (1 - z) * h + z * n
        return h, h
    return step, lambda h, c: h


_CELLS: dict[str, Callable] = {"lstm_fused": _lstm_fused, "lstm_flax": _lstm_flax, "lstm_haiku": _lstm_haiku,
                               "gru_fused": _gru_fused, "gru_flax": _gru_flax, "gru_haiku": _gru_haiku}


def _op(kind: str) -> str:
    return "LSTM" if kind.startswith("lstm") else "GRU"


def _edge_inputs(shape) -> list[np.ndarray]:
    """Normal values; the same with NaN, +inf and -inf at three steps (the exact Loops run) and -0.0 in the
    first step; all -0.0."""
    rng = np.random.default_rng(7)
    plain = rng.standard_normal(shape).astype(np.float32)
    edges = plain.copy()
    edges[1, 0, 0], edges[2, -1, 1], edges[3, 0, 2] = np.nan, np.inf, -np.inf
    edges[0] = -0.0
    return [plain, edges, np.full(shape, -0.0, np.float32)]


def _assert_near_jax(model, fn, input_sets) -> None:
    run = OnnxRunner(model.SerializeToString())
    for inputs in input_sets:
        got, want = run.run(inputs), jax.tree_util.tree_leaves(jax.jit(fn)(*inputs))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same_floats(g, np.asarray(w), 2e-5, 2e-6)


def _stack(first: str, second: str):
    """Two scans, the second over the first's outputs, each from a zero state; returns both final states
    and the second's outputs."""
    rng = np.random.default_rng(0)
    (step1, carry1), (step2, carry2) = _CELLS[first](rng, _D), _CELLS[second](rng, _H)
    zeros = jnp.zeros((_B, _H), jnp.float32)

    def fn(xs):
        last1, ys1 = lax.scan(step1, carry1(zeros, zeros), xs)
        last2, ys2 = lax.scan(step2, carry2(zeros, zeros), ys1)
        return last1, last2, ys2
    return fn


@pytest.mark.parametrize("first, second", [("gru_fused", "gru_fused"), ("gru_flax", "gru_haiku"),
                                           ("lstm_fused", "lstm_flax"), ("gru_fused", "lstm_fused"),
                                           ("lstm_haiku", "gru_flax")])
def test_a_scan_over_another_scans_outputs_converts_with_both_as_rnn_ops(first, second):
    fn = _stack(first, second)
    model = jaxconv.to_onnx(fn, f"f32[{_T},{_B},{_D}]")  # checked: onnx.checker and jax.jit on random inputs
    ops = op_types(model.graph)
    assert sum(ops.count(op) for op in {_op(first), _op(second)}) == 2, ops
    _assert_near_jax(model, fn, [[xs] for xs in _edge_inputs((_T, _B, _D))])


def test_two_gru_scans_over_a_state_read_from_an_input():
    # the first scan's state an input: its If guards xs and h0, the second's its outputs
    rng = np.random.default_rng(1)
    (step1, _), (step2, _) = _gru_fused(rng, _D), _gru_flax(rng, _H)

    def fn(xs, h0):
        last1, ys1 = lax.scan(step1, h0, xs)
        return lax.scan(step2, last1, ys1)

    model = jaxconv.to_onnx(fn, f"f32[{_T},{_B},{_D}]", f"f32[{_B},{_H}]")
    assert op_types(model.graph).count("GRU") == 2
    h0s = [np.full((_B, _H), v, np.float32) for v in (0.5, -0.0, np.nan)]
    _assert_near_jax(model, fn, [[xs, h0] for xs, h0 in zip(_edge_inputs((_T, _B, _D)), h0s)])


def _one_layer(kind: str, state_rows: int, state=None):
    """One scan from ``state`` (a zero state of ``state_rows`` rows when None), returning its final carry
    and outputs."""
    step, carry = _CELLS[kind](np.random.default_rng(2), _D)

    def fn(xs, *h0):
        h = h0[0] if h0 else jnp.zeros((state_rows, _H), jnp.float32) if state is None else state
        return lax.scan(step, carry(h, jnp.zeros_like(h)), xs)
    return fn


@pytest.mark.parametrize("kind", sorted(set(_CELLS) - {"lstm_haiku"}))  # concat([x, h]) needs one batch
@pytest.mark.parametrize("state", ["zeros", "ones", "input"])
def test_a_state_of_more_rows_than_the_sequence_stays_a_loop(kind, state):
    # h0 (and c0) [2, H] over a batch of 1: the cell's sums broadcast the sequence's row over the state's two
    if state == "input":
        fn, specs = _one_layer(kind, 2), [f"f32[{_T},1,{_D}]", f"f32[2,{_H}]"]
    else:
        value = jnp.full((2, _H), 0.0 if state == "zeros" else 1.0, jnp.float32)
        fn, specs = _one_layer(kind, 2, value), [f"f32[{_T},1,{_D}]"]
    model = jaxconv.to_onnx(fn, *specs)
    assert _op(kind) not in op_types(model.graph)
    h0 = [np.linspace(-1, 1, 2 * _H, dtype=np.float32).reshape(2, _H)] if state == "input" else []
    _assert_near_jax(model, fn, [[xs, *h0] for xs in _edge_inputs((_T, 1, _D))])


@pytest.mark.parametrize("kind", sorted(_CELLS))
def test_a_state_of_the_sequences_batch_is_still_the_op(kind):
    fn = _one_layer(kind, _B)
    model = jaxconv.to_onnx(fn, f"f32[{_T},{_B},{_D}]", f"f32[{_B},{_H}]")
    assert _op(kind) in op_types(model.graph)
    h0 = np.linspace(-1, 1, _B * _H, dtype=np.float32).reshape(_B, _H)
    _assert_near_jax(model, fn, [[xs, h0] for xs in _edge_inputs((_T, _B, _D))])


@pytest.mark.parametrize("kind", ["lstm_fused", "gru_fused"])
def test_a_symbolic_batch_converts_like_jax(kind):
    # h0 [b, H] from an input, xs [T, b, D]: whatever the rules make of it, jax.jit's numbers at two batches
    fn = _one_layer(kind, 0)
    model = jaxconv.to_onnx(fn, f"f32[{_T},b,{_D}]", f"f32[b,{_H}]")
    for batch in (1, 3):
        h0 = np.linspace(-1, 1, batch * _H, dtype=np.float32).reshape(batch, _H)
        _assert_near_jax(model, fn, [[xs, h0] for xs in _edge_inputs((_T, batch, _D))])
