"""reduce_window and select_and_scatter: pooling, cumulative scans, dilations, NaN, gradients of max-pool."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from lowering_check import assert_onnx_matches_jax, onnx_op_types

RNG = np.random.default_rng(2)


def _f(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _i(shape, dtype, lo=-20, hi=20):
    return RNG.integers(lo, hi, size=shape).astype(dtype)


def max_pool(x, window, strides, padding):
    """flax.linen.max_pool on NHWC."""
    dims = (1,) + window + (1,)
    st = (1,) + strides + (1,)
    return lax.reduce_window(x, -jnp.inf, lax.max, dims, st, padding)


def avg_pool(x, window, strides, padding):
    """flax.linen.avg_pool on NHWC (count_include_pad=True)."""
    dims = (1,) + window + (1,)
    st = (1,) + strides + (1,)
    return lax.reduce_window(x, 0.0, lax.add, dims, st, padding) / np.prod(window)


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("window,strides", [((2, 2), (2, 2)), ((3, 3), (2, 2)), ((2, 3), (1, 2))])
def test_max_pool_nhwc(padding, window, strides):
    model = assert_onnx_matches_jax(lambda x: max_pool(x, window, strides, padding), _f((2, 7, 8, 3)))
    assert "MaxPool" in onnx_op_types(model)


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("window,strides", [((2, 2), (2, 2)), ((3, 3), (1, 1))])
def test_avg_pool_nhwc(padding, window, strides):
    assert_onnx_matches_jax(lambda x: avg_pool(x, window, strides, padding), _f((2, 7, 8, 3)))


def test_max_pool_propagates_nan():
    x = _f((1, 6, 6, 2))
    x[0, 1, 1, 0] = np.nan
    x[0, 4, 5, 1] = np.nan
    assert_onnx_matches_jax(lambda x: max_pool(x, (2, 2), (2, 2), "SAME"), x)
    assert_onnx_matches_jax(lambda x: max_pool(x, (3, 3), (1, 1), "SAME"), x)


def test_min_pool_and_nan():
    x = _f((2, 9, 4))
    x[1, 3, 2] = np.nan
    fn = lambda x: lax.reduce_window(x, jnp.inf, lax.min, (1, 3, 1), (1, 2, 1), "SAME")  # noqa: E731
    assert_onnx_matches_jax(fn, x)


def test_1d_and_3d_pools():
    x1 = _f((2, 11, 3))
    assert_onnx_matches_jax(lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 1), (1, 2, 1), "SAME"), x1)
    x3 = _f((1, 5, 6, 7, 2))
    fn = lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 2, 1), (1, 2, 1, 2, 1), "VALID")  # noqa: E731
    assert_onnx_matches_jax(fn, x3)
    assert_onnx_matches_jax(lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 3, 2, 1), (1, 1, 2, 2, 1),
                                                        "SAME"), x3)


def test_nchw_pool():
    x = _f((2, 3, 8, 8))
    assert_onnx_matches_jax(lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 3, 3), (1, 1, 2, 2), "SAME"), x)


def test_window_and_base_dilation():
    x = _f((1, 9, 8, 2))
    fn = lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 1, 2, 1), "SAME",  # noqa: E731
                                     window_dilation=(1, 2, 3, 1))
    assert_onnx_matches_jax(fn, x)
    fn = lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 3, 2, 1), (1, 2, 1, 1), "SAME",  # noqa: E731
                                     base_dilation=(1, 2, 1, 1), window_dilation=(1, 1, 2, 1))
    assert_onnx_matches_jax(fn, x)
    fn = lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME",  # noqa: E731
                                     base_dilation=(1, 2, 2, 1))
    assert_onnx_matches_jax(fn, x)


def test_explicit_and_negative_padding():
    x = _f((2, 10, 6))
    fn = lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 2), (1, 2, 1), ((0, 0), (2, -1), (-1, 3)))  # noqa
    assert_onnx_matches_jax(fn, x)
    fn = lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 3, 2), (1, 2, 1), ((0, 0), (2, -1), (-1, 3)))  # noqa
    assert_onnx_matches_jax(fn, x)


def test_init_value_fills_padding():
    x = _f((2, 7, 5))
    fn = lambda x: lax.reduce_window(x, 0.0, lax.max, (1, 3, 3), (1, 2, 2), "SAME")  # noqa: E731
    assert_onnx_matches_jax(fn, x)
    fn = lambda x: lax.reduce_window(x, 1.5, lax.add, (1, 3, 3), (1, 1, 1), "SAME")  # noqa: E731
    assert_onnx_matches_jax(fn, x)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.uint8, np.int32, np.uint32])
def test_integer_pools(dtype):
    x = _i((2, 7, 6), dtype, 0, 120)
    info = np.iinfo(dtype)
    fn = lambda x: (lax.reduce_window(x, dtype(info.min), lax.max, (1, 3, 2), (1, 2, 1), "SAME"),  # noqa: E731
                    lax.reduce_window(x, dtype(0), lax.add, (1, 3, 2), (1, 1, 2), "VALID"),
                    lax.reduce_window(x, dtype(info.max), lax.min, (1, 2, 2), (1, 2, 2), "SAME"))
    assert_onnx_matches_jax(fn, x)


def test_float64_pools():
    with jax.enable_x64(True):
        x = _f((2, 8, 8, 2), np.float64)
        x[0, 2, 2, 0] = np.nan
        assert_onnx_matches_jax(lambda x: (max_pool(x, (2, 2), (2, 2), "SAME"), avg_pool(x, (3, 3), (1, 1), "SAME")),
                                x)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_half_float_pools(dtype):
    x = _f((2, 6, 6, 3), dtype)
    fn = lambda x: (max_pool(x, (2, 2), (2, 2), "SAME").astype(jnp.float32),  # noqa: E731
                    avg_pool(x, (3, 3), (1, 1), "SAME").astype(jnp.float32))
    assert_onnx_matches_jax(fn, x, rtol=2e-2, atol=2e-2)


def test_bool_window():
    x = RNG.random((3, 8)) < 0.3
    fn = lambda x: (lax.reduce_window(x, False, lax.bitwise_or, (1, 3), (1, 1), "SAME"),  # noqa: E731
                    lax.reduce_window(x, True, lax.bitwise_and, (1, 2), (1, 2), "VALID"))
    assert_onnx_matches_jax(fn, x)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_cumsum(axis):
    model = assert_onnx_matches_jax(lambda x: jnp.cumsum(x, axis=axis), _f((4, 5, 6)))
    assert "CumSum" in onnx_op_types(model)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint8])
def test_integer_cumsum_wraps(dtype):
    x = _i((3, 40), dtype, 0, 100)
    assert_onnx_matches_jax(lambda x: jnp.cumsum(x, axis=1, dtype=dtype), x)


def test_reverse_cumulative():
    x = _f((4, 6))
    assert_onnx_matches_jax(lambda x: (lax.cumsum(x, axis=1, reverse=True), lax.cummax(x, axis=0, reverse=True),
                                       lax.cumprod(x, axis=1, reverse=True)), x)


@pytest.mark.parametrize("opset", [21, 26])
@pytest.mark.parametrize("axis", [0, 1])
def test_cumprod(axis, opset):
    x = _f((5, 7)) * 0.5 + 1.0
    model = assert_onnx_matches_jax(lambda x: jnp.cumprod(x, axis=axis), x, opset=opset)
    assert ("CumProd" in onnx_op_types(model)) == (opset >= 26)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_cummax_cummin(axis):
    x = _f((5, 6, 9))
    x[2, 3, 4] = np.nan
    assert_onnx_matches_jax(lambda x: (lax.cummax(x, axis=axis), lax.cummin(x, axis=axis)), x)


def test_integer_cummax():
    x = _i((3, 11), np.int16, -300, 300)
    assert_onnx_matches_jax(lambda x: (lax.cummax(x, axis=1), lax.cummin(x, axis=1)), x)


def test_cumsum_dynamic_batch():
    b, = jax.export.symbolic_shape("b")
    spec = [jax.ShapeDtypeStruct((b, 6), np.float32)]
    assert_onnx_matches_jax(lambda x: (jnp.cumsum(x, axis=1), lax.cummax(x, axis=1)), _f((2, 6)), specs=spec,
                            inputs_for_run=[[_f((5, 6))]])


def test_cummax_along_dynamic_axis_reports_clearly():
    from jaxconv.errors import UnsupportedError

    n, = jax.export.symbolic_shape("n")
    spec = [jax.ShapeDtypeStruct((3, n), np.float32)]
    with pytest.raises(UnsupportedError, match="dynamic_reduce_window: a cumulative max of float32 along"):
        assert_onnx_matches_jax(lambda x: jax.lax.cummax(x, axis=1), _f((3, 4)), specs=spec)


def test_max_pool_dynamic_batch():
    b, = jax.export.symbolic_shape("b")
    spec = [jax.ShapeDtypeStruct((b, 8, 8, 3), np.float32)]
    assert_onnx_matches_jax(lambda x: (max_pool(x, (2, 2), (2, 2), "VALID"), avg_pool(x, (3, 3), (2, 2), "SAME")),
                            _f((2, 8, 8, 3)), specs=spec, inputs_for_run=[[_f((3, 8, 8, 3))]])


@pytest.mark.parametrize("window,strides,padding", [((2, 2), (2, 2), "VALID"), ((3, 3), (2, 2), "SAME"),
                                                    ((3, 3), (1, 1), "SAME")])
def test_grad_of_max_pool(window, strides, padding):
    def loss(x):
        return jnp.sum(max_pool(x, window, strides, padding) ** 2)

    x = _f((2, 6, 7, 3))
    assert_onnx_matches_jax(jax.grad(loss), x)


def test_grad_of_max_pool_with_ties_and_nan():
    x = np.round(_f((1, 6, 6, 2)))  # many equal values: the first max in each window is picked
    x[0, 3, 3, 1] = np.nan

    def loss(x):
        return jnp.sum(max_pool(x, (3, 3), (2, 2), "SAME") * jnp.arange(1.0, 19.0).reshape(1, 3, 3, 2))

    assert_onnx_matches_jax(jax.grad(loss), x)


def test_grad_of_1d_max_pool_nchw():
    def loss(x):
        return jnp.sum(lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 3), (1, 1, 2), "SAME") ** 2)

    assert_onnx_matches_jax(jax.grad(loss), _f((2, 3, 9)))


def test_pools_on_symbolic_spatial_dims():
    b, h, w = jax.export.symbolic_shape("b, h, w")
    spec = [jax.ShapeDtypeStruct((b, h, w, 3), np.float32)]
    x = _f((2, 8, 7, 3))
    x[0, 1, 1, 0] = np.nan
    assert_onnx_matches_jax(lambda x: (max_pool(x, (2, 2), (2, 2), "SAME"), avg_pool(x, (3, 3), (2, 2), "SAME"),
                                       max_pool(x, (3, 3), (1, 1), "VALID")),
                            x, specs=spec, inputs_for_run=[[_f((1, 5, 9, 3))]])


# ---- XLA CPU's evaluation order: f16/bf16 sums and products, general and multi-operand bodies --------

@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16])
@pytest.mark.parametrize("n,reverse", [(9, False), (9, True), (100, False), (300, True)])
def test_narrow_float_cumsum_cumprod_bit_exact(dtype, n, reverse):
    # Each step rounds to the narrow type; past 16 elements XLA tiles the scan. Both orders are matched exactly.
    x = _f((n, 3)).astype(dtype)
    p = (1 + 0.05 * _f((n, 3))).astype(dtype)
    assert_onnx_matches_jax(lambda x, p: (lax.cumsum(x, 0, reverse=reverse), lax.cumprod(p, 0, reverse=reverse)),
                            x, p, rtol=0, atol=0)


@pytest.mark.parametrize("window,strides,padding", [((3, 3), (1, 2), "SAME"), ((2, 3), (1, 1), "VALID"),
                                                    ((1, 3), (1, 1), ((0, 0), (2, 1)))])
def test_bfloat16_window_sums_round_every_step_like_xla(window, strides, padding):
    # XLA folds each bf16 window row-major from the init value, rounding after every addition
    # (fuzz reduce_window_add/bf16/value: a 3x3 SAME sum gave 1.109 where jax.jit gives 1.141)
    dtype = ml_dtypes.bfloat16
    x = np.array([-1.359375, 0.498046875, 5.96875, 0.490234375, -2.09375, -2.390625, 1.0, 1.0], dtype).reshape(4, 2)
    y = (3 * _f((5, 7))).astype(dtype)
    fn = lambda x: lax.reduce_window(x, np.array(0, dtype), lax.add, window, strides, padding)  # noqa: E731
    assert_onnx_matches_jax(fn, x, rtol=0, atol=0)
    assert_onnx_matches_jax(fn, y, rtol=0, atol=0)


def test_bfloat16_cumsum_along_inner_axis_dynamic_batch():
    b, = jax.export.symbolic_shape("b")
    x = _f((2, 40)).astype(ml_dtypes.bfloat16)
    assert_onnx_matches_jax(lambda x: jnp.cumsum(x, axis=1), x, rtol=0, atol=0,
                            specs=[jax.ShapeDtypeStruct((b, 40), ml_dtypes.bfloat16)],
                            inputs_for_run=[[_f((5, 40)).astype(ml_dtypes.bfloat16)]])


@pytest.mark.parametrize("n", [8, 40])
def test_cumlogsumexp(n):
    assert_onnx_matches_jax(lambda x: lax.cumlogsumexp(x, axis=0), _f((n, 5)))
    assert_onnx_matches_jax(lambda x: lax.cumlogsumexp(x, axis=1, reverse=True), _f((3, n)))


def _min_with_payload(a, b):
    """Pairs (key, payload): keep the pair with the smaller key (the select_and_gather_add body)."""
    take = a[0] <= b[0]
    return lax.select(take, a[0], b[0]), lax.select(take, a[1], b[1])


@pytest.mark.parametrize("window,strides,padding", [((2, 2), (2, 3), "VALID"), ((3, 2), (1, 1), "SAME")])
def test_two_operand_reduce_window(window, strides, padding):
    keys, payload = _f((5, 6)), _f((5, 6))
    assert_onnx_matches_jax(lambda k, p: lax.reduce_window((k, p), (np.float32(np.inf), np.float32(0)),
                                                           _min_with_payload, window, strides, padding), keys, payload)


def test_two_operand_cumulative_window_is_tiled_like_xla():
    keys, payload = _f((3, 37)), _f((3, 37))
    f = lambda k, p: lax.reduce_window((k, p), (np.float32(np.inf), np.float32(0)), _min_with_payload,
                                       (1, 37), (1, 1), ((0, 0), (36, 0)))
    assert_onnx_matches_jax(f, keys, payload)


def test_general_body_window_with_dilations_dynamic_batch():
    b, = jax.export.symbolic_shape("b")
    keys, payload = _f((2, 4, 6)), _f((2, 4, 6))
    f = lambda k, p: lax.reduce_window((k, p), (np.float32(np.inf), np.float32(0)), _min_with_payload,
                                       (1, 2, 2), (1, 1, 1), "VALID", window_dilation=(1, 2, 3))[1]
    spec = jax.ShapeDtypeStruct((b, 4, 6), np.float32)
    assert_onnx_matches_jax(f, keys, payload, specs=[spec, spec], inputs_for_run=[[_f((3, 4, 6)), _f((3, 4, 6))]])


def test_general_body_over_dynamic_window_reports_clearly():
    from jaxconv.errors import UnsupportedError

    b, = jax.export.symbolic_shape("b")
    spec = jax.ShapeDtypeStruct((b, 6), np.float32)
    f = lambda k, p: lax.reduce_window((k, p), (np.float32(np.inf), np.float32(0)), _min_with_payload,
                                       (2, 1), (1, 1), "VALID")
    with pytest.raises(UnsupportedError, match="reduce_window with this body over a dynamic windowed dimension"):
        assert_onnx_matches_jax(f, _f((3, 6)), _f((3, 6)), specs=[spec, spec])


# ---- select_and_scatter: padding, other scatter bodies, bool, dynamic batch --------------------------

def _select_and_scatter(operand, source, init, select, scatter, window, strides, padding):
    from jax._src.lax.windowed_reductions import _select_and_scatter as sas

    return sas(operand, select, window, strides, padding, source, init, scatter)


@pytest.mark.parametrize("padding", [((0, 0), (1, 1)), ((1, 0), (0, 2))])
def test_select_and_scatter_with_padding(padding):
    x = _f((5, 6))
    n = [(5 + padding[0][0] + padding[0][1] - 2) // 2 + 1, (6 + padding[1][0] + padding[1][1] - 3) // 2 + 1]
    src = _f(tuple(n))
    assert_onnx_matches_jax(lambda x, s: _select_and_scatter(x, s, np.float32(0), lax.ge, lax.add, (2, 3), (2, 2),
                                                             padding), x, src)


def test_select_and_scatter_max_body_and_bool():
    x = _f((4, 6))
    src = _f((2, 3))
    assert_onnx_matches_jax(lambda x, s: _select_and_scatter(x, s, np.float32(-1), lax.ge, lax.max, (2, 2), (2, 2),
                                                             ((0, 0), (0, 0))), x, src)
    xb, sb = RNG.random((2, 4, 6)) > 0.5, RNG.random((1, 3, 5)) > 0.5
    assert_onnx_matches_jax(lambda x, s: _select_and_scatter(x, s, np.bool_(False), lax.ge, lax.bitwise_or,
                                                             (2, 2, 2), (1, 1, 1), ((0, 0),) * 3), xb, sb)


def test_max_pool_gradient_dynamic_batch():
    b, = jax.export.symbolic_shape("b")
    f = jax.grad(lambda x: max_pool(x, (2, 2), (2, 2), "VALID").sum())
    assert_onnx_matches_jax(f, _f((2, 4, 6, 3)), specs=[jax.ShapeDtypeStruct((b, 4, 6, 3), np.float32)],
                            inputs_for_run=[[_f((3, 4, 6, 3))]])


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16], ids=["f32", "f16", "bf16"])
def test_pools_over_infinities_only(dtype):
    """ONNX Runtime's MaxPool starts from the lowest finite value; a window of -inf alone is -inf."""
    from elementwise_support import check

    x = np.array([-np.inf, -np.inf, 1.0, np.inf, np.inf, np.nan, -np.inf], dtype)

    def f(x):
        return (lax.reduce_window(x, -jnp.inf, lax.max, (2,), (1,), "VALID"),
                lax.reduce_window(-x, jnp.inf, lax.min, (2,), (1,), "VALID"),
                lax.reduce_window(x, -jnp.inf, lax.max, (3,), (2,), "SAME"),
                lax.reduce_window(x, -jnp.inf, lax.max, (2,), (1,), [(3, 3)]))

    check(f, x)
    grid = np.full((1, 4, 4, 1), -np.inf, dtype)
    grid[0, 3, 3, 0] = -0.0
    check(lambda g: (max_pool(g, (2, 2), (1, 1), "SAME"), -max_pool(-g, (3, 3), (2, 2), "VALID")), grid)


def test_min_pool_beside_a_scatter_min_loads():
    """The pooling guard's If branch and the scatter's lowering used to give two values the same name."""

    def f(i, u, x, y):
        return lax.reduce_window(x, jnp.inf, lax.min, (3, 1), (1, 1), "VALID"), y.at[i].min(u, mode="drop")

    bf = ml_dtypes.bfloat16
    assert_onnx_matches_jax(f, np.array([0], np.int8), np.full((1, 1, 1), 0.4453125, bf), np.ones((4, 1), bf),
                            np.full((1, 1, 1), -0.6171875, bf))
