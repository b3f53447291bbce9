"""Data movement lowerings (pad, reverse, slices, dynamic slices, reshapes, broadcasts) against jax.jit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lowering_check import assert_onnx_matches_jax, onnx_op_types

DTYPES = ["float32", "float16", "bfloat16", "float64", "int8", "int16", "int32", "int64",
          "uint8", "uint16", "uint32", "uint64", "bool"]
from dtype_support import WIDE, data, np_dtype, x64_for  # noqa: E402,F401


@pytest.mark.parametrize("dtype", DTYPES)
def test_data_movement_every_dtype(dtype):
    """pad (interior, negative, any value), reverse, dynamic slices and the plain movement ops, per dtype."""
    def f(x, v, ij, u):
        y = jnp.broadcast_to(x[:, None, :], (4, 2, 5))
        return (jax.lax.pad(x, v[0], [(1, -1, 2), (-2, 3, 1)]),
                jnp.flip(x), x[::-2, 1:4],
                jax.lax.dynamic_slice(x, (ij[0], ij[1]), (2, 3)),
                jax.lax.dynamic_update_slice(x, u, (ij[1], ij[0])),
                y.reshape(8, 5).T, jnp.concatenate([x, x[::-1]], 0), jnp.transpose(y, (2, 0, 1)),
                jnp.tile(x, (2, 1)))

    x = data((4, 5), dtype)
    with x64_for(dtype):
        assert_onnx_matches_jax(f, x, data((1,), dtype, 3), np.array([1, 3], np.int32), data((2, 3), dtype, 1))


@pytest.mark.parametrize("config", [
    [(0, 0, 0), (2, 1, 0)],
    [(-1, -2, 0), (0, 0, 3)],
    [(3, 0, 1), (-4, -4, 1)],
    [(0, 0, 5), (0, 0, 0)],
])
def test_pad_configs(config):
    assert_onnx_matches_jax(lambda x: jax.lax.pad(x, np.float32(-7.5), config), data((3, 9), "float32"))


def test_pad_of_empty_and_to_empty():
    assert_onnx_matches_jax(lambda x: jax.lax.pad(x, np.float32(1.0), [(0, 0, 0), (1, 2, 3)]), data((0, 4), "float32"))
    assert_onnx_matches_jax(lambda x: jax.lax.pad(x, np.float32(1.0), [(1, 1, 2), (0, 0, 0)]), data((0, 4), "float32"))
    assert_onnx_matches_jax(lambda x: jax.lax.pad(x, np.float32(1.0), [(-2, -1, 0)]), data((3,), "float32"))


def test_jnp_pad_modes():
    x = data((4, 6), "float32")
    assert_onnx_matches_jax(lambda x: jnp.pad(x, ((1, 2), (3, 0))), x)
    assert_onnx_matches_jax(lambda x: jnp.pad(x, ((1, 2), (3, 0)), mode="reflect"), x)
    assert_onnx_matches_jax(lambda x: jnp.pad(x, ((1, 2), (3, 0)), mode="edge"), x)


def test_reverse_empty():
    assert_onnx_matches_jax(lambda x: jnp.flip(x, 0), data((0, 3), "float32"))


@pytest.mark.parametrize("i,j", [(0, 0), (4, 6), (-1, 2), (-100, 100), (3, 5), (2**31 - 1, -2**31)])
def test_dynamic_slice_clamps_starts(i, j):
    def f(x, i, j):
        return jax.lax.dynamic_slice(x, (i, j), (2, 3))

    # The jnp front end wraps negative indices first; lax.dynamic_slice is the raw op.
    x = data((5, 7), "float32")
    assert_onnx_matches_jax(f, x, np.int32(i), np.int32(j),
                            inputs_for_run=[[x, np.int32(-i), np.int32(j + 1)]])


@pytest.mark.parametrize("idx_dtype", ["int8", "uint8", "int16", "uint32", "int64"])
def test_dynamic_slice_index_dtypes(idx_dtype):
    def f(x, i):
        return jax.lax.dynamic_slice_in_dim(x, i, 3, axis=1)

    with x64_for(idx_dtype):
        assert_onnx_matches_jax(f, data((2, 9), "float32"), np.asarray(7, idx_dtype))


def test_dynamic_index_in_dim_and_full_slice():
    x = data((4, 6), "int32")
    assert_onnx_matches_jax(lambda x, i: x[i], x, np.int32(-1), inputs_for_run=[[x, np.int32(2)]])
    assert_onnx_matches_jax(lambda x, i: jax.lax.dynamic_slice(x, (i, 0), (4, 6)), x, np.int32(3))


@pytest.mark.parametrize("i,j", [(0, 0), (4, 6), (-3, 2), (100, -100)])
def test_dynamic_update_slice_clamps(i, j):
    def f(x, u, i, j):
        return jax.lax.dynamic_update_slice(x, u, (i, j))

    assert_onnx_matches_jax(f, data((5, 7), "float32"), data((2, 3), "float32", 1), np.int32(i), np.int32(j))


def test_dynamic_update_slice_kv_cache():
    """A decode step writing one position of a [batch, time, heads, dim] cache."""
    def step(cache, kv, pos):
        return jax.lax.dynamic_update_slice(cache, kv[:, None], (0, pos, 0, 0))

    cache = data((2, 8, 3, 4), "float32")
    kv = data((2, 3, 4), "float32", 1)
    model = assert_onnx_matches_jax(step, cache, kv, np.int32(5),
                                    inputs_for_run=[[cache, kv, np.int32(7)], [cache, kv, np.int32(9)]])
    assert "ScatterND" in onnx_op_types(model)


def test_dynamic_update_slice_whole_and_empty():
    x = data((3, 4), "float32")
    assert_onnx_matches_jax(lambda x, u, i: jax.lax.dynamic_update_slice(x, u, (i, i)), x, data((3, 4), "float32", 2),
                            np.int32(1))
    assert_onnx_matches_jax(lambda x, u, i: jax.lax.dynamic_update_slice(x, u, (i, i)), x, data((0, 2), "float32", 2),
                            np.int32(1))


def test_at_set_with_scalar_index_uses_update_slice():
    def f(x, i, v):
        return x.at[i].set(v), x.at[:, i].add(v)

    x = data((4, 4), "float32")
    assert_onnx_matches_jax(f, x, np.int32(2), np.float32(9.0), inputs_for_run=[[x, np.int32(-1), np.float32(1.0)]])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "uint32", "float16"])
def test_iota(dtype):
    def f():
        return jax.lax.broadcasted_iota(dtype, (3, 5), 1), jnp.arange(6, dtype=dtype)

    assert_onnx_matches_jax(f)


def test_empty_tensors_move():
    def f(x):
        return x.reshape(0, 2, 3), jnp.concatenate([x, x], 1), x.T, jnp.broadcast_to(x[None], (2, 0, 6))

    assert_onnx_matches_jax(f, data((0, 6), "float32"))


def test_constants_of_every_dtype():
    def f():
        return (jnp.array([1.5, -2.0], jnp.bfloat16), jnp.array([True, False]), jnp.array([3, 250], jnp.uint8),
                jnp.full((2, 3), -1, jnp.int16))

    assert_onnx_matches_jax(f)
