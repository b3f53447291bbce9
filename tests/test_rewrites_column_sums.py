"""jaxconv.onnx.rewrites.column_sums: a long float32 sum over middle or leading axes summed in blocks of rows
where they lie (no Transpose, no Pad of the input); jax.jit's values within the converter's tolerance, as
accurate as the lowering's own blocks against a float64 sum, NaN/+-inf/-0.0 inputs included."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxconv.onnx.rewrites import column_sums
from lowering_check import assert_same_floats, without_rule
from lowering_check import convert_and_run as _convert

_plain = without_rule(column_sums)


def _input(shape: tuple[int, ...], kind: str) -> np.ndarray:
    x = np.random.default_rng(11).standard_normal(shape).astype(np.float32)
    x = x.reshape(shape[0] if len(shape) > 2 else 1, -1, shape[-1])
    if kind == "specials":
        x[0, 3, 0] = np.nan
        x[-1, 1, -1] = np.inf
        x[-1, 2, 1 % shape[-1]] = -np.inf
        x[0, :, -1] = -0.0  # a channel of -0.0 only: its sum's sign as jax.jit's
        x[0, 5, 1 % shape[-1]] = -0.0
    if kind == "large":
        x = x * np.float32(1e4) + np.float32(3e4)
    return x.reshape(shape)


CASES = {
    "mean hw 9x9": ((2, 9, 9, 5), lambda x: x.mean(axis=(1, 2))),
    "sum hw 8x8 keepdims": ((3, 8, 8, 4), lambda x: x.sum(axis=(1, 2), keepdims=True)),
    "mean hw 35x35": ((2, 35, 35, 3), lambda x: x.mean(axis=(1, 2))),
    "var hw": ((2, 12, 12, 6), lambda x: x.var(axis=(1, 2))),
    "sum middle": ((4, 300, 7), lambda x: x.sum(axis=1)),
    "sum leading": ((600, 6), lambda x: x.sum(axis=0)),
    "mean h of nhwc": ((2, 300, 3, 5), lambda x: x.mean(axis=1)),
    "group stats": ((2, 16, 16, 8), lambda x: _group_stats(x, 4)),
    "group stats 1000 rows": ((1, 40, 25, 6), lambda x: _group_stats(x, 3)),
}


def _group_stats(x, groups: int):
    """A group norm's mean and variance over (H, W, channels of the group): reduced axes 1, 2 and 4."""
    n, h, w, c = x.shape
    y = x.reshape(n, h, w, groups, c // groups)
    mean = y.mean(axis=(1, 2, 4), keepdims=True)
    inv = jax.lax.rsqrt(((y - mean) ** 2).mean(axis=(1, 2, 4)) + 1e-5)
    return (y - mean).reshape(x.shape) * inv[:, None, None, :].repeat(c // groups, -1)


@pytest.mark.parametrize("kind", ["normal", "specials", "large"])
@pytest.mark.parametrize("name", list(CASES))
def test_blocked_sums_in_place(monkeypatch, name, kind):
    shape, fn = CASES[name]
    x = _input(shape, kind)
    ops, (got,) = _convert(fn, x)
    plain_ops, (plain,) = _plain(monkeypatch, fn, x)
    assert ops["Transpose"] == 0 and plain_ops["Transpose"] >= 1, (ops, plain_ops)
    want = np.asarray(jax.jit(fn)(x))
    assert_same_floats(got, want, 2e-6, 1e-5)
    if kind != "specials" and not name.startswith("group"):  # as accurate as the lowering's blocks (a float64 sum of the same numbers)
        exact = np.asarray(fn(x.astype(np.float64)))
        tiny = 2 * np.float64(np.finfo(np.float32).eps) * np.abs(exact).max()  # two rounding steps
        assert np.abs(got - exact).max() <= max(np.abs(plain - exact).max() * 2, tiny)


def test_sums_over_trailing_axes_stay():
    """The reduced axes last already: no Transpose to save, the lowering's blocks stay."""
    fn = lambda x: x.sum(axis=(2, 3))  # noqa: E731
    x = _input((2, 3, 40, 40), "normal")
    ops, (got,) = _convert(fn, x)
    assert ops["Transpose"] == 0 and ops["Pad"] == 1, ops
    assert_same_floats(got, jax.jit(fn)(x), 2e-6, 1e-5)


def test_short_sums_have_no_blocks():
    fn = lambda x: x.mean(axis=(1, 2))  # noqa: E731
    x = _input((2, 4, 4, 8), "specials")
    ops, (got,) = _convert(fn, x)
    assert ops["Transpose"] == 0 and ops["Reshape"] == 0, ops
    assert_same_floats(got, jax.jit(fn)(x), 2e-6, 1e-6)

