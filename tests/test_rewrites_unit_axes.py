"""Transposes through size-1 axes (rewrites.layout) and Reshape chains (rewrites.squeezes.reshape_chains):
a vmapped conv and max pool (Equinox's CNN) keeps NCHW with no Transpose, Unsqueeze or Reshape pair
left between its layers, with jax.jit's numbers (NaN, ±inf, -0.0 inputs)."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxconv.onnx.rewrites import _regroup, layout, squeezes
from lowering_check import assert_same_floats
from lowering_check import convert_and_run as _convert

_RNG = np.random.default_rng(0)
_W = _RNG.standard_normal((3, 1, 4, 4)).astype(np.float32)
_B = _RNG.standard_normal(3).astype(np.float32)


def _one(x):
    """Equinox's Conv2d, MaxPool2d and relu on one [C, H, W] example (the pool runs channels-last)."""
    y = lax.conv_general_dilated(x[None], _W, (1, 1), "VALID")[0] + _B[:, None, None]
    y = jnp.moveaxis(y, 0, -1)[None]
    y = lax.reduce_window(y, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 1, 1, 1), "VALID")[0]
    return jax.nn.relu(jnp.moveaxis(y, -1, 0)).reshape(-1)


def _images() -> np.ndarray:
    x = _RNG.standard_normal((3, 1, 12, 12)).astype(np.float32)
    x[1, 0, 2, 3] = np.nan
    x[1, 0, 8, 8] = np.inf
    x[2, 0, 5, 5:7] = -np.inf
    x[2, 0, 0, :] = -0.0
    return x


def test_vmapped_conv_pool_keeps_nchw_without_transposes(monkeypatch):
    fn = jax.vmap(_one)
    x = _images()
    ops, (got,) = _convert(fn, x)
    assert ops["Transpose"] == 0 and ops["Unsqueeze"] == 0, ops
    assert ops["Reshape"] == 1, ops  # the flatten: 3 channels, the pool reads [N, C, H, W] (pooling.chains)
    want = jax.jit(fn)(x)
    assert np.isnan(want[1]).any() and np.isposinf(want[1]).any()  # the edge values reach the output
    assert_same_floats(got, want, 1e-5, 1e-5)
    monkeypatch.setattr(layout, "_sink_through_reshape", lambda *a: False)
    monkeypatch.setattr(layout, "_lift_through_reshape", lambda *a: False)
    monkeypatch.setattr(squeezes, "reshape_chains", lambda graph: 0)
    plain_ops, (plain,) = _convert(fn, x)
    # (one Unsqueeze: the symbolic rule drops the Reshape back to the conv's input and the Unsqueeze before it)
    assert plain_ops["Transpose"] == 4 and plain_ops["Unsqueeze"] == 1, plain_ops
    assert_same_floats(got, plain, 0, 0)  # the same kernels on the same numbers


def test_reshape_chain_is_one_reshape_and_none_where_the_shape_comes_back():
    def fn(x):
        y = jnp.expand_dims(x, 1).reshape(2, 12) * 2.0  # Unsqueeze then Reshape: one Reshape
        z = jnp.expand_dims(x, 0).reshape(x.shape)  # back to x's shape: no Reshape at all
        return y, z - 1.0

    x = np.array([[np.nan, -0.0, np.inf, -np.inf, 1.5, -2.0], [0.0, 3.0, -1e-30, 7.0, 1e30, -5.0],
                  [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [-1.0, -2.0, -3.0, -4.0, -5.0, -6.0]], np.float32)
    ops, got = _convert(fn, x)
    assert ops["Unsqueeze"] == 0 and ops["Reshape"] == 1, ops
    for g, w in zip(got, jax.jit(fn)(x)):
        assert_same_floats(g, w, 0, 0)


def test_unit_axes_perm_matches_numpy():
    """The Reshape-first form of ``Reshape(Transpose(x, perm), z_shape)`` gives the same array, for
    every permutation of a small shape with size-1 axes and Reshapes that insert or drop them."""
    x = np.arange(2 * 1 * 3 * 4).reshape(2, 1, 3, 4)
    count = 0
    for perm in itertools.permutations(range(4)):
        y = x.transpose(perm)
        core = [d for d in y.shape if d != 1]
        for z_shape in ([*core], [1, *core], [*core[:1], 1, *core[1:]], [*core, 1, 1], list(y.shape)):
            found = _regroup.unit_axes_perm(list(perm), list(y.shape), z_shape)
            assert found is not None
            x_shape, perm2 = found
            np.testing.assert_array_equal(x.reshape(x_shape).transpose(perm2), y.reshape(z_shape))
            count += 1
    assert count == 24 * 5
    assert _regroup.unit_axes_perm([0, 2, 1], [2, 4, 3], [8, 3]) is None  # regroups: not moved
