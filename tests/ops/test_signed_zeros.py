"""Selections keep the sign of zero at every opset (ONNX Runtime's float Where returns +0 where it
selects a -0 from its second input, and its Max/Min return either zero of a tie)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from elementwise_support import BF16, F16, F32, F64, check, grid

OPSETS = [18, 21, 25, 26]
EDGES = [-0.0, 0.0, -0.4, 0.4, 3.0, -3.0, np.inf, -np.inf, np.nan, -1e-3]
SIGNED_ZEROS = np.array([0.0, -0.0, 1.0, -2.0, np.inf, -np.inf, np.nan])


def _edges(dtype):
    return np.array(EDGES, np.float64).astype(dtype)


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
def test_where_with_a_constant_keeps_negative_zero(opset, dtype):
    check(lambda x: (1 / jnp.where(x < 1, x, 2.0), 1 / jnp.where(x > 1, 2.0, x)), _edges(dtype), opset=opset)


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
def test_trunc_of_small_negatives_is_negative_zero(opset, dtype):
    check(jnp.trunc, _edges(dtype), opset=opset)


@pytest.mark.parametrize("opset", OPSETS)
def test_select_of_two_arrays_keeps_both_zeros(opset):
    a, b = (v.astype(np.float32) for v in grid(SIGNED_ZEROS))
    cond = np.arange(a.size) % 3 == 0
    check(lambda c, a, b: (jnp.where(c, a, b), jnp.where(c, b, a)), cond, a, b, opset=opset)


@pytest.mark.parametrize("opset", OPSETS)
def test_select_on_a_negated_condition(opset):
    """ONNX Runtime fuses Not into Where by swapping Where's value inputs."""
    a, b = (v.astype(np.float32) for v in grid(SIGNED_ZEROS))

    def f(a, b):
        return (jnp.where(~(a > b), a, b), jnp.where(a != b, a, -0.0), jnp.where(~(a < b), -0.0, b),
                jnp.where(jnp.logical_not(a == 1), b, a))

    check(f, a, b, opset=opset)


@pytest.mark.parametrize("opset", OPSETS)
def test_scalar_predicate(opset):
    x = np.array([-0.0, 0.0, 1.0], np.float32)
    check(lambda p, x, y: lax.select(p, x, y), np.array(True), x, -x, opset=opset)
    check(lambda p, x, y: lax.select(p, x, y), np.array(False), x, -x, opset=opset)


@pytest.mark.parametrize("opset", OPSETS)
def test_take_along_axis_fill_and_at_get(opset):
    x = np.array([-0.0, 0.0, -0.0, 2.0, -0.0], np.float32)
    i = np.array([0, 1, 10, -20, 2], np.int32)

    def f(x, i):
        return (jnp.take_along_axis(x, i, axis=0, mode="fill"), x.at[i].get(mode="fill", fill_value=-0.0),
                x.at[i].get(mode="fill", fill_value=1.0))

    check(f, x, i, opset=opset)


@pytest.mark.parametrize("opset", OPSETS)
def test_at_updates_keep_negative_zero(opset):
    x = np.array([-0.0, 0.0, -0.0, 2.0, -0.0], np.float32)

    def f(x):
        idx = jnp.array([1, 3, 7])
        return x.at[idx].set(-0.0, mode="drop"), x.at[idx].mul(-1.0, mode="drop"), x.at[idx].add(-0.0, mode="drop")

    check(f, x, opset=opset)


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
def test_maximum_minimum_zero_ties(opset, dtype):
    """XLA: max(+0, -0) = +0 and min(+0, -0) = -0 in either order (also in vectorised runs)."""
    a, b = grid(np.array([0.0, -0.0, 0.0, -0.0, 1.0, -1.0, np.nan], np.float64).astype(dtype))
    a, b = np.tile(a, 3), np.tile(b, 3)
    check(lambda a, b: (jnp.maximum(a, b), jnp.minimum(a, b), lax.clamp(b, a, b)), a, b, opset=opset)


@pytest.mark.parametrize("opset", OPSETS)
def test_relu_and_clip_at_zero(opset):
    x = np.array([-0.0, 0.0, -1.0, 1.0, np.nan], np.float32)
    check(lambda x: (jax.nn.relu(x), jnp.clip(x, 0.0, 1.0), jnp.clip(x, -1.0, -0.0), jnp.minimum(x, 0.0)), x,
          opset=opset)


def test_float64_select_keeps_negative_zero(x64):
    a, b = (v.astype(F64) for v in grid(SIGNED_ZEROS))
    cond = np.arange(a.size) % 2 == 0
    check(lambda c, a, b: (jnp.where(c, a, b), jnp.maximum(a, b), jnp.minimum(a, b)), cond, a, b)


@pytest.mark.parametrize("opset", [18, 21])
def test_single_term_dot_keeps_negative_zero(opset):
    """XLA multiplies when the contraction has one term; ONNX Runtime's MatMul adds the product to +0."""
    a = np.array([-0.0, 0.0, -1.0, 2.0], np.float32)
    b = np.array([1.8e19, -3.0, 0.0, -0.0], np.float32)
    check(lambda a, b: (a[:1] @ b[:1], jnp.outer(a, b), a[:, None] @ b[None, :2]), a, b, opset=opset)


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
def test_sums_of_negative_zeros_start_from_positive_zero(dtype):
    """XLA adds the +0 init: a sum or running sum of -0s is +0 (ONNX Runtime's ReduceSum/CumSum give -0)."""
    x = np.array([[-0.0, -0.0, 1.0], [-0.0, -0.0, -0.0]], np.float64).astype(dtype)
    check(lambda x: (jnp.sum(x, axis=1), jnp.cumsum(x, axis=1), jnp.cumsum(x[:, ::-1], axis=1), jnp.sum(x, axis=0)), x)


@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
def test_cumulative_min_max_zero_ties(dtype):
    x = np.array([[0.0, -0.0, 1.0], [-0.0, 0.0, -1.0], [-0.0, -0.0, 0.0]], np.float64).astype(dtype)
    check(lambda x: (lax.cummin(x, axis=1), lax.cummax(x, axis=1), lax.cummax(x, axis=0, reverse=True)), x)


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
def test_scatter_min_max_zero_ties(dtype):
    """XLA orders -0 below +0 in a scatter's min/max too, whatever the order of the updates."""
    x = np.array([1.0, 0.0, -0.0, 0.0, -0.0, np.nan], np.float64).astype(dtype)
    u = np.array([-0.0, 1.0, 0.0, 0.0, -0.0, -0.0, 0.0, -0.0, 2.0], np.float64).astype(dtype)
    i = np.array([0, 0, 0, 1, 2, 3, 4, 5, 1], np.int32)
    check(lambda x, u, i: (x.at[i].min(u), x.at[i].max(u), x.at[i].min(-u), x.at[i].max(-u)), x, u, i)
