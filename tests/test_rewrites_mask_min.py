"""jaxconv.onnx.rewrites.mask_min: a mask's Where with a -inf (or -FLT_MAX) fill as Min(x, M) behind a
finiteness test; ONNX Runtime's outputs bit for bit the Where's, NaN and infinities at masked places
included, and jax.jit's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import mask_min
from lowering_check import assert_same_bits, assert_same_floats, without_rule
from lowering_check import convert_and_run as _convert

T = 6
_CAUSAL = np.tril(np.ones((T, T), bool))


def _logits(kind: str) -> np.ndarray:
    x = np.random.default_rng(9).standard_normal((2, 3, T, T)).astype(np.float32)
    x[0, 0, 1, 1] = -0.0  # kept: its sign stays
    if kind == "nan masked":
        x[0, 1, 0, 4] = np.nan  # dropped by the mask: the row stays finite
    elif kind == "inf masked":
        x[1, 2, 2, 5] = np.inf
        x[1, 2, 3, 4] = -np.inf
    elif kind == "nan kept":
        x[1, 0, 4, 2] = np.nan
    return x


_plain = without_rule(mask_min)




@pytest.mark.parametrize("kind", ["finite", "nan masked", "inf masked", "nan kept"])
@pytest.mark.parametrize("fill", [-np.inf, float(np.finfo(np.float32).min)], ids=["-inf", "-FLT_MAX"])
def test_mask_where_as_guarded_min(monkeypatch, kind, fill):
    def fn(x):
        masked = jnp.where(_CAUSAL, x, fill)
        return masked, jax.nn.softmax(masked, axis=-1)

    x = _logits(kind)
    ops, got = _convert(fn, x)
    plain_ops, plain = _plain(monkeypatch, fn, x)
    assert ops["If"] == 1 and plain_ops["If"] == 0, (ops, plain_ops)
    assert_same_bits(got, plain)
    want = jax.jit(fn)(x)
    for g, w in zip(got, want):
        assert_same_floats(g, w, 1e-6, 1e-7)
    assert np.signbit(got[0][0, 0, 1, 1])
    if kind == "nan masked":
        assert np.isfinite(got[1][0, 1]).all()


def test_mask_from_input_and_flipped_where(monkeypatch):
    """A padding mask given at run time, the fill as the Where's second operand."""
    def fn(x, keep):
        return jax.nn.softmax(jnp.where(~keep[:, None, None, :], jnp.finfo(jnp.float32).min, x), axis=-1)

    x = _logits("inf masked")
    keep = np.ones((2, T), bool)
    keep[1, -2:] = False
    ops, got = _convert(fn, x, keep)
    plain_ops, plain = _plain(monkeypatch, fn, x, keep)
    assert ops["If"] == 1, ops
    assert_same_bits(got, plain)
    assert_same_floats(got[0], jax.jit(fn)(x, keep), 1e-6, 1e-7)


@pytest.mark.parametrize("fill", [-1e9, 0.0], ids=["-1e9", "zero"])
def test_other_fills_stay(fill):
    """A finite fill above -FLT_MAX is not min(x, fill) for every finite x: the Where stays."""
    fn = lambda x, keep: jnp.where(keep[:, None, None, :], x, np.float32(fill))  # noqa: E731
    x = _logits("finite")
    keep = np.ones((2, T), bool)
    keep[0, :2] = False
    ops, got = _convert(fn, x, keep)
    assert ops["If"] == 0 and ops["Where"] == 1, ops
    assert_same_floats(got[0], jax.jit(fn)(x, keep), 0, 0)


def test_float64_stays():
    fn = lambda x, keep: jnp.where(keep[:, None, None, :], x, -jnp.inf)  # noqa: E731
    x = _logits("finite").astype(np.float64)
    keep = np.ones((2, T), bool)
    keep[0, :2] = False
    with jax.enable_x64(True):
        ops, got = _convert(fn, x, keep)
        want = jax.jit(fn)(x, keep)
    assert ops["If"] == 0, ops
    assert_same_floats(got[0], want, 0, 0)
