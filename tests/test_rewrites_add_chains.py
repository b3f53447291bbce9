"""jaxconv.onnx.rewrites.add_chains: a chain of float additions as one Sum of its operands in order; ONNX
Runtime's outputs bit for bit those without the rule (NaN, infinities, -0.0 included), and jax.jit's."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxconv.onnx.rewrites import add_chains
from lowering_check import assert_same_bits, assert_same_floats, without_rule
from lowering_check import convert_and_run as _convert

_plain = without_rule(add_chains)
_RNG = np.random.default_rng(11)
_W1 = (_RNG.standard_normal((16, 1024)) / 4).astype(np.float32)
_C1 = (_RNG.standard_normal(1024) / 100).astype(np.float32)
_W2 = (_RNG.standard_normal((1024, 16)) / 32).astype(np.float32)
_C2 = (_RNG.standard_normal(16) / 100).astype(np.float32)


def _special(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Random values with -0.0, +0.0, NaN, +-inf and huge values in known places."""
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[:6] = [-0.0, 0.0, np.nan, np.inf, -np.inf, 3e38]
    flat[6 + seed % 5::17] = -0.0
    flat[9::23] = -3e38
    return x


def test_four_operands_become_one_sum(monkeypatch):
    fn = lambda a, b, c, d: a + b + c + d  # noqa: E731
    args = [_special((4, 8, 16), s) for s in range(4)]
    ops, got = _convert(fn, *args)
    plain_ops, plain = _plain(monkeypatch, fn, *args)
    assert plain_ops["Add"] == 3 and ops["Add"] == 0 and ops["Sum"] == 1, (ops, plain_ops)
    assert_same_bits(got, plain)
    assert_same_floats(got[0], jax.jit(fn)(*args), 0, 0)


def test_accumulator_as_second_operand(monkeypatch):
    """``d + (a + b)``: the addition is commutative, so the Sum is ``(a + b) + d``."""
    fn = lambda a, b, d: (d * 2.0) + (a + b)  # noqa: E731
    args = [_special((3, 16), s) for s in (5, 6, 7)]
    ops, got = _convert(fn, *args)
    plain_ops, plain = _plain(monkeypatch, fn, *args)
    assert ops["Add"] == 0 and ops["Sum"] == 1 and plain_ops["Add"] == 2, (ops, plain_ops)
    assert_same_bits(got, plain)


def test_broadcast_operand(monkeypatch):
    """A bias of the last axis only, added last, and a scalar first."""
    c = np.array([0.0, -0.0, np.inf, np.nan] * 4, np.float32)
    fn = lambda a, b: (a + 1.5) + b + c  # noqa: E731
    args = [_special((2, 5, 16), s) for s in (8, 9)]
    ops, got = _convert(fn, *args)
    plain_ops, plain = _plain(monkeypatch, fn, *args)
    assert ops["Add"] == 0 and ops["Sum"] == 1, (ops, plain_ops)
    assert_same_bits(got, plain)


def test_feed_forward_residual(monkeypatch):
    """A transformer's feed-forward block in column blocks (k_blocks' Sum), its residual and its bias."""
    def fn(x):
        h = jax.nn.gelu(x @ _W1 + _C1)
        return x + h @ _W2 + _C2

    x = np.random.default_rng(3).standard_normal((2, 64, 16)).astype(np.float32)
    ops, got = _convert(fn, x)
    plain_ops, plain = _plain(monkeypatch, fn, x)
    assert plain_ops["Sum"] == 1 and plain_ops["Add"] >= 2, plain_ops
    assert ops["Sum"] == 1 and ops["Add"] == plain_ops["Add"] - 2, (ops, plain_ops)
    assert_same_bits(got, plain)
    assert_same_floats(got[0], jax.jit(fn)(x), 1e-5, 1e-5)
    x[0, 0] = np.nan
    x[1, 3, :4] = [np.inf, -np.inf, -0.0, 0.0]
    assert_same_bits(_convert(fn, x)[1], _plain(monkeypatch, fn, x)[1])


def test_accumulator_read_twice_stays(monkeypatch):
    def fn(a, b, c):
        s = a + b
        return s + c, s * 2.0

    args = [_special((3, 16), s) for s in (1, 2, 3)]
    ops, got = _convert(fn, *args)
    plain_ops, plain = _plain(monkeypatch, fn, *args)
    assert ops == plain_ops and ops["Add"] == 2, ops
    assert_same_bits(got, plain)


@pytest.mark.parametrize("rank", [2, 3])
def test_dense_bias_stays(monkeypatch, rank):
    """``x @ w + b + r``: ORT fuses the bias with the product (Gemm), so that Add is not folded."""
    w = _W1[:, :16]
    b = _C1[:16]
    fn = lambda x, r: x @ w + b + r  # noqa: E731
    shape = (8, 16) if rank == 2 else (2, 8, 16)
    args = [_special(shape, s) for s in (4, 5)]
    ops, got = _convert(fn, *args)
    plain_ops, plain = _plain(monkeypatch, fn, *args)
    assert ops == plain_ops and ops["Add"] == 2, ops
    assert_same_bits(got, plain)


def test_integers_stay(monkeypatch):
    fn = lambda a, b, c: a + b + c  # noqa: E731
    args = [np.arange(12, dtype=np.int32).reshape(3, 4) * k for k in (1, 2, 3)]
    ops, got = _convert(fn, *args)
    assert ops["Add"] == 2 and ops["Sum"] == 0, ops
    np.testing.assert_array_equal(got[0], args[0] * 6)


def test_rank_two_product_stays(monkeypatch):
    """``(a + b) + x @ w`` of rank 2: ORT fuses that Add into a Gemm (C = a + b), so it stays."""
    w = _W1[:, :16]
    fn = lambda x, a, b: (a + b) + x @ w  # noqa: E731
    args = [_special((8, 16), s) for s in (1, 2, 3)]
    ops, got = _convert(fn, *args)
    plain_ops, plain = _plain(monkeypatch, fn, *args)
    assert ops == plain_ops and ops["Add"] == 2, ops
    assert_same_bits(got, plain)


def test_loop_bodies_stay(monkeypatch):
    def fn(xs, b):
        def cell(h, x):
            h = (x + b) + h + x
            return h, h
        return jax.lax.scan(cell, np.zeros(16, np.float32), xs)

    args = (_special((5, 16), 1), _special((16,), 2))
    ops, got = _convert(fn, *args)
    plain_ops, plain = _plain(monkeypatch, fn, *args)
    assert ops == plain_ops, (ops, plain_ops)
    assert_same_bits(got, plain)
