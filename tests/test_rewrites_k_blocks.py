"""jaxconv.onnx.rewrites.k_blocks: a MatMul by a constant whose left operand has rows a multiple of
4 KiB long, computed in column blocks (of the elementwise chain that builds the operand, or of a
Split of it) and summed; numbers against jax.jit and against the graph without the rule, with NaN,
infinities, -0.0 and FLT_MAX in the inputs and in the constants."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import k_blocks
from lowering_check import assert_same_floats, without_rule
from lowering_check import convert_and_run as _convert

_RNG = np.random.default_rng(11)
_FLT_MAX = float(np.finfo(np.float32).max)


def _w(*shape: int, scale: float = 0.05) -> np.ndarray:
    return (_RNG.standard_normal(shape) * scale).astype(np.float32)


def _x(*shape: int) -> np.ndarray:
    x = np.random.default_rng(12).standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1, shape[-1])
    flat[0] = -0.0
    flat[1, 3] = np.nan
    flat[2, 4] = np.inf
    flat[3, 5] = -np.inf
    flat[4, :8] = _FLT_MAX
    flat[5, 7] = 1e-42  # subnormal
    return x


_plain = without_rule(k_blocks)


def _matches(got, fn, *args, rtol=1e-4, atol=1e-5):  # FLT_MAX rows cancel: 4.5e-5 apart
    for g, w in zip(got, jax.tree_util.tree_leaves(jax.jit(fn)(*args))):
        assert_same_floats(g, np.asarray(w), rtol, atol)


def _close_to_plain(got, plain):
    """The blocks change only how the sum over K is associated: rounding, never a NaN or an infinity."""
    for g, p in zip(got, plain):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(p))
        np.testing.assert_array_equal(np.isinf(g), np.isinf(p))
        np.testing.assert_allclose(g, p, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("k", "widths"), [(1024, [512, 512]), (2048, [512, 1536]), (3072, [1536, 1536]),
                                           (4096, [1536, 2560])])
def test_block_widths(k, widths):
    assert k_blocks.block_widths(k) == widths
    assert all(w % k_blocks.ALIASED_FLOATS for w in widths)


@pytest.mark.parametrize("k", [0, 512, 768, 1000, 1536])
def test_no_blocks_where_rows_are_not_4k(k):
    assert k_blocks.block_widths(k) is None


def test_feed_forward_in_blocks(monkeypatch):
    """A transformer's feed-forward block: gelu(x @ w1 + b1) @ w2 with a hidden width of 1024."""
    w1, b1, w2 = _w(64, 1024), _w(1024, scale=0.1), _w(1024, 48)

    def fn(x):
        return jax.nn.gelu(x @ w1 + b1) @ w2

    x = _x(2, 80, 64)
    ops, got = _convert(fn, x)
    plain_ops, plain = _plain(monkeypatch, fn, x)
    assert plain_ops["MatMul"] == 2 and "Sum" not in plain_ops, plain_ops
    assert ops["MatMul"] == 4 and ops["Sum"] == 1 and "Split" not in ops, ops
    _close_to_plain(got, plain)
    _matches(got, fn, x)


def test_gated_feed_forward_in_blocks_of_two_widths(monkeypatch):
    """SwiGLU with an exact sigmoid and a hidden width of 2048: blocks of 512 and 1536 columns, both
    products and the gate's constants cut by columns."""
    wg, wu, c, wd = _w(32, 2048), _w(32, 2048), _w(1, 2048, scale=0.5), _w(2048, 16)

    def fn(x):
        gate = x @ wg
        return (gate / (1 + jnp.exp(-gate)) * (x @ wu) * c) @ wd

    x = _x(128, 32)
    ops, got = _convert(fn, x)
    plain_ops, plain = _plain(monkeypatch, fn, x)
    assert ops["MatMul"] == plain_ops["MatMul"] + 3 and ops["Sum"] == 1, (ops, plain_ops)
    _close_to_plain(got, plain)
    _matches(got, fn, x)


def test_edge_values_in_the_constants(monkeypatch):
    """NaN, infinities and FLT_MAX in the cut constants reach the same outputs as without blocks."""
    w1, b1, w2 = _w(16, 1024), _w(1024), _w(1024, 8)
    w1[3, 5], w1[4, 700] = np.inf, -_FLT_MAX
    b1[600], b1[1000] = np.nan, -np.inf
    w2[5, 2] = np.inf

    def fn(x):
        return jnp.maximum(x @ w1 + b1, 0.0) @ w2

    x = _x(4, 32, 16)
    ops, got = _convert(fn, x)
    plain_ops, plain = _plain(monkeypatch, fn, x)
    assert ops["Sum"] == 1 and "Sum" not in plain_ops
    _close_to_plain(got, plain)
    _matches(got, fn, x)


@pytest.mark.parametrize("k", [1024, 2048])
def test_other_operands_split_into_blocks(monkeypatch, k):
    """An operand not built from products by constants (here a normalised input) is cut by a Split
    (2048 columns: 512 and 1536)."""
    g, w = _w(k, scale=1.0), _w(k, 24)

    def fn(x):
        return ((x - x.mean(-1, keepdims=True)) * g) @ w

    x = _x(2, 64, k)
    ops, got = _convert(fn, x)
    plain_ops, plain = _plain(monkeypatch, fn, x)
    assert ops["Split"] == plain_ops["Split"] + 1 and ops["MatMul"] == 2, (ops, plain_ops)
    _close_to_plain(got, plain)
    _matches(got, fn, x, rtol=1e-4, atol=1e-4)


def test_symbolic_rows_get_blocks():
    w1, w2 = _w(16, 1024), _w(1024, 8)

    def fn(x):
        return jnp.tanh(x @ w1) @ w2

    spec = jax.ShapeDtypeStruct(jax.export.symbolic_shape("b, 16"), jnp.float32)
    x = _x(7, 16)
    ops, got = _convert(fn, x, specs=[spec])
    assert ops["Sum"] == 1 and ops["MatMul"] == 4, ops
    _matches(got, fn, x)


@pytest.mark.parametrize("case", ["few_rows", "k_768", "weight_input", "hidden_also_returned"])
def test_stays(monkeypatch, case):
    w1, w2 = _w(16, 1024), _w(1024, 8)
    args: tuple = (_x(2, 40, 16),)
    if case == "few_rows":
        args = (_x(2, 4, 16),)
        fn = lambda x: jnp.tanh(x @ w1) @ w2  # noqa: E731
    elif case == "k_768":
        w1, w2 = _w(16, 768), _w(768, 8)
        fn = lambda x: jnp.tanh(x @ w1) @ w2  # noqa: E731
    elif case == "weight_input":
        args = (args[0], w2)
        fn = lambda x, w: jnp.tanh(x @ w1) @ w  # noqa: E731
    else:  # the hidden value has a second reader and 80 rows: fewer than a Split's copy pays for
        def fn(x):
            h = jnp.tanh(x @ w1)
            return h @ w2, h
    ops, got = _convert(fn, *args)
    plain_ops, plain = _plain(monkeypatch, fn, *args)
    assert ops == plain_ops, (ops, plain_ops)
    for g, p in zip(got, plain):
        np.testing.assert_array_equal(np.asarray(g).view(np.uint32), np.asarray(p).view(np.uint32))
    _matches(got, fn, *args)


def test_long_chain_takes_the_split(monkeypatch):
    """A chain of more than MAX_TREE_NODES ops before the product is not copied per block (and not walked
    deeper than that): 600 ops, 128 rows, so a Split cuts the operand."""
    w1, w2 = _w(16, 1024), _w(1024, 8)

    def fn(x):
        h = x @ w1
        for i in range(600):
            h = jnp.sin(h) if i % 2 else jnp.tanh(h)
        return h @ w2

    x = _x(2, 64, 16)
    ops, got = _convert(fn, x)
    plain_ops, plain = _plain(monkeypatch, fn, x)
    assert ops["Split"] == plain_ops["Split"] + 1 and ops["MatMul"] == 3, (ops, plain_ops)
    _close_to_plain(got, plain)
    _matches(got, fn, x)
