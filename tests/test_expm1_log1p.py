"""expm1 and log1p without selects: accurate to a few ulps of the float64 (float32 inputs) or numpy's
(float64 inputs) value over the whole range, jax.jit's special values (±0, ±inf, NaN, -1, overflow), and no
Where: ONNX Runtime's Where costs up to 40 Muls where its condition follows the data."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lowering_check import assert_same_bits, convert_and_run

MAX_ULPS = 5  # jax.jit's own expm1 is 5.5 ulps off in float32 on these values, its log1p far more near -1


def _spread(dtype, scales, rng) -> np.ndarray:
    return np.concatenate([rng.standard_normal(4000) * s for s in scales]).astype(dtype)


def _inputs(name: str, dtype) -> np.ndarray:
    rng = np.random.default_rng(11)
    big = 88.0 if dtype == np.float32 else 709.0
    x = _spread(dtype, (1e-9, 1e-5, 1e-3, 0.1, 0.7, 2, 10, 40, big / 2), rng)
    if name == "expm1":
        edges = [big + 0.7, big + 0.8, -big - 20, -1e4, 1e-30, -1e-30]
    else:
        x = np.concatenate([np.abs(x) - 0.5, -rng.uniform(0, 1, 4000)])
        edges = [-1.0, -1.0 + np.finfo(dtype).eps, 1e30, np.finfo(dtype).max, -1e-30, 1e-30, -2.0]
    return np.concatenate([x, np.array(edges, dtype)]).astype(dtype)


def _specials(dtype) -> np.ndarray:
    return np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0], dtype)


FUNCTIONS = {"expm1": (jnp.expm1, np.expm1), "log1p": (jnp.log1p, np.log1p)}


def _ulps(got: np.ndarray, want: np.ndarray, dtype) -> float:
    """The largest error of ``got`` in ulps of the exact ``want`` rounded to ``dtype``, after its NaNs and
    infinities (overflow included) are found the same."""
    rounded = want.astype(dtype)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(rounded))
    infinite = np.isinf(rounded)
    np.testing.assert_array_equal(got[infinite], rounded[infinite])
    finite = np.isfinite(rounded)
    err = np.abs(got[finite].astype(np.float64) - want[finite]) / np.spacing(np.abs(rounded[finite]))
    return float(err.max())


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_accurate_over_the_range(name, dtype):
    fn, exact = FUNCTIONS[name]
    x = _inputs(name, dtype)
    with jax.enable_x64(dtype == np.float64):
        ops, (got,) = convert_and_run(fn, x)
    want = exact(x.astype(np.float64)) if dtype == np.float32 else exact(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        assert _ulps(got, want, dtype) <= MAX_ULPS
    assert "Where" not in ops and "If" not in ops, ops


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_special_values_as_jax(name, dtype):
    fn = FUNCTIONS[name][0]
    x = _specials(dtype)
    with jax.enable_x64(dtype == np.float64):
        _, got = convert_and_run(fn, x)
        want = [np.asarray(jax.jit(fn)(x))]
    finite = np.isfinite(want[0]) & (want[0] != 0)
    np.testing.assert_allclose(got[0][finite], want[0][finite], rtol=4 * np.finfo(dtype).eps)
    assert_same_bits([got[0][~finite]], [want[0][~finite]], nan_signs=False)
