"""masked_softmax: a Softmax behind an attention mask computed on its input raised to ``max - 64`` where
lower, those outputs zeroed, so that ONNX Runtime's exp makes no subnormals (on an Intel CPU each one a
microcode assist: a causal [2, 4, 64, 64] Softmax 6x slower). The kept outputs keep their bits; masked
places give jax.jit's exact zero; rows of NaN, +inf, -inf or all masked stay what they were."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import masked_softmax
from lowering_check import convert_and_run, without_rule

_plain = without_rule(masked_softmax)
_T = 16
_CAUSAL = np.tril(np.ones((_T, _T), bool))
_LOWEST = np.finfo(np.float32).min


def _scores(seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((2, 3, _T, _T)) * 4).astype(np.float32)


def _edge_rows(s: np.ndarray) -> np.ndarray:
    """Rows with NaN first and in the middle, +inf, -inf places, a spread beyond exp's range, all masked."""
    s = s.copy()
    s[0, 0, 5, 0] = np.nan
    s[0, 0, 9, 4] = np.nan
    s[0, 1, 7, 3] = np.inf
    s[0, 1, 8, :4] = -np.inf
    s[0, 2, 12, :6] = [0, -70, -90, -200, 30, -1e30]  # kept places far below the max: x - m < -64
    s[1, 0, 10, :] = -np.inf
    return s


# (name, fn of scores; the mask is a constant, an input, or an additive bias)
FORMS = {
    "additive_bias": lambda s: jax.nn.softmax(s + jnp.where(_CAUSAL, 0.0, _LOWEST), axis=-1),
    "where_lowest": lambda s: jax.nn.softmax(jnp.where(_CAUSAL, s, _LOWEST), axis=-1),
    "where_minus_inf": lambda s: jax.nn.softmax(jnp.where(_CAUSAL, s, -jnp.inf), axis=-1),
    "where_1e9": lambda s: jax.nn.softmax(jnp.where(_CAUSAL, s, -1e9), axis=-1),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_masked_softmax_keeps_the_bits_and_gives_jits_zeros(monkeypatch, form):
    fn = FORMS[form]
    for s in (_scores(), _edge_rows(_scores(1))):
        ops, (got,) = convert_and_run(fn, s)
        plain_ops, (before,) = _plain(monkeypatch, fn, s)
        assert ops["Max"] == 1 and ops["Softmax"] == 1 and plain_ops.get("Max", 0) == 0, (ops, plain_ops)
        want = np.asarray(jax.jit(fn)(s))
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        kept = np.broadcast_to(_CAUSAL, s.shape) & ~np.isnan(want)
        with np.errstate(invalid="ignore"):
            far = (s - np.nanmax(np.where(_CAUSAL, s, -np.inf), -1, keepdims=True)) < masked_softmax.FLOOR
        same = kept & ~far
        np.testing.assert_array_equal(got[same].view(np.uint32), before[same].view(np.uint32))
        np.testing.assert_allclose(got[~np.isnan(want)], want[~np.isnan(want)], rtol=1e-6, atol=1e-27)
        assert (got[want == 0] == 0).all()  # jax.jit's zeros (every masked place of a row with a kept key)
        masked = ~np.broadcast_to(_CAUSAL, s.shape)
        assert (want[masked & np.isfinite(s).any(-1, keepdims=True) & ~np.isnan(want)] == 0).sum() > 300


def test_a_row_masked_everywhere_is_uniform_as_in_jit(monkeypatch):
    mask = np.zeros((_T, _T), bool)
    mask[1:] = _CAUSAL[1:]  # row 0 has no key to attend to

    def fn(s):
        return jax.nn.softmax(jnp.where(mask, s, -1e9), axis=-1)

    s = _scores(2)
    _, (got,) = convert_and_run(fn, s)
    want = np.asarray(jax.jit(fn)(s))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    np.testing.assert_allclose(got[:, :, 0], 1 / _T, rtol=1e-6)


def test_a_mask_given_as_an_input_stays():
    """How much of a mask computed from the inputs is filled is not known: the rule costs where little is."""
    def fn(s, keep):
        return jax.nn.softmax(jnp.where(keep, s, -1e9), axis=-1)

    keep = np.random.default_rng(4).random((2, 1, _T, _T)) < 0.5
    ops, (got,) = convert_and_run(fn, _scores(3), keep)
    assert ops["Softmax"] == 1 and ops.get("Max", 0) == 0, ops
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(_scores(3), keep)), rtol=1e-6, atol=0)


@pytest.mark.parametrize("case", ["no_mask", "mask_of_ones", "small_bias", "padding_columns"])
def test_a_softmax_without_a_masks_fill_stays(case):
    bias = np.random.default_rng(5).standard_normal((_T, _T)).astype(np.float32)
    padding = np.arange(_T) < _T - 3
    fns = {
        "no_mask": lambda s: jax.nn.softmax(s, axis=-1),
        "mask_of_ones": lambda s: jax.nn.softmax(jnp.where(np.ones((_T, _T), bool), s, _LOWEST), axis=-1),
        "small_bias": lambda s: jax.nn.softmax(s + bias, axis=-1),  # T5's position bias: no fill
        "padding_columns": lambda s: jax.nn.softmax(jnp.where(padding, s, -1e9), axis=-1),  # 3 of 16 keys
    }
    ops, (got,) = convert_and_run(fns[case], _scores(6))
    assert ops["Softmax"] == 1 and ops.get("Max", 0) == 0, ops
    np.testing.assert_allclose(got, np.asarray(jax.jit(fns[case])(_scores(6))), rtol=1e-6, atol=1e-7)


def test_causal_attention_output_matches_jit_on_huge_values():
    """The zeroed places meet the values: a kept exp(-64)/sum times a huge value would not be jax.jit's 0."""
    def fn(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k)
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(jnp.where(_CAUSAL, s, _LOWEST), axis=-1), v)

    r = np.random.default_rng(7)
    q, k = (r.standard_normal((1, 2, _T, 8)).astype(np.float32) for _ in range(2))
    v = r.standard_normal((1, 2, _T, 8)).astype(np.float32)
    v[:, :, _T // 2:] = 3e38  # the later keys, masked for the first half of the queries
    ops, (got,) = convert_and_run(fn, q, k, v)
    assert ops["Max"] == 1, ops
    want = np.asarray(jax.jit(fn)(q, k, v))
    np.testing.assert_allclose(got[:, :, : _T // 2], want[:, :, : _T // 2], rtol=1e-5, atol=1e-6)
