"""Op rows: data movement (pad, reverse, slices, dynamic slices, reshapes, broadcasts, iota, constants)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from conformance.case import op_row

DTYPES = ["float32", "float16", "bfloat16", "float64", "int8", "int16", "int32", "int64",
          "uint8", "uint16", "uint32", "uint64", "bool"]


def data(shape, dtype: str, seed: int = 0) -> np.ndarray:
    """Distinct-ish values of ``dtype`` (bool alternates)."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    np_dtype = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    if np.issubdtype(np_dtype, np.integer):
        return rng.integers(0, 100, size=shape).astype(dtype)
    return rng.normal(size=shape).astype(np_dtype)


def _movement(x, v, ij, u):
    y = jnp.broadcast_to(x[:, None, :], (4, 2, 5))
    return (jax.lax.pad(x, v[0], [(1, -1, 2), (-2, 3, 1)]),
            jnp.flip(x), x[::-2, 1:4],
            jax.lax.dynamic_slice(x, (ij[0], ij[1]), (2, 3)),
            jax.lax.dynamic_update_slice(x, u, (ij[1], ij[0])),
            y.reshape(8, 5).T, jnp.concatenate([x, x[::-1]], 0), jnp.transpose(y, (2, 0, 1)),
            jnp.tile(x, (2, 1)))


# pad (interior, negative, any value), reverse, dynamic slices and the plain movement ops, per dtype.
for dtype in DTYPES:
    op_row(f"shape.movement.{dtype}", _movement, data((4, 5), dtype), data((1,), dtype, 3), np.array([1, 3], np.int32),
           data((2, 3), dtype, 1))

for k, config in enumerate([[(0, 0, 0), (2, 1, 0)], [(-1, -2, 0), (0, 0, 3)], [(3, 0, 1), (-4, -4, 1)],
                            [(0, 0, 5), (0, 0, 0)]]):
    op_row(f"shape.pad.config{k}", lambda x, config=config: jax.lax.pad(x, np.float32(-7.5), config), data((3, 9), "float32"))

op_row("shape.pad.of_empty", lambda x: jax.lax.pad(x, np.float32(1.0), [(0, 0, 0), (1, 2, 3)]), data((0, 4), "float32"))
op_row("shape.pad.of_empty_interior", lambda x: jax.lax.pad(x, np.float32(1.0), [(1, 1, 2), (0, 0, 0)]),
       data((0, 4), "float32"))
op_row("shape.pad.to_empty", lambda x: jax.lax.pad(x, np.float32(1.0), [(-2, -1, 0)]), data((3,), "float32"))

_X46 = data((4, 6), "float32")
op_row("shape.jnp_pad.constant", lambda x: jnp.pad(x, ((1, 2), (3, 0))), _X46)
op_row("shape.jnp_pad.reflect", lambda x: jnp.pad(x, ((1, 2), (3, 0)), mode="reflect"), _X46)
op_row("shape.jnp_pad.edge", lambda x: jnp.pad(x, ((1, 2), (3, 0)), mode="edge"), _X46)
op_row("shape.reverse.empty", lambda x: jnp.flip(x, 0), data((0, 3), "float32"))

# The jnp front end wraps negative indices first; lax.dynamic_slice is the raw op.
_X57 = data((5, 7), "float32")
for i, j in [(0, 0), (4, 6), (-1, 2), (-100, 100), (3, 5), (2**31 - 1, -2**31)]:
    op_row(f"shape.dynamic_slice.clamps.{i}.{j}", lambda x, i, j: jax.lax.dynamic_slice(x, (i, j), (2, 3)),
           _X57, np.int32(i), np.int32(j), runs=[[_X57, np.int32(-i), np.int32(j + 1)]])

for idx_dtype in ["int8", "uint8", "int16", "uint32", "int64"]:
    op_row(f"shape.dynamic_slice.index.{idx_dtype}", lambda x, i: jax.lax.dynamic_slice_in_dim(x, i, 3, axis=1),
           data((2, 9), "float32"), np.asarray(7, idx_dtype))

_I46 = data((4, 6), "int32")
op_row("shape.dynamic_index_in_dim", lambda x, i: x[i], _I46, np.int32(-1), runs=[[_I46, np.int32(2)]])
op_row("shape.dynamic_slice.full", lambda x, i: jax.lax.dynamic_slice(x, (i, 0), (4, 6)), _I46, np.int32(3))

for i, j in [(0, 0), (4, 6), (-3, 2), (100, -100)]:
    op_row(f"shape.dynamic_update_slice.clamps.{i}.{j}", lambda x, u, i, j: jax.lax.dynamic_update_slice(x, u, (i, j)),
           _X57, data((2, 3), "float32", 1), np.int32(i), np.int32(j))

_X34 = data((3, 4), "float32")
op_row("shape.dynamic_update_slice.whole", lambda x, u, i: jax.lax.dynamic_update_slice(x, u, (i, i)), _X34,
       data((3, 4), "float32", 2), np.int32(1))
op_row("shape.dynamic_update_slice.empty", lambda x, u, i: jax.lax.dynamic_update_slice(x, u, (i, i)), _X34,
       data((0, 2), "float32", 2), np.int32(1))

_X44 = data((4, 4), "float32")
op_row("shape.at_set.scalar_index", lambda x, i, v: (x.at[i].set(v), x.at[:, i].add(v)), _X44, np.int32(2), np.float32(9.0),
       runs=[[_X44, np.int32(-1), np.float32(1.0)]])

for dtype in ["float32", "bfloat16", "int8", "uint32", "float16"]:
    op_row(f"shape.iota.{dtype}", lambda dtype=dtype: (jax.lax.broadcasted_iota(dtype, (3, 5), 1), jnp.arange(6, dtype=dtype)))

op_row("shape.empty_tensors_move", lambda x: (x.reshape(0, 2, 3), jnp.concatenate([x, x], 1), x.T,
                                              jnp.broadcast_to(x[None], (2, 0, 6))), data((0, 6), "float32"))
op_row("shape.constants_every_dtype", lambda: (jnp.array([1.5, -2.0], jnp.bfloat16), jnp.array([True, False]),
                                               jnp.array([3, 250], jnp.uint8), jnp.full((2, 3), -1, jnp.int16)))
