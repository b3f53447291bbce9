"""Which dtypes the softmax rewrite writes ORT's Softmax / LogSoftmax for: only those whose ORT kernel
gives jax.jit's NaN rows (float64 LogSoftmax does not: [1, NaN, 2] -> [45.05, NaN, 46.05])."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from lowering_check import convert_and_run

ROWS = [[1.0, np.nan, 2.0], [np.inf, 1.0, 0.0], [-np.inf, -np.inf, -np.inf], [np.inf, np.inf, 1.0],
        [-0.0, 0.0, -0.0], [0.5, -1.0, 2.0]]


def _check(fn, dtype, op, present):
    x = np.array(ROWS, dtype)
    with jax.enable_x64(dtype == np.float64):
        ops, (got,) = convert_and_run(fn, x)
        want = np.asarray(jax.jit(fn)(x))
    assert (ops[op] == 1) == present, ops
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype, present", [(np.float32, True), (np.float64, False)])
def test_log_softmax_op_only_where_its_kernel_keeps_nan_rows(dtype, present):
    _check(lambda v: jax.nn.log_softmax(v, axis=-1), dtype, "LogSoftmax", present)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_op_in_float32_and_float64(dtype):
    _check(lambda v: jax.nn.softmax(v, axis=-1), dtype, "Softmax", True)
