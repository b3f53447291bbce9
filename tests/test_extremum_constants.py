"""maximum/minimum against a constant: jax.jit's numbers (NaN, infinities, both zeros) in the fewest nodes.

``jnp.clip(x, 0, 1)`` passes its integer bounds into a jitted callee that converts them to the float
type: the bounds are constants only through that Cast. A bound that is not zero never ties with a zero,
so the op needs no signed-zero fix; a zero bound needs one test of ``x`` against zero, not the general
fix's two reciprocals."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lowering_check import assert_same_bits, convert_and_run

NAN, INF = np.nan, np.inf


def _edges(dtype=np.float32) -> np.ndarray:
    """Random values with both zeros, NaN, infinities, the extremes and the bounds themselves (no subnormals:
    jax.jit's CPU code flushes them, a difference of its own)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 40)).astype(dtype) * 2
    x[0, :8] = [0.0, -0.0, NAN, INF, -INF, 1.0, -1.0, 6.0]
    x[1, :6] = [np.finfo(dtype).max, -np.finfo(dtype).max, np.finfo(dtype).tiny, -np.finfo(dtype).tiny, 1.0, -6.0]
    x[2] = -0.0
    x[3] = 0.0
    return x


CASES = {
    "clip_int_bounds": lambda x: jnp.clip(x, 0, 1),
    "clip_int_symmetric": lambda x: jnp.clip(x, -1, 1),
    "clip_int_six": lambda x: jnp.clip(x, 0, 6),
    "clip_float_bounds": lambda x: jnp.clip(x, 0.0, 1.0),
    "clip_max_zero": lambda x: jnp.clip(x, max=0.0),
    "clip_max_int_zero": lambda x: jnp.clip(x, max=0),
    "minimum_zero": lambda x: jnp.minimum(x, 0.0),
    "minimum_neg_zero": lambda x: jnp.minimum(x, -0.0),
    "maximum_zero": lambda x: jnp.maximum(x, 0.0),
    "maximum_neg_zero": lambda x: jnp.maximum(-0.0, x),
    "minimum_int_one": lambda x: jnp.minimum(x, jnp.asarray(1, jnp.int32).astype(x.dtype)),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_same_bits_as_jax(name, dtype):
    fn = CASES[name]
    x = _edges(dtype)
    with jax.enable_x64(dtype == np.float64):
        _, got = convert_and_run(fn, x)
        want = [np.asarray(jax.jit(fn)(x))]
    assert_same_bits(got, want, nan_signs=False)


@pytest.mark.parametrize("name", ["clip_int_bounds", "clip_int_symmetric", "clip_int_six", "minimum_int_one"])
def test_nonzero_or_positive_zero_bounds_need_no_fix(name):
    """Bounds known through the Cast of an integer constant: no reciprocal, no select."""
    ops, _ = convert_and_run(CASES[name], _edges())
    assert not {"Reciprocal", "Where", "If", "Equal"} & set(ops), ops
    assert sum(ops.values()) <= 3, ops


@pytest.mark.parametrize("name", ["minimum_zero", "clip_max_zero", "clip_max_int_zero"])
def test_positive_zero_bound_of_minimum_takes_one_test(name):
    """min(x, +0): one Equal of x with zero and one Where that keeps x's zeros, no reciprocals."""
    ops, _ = convert_and_run(CASES[name], _edges(), bodies=True)
    assert ops["Reciprocal"] == 0 and ops["If"] == 0, ops
    assert ops["Equal"] == 1 and ops["Where"] == 1 and sum(ops.values()) == 4, ops
