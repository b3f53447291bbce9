"""A softmax whose scores move axes of size 1 between the max and the sum is the Softmax op too.

keras' attention (keras-hub's SigLIP vision encoder) takes the max over ``[b, h, q, 1, k]`` scores, then
transposes the scores and the max to ``[1, b, h, q, k]`` to subtract, exponentiate and sum: jax's
softmax with its axes moved, which the rule missed (three Softmaxes left as a dozen nodes each: the
encoder took 1.28x jax.jit's time in ONNX Runtime, 0.83x with the rule). A transpose that moves a wider
axis, or a sum over another axis than the max, is no softmax and stays.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lowering_check import convert_and_run

EDGE_ROWS = [[1.0, np.nan, 2.0, 0.0], [np.inf, 1.0, 0.0, -1.0], [-np.inf] * 4, [np.inf, np.inf, 1.0, 0.0],
             [-0.0, 0.0, -0.0, 0.0], [0.5, -1.0, 2.0, 88.0], [-1e30, 3e38, -3e38, 1.0]]


def _keras_like(s):
    """[b, h, q, 1, k] scores: the max in their layout, the rest in [1, b, h, q, k] (keras' jax softmax)."""
    mx = jnp.maximum(-jnp.inf, jnp.max(s, axis=4))
    mx = jnp.transpose(mx, (3, 0, 1, 2))[..., None]
    e = jnp.exp(jnp.transpose(s, (3, 0, 1, 2, 4)) - mx)
    return e / jnp.sum(e, axis=4, keepdims=True)


def _unit_axis_last(s):
    """[b, h, q, k, 1] scores: the max over k (axis 3), the sum over k as axis 4 of [1, b, h, q, k]."""
    mx = jnp.transpose(jnp.max(s, axis=3, keepdims=True), (4, 0, 1, 2, 3))
    e = jnp.exp(jnp.transpose(s, (4, 0, 1, 2, 3)) - mx)
    return e / jnp.sum(e, axis=4, keepdims=True)


def _scores(rows: list[list[float]] | None = None) -> np.ndarray:
    if rows is None:
        return np.random.default_rng(0).standard_normal((2, 3, 7, 1, 4)).astype(np.float32) * 4
    return np.array(rows, np.float32).reshape(1, 1, len(rows), 1, 4)


@pytest.mark.parametrize("fn", [_keras_like, _unit_axis_last])
@pytest.mark.parametrize("rows", [None, EDGE_ROWS], ids=["random", "edge"])
def test_unit_axes_moved_between_max_and_sum_is_one_softmax(fn, rows):
    s = _scores(rows)
    if fn is _unit_axis_last:
        s = np.moveaxis(s, 3, 4)
    ops, (got,) = convert_and_run(fn, s)
    want = np.asarray(jax.jit(fn)(s))
    assert ops["Softmax"] == 1 and ops["Exp"] == 0 and ops["ReduceMax"] == 0, ops
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("fn", [_keras_like, _unit_axis_last])
def test_with_a_symbolic_batch_too(fn):
    s = _scores()
    if fn is _unit_axis_last:
        s = np.moveaxis(s, 3, 4)
    spec = jax.ShapeDtypeStruct(jax.export.symbolic_shape(f"b, {', '.join(map(str, s.shape[1:]))}"), np.float32)
    ops, (got,) = convert_and_run(fn, s, specs=[spec])
    assert ops["Softmax"] == 1 and ops["Exp"] == 0 and ops["Reshape"] == 0, ops
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(s)), rtol=1e-6, atol=1e-7)
    bigger = np.concatenate([s, s[:1] * 2])
    _, (got,) = convert_and_run(fn, bigger, specs=[spec])
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(bigger)), rtol=1e-6, atol=1e-7)


def test_a_max_from_wider_axes_moved_is_no_softmax():
    """The max of each (h, q) row subtracted from the (q, h) row: a shift by another row's max, which
    underflows to 0 / 0 where a Softmax would not."""
    def fn(s):
        mx = jnp.max(s, axis=4)[..., None]
        e = jnp.exp(jnp.transpose(s, (0, 2, 1, 3, 4)) - mx)
        return e / jnp.sum(e, axis=4, keepdims=True)

    s = np.random.default_rng(1).standard_normal((2, 3, 3, 1, 4)).astype(np.float32)
    s[0, 0, 1] += 100
    s[0, 1, 0] -= 100
    ops, (got,) = convert_and_run(fn, s)
    want = np.asarray(jax.jit(fn)(s))
    assert np.isnan(want).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert ops["Softmax"] == 0, ops


def test_a_sum_over_another_axis_than_the_max_stays():
    def fn(s):
        mx = jnp.transpose(jnp.max(s, axis=4), (3, 0, 1, 2))[..., None]
        e = jnp.exp(jnp.transpose(s, (3, 0, 1, 2, 4)) - mx)
        return e / jnp.sum(e, axis=3, keepdims=True)

    s = _scores()
    ops, (got,) = convert_and_run(fn, s)
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(s)), rtol=1e-6, atol=1e-7)
    assert ops["Softmax"] == 0, ops
