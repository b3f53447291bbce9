"""Op rows: selections keep the sign of zero at every opset (ONNX Runtime's float Where returns +0 where it
selects a -0 from its second input, and its Max/Min return either zero of a tie); compared bit for bit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from conformance.case import op_row
from conformance.values import BF16, F16, F32, F64, grid

OPSETS = (18, 21, 25, 26)
EDGES = [-0.0, 0.0, -0.4, 0.4, 3.0, -3.0, np.inf, -np.inf, np.nan, -1e-3]
SIGNED_ZEROS = np.array([0.0, -0.0, 1.0, -2.0, np.inf, -np.inf, np.nan])


def row(name, fn, *args, opsets=(None,)):
    op_row(f"signed_zeros.{name}", fn, *args, expect="exact", opsets=opsets)


def _edges(dtype):
    return np.array(EDGES, np.float64).astype(dtype)


for d in (F32, F16, BF16):
    row(f"where_constant.{d.name}", lambda x: (1 / jnp.where(x < 1, x, 2.0), 1 / jnp.where(x > 1, 2.0, x)), _edges(d),
        opsets=OPSETS)
    row(f"trunc_small_negatives.{d.name}", jnp.trunc, _edges(d), opsets=OPSETS)

_A, _B = (v.astype(np.float32) for v in grid(SIGNED_ZEROS))
row("select_two_arrays", lambda c, a, b: (jnp.where(c, a, b), jnp.where(c, b, a)), np.arange(_A.size) % 3 == 0, _A, _B,
    opsets=OPSETS)
# ONNX Runtime fuses Not into Where by swapping Where's value inputs.
row("select_negated_condition",
    lambda a, b: (jnp.where(~(a > b), a, b), jnp.where(a != b, a, -0.0), jnp.where(~(a < b), -0.0, b),
                  jnp.where(jnp.logical_not(a == 1), b, a)), _A, _B, opsets=OPSETS)
_X = np.array([-0.0, 0.0, 1.0], np.float32)
row("scalar_predicate.true", lambda p, x, y: lax.select(p, x, y), np.array(True), _X, -_X, opsets=OPSETS)
row("scalar_predicate.false", lambda p, x, y: lax.select(p, x, y), np.array(False), _X, -_X, opsets=OPSETS)
_X = np.array([-0.0, 0.0, -0.0, 2.0, -0.0], np.float32)
row("take_along_axis_fill_at_get",
    lambda x, i: (jnp.take_along_axis(x, i, axis=0, mode="fill"), x.at[i].get(mode="fill", fill_value=-0.0),
                  x.at[i].get(mode="fill", fill_value=1.0)), _X, np.array([0, 1, 10, -20, 2], np.int32), opsets=OPSETS)


def _at_updates(x):
    idx = jnp.array([1, 3, 7])
    return x.at[idx].set(-0.0, mode="drop"), x.at[idx].mul(-1.0, mode="drop"), x.at[idx].add(-0.0, mode="drop")


row("at_updates", _at_updates, _X, opsets=OPSETS)

# XLA: max(+0, -0) = +0 and min(+0, -0) = -0 in either order (also in vectorised runs).
for d in (F32, F16, BF16):
    a, b = grid(np.array([0.0, -0.0, 0.0, -0.0, 1.0, -1.0, np.nan], np.float64).astype(d))
    row(f"maximum_minimum_ties.{d.name}", lambda a, b: (jnp.maximum(a, b), jnp.minimum(a, b), lax.clamp(b, a, b)),
        np.tile(a, 3), np.tile(b, 3), opsets=OPSETS)

row("relu_clip_at_zero", lambda x: (jax.nn.relu(x), jnp.clip(x, 0.0, 1.0), jnp.clip(x, -1.0, -0.0), jnp.minimum(x, 0.0)),
    np.array([-0.0, 0.0, -1.0, 1.0, np.nan], np.float32), opsets=OPSETS)
_A64, _B64 = (v.astype(F64) for v in grid(SIGNED_ZEROS))
row("float64_select", lambda c, a, b: (jnp.where(c, a, b), jnp.maximum(a, b), jnp.minimum(a, b)),
    np.arange(_A64.size) % 2 == 0, _A64, _B64)
# XLA multiplies when the contraction has one term; ONNX Runtime's MatMul adds the product to +0.
row("single_term_dot", lambda a, b: (a[:1] @ b[:1], jnp.outer(a, b), a[:, None] @ b[None, :2]),
    np.array([-0.0, 0.0, -1.0, 2.0], np.float32), np.array([1.8e19, -3.0, 0.0, -0.0], np.float32), opsets=(18, 21))

# XLA adds the +0 init: a sum or running sum of -0s is +0 (ONNX Runtime's ReduceSum/CumSum give -0).
for d in (F32, F16, BF16):
    row(f"sums_of_negative_zeros.{d.name}",
        lambda x: (jnp.sum(x, axis=1), jnp.cumsum(x, axis=1), jnp.cumsum(x[:, ::-1], axis=1), jnp.sum(x, axis=0)),
        np.array([[-0.0, -0.0, 1.0], [-0.0, -0.0, -0.0]], np.float64).astype(d))
for d in (F32, BF16):
    row(f"cumulative_min_max_ties.{d.name}",
        lambda x: (lax.cummin(x, axis=1), lax.cummax(x, axis=1), lax.cummax(x, axis=0, reverse=True)),
        np.array([[0.0, -0.0, 1.0], [-0.0, 0.0, -1.0], [-0.0, -0.0, 0.0]], np.float64).astype(d))
# XLA orders -0 below +0 in a scatter's min/max too, whatever the order of the updates.
for d in (F32, F16, BF16):
    row(f"scatter_min_max_ties.{d.name}",
        lambda x, u, i: (x.at[i].min(u), x.at[i].max(u), x.at[i].min(-u), x.at[i].max(-u)),
        np.array([1.0, 0.0, -0.0, 0.0, -0.0, np.nan], np.float64).astype(d),
        np.array([-0.0, 1.0, 0.0, 0.0, -0.0, -0.0, 0.0, -0.0, 2.0], np.float64).astype(d),
        np.array([0, 0, 0, 1, 2, 3, 4, 5, 1], np.int32))
