"""Differences the fuzzer found (scripts/fuzz.py), each reduced to a small program compared with jax.jit.

Every program goes through the whole ``jaxconv.to_onnx`` pipeline (lowering, rewrites, clean-up)
and runs in ONNX Runtime; outputs must equal jax.jit's bit for bit where the lowering matches
XLA (zero signs, NaN places), or show the named difference where conformance/fuzz/known.py
names it.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import jaxconv
from jaxconv.runtimes.onnxrt import OnnxRunner

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32 = np.dtype(np.float16), np.dtype(np.float32)


def _run(fn: Callable[..., Any], *args: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(jax.jit's outputs, ONNX Runtime's outputs of jaxconv's ONNX) on ``args``."""
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args]
    model = jaxconv.to_onnx(fn, *specs, check=False)
    expected = [np.asarray(o) for o in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]
    return expected, OnnxRunner(model.SerializeToString()).run(list(args))


def _bits(a: np.ndarray) -> np.ndarray:
    """Values as float64 with -0 told from +0 (NaNs compare equal)."""
    wide = np.asarray(a).astype(np.float64)
    return np.where(wide == 0, np.copysign(1.0, wide) * 1e-300, wide)


def assert_exact(fn: Callable[..., Any], *args: np.ndarray) -> None:
    """jax.jit and the ONNX agree exactly: same values, zero signs and NaN places."""
    expected, actual = _run(fn, *args)
    for k, (e, a) in enumerate(zip(expected, actual)):
        assert e.dtype == a.dtype and e.shape == a.shape, k
        np.testing.assert_array_equal(_bits(a), _bits(e), err_msg=f"output {k}")


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
def test_sum_over_extent_one_dims_keeps_negative_zero(dtype):
    """XLA folds a sum over dims of extent 1 to a reshape (its +0 init unused): a sum of one -0 is -0."""
    x = np.array([-0.0, 0.0, -1.0, 2.0], np.float64).astype(dtype)
    assert_exact(lambda x: (jnp.sum(x.reshape(1, 4, 1), axis=2), jnp.sum(x[:1]), jnp.sum(x.reshape(4, 1, 1), axis=(1, 2)),
                            jnp.sum(x.reshape(2, 2), axis=1)), x)


def test_clip_of_negative_zero_at_a_zero_bound():
    """jnp.clip(-0., 0., 1.) is +0 in XLA (max(-0, +0) = +0)."""
    x = np.array([-0.0, 1.0], np.float32)
    assert_exact(lambda x: jnp.clip(x, 0.0, 1.0), x)


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
def test_cumsum_over_extent_one_axis(dtype):
    """XLA keeps the operand of a running sum over an axis of extent 1 (f32/f16: -0 stays -0), bf16 adds +0."""
    x = np.array([-0.0, 0.0, -1.0], np.float64).astype(dtype)
    assert_exact(lambda x: (jnp.cumsum(x.reshape(1, 3), axis=0), jnp.cumsum(x[:1])), x)


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
def test_one_element_sum_windows_with_padding(dtype):
    """XLA folds a sum over one-element windows at unit stride to the padded operand (f32/f16: -0 stays -0);
    strided or base-dilated windows add the +0 init (found as where -> reduce_window_add -> atan2)."""
    x = np.array([-0.0, 1.0, -0.0, -2.5], np.float64).astype(dtype)
    zero = np.array(0, dtype)
    assert_exact(lambda x: (lax.reduce_window(x, zero, lax.add, (1,), (1,), ((1, 2),)),
                            lax.reduce_window(x, zero, lax.add, (1,), (1,), ((-1, 1),)),
                            lax.reduce_window(x, zero, lax.add, (1,), (2,), ((0, 0),)),
                            lax.reduce_window(x, zero, lax.add, (1,), (1,), ((1, 0),), base_dilation=(2,)),
                            jnp.arctan2(lax.reduce_window(x, zero, lax.add, (1,), (1,), ((1, 0),)), -0.0)), x)


def test_float64_dot_with_a_float32_result_multiplies_in_float64():
    """matmul(f64, f64, preferred_element_type=f32): XLA multiplies in f64 (7.5e-155 x -1.3e154 = -1, not 0 x -inf)."""
    with jax.enable_x64(True):
        a = np.array([7.45834073e-155, 2.0], np.float64)
        b = np.array([[-1.34078079e154], [1e300]], np.float64)
        assert_exact(lambda a, b: (jnp.matmul(a[:1], b[:1], preferred_element_type=jnp.float32),
                                   jnp.matmul(a, b, preferred_element_type=jnp.float32)), a, b)
