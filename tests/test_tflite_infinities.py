"""TFLite on both routes keeps +-inf: the converter is told not to write +-inf constants as
+-FLT_MAX (its default), so masks, max-pooling pads and reduction inits stay infinite. Every number
is compared with jax.jit on the same inputs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxconv import api

pytestmark = pytest.mark.tf
tf = pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert")

INF, NAN = float("inf"), float("nan")


def _lite(fn, *args, route="tf-ops", specs=None):
    """The TFLite model's outputs for ``args`` (converted without the check) and jax.jit's."""
    from jaxconv.runtimes.tflite import TFLiteRunner, read_route

    specs = specs or [jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype) for a in args]
    data = api.to_tflite(fn, *specs, route=route, check=False)
    assert read_route(data) == route
    got = [np.asarray(g) for g in TFLiteRunner(data).run(list(args))]
    want = [np.asarray(w) for w in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]
    assert len(got) == len(want)
    return got, want


def _same(got, want):
    """Bit for bit where jax.jit is exact: the same NaN places, infinities and zero signs."""
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
        if w.dtype.kind == "f":
            np.testing.assert_array_equal(np.signbit(g), np.signbit(w))


# ---- infinities: the converter keeps +-inf constants (not +-FLT_MAX) --------------------------------

def _masked_softmax(x, m):
    return jax.nn.softmax(jnp.where(m, x, -jnp.inf), axis=-1)


@pytest.mark.parametrize("route", ["xla", "tf-ops"])
def test_masked_softmax_row_of_only_minus_inf_is_nan_as_in_jax(route):
    """A row masked out entirely is NaN in jax.jit; with -inf written as -FLT_MAX it was a uniform row."""
    x = np.array([[1.0, -2.0, 3.0, 0.5], [-1.0, 2.0, -3.0, 0.25]], np.float32)
    m = np.array([[True, False, True, True], [False, False, False, False]])
    (got,), (want,) = _lite(_masked_softmax, x, m, route=route)
    assert np.isnan(want[1]).all() and np.isnan(got[1]).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=0)


@pytest.mark.parametrize("route", ["xla", "tf-ops"])
def test_inf_constants_reach_the_outputs(route):
    def fn(x):
        return (jnp.where(x > 0, x, -jnp.inf), x * 0 + jnp.inf, x / jnp.float32(0.0),
                jnp.max(x[:, :0], axis=1, initial=-jnp.inf))

    x = np.array([[1.0, -2.0, NAN, 0.0], [-0.0, INF, -INF, 3e38]], np.float32)
    got, want = _lite(fn, x, route=route)
    assert np.isneginf(want[3]).all()
    _same(got, want)


def test_max_pool_over_a_window_of_only_minus_inf_gives_minus_inf():
    def fn(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "SAME")

    x = np.full((1, 5, 4, 1), -INF, np.float32)
    x[0, 0, 0, 0], x[0, 2, 3, 0], x[0, 4, 1, 0] = 1.0, NAN, -0.0
    for route in ("xla", "tf-ops"):
        got, want = _lite(fn, x, route=route)
        assert np.isneginf(want[0]).sum() == 3 and np.isnan(want[0]).sum() == 1
        _same(got, want)


def test_converter_is_told_to_keep_infinities():
    """The flag behind the tests above, set on the converter of either route."""
    from jaxconv.program import trace
    from jaxconv.tf.tflite import _converter

    program = trace(lambda x: x + 1.0, [jax.ShapeDtypeStruct((2,), np.float32)])
    for route in ("xla", "tf-ops"):
        converter, _, _ = _converter(program, False, None, route)
        assert converter.canonicalizing_inf_as_min_max_float is False
