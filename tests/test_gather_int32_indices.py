"""A gather along one axis (x[i], jnp.take) with int32 indices clamps them as int32: no Cast to int64,
and XLA's clamping kept for indices past either end, in both index-vector layouts."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from lowering_check import convert_and_run as _convert

TABLE = np.arange(40, dtype=np.float32).reshape(8, 5) - 20.0


def _raw_gather(x, idx, index_vector_dim):
    """lax.gather with XLA's clamping of out-of-range starts (no jnp fill/wrap around it)."""
    dn = lax.GatherDimensionNumbers(offset_dims=(idx.ndim - (1 if index_vector_dim < idx.ndim else 0),),
                                    collapsed_slice_dims=(0,), start_index_map=(0,))
    if index_vector_dim == idx.ndim - 1:
        return lax.gather(x, idx, dn, (1, 5), mode=lax.GatherScatterMode.CLIP)
    return lax.gather(x, idx[..., None], dn, (1, 5), mode=lax.GatherScatterMode.CLIP)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32], ids=str)
def test_take_out_of_range_clamps_like_xla(dtype):
    idx = np.array([[0, 7, 8, 100], [3, 2, 1, 2**31 - 1 if dtype != np.int64 else 2**40]], dtype)
    if dtype != np.uint32:
        idx[0, 0] = -5
    fn = lambda i: jnp.take(TABLE, i, axis=0, mode="clip")  # noqa: E731
    with jax.enable_x64(dtype == np.int64):
        ops, (got,) = _convert(fn, idx)
        want = np.asarray(jax.jit(fn)(idx))
    np.testing.assert_array_equal(got, want)
    if dtype == np.int32:
        assert ops["Cast"] == 0, ops


def test_index_vector_as_last_axis_of_int32_indices():
    idx = np.array([[[9], [-1]], [[4], [7]]], np.int32)
    fn = lambda i: _raw_gather(TABLE, i, 2)  # noqa: E731
    ops, (got,) = _convert(fn, idx)
    np.testing.assert_array_equal(got, np.asarray(jax.jit(fn)(idx)))
    assert ops["Cast"] == 0 and ops["Gather"] == 1, ops


def test_embedding_lookup_with_fill_keeps_nan_rows():
    idx = np.array([[1, -1, -8, -9, 8, 3]], np.int32)
    fn = lambda i: jnp.take(TABLE, i, axis=0)  # noqa: E731  (fill: NaN rows out of range, negatives wrap)
    ops, (got,) = _convert(fn, idx)
    want = np.asarray(jax.jit(fn)(idx))
    assert np.isnan(want[0, 3:5]).all()
    np.testing.assert_array_equal(got, want)
    assert ops["Cast"] == 0, ops
