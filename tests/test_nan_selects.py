"""Selects on a NaN test that change nothing but a NaN's payload are dropped (``onnx/ops/nan_selects``):
jnp.logaddexp against a finite constant (softplus, log_sigmoid, mish) loses its select and keeps jax.jit's
numbers; selects whose NaN side is not NaN, or whose test is not NaN-only, stay."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lowering_check import convert_and_run

INF, NAN = np.inf, np.nan


def _x(dtype=np.float32) -> np.ndarray:
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((4, 64)) * 8).astype(dtype)
    x[0, :9] = [0.0, -0.0, INF, -INF, NAN, 1e30, -1e30, 50.0, -50.0]
    return x


def _same(got: np.ndarray, want: np.ndarray) -> None:
    """NaNs in the same places (a NaN's payload may differ), the rest within 8 ulps (ORT's tanh and log are not
    XLA's), zeros' signs kept."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=8 * np.finfo(want.dtype).eps, atol=0)
    zero = want == 0
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]))


DROPPED = {
    "softplus": jax.nn.softplus,
    "log_sigmoid": jax.nn.log_sigmoid,
    "mish": jax.nn.mish,
    "logaddexp_const": lambda x: jnp.logaddexp(x, 1.5),
    "logaddexp_scaled": lambda x: jnp.logaddexp(2.0 * x, -3.0),
}


@pytest.mark.parametrize("name", sorted(DROPPED))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dropped_and_same_numbers(name, dtype):
    fn, x = DROPPED[name], _x(dtype)
    with jax.enable_x64(dtype == np.float64):
        ops, (got,) = convert_and_run(fn, x, bodies=True)
        want = np.asarray(jax.jit(fn)(x))
    assert "Where" not in ops and "If" not in ops, ops
    _same(got, want)


KEPT = {
    # infinities of one sign: inf - inf is NaN, the select returns inf + inf
    "logaddexp_two_inputs": (lambda x: jnp.logaddexp(x, x[::-1]), "Where"),
    # the NaN side is a constant, not NaN
    "nan_to_zero": (lambda x: jnp.where(jnp.isnan(x), 0.0, jnp.exp(x)), "Where"),
    # an infinite constant: x - inf is NaN where x is +inf too
    "logaddexp_inf": (lambda x: jnp.logaddexp(x, -jnp.inf), "Where"),
}


@pytest.mark.parametrize("name", sorted(KEPT))
def test_kept_where_a_side_is_not_nan(name):
    fn, op = KEPT[name]
    x = _x()
    x[1, :4] = [INF, -INF, INF, -INF]
    x[1, -4:] = [INF, -INF, INF, -INF]  # reversed rows meet their own sign: inf + inf
    ops, (got,) = convert_and_run(fn, x, bodies=True)
    assert ops[op] >= 1, ops
    _same(got, np.asarray(jax.jit(fn)(x)))
