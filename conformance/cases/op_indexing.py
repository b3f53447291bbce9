"""Op rows: gather, scatter and argmax/argmin against jax.jit, out-of-range indices included."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from conformance.case import op_row
from conformance.cases.op_shape import DTYPES, data

IDX = np.array([0, 4, -1, 7, -9, 2], np.int32)  # in range, negative (wrapped by jnp), too large, too small

# ---- gather --------------------------------------------------------------------------------------
_X56 = data((5, 6), "float32")
op_row("indexing.take.modes_out_of_range",
       lambda x, i: (jnp.take(x, i, axis=0, mode="clip"), jnp.take(x, i, axis=0, mode="wrap"),
                     jnp.take(x, i, axis=1, mode="fill", fill_value=-1.0), x.at[i].get(mode="clip")),
       _X56, IDX, runs=[[_X56, np.array([100, -100, 2**30, -2**31, 2**31 - 1, 5], np.int32)]])

# lax.gather with slice size 3: starts clamp to [0, dim - 3] (no jnp index wrapping in between).
_DN_CLAMP = jax.lax.GatherDimensionNumbers(offset_dims=(1, 2), collapsed_slice_dims=(), start_index_map=(0,))
op_row("indexing.gather.clamps_whole_window",
       lambda x, i: jax.lax.gather(x, i[:, None], _DN_CLAMP, slice_sizes=(3, 4), mode=jax.lax.GatherScatterMode.CLIP),
       data((6, 4), "float32"), np.array([0, 3, 4, 5, -2, 99], np.int32))

for dtype in ["float32", "bfloat16", "int8", "uint64", "bool"]:
    op_row(f"indexing.gather.two_index_arrays.{dtype}",
           lambda x, i, j: (x[i, j], x[i[:, None], j[None, :]], x[:, i, j], x[i, :, j]),
           data((3, 4, 5), dtype), np.array([0, 2, -1, 5], np.int32), np.array([3, -4, 1, 9], np.int32))

op_row("indexing.take_along_axis.3d_middle", lambda x, i: jnp.take_along_axis(x, i, axis=1), data((2, 5, 3), "float32"),
       np.random.default_rng(1).integers(-6, 6, size=(2, 4, 3)).astype(np.int32))

# vmap of a per-example gather produces operand_batching_dims.
_BI = np.array([[0, 2], [3, -1], [9, 1]], np.int32)
op_row("indexing.gather.vmap", jax.vmap(lambda x, i: x[i, :2], in_axes=(0, 0)), data((3, 4, 5), "float32"), _BI)
op_row("indexing.gather.vmap_axis1", jax.vmap(lambda x, i: x[:, i], in_axes=(1, 0), out_axes=1), data((4, 3, 5), "float32"),
       _BI)
op_row("indexing.one_hot_embedding",
       lambda table, ids: (table[ids] * 2.0, jax.nn.one_hot(ids, 7), jnp.take(table, ids.reshape(-1), axis=0)),
       data((7, 4), "float32"), np.array([[1, 6, 0], [3, 3, 2]], np.int32))
_X53 = data((5, 3), "float32")
op_row("indexing.gather.scalar_index", lambda x, i: jnp.take(x, i, axis=0), _X53, np.int32(7))
op_row("indexing.gather.empty_indices", lambda x, i: x[i], _X53, np.zeros((0,), np.int32))
op_row("indexing.gather.empty_operand", lambda x, i: x[i], data((0, 3), "float32")[:0], np.zeros((0,), np.int32))

# ---- scatter -------------------------------------------------------------------------------------
SCATTER_IDX = np.array([1, 4, -1, 7, -9, 1, 1], np.int32)  # duplicates, negative, out of range

for dtype in DTYPES:
    methods = ["set", "min", "max"] if dtype == "bool" else ["set", "min", "max", "add", "mul"]
    # XLA rounds half-precision sums after every duplicate; ONNX Runtime accumulates them in f32.
    tol = (2e-2, 2e-2) if dtype in ("float16", "bfloat16") else None
    op_row(f"indexing.scatter.at_methods.{dtype}", lambda x, i, u, methods=methods: [getattr(x.at[i], m)(u) for m in methods],
           data((5, 3), dtype), SCATTER_IDX, data((7, 3), dtype, 2), tol=tol)

op_row("indexing.scatter.at_methods_2d_points",
       lambda x, i, j, u: [getattr(x.at[i, j], m)(u) for m in ("set", "add", "mul", "min", "max")],
       data((4, 3), "float32"), np.array([0, 0, 3, -1, 5, 2, 2], np.int32), np.array([1, 1, 2, -3, 0, 9, 1], np.int32),
       data((7,), "float32", 3))
op_row("indexing.scatter.set_duplicates_last_wins", lambda x, i, u: x.at[i].set(u), np.zeros(4, np.float32),
       np.array([1, 1, 1, 2, 2, 0], np.int32), np.arange(1, 7, dtype=np.float32))
op_row("indexing.scatter.max_min_nan", lambda x, i, u: (x.at[i].max(u), x.at[i].min(u)),
       np.array([np.nan, 2, 3, 4, 5], np.float32), np.array([0, 1, 1, 2, 2], np.int32),
       np.array([9, np.nan, 5, 1, np.nan], np.float32))
op_row("indexing.scatter.column_and_window", lambda x, i, u, v: (x.at[:, i].set(u), x.at[1:3, i].add(v)),
       data((4, 6), "float32"), np.array([0, 5, -2], np.int32), data((4, 3), "float32", 1), data((2, 3), "float32", 2))

# Windows of size 2 that would cross the end (start 4 of 5) are dropped, not clamped.
_DN_WIN = jax.lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(), scatter_dims_to_operand_dims=(0,))
op_row("indexing.scatter.drops_partial_windows",
       lambda x, i, u: (jax.lax.scatter(x, i[:, None], u, _DN_WIN, mode=jax.lax.GatherScatterMode.FILL_OR_DROP),
                        jax.lax.scatter_add(x, i[:, None], u, _DN_WIN, mode=jax.lax.GatherScatterMode.FILL_OR_DROP)),
       np.zeros(5, np.float32), np.array([0, 3, 4, -1, 2], np.int32), np.arange(10, dtype=np.float32).reshape(5, 2) + 1)
op_row("indexing.scatter.vmap", jax.vmap(lambda x, i, u: x.at[i].add(u)), data((3, 4), "float32"),
       np.array([[0, 2, 2], [3, -1, 7], [1, 1, 0]], np.int32), data((3, 3), "float32", 1))
op_row("indexing.scatter.segment_sum_histogram",
       lambda v, seg: (jax.ops.segment_sum(v, seg, num_segments=4), jnp.zeros(5, jnp.int32).at[seg].add(1)),
       data((7,), "float32"), np.array([0, 0, 3, 1, 3, 9, -1], np.int32))
op_row("indexing.scatter.empty_updates", lambda x, i, u: x.at[i].add(u), data((4, 2), "float32"), np.zeros((0,), np.int32),
       np.zeros((0, 2), np.float32))

# ``x.at[()].add(y)`` on a rank-0 operand: no index at all, one update.
for how in ["add", "multiply", "set", "max", "min"]:
    for dtype in ["bfloat16", "float16", "float32", "int32"]:
        x = np.array(1.5 if dtype != "int32" else 3, data((), dtype).dtype)
        y = np.array(-2.25 if dtype != "int32" else -2, x.dtype)
        op_row(f"indexing.scatter.into_scalar.{how}.{dtype}", lambda a, b, how=how: getattr(a.at[()], how)(b), x, y)
        if dtype != "int32":
            op_row(f"indexing.scatter.into_scalar.{how}.{dtype}.nan", lambda a, b, how=how: getattr(a.at[()], how)(b), x,
                   np.array(np.nan, x.dtype))

# ---- argmax / argmin -----------------------------------------------------------------------------
for dtype in DTYPES:
    x = data((4, 6), dtype)
    if dtype != "bool":
        x[1, :] = x[1, 0]  # ties: first index wins
    op_row(f"indexing.argmax_argmin.{dtype}",
           lambda x: (jnp.argmax(x, axis=1), jnp.argmin(x, axis=0), jnp.argmax(x), jnp.max(x, axis=1)), x)

_NAN_X = np.array([[1, np.nan, np.nan, 3], [np.nan, 1, 2, np.nan], [-np.inf, -np.inf, -np.inf, -np.inf],
                   [np.inf, 0, np.inf, -0.0], [0.0, -0.0, 0.0, -0.0]], np.float32)


def _arg_both_axes(x):
    return jnp.argmax(x, axis=1), jnp.argmin(x, axis=1), jnp.argmax(x, axis=0), jnp.argmin(x, axis=0)


op_row("indexing.argmax.nan_infinities.float32", _arg_both_axes, _NAN_X)
op_row("indexing.argmax.nan_infinities.float16", _arg_both_axes, _NAN_X.astype(np.float16))
_I32 = np.iinfo(np.int32)
op_row("indexing.argmax.int32_extremes_keepdims", lambda x: (jnp.argmax(x, 1, keepdims=True), jnp.argmin(x, 1)),
       np.array([[_I32.min, _I32.min, 0], [_I32.max, 5, _I32.max]], np.int32))
op_row("indexing.argmax.uint64_extremes", lambda x: (jnp.argmax(x, 1), jnp.argmin(x, 1)),
       np.array([[0, 2**64 - 1, 2**63], [2**63, 2**63 - 1, 1]], np.uint64))
_X345 = data((3, 4, 5), "float32")
op_row("indexing.argmax.3d", lambda x: (jnp.argmax(x, axis=1), jnp.argmin(x, axis=-1)), _X345)
op_row("indexing.argmax.int64_index", lambda x: jnp.argmax(x, axis=2), _X345, tags={"x64"})
op_row("indexing.argmax.empty_batch", lambda x: jnp.argmax(x, axis=1), np.zeros((0, 3), np.float32))
op_row("indexing.argmax.float16_after_log_chain", lambda a: jnp.argmax(-jnp.log(-jnp.log(a)), -1),
       np.random.default_rng(0).uniform(0.05, 0.95, (5, 4)).astype(np.float16))
