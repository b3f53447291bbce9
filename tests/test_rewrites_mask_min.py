"""jaxconv.onnx.rewrites.mask_min: a mask's Where with a -inf (or -FLT_MAX) fill as Min(x, M) behind a
finiteness test; ONNX Runtime's outputs bit for bit the Where's, NaN and infinities at masked places
included, and jax.jit's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import mask_min, masked_softmax
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


@pytest.fixture(autouse=True)
def _softmax_zeros_compared(monkeypatch):
    """The masked Softmax keeps its comparison (no If of its own beside the guard counted here):
    test_rewrites_masked_softmax reads its zeros from the masks this rule makes."""
    monkeypatch.setattr(masked_softmax, "_known_mask", lambda *args: None)




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


_FINITE_FILLS = [-1e4, -1e9, -1e30, float(-0.7 * np.finfo(np.float32).max)]


@pytest.mark.parametrize("kind", ["finite", "nan masked", "inf masked", "below the fill masked"])
@pytest.mark.parametrize("fill", _FINITE_FILLS, ids=["-1e4", "-1e9", "-1e30", "-0.7 FLT_MAX"])
def test_finite_fills_as_guarded_min(monkeypatch, kind, fill):
    """A finite fill f is min(x, f) only where x >= f: the fast branch runs only when every |x| < |f|
    (the sum of squares below f squared), so a value below the fill at a dropped place still gives f."""
    def fn(x, keep):
        masked = jnp.where(keep[:, None, None, :], x, np.float32(fill))
        return masked, jax.nn.softmax(masked, axis=-1)

    x = _logits("finite" if kind == "below the fill masked" else kind)
    keep = np.ones((2, T), bool)
    keep[0, :2] = False
    if kind == "below the fill masked":
        x[0, 1, 3, 0] = max(2.0 * fill, float(np.finfo(np.float32).min))
    ops, got = _convert(fn, x, keep)
    plain_ops, plain = _plain(monkeypatch, fn, x, keep)
    assert ops["If"] == 1 and plain_ops["If"] == 0, (ops, plain_ops)
    assert_same_bits(got, plain)
    want = jax.jit(fn)(x, keep)
    assert_same_floats(got[0], want[0], 0, 0)
    assert_same_floats(got[1], want[1], 1e-6, 1e-7)
    assert got[0][0, 1, 3, 0] == np.float32(fill)


def test_dot_product_attention_mask_as_guarded_min(monkeypatch):
    """jax.nn.dot_product_attention fills with -0.7 * FLT_MAX, broadcast by an Expand (kept, not folded, at
    this size): the Min and the exact branch read the scalar, so no fill of the scores' size is made."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((2, 128, 4, 8)).astype(np.float32) for _ in range(3))
    q[1, 2, 3, 5] = np.nan  # its row, and only its row, NaN
    fn = lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    ops, (got,) = _convert(fn, q, k, v)
    plain_ops, (plain,) = _plain(monkeypatch, fn, q, k, v)
    assert ops["If"] == 1 and ops["Expand"] == 0, ops
    assert plain_ops["If"] == 0 and plain_ops["Expand"] == 1, plain_ops
    assert_same_bits([got], [plain])
    assert_same_floats(got, jax.jit(fn)(q, k, v), 1e-5, 1e-6)
    assert np.isnan(got[1, 2, 3]).all() and np.isfinite(got[0]).all()


@pytest.mark.parametrize("fill", [-5e3, -1.0, 0.0], ids=["-5e3", "-1", "zero"])
def test_other_fills_stay(fill):
    """A fill above -1e4 is not a mask's: x would rarely be bounded by it; the Where stays."""
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
