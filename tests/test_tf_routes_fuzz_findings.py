"""Differences of the TFLite and SavedModel routes from jax.jit found by the fuzzer (targets run, seed 7177),
each a strict xfail until the route handles it: the artifact's value against jax.jit's."""

from __future__ import annotations

import tempfile

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import jaxconv

BF16 = ml_dtypes.bfloat16


def _tflite(fn, specs, inputs):
    from jaxconv.runtimes.tflite import TFLiteRunner

    return TFLiteRunner(jaxconv.to_tflite(fn, *specs, check=False)).run(inputs)


def _saved_model(fn, specs, inputs):
    from jaxconv.runtimes.tf import SavedModelRunner

    path = tempfile.mkdtemp(prefix="fuzz-finding-") + "/saved"
    jaxconv.to_saved_model(fn, *specs, path=path, check=False)
    return SavedModelRunner(path).run(inputs)


def _bits(a) -> np.ndarray:
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}")


@pytest.mark.xfail(strict=True, reason="TFLite route: argsort of booleans gives True before False "
                                        "(program 34: [False, True] -> [1, 0], jax.jit [0, 1])")
def test_tflite_argsort_of_booleans():
    x = np.array([[False], [True]])
    fn = lambda x: jnp.argsort(x, axis=0)  # noqa: E731
    np.testing.assert_array_equal(_tflite(fn, ["bool[2,1]"], [x])[0], np.asarray(jax.jit(fn)(x)))


def _clamp_to_minus_zero(x):
    return lax.clamp(np.array(-jnp.inf, BF16), x, np.array(-0.0, BF16))


@pytest.mark.xfail(strict=True, reason="SavedModel route: a bfloat16 clamp to an upper bound of -0 gives +0 for "
                                        "x = +0 (program 15; jax.jit -0: XLA's minimum orders -0 below +0)")
def test_saved_model_bf16_clamp_keeps_minus_zero():
    x = np.zeros((1, 1, 1), BF16)
    np.testing.assert_array_equal(_bits(_saved_model(_clamp_to_minus_zero, ["bf16[1,1,1]"], [x])[0]),
                                  _bits(jax.jit(_clamp_to_minus_zero)(x)))


@pytest.mark.xfail(strict=True, reason="TFLite route: a bfloat16 clamp to an upper bound of -0 gives +0 "
                                        "(program 15, x = 4.47; jax.jit -0)")
def test_tflite_bf16_clamp_keeps_minus_zero():
    x = np.full((1, 1, 1), 4.46875, BF16)
    np.testing.assert_array_equal(_bits(_tflite(_clamp_to_minus_zero, ["bf16[1,1,1]"], [x])[0]),
                                  _bits(jax.jit(_clamp_to_minus_zero)(x)))


@pytest.mark.xfail(strict=True, reason="SavedModel route: scatter-max of a NaN update keeps the old value "
                                        "(program 57; jax.jit NaN)")
def test_saved_model_scatter_max_of_nan():
    x, idx, u = np.float32([[-0.7954668]]), np.int32([0, 0]), np.float32([[np.nan]])
    fn = lambda x, i, u: x.at[i].max(u, mode="clip")  # noqa: E731
    got = _saved_model(fn, ["f32[1,1]", "i32[2]", "f32[1,1]"], [x, idx, u])[0]
    assert np.isnan(got).all() and np.isnan(np.asarray(jax.jit(fn)(x, idx, u))).all()


@pytest.mark.xfail(strict=True, reason="TFLite route: log1p(-0) is +0 (program 61; jax.jit -0)")
def test_tflite_log1p_keeps_minus_zero():
    x = np.float32([[-0.0]])
    np.testing.assert_array_equal(_bits(_tflite(jnp.log1p, ["f32[1,1]"], [x])[0]), _bits(jax.jit(jnp.log1p)(x)))


@pytest.mark.xfail(strict=True, reason="TFLite route: logsumexp of [NaN] is -inf (program 18; jax.jit NaN)")
def test_tflite_logsumexp_of_nan():
    x = np.float32([np.nan])
    fn = lambda x: jax.nn.logsumexp(x, axis=None)  # noqa: E731
    assert np.isnan(_tflite(fn, ["f32[1]"], [x])[0]).all()
