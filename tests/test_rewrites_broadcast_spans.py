"""jaxconv.onnx.rewrites.broadcast_spans: a small operand broadcast along a short run of last axes expanded
along them; ONNX Runtime's outputs bit for bit the unexpanded graph's, and jax.jit's values, with NaN,
+-inf and -0.0 in either operand."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import broadcast_spans
from lowering_check import assert_same_floats, without_rule
from lowering_check import convert_and_run as _convert

_plain = without_rule(broadcast_spans)


def _input(shape: tuple[int, ...], specials: bool, seed: int = 2) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    if specials:
        flat = x.reshape(-1)
        flat[3], flat[10], flat[11], flat[17] = np.nan, np.inf, -np.inf, -0.0
        flat[-1] = 0.0
    return x


def _group_norm(x, groups: int = 4):
    n, h, w, c = x.shape
    y = x.reshape(n, h, w, groups, c // groups)
    mean = y.mean(axis=(1, 2, 4), keepdims=True)
    var = ((y - mean) ** 2).mean(axis=(1, 2, 4), keepdims=True)
    return ((y - mean) * jax.lax.rsqrt(var + 1e-5)).reshape(x.shape)


@pytest.mark.parametrize("specials", [False, True], ids=["finite", "nan inf -0"])
def test_group_norm_statistics_expanded(monkeypatch, specials):
    x = _input((2, 6, 6, 16), specials)
    ops, (got,) = _convert(_group_norm, x)
    plain_ops, (plain,) = _plain(monkeypatch, _group_norm, x)
    assert ops["Expand"] == plain_ops["Expand"] + 2, (ops, plain_ops)  # x - mean, and times 1/std
    np.testing.assert_array_equal(got.view(np.uint32), plain.view(np.uint32))
    assert_same_floats(got, jax.jit(_group_norm)(x), 2e-5, 2e-5)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "max", "min", "pow"])
def test_runtime_operand_every_op(monkeypatch, op):
    """``x op s`` with ``s`` [n, 1, g, 1] computed at run time; -0.0, NaN and infinities on both sides."""
    f = {"add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply, "div": jnp.divide, "max": jnp.maximum,
         "min": jnp.minimum, "pow": jnp.power}[op]

    def fn(x, s):
        return f(x, jnp.abs(s) if op == "pow" else s), f(s * 1.0, x)

    x = _input((2, 40, 8, 3), True)
    s = _input((2, 1, 8, 1), False, seed=4)
    s[0, 0, 1, 0], s[1, 0, 2, 0], s[1, 0, 5, 0] = -0.0, np.nan, -np.inf
    ops, got = _convert(fn, x, s)
    plain_ops, plain = _plain(monkeypatch, fn, x, s)
    assert ops["Expand"] >= plain_ops["Expand"] + 1, (ops, plain_ops)
    for g, p, w in zip(got, plain, jax.jit(fn)(x, s)):
        np.testing.assert_array_equal(g.view(np.uint32), p.view(np.uint32))
        assert_same_floats(g, w, 1e-6, 1e-6)


def test_constant_operand_becomes_a_wider_constant(monkeypatch):
    scale = np.random.default_rng(1).standard_normal((8, 1)).astype(np.float32)
    scale[3, 0] = -0.0
    fn = lambda x: x * scale  # noqa: E731
    x = _input((4, 16, 8, 2), True)
    ops, (got,) = _convert(fn, x)
    _, (plain,) = _plain(monkeypatch, fn, x)
    assert ops["Expand"] == 0, ops
    np.testing.assert_array_equal(got.view(np.uint32), plain.view(np.uint32))
    assert_same_floats(got, jax.jit(fn)(x), 0, 0)


@pytest.mark.parametrize("shape,other", [((4, 16, 64), (16, 1)), ((4, 16, 8), (4, 1, 1)), ((2, 8, 4), (2, 8, 4))],
                         ids=["long run", "only broadcast before", "no broadcast"])
def test_long_runs_stay(shape, other):
    fn = lambda x, y: x - y  # noqa: E731
    x, y = _input(shape, False), _input(other, False, seed=5)
    ops, (got,) = _convert(fn, x, y)
    assert ops["Expand"] == 0, ops
    assert_same_floats(got, jax.jit(fn)(x, y), 0, 0)
