"""RNN layers read at their last step (jaxconv.onnx.rewrites.scan_last_row, and the rules it works with).

``hk.dynamic_unroll(core, xs, state)[0][-1]`` and ``nn.RNN(cell)(x)[:, -1]`` stack every step's output and
read one row: the Scan then returns only its final carry. A ReLU cell's -0.0 fix (``Abs``) leaves a loop
body where its value cannot be -0.0 (a bias without -0.0 added after the product), and a bias reshaped
for the row (flax's SimpleCell) is added before the Scan. Outputs: bit for bit those of the graph without
the rules (ORT's optimizations off), within tolerance of jax.jit with its zero signs, on inputs with NaN,
infinities and -0.0."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scan_support import convert, ops, same_bits, unoptimized

from jaxconv.onnx.rewrites import scan_last_row, scan_rows, zeros
from lowering_check import assert_same_floats, sequence_inputs

_T, _B, _I, _H = 6, 2, 3, 8


def _w(seed: int, *shape: int, scale: float = 0.4) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _relu_core(bias: float | None):
    """Haiku's VanillaRNN: relu(x @ wx + bx + (h @ wh + bh)); biases of ``bias`` (None: random)."""
    wx, wh, out = _w(0, _I, _H), _w(1, _H, _H), _w(2, _H, 3)
    bx, bh = (_w(3, _H), _w(4, _H)) if bias is None else (np.full(_H, bias, np.float32),) * 2

    def step(h, x):
        h = jax.nn.relu(x @ wx + bx + (h @ wh + bh))
        return h, h
    return step, out


def _time_major_last(bias: float | None, index):
    step, out = _relu_core(bias)

    def fn(xs):
        ys = jax.lax.scan(step, jnp.zeros((xs.shape[1], _H)), xs)[1]
        return index(ys) @ out
    return fn


def _batch_major_tanh():
    """flax's nn.RNN(nn.SimpleCell) and ``[:, -1]``: the bias reshaped to [1, H], the sequence transposed."""
    wx, wh, b, out = _w(5, _I, _H), _w(6, _H, _H), _w(7, _H), _w(8, _H, 2)

    def fn(x):
        def step(h, xr):
            h = jnp.tanh(xr + b.reshape(1, _H) + h @ wh)
            return h, h
        ys = jax.lax.scan(step, jnp.zeros((x.shape[0], _H)), jnp.transpose(x, (1, 0, 2)) @ wx)[1]
        return jnp.transpose(ys, (1, 0, 2))[:, -1] @ out
    return fn


def _plain(monkeypatch, fn, x):
    with monkeypatch.context() as patch:
        patch.setattr(scan_last_row, "rewrite", lambda *a: 0)
        patch.setattr(scan_rows, "rewrite", lambda *a: 0)
        patch.setattr(zeros, "rewrite", lambda *a, **k: 0)
        return convert(fn, x)


def _check(monkeypatch, fn, shape):
    """The converted model, its outputs bit for bit the plain graph's and within tolerance of jax.jit."""
    x = np.zeros(shape, np.float32)
    model = convert(fn, x)
    run, run_plain = unoptimized(model), unoptimized(_plain(monkeypatch, fn, x))
    for xs in sequence_inputs(shape):
        got, want = run(xs), jax.jit(fn)(xs)
        same_bits(got, run_plain(xs))
        for g, w in zip(got, want if isinstance(want, tuple) else (want,)):
            assert_same_floats(g, w, rtol=1e-5, atol=1e-6)
    return model


def _scan(model):
    return next(n for n in model.graph.node if n.op_type == "Scan")


@pytest.mark.parametrize("bias", [0.0, None], ids=["zero_bias", "random_bias"])
@pytest.mark.parametrize("index", [lambda ys: ys[-1], lambda ys: ys[_T - 1], lambda ys: ys[-1:][0]],
                         ids=["minus_one", "t_minus_one", "slice"])
def test_a_relu_rnn_read_at_its_last_step_returns_only_its_carry(monkeypatch, bias, index):
    model = _check(monkeypatch, _time_major_last(bias, index), (_T, _B, _I))
    main, body = ops(model)
    assert len(_scan(model).output) == 1, "the stacked rows are no longer written"
    assert body["Abs"] == 0 and body["Identity"] == 0, body
    assert main["Slice"] == main["Gather"] == 0, main


def test_a_batch_major_tanh_rnn_read_at_its_last_step(monkeypatch):
    model = _check(monkeypatch, _batch_major_tanh(), (4, _T, _I))  # a batch of 4: sequence_inputs edits rows 0-3
    main, body = ops(model)
    assert len(_scan(model).output) == 1
    assert body == {"MatMul": 1, "Add": 1, "Tanh": 1}, body  # the bias added before the Scan
    assert main["Transpose"] == 1 and main["Unsqueeze"] == 0 and main["Reshape"] == 0, main


def test_rows_read_elsewhere_keep_the_stacked_output(monkeypatch):
    step, out = _relu_core(None)

    def fn(xs):
        ys = jax.lax.scan(step, jnp.zeros((xs.shape[1], _H)), xs)[1]
        return ys[-1] @ out, ys[0]

    model = _check(monkeypatch, fn, (_T, _B, _I))
    assert len(_scan(model).output) == 2


def test_a_step_output_other_than_the_carry_stays_stacked(monkeypatch):
    step, out = _relu_core(None)

    def fn(xs):
        ys = jax.lax.scan(lambda h, x: (step(h, x)[0], step(h, x)[0] * 2.0), jnp.zeros((xs.shape[1], _H)), xs)[1]
        return ys[-1] @ out

    model = _check(monkeypatch, fn, (_T, _B, _I))
    assert len(_scan(model).output) == 2


def test_a_relu_that_can_be_minus_zero_keeps_its_fix(monkeypatch):
    """relu(x + h @ wh): without a bias, -0.0 + -0.0 reaches the ReLU (all -0.0 inputs), so the carry's
    Abs stays and the zeros come out +0.0 as in jax.jit."""
    wh, out = _w(1, _I, _I), _w(2, _I, 2)

    def fn(xs):
        ys = jax.lax.scan(lambda h, x: (jax.nn.relu(x + h @ wh),) * 2, jnp.zeros((xs.shape[1], _I)), xs)[1]
        return ys[-1] @ out, ys[-1]

    model = _check(monkeypatch, fn, (_T, _B, _I))
    assert ops(model)[1]["Abs"] == 1
