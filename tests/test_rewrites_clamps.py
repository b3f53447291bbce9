"""The clamps rule (jaxconv.onnx.rewrites.clamps): selects that clamp at a constant become Min/Max (or one
Clip), bit for bit the graph without the rule and jax.jit's numbers on NaN, infinities, both zeros and the
bounds themselves; selects that are no clamp keep their Where."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import clamps
from lowering_check import assert_same_bits, convert_and_run, with_without_and_jax, without_rule

_plain = without_rule(clamps)


def _x(dtype=np.float32) -> np.ndarray:
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((8, 128)) * 2).astype(dtype)
    info = np.finfo(dtype)
    x[0, :12] = [0.0, -0.0, np.nan, np.inf, -np.inf, 1.0, -1.0, 2.5, -2.0, info.max, -info.max, info.tiny]
    return x


CLAMPED = {
    "hard_tanh": jax.nn.hard_tanh,
    "above_int": lambda x: jnp.where(x > 1, 1, x),
    "at_or_above": lambda x: jnp.where(x >= 2.5, 2.5, x),
    "mirrored": lambda x: jnp.where(-2.0 > x, -2.0, x),
    "below": lambda x: jnp.where(x < -2.0, -2.0, x),
    "two_sided": lambda x: jnp.where(x > 2.5, 2.5, jnp.where(x <= -1.0, -1.0, x)),
}


@pytest.mark.parametrize("name", sorted(CLAMPED))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_clamp_without_where_same_bits(monkeypatch, name, dtype):
    ops, got, plain, want = with_without_and_jax(_plain, monkeypatch, CLAMPED[name], _x(dtype))
    assert "Where" not in ops and "If" not in ops, ops
    assert_same_bits(got, plain, nan_signs=False)
    assert_same_bits(got, want, nan_signs=False)


NOT_CLAMPS = {
    "zero_bound": lambda x: jnp.where(x > 0, 0.0, x),  # -0 stays -0, a Min could give +0
    "nan_to_bound": lambda x: jnp.where(x > 1.0, x, 1.0),  # NaN fails the test: the bound, not NaN
    "other_constant": lambda x: jnp.where(x > 1.0, 2.0, x),
    "crossed_sides": lambda x: jnp.where(x > 1.0, 1.0, jnp.maximum(x, 2.0)),
}


@pytest.mark.parametrize("name", sorted(NOT_CLAMPS))
def test_no_clamp_keeps_its_select(monkeypatch, name):
    fn, x = NOT_CLAMPS[name], _x()
    ops, got = convert_and_run(fn, x, bodies=True)
    _, plain = _plain(monkeypatch, fn, x)
    assert ops["Where"] >= 1, ops
    assert_same_bits(got, plain)
    assert_same_bits(got, [np.asarray(jax.jit(fn)(x))], nan_signs=False)
