"""reduce lowering: every body, dtype, NaN propagation, init values, empty and zero-size axes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from lowering_check import assert_onnx_matches_jax

RNG = np.random.default_rng(1)


def _f(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _i(shape, dtype, lo=-50, hi=50):
    info = np.iinfo(dtype)
    return RNG.integers(max(lo, info.min), min(hi, info.max), size=shape, endpoint=True).astype(dtype)


@pytest.mark.parametrize("fn", [jnp.sum, jnp.prod, jnp.max, jnp.min], ids=["sum", "prod", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1, (0, 2), None])
def test_float_reductions(fn, axis):
    assert_onnx_matches_jax(lambda x: fn(x, axis=axis), _f((3, 4, 5)) * 0.8)


@pytest.mark.parametrize("fn", [jnp.max, jnp.min], ids=["max", "min"])
def test_nan_propagates(fn):
    x = _f((4, 6))
    x[1, 2] = np.nan
    x[3, 0] = np.nan
    x[2, :] = np.inf if fn is jnp.max else -np.inf
    assert_onnx_matches_jax(lambda x: fn(x, axis=1), x)
    assert_onnx_matches_jax(lambda x: fn(x, axis=0), x)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32])
@pytest.mark.parametrize("fn", [jnp.sum, jnp.prod, jnp.max, jnp.min], ids=["sum", "prod", "max", "min"])
def test_integer_dtypes(dtype, fn):
    # Values large enough that narrow sums and products wrap like XLA's.
    x = _i((3, 7), dtype, -120, 250)
    assert_onnx_matches_jax(lambda x: fn(x, axis=1, dtype=dtype) if fn in (jnp.sum, jnp.prod) else fn(x, axis=1), x)


@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
@pytest.mark.parametrize("fn", [jnp.sum, jnp.max, jnp.min], ids=["sum", "max", "min"])
def test_64_bit_integers(dtype, fn):
    with jax.enable_x64(True):
        x = RNG.integers(0, 2**62, size=(3, 5)).astype(dtype)
        if dtype == np.uint64:
            x[0, 1] = np.uint64(2**64 - 5)  # above INT64_MAX: unsigned order must survive
        assert_onnx_matches_jax(lambda x: fn(x, axis=1), x)


def test_float64():
    with jax.enable_x64(True):
        x = _f((4, 5), np.float64)
        x[0, 0] = np.nan
        assert_onnx_matches_jax(lambda x: (x.sum(0), x.max(1), x.min(1), x.prod(0)), x)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_half_floats(dtype):
    x = _f((4, 64), dtype)
    x[1, 3] = np.nan
    fn = lambda x: (x.sum(1).astype(jnp.float32), x.max(1).astype(jnp.float32),  # noqa: E731
                    x.min(0).astype(jnp.float32))
    tol = dict(rtol=2e-2, atol=5e-2)
    assert_onnx_matches_jax(fn, x, **tol)


def test_bool_any_all():
    x = RNG.random((4, 5)) < 0.3
    x[0] = True
    x[1] = False
    assert_onnx_matches_jax(lambda x: (jnp.any(x, axis=1), jnp.all(x, axis=1), jnp.any(x), jnp.all(x, axis=0)), x)


def test_bool_xor_reduce():
    x = RNG.random((4, 6)) < 0.5
    assert_onnx_matches_jax(lambda x: lax.reduce(x, False, lax.bitwise_xor, (1,)), x)


@pytest.mark.parametrize("op,init", [(lax.bitwise_and, -1), (lax.bitwise_or, 0), (lax.bitwise_xor, 0),
                                     (lax.bitwise_and, 0x0F0F), (lax.bitwise_xor, 7)])
def test_integer_bitwise_bodies(op, init):
    x = _i((3, 7, 5), np.int32, -1000, 1000)
    assert_onnx_matches_jax(lambda x: lax.reduce(x, np.int32(init), op, (1,)), x)
    assert_onnx_matches_jax(lambda x: lax.reduce(x, np.int32(init), op, (0, 2)), x)


def test_uint8_bitwise_or():
    x = _i((5, 6), np.uint8, 0, 255)
    assert_onnx_matches_jax(lambda x: lax.reduce(x, np.uint8(0), lax.bitwise_or, (0,)), x)


@pytest.mark.parametrize("op,init", [(lax.add, 2.5), (lax.mul, -2.0), (lax.max, 0.5), (lax.min, -0.25)])
def test_init_value_not_identity(op, init):
    x = _f((3, 4))
    assert_onnx_matches_jax(lambda x: lax.reduce(x, np.float32(init), op, (1,)), x)


def test_init_value_is_an_argument():
    assert_onnx_matches_jax(lambda x, i: lax.reduce(x, i, lax.add, (0,)), _f((3, 4)), np.float32(1.5))


def test_empty_dimensions_is_the_operand_like_xla():
    x = _f((3, 4))
    assert_onnx_matches_jax(lambda x: lax.reduce(x, np.float32(1.0), lax.add, ()), x)
    assert_onnx_matches_jax(lambda x: lax.reduce(x, np.float32(0.0), lax.add, ()), x)


@pytest.mark.parametrize("op,init", [(lax.add, 3.0), (lax.max, -np.inf), (lax.min, 2.0), (lax.mul, 1.0)])
def test_zero_size_axis_gives_init(op, init):
    x = np.zeros((3, 0, 2), np.float32)
    assert_onnx_matches_jax(lambda x: lax.reduce(x, np.float32(init), op, (1,)), x)


def test_int32_sum_and_product_wrap():
    x = RNG.integers(2**29, 2**31 - 1, size=(4, 9)).astype(np.int32)
    assert_onnx_matches_jax(lambda x: (jnp.sum(x, axis=1), jnp.prod(x, axis=0)), x)


def test_zero_size_int_max():
    x = np.zeros((0, 4), np.int32)
    assert_onnx_matches_jax(lambda x: jnp.max(x, axis=0, initial=-7), x)


def test_mean_and_var_dynamic_batch():
    b, = jax.export.symbolic_shape("b")
    spec = [jax.ShapeDtypeStruct((b, 6), np.float32)]
    assert_onnx_matches_jax(lambda x: (x.sum(0), x.max(1), jnp.any(x > 0, axis=0)), _f((3, 6)), specs=spec,
                            inputs_for_run=[[_f((5, 6))]])


def test_integer_bitwise_over_dynamic_dim_reports_clearly():
    from jaxconv.errors import UnsupportedError

    b, = jax.export.symbolic_shape("b")
    spec = [jax.ShapeDtypeStruct((b, 6), np.int32)]
    with pytest.raises(UnsupportedError, match="int32 xor reduction over a dynamic dimension"):
        assert_onnx_matches_jax(lambda x: lax.reduce(x, np.int32(0), lax.bitwise_xor, (0,)), _i((3, 6), np.int32),
                                specs=spec)


# ---- variadic and general bodies ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.bool_])
def test_variadic_reduce_with_independent_bodies(dtype):
    # Result i combines only accumulator i with operand i (max over one, min over the other).
    x = _f((4, 6)).astype(dtype) if dtype is not np.bool_ else RNG.random((4, 6)) > 0.5
    y = RNG.integers(-9, 9, size=(4, 6)).astype(np.int32)
    init = np.array(3 if dtype is not np.bool_ else False, dtype)
    f = lambda x, y: lax.reduce((x, y), (init, np.int32(0)), lambda a, b: (lax.max(a[0], b[0]), lax.min(a[1], b[1])),
                                (0,))
    assert_onnx_matches_jax(f, x, y)


def test_variadic_reduce_over_dynamic_batch():
    b, = jax.export.symbolic_shape("b")
    spec = jax.ShapeDtypeStruct((b, 4, 6), np.int32)
    x, y = (RNG.integers(-9, 9, size=(2, 4, 6)).astype(np.int32) for _ in range(2))
    f = lambda x, y: lax.reduce((x, y), (np.int32(3), np.int32(0)),
                                lambda a, b: (lax.max(a[0], b[0]), lax.min(a[1], b[1])), (1, 2))
    assert_onnx_matches_jax(f, x, y, specs=[spec, spec],
                            inputs_for_run=[[RNG.integers(-9, 9, size=(3, 4, 6)).astype(np.int32)] * 2])


def _min_with_payload(a, b):
    take = a[0] <= b[0]
    return lax.select(take, a[0], b[0]), lax.select(take, a[1], b[1])


@pytest.mark.parametrize("axes", [(0,), (1,), (0, 1), ()])
def test_general_variadic_body_halving_tree(axes):
    keys, payload = _f((5, 7)), _f((5, 7))
    f = lambda k, p: lax.reduce((k, p), (np.float32(np.inf), np.float32(0)), _min_with_payload, axes)
    assert_onnx_matches_jax(f, keys, payload)


def test_general_single_body_logaddexp():
    f = lambda x: lax.reduce(x, np.float32(-np.inf), jnp.logaddexp, (1,))
    assert_onnx_matches_jax(f, _f((3, 9)))


def test_general_body_zero_size_gives_init():
    f = lambda k, p: lax.reduce((k, p), (np.float32(np.inf), np.float32(5)), _min_with_payload, (0,))
    assert_onnx_matches_jax(f, np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32))


def test_general_body_over_dynamic_dim_reports_clearly():
    from jaxconv.errors import UnsupportedError

    b, = jax.export.symbolic_shape("b")
    spec = jax.ShapeDtypeStruct((b, 6), np.float32)
    f = lambda k, p: lax.reduce((k, p), (np.float32(np.inf), np.float32(0)), _min_with_payload, (0,))
    with pytest.raises(UnsupportedError, match="variadic reduce with 2 results with a general body over a dynamic"):
        assert_onnx_matches_jax(f, _f((3, 6)), _f((3, 6)), specs=[spec, spec])


@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
def test_64_bit_sum_over_dynamic_dims_wraps(dtype):
    b, = jax.export.symbolic_shape("b")
    info = np.iinfo(dtype)
    x = np.array([[info.max, 7, info.max // 2 + 3], [info.max, info.max, 1]], dtype)
    assert_onnx_matches_jax(lambda x: (jnp.sum(x, axis=0), jnp.sum(x)), x,
                            specs=[jax.ShapeDtypeStruct((b, 3), dtype)],
                            inputs_for_run=[[np.zeros((0, 3), dtype)], [np.tile(x, (3, 1))]])


@pytest.mark.parametrize("shape,axis", [((100000,), 0), ((3, 20000), 1), ((20000, 3), 0), ((4, 64, 64), (1, 2)),
                                        ((64, 64, 4), (0, 1)), ((3, 1000, 5), 1)], ids=str)
def test_long_float32_sums_match_xla_accuracy(shape, axis):
    """ONNX Runtime's ReduceSum drifts on long sums (1e5 x 0.1 = 9998.74); XLA's gives 10000.0."""
    x = np.full(shape, 0.1, np.float32)
    expected = np.asarray(jax.jit(lambda x: jnp.sum(x, axis=axis))(x))
    np.testing.assert_allclose(expected, x.astype(np.float64).sum(axis), rtol=1e-6)
    assert_onnx_matches_jax(lambda x: (jnp.sum(x, axis=axis), jnp.mean(x, axis=axis, keepdims=True)), x,
                            rtol=1e-6, atol=0.0)
