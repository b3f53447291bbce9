"""convolution lowering: layouts, strides, padding, dilations, groups, transposed convs, dtypes, dynamic dims."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from lowering_check import assert_onnx_matches_jax, onnx_op_types

RNG = np.random.default_rng(3)
NHWC = ("NHWC", "HWIO", "NHWC")


def _f(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def conv(x, k, strides=(1, 1), padding="SAME", dn=NHWC, **kw):
    return lax.conv_general_dilated(x, k, strides, padding, dimension_numbers=dn, **kw)


@pytest.mark.parametrize("strides", [(1, 1), (2, 2), (2, 1)])
@pytest.mark.parametrize("padding", ["SAME", "VALID"])
def test_flax_style_nhwc(strides, padding):
    model = assert_onnx_matches_jax(lambda x, k: conv(x, k, strides, padding), _f((2, 9, 8, 3)), _f((3, 3, 3, 4)))
    assert "Conv" in onnx_op_types(model)


@pytest.mark.parametrize("dn", [("NCHW", "OIHW", "NCHW"), ("NHWC", "OIHW", "NCHW"), ("NCHW", "HWIO", "NHWC"),
                                ("HWNC", "IOHW", "CNHW")])
def test_other_layouts(dn):
    lhs_shape = {"NCHW": (2, 3, 7, 6), "NHWC": (2, 7, 6, 3), "HWNC": (7, 6, 2, 3)}[dn[0]]
    rhs_shape = {"OIHW": (4, 3, 3, 2), "HWIO": (3, 2, 3, 4), "IOHW": (3, 4, 3, 2)}[dn[1]]
    assert_onnx_matches_jax(lambda x, k: conv(x, k, (1, 2), "SAME", dn), _f(lhs_shape), _f(rhs_shape))


def test_explicit_and_negative_padding():
    fn = lambda x, k: conv(x, k, (1, 1), ((2, -1), (0, 3)))  # noqa: E731
    assert_onnx_matches_jax(fn, _f((1, 8, 7, 2)), _f((3, 2, 2, 3)))


def test_rhs_dilation():
    fn = lambda x, k: conv(x, k, (1, 1), "SAME", rhs_dilation=(2, 3))  # noqa: E731
    assert_onnx_matches_jax(fn, _f((2, 10, 11, 3)), _f((3, 3, 3, 5)))


def test_lhs_dilation():
    fn = lambda x, k: conv(x, k, (1, 1), ((1, 2), (2, 0)), lhs_dilation=(2, 3))  # noqa: E731
    assert_onnx_matches_jax(fn, _f((2, 5, 4, 3)), _f((3, 2, 3, 2)))


@pytest.mark.parametrize("strides,padding", [((2, 2), "SAME"), ((2, 2), "VALID"), ((1, 1), "SAME"),
                                             ((3, 2), ((1, 0), (2, 1)))])
def test_conv_transpose(strides, padding):
    fn = lambda x, k: lax.conv_transpose(x, k, strides, padding, dimension_numbers=NHWC)  # noqa: E731
    assert_onnx_matches_jax(fn, _f((2, 5, 6, 3)), _f((3, 3, 3, 4)))


def test_depthwise():
    c = 6
    fn = lambda x, k: conv(x, k, (1, 1), "SAME", feature_group_count=c)  # noqa: E731
    assert_onnx_matches_jax(fn, _f((2, 7, 7, c)), _f((3, 3, 1, c)))


def test_grouped_with_multiplier():
    fn = lambda x, k: conv(x, k, (2, 2), "SAME", feature_group_count=2)  # noqa: E731
    assert_onnx_matches_jax(fn, _f((2, 8, 8, 4)), _f((3, 3, 2, 6)))


def test_dilated_depthwise_nchw():
    fn = lambda x, k: conv(x, k, (1, 1), "SAME", ("NCHW", "OIHW", "NCHW"), rhs_dilation=(2, 2),  # noqa: E731
                           feature_group_count=3)
    assert_onnx_matches_jax(fn, _f((1, 3, 9, 9)), _f((3, 1, 3, 3)))


def test_batch_group_count():
    fn = lambda x, k: conv(x, k, (1, 1), "VALID", batch_group_count=2)  # noqa: E731
    assert_onnx_matches_jax(fn, _f((4, 6, 5, 3)), _f((2, 2, 3, 6)))


def test_gradients_of_strided_grouped_conv():
    def loss(x, k):
        return jnp.sum(conv(x, k, (2, 2), "SAME", feature_group_count=2) ** 2)

    assert_onnx_matches_jax(jax.grad(loss, argnums=(0, 1)), _f((2, 7, 8, 4)), _f((3, 3, 2, 4)))


def test_1d_conv():
    fn = lambda x, k: lax.conv_general_dilated(x, k, (2,), "SAME", dimension_numbers=("NWC", "WIO", "NWC"))  # noqa
    assert_onnx_matches_jax(fn, _f((2, 11, 3)), _f((5, 3, 4)))


def test_3d_conv():
    fn = lambda x, k: lax.conv_general_dilated(x, k, (1, 2, 1), "SAME",  # noqa: E731
                                               dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))
    assert_onnx_matches_jax(fn, _f((1, 5, 6, 4, 2)), _f((3, 3, 2, 2, 3)))


def test_float64_without_conv_kernel():
    with jax.enable_x64(True):
        fn = lambda x, k: (conv(x, k, (2, 1), "SAME", rhs_dilation=(1, 2)),  # noqa: E731
                           conv(x, k[:, :, :1, :], (1, 1), "VALID", feature_group_count=3),
                           lax.conv_transpose(x, k, (2, 2), "SAME", dimension_numbers=NHWC))
        model = assert_onnx_matches_jax(fn, _f((2, 6, 7, 3), np.float64), _f((3, 3, 3, 3), np.float64))
    assert "Conv" not in onnx_op_types(model)


def test_float64_batch_groups():
    with jax.enable_x64(True):
        fn = lambda x, k: conv(x, k, (1, 1), "VALID", batch_group_count=2)  # noqa: E731
        assert_onnx_matches_jax(fn, _f((4, 6, 5, 3), np.float64), _f((2, 2, 3, 6), np.float64))


def test_float16():
    fn = lambda x, k: conv(x, k, (1, 1), "SAME")  # noqa: E731
    assert_onnx_matches_jax(fn, _f((2, 6, 6, 8), np.float16), _f((3, 3, 8, 4), np.float16), rtol=1e-2, atol=1e-2)


def test_bfloat16_preferred_float32():
    fn = lambda x, k: conv(x, k, (1, 1), "SAME", preferred_element_type=jnp.float32)  # noqa: E731
    assert_onnx_matches_jax(fn, _f((2, 6, 6, 8), ml_dtypes.bfloat16), _f((3, 3, 8, 4), ml_dtypes.bfloat16))


def test_bfloat16_result():
    fn = lambda x, k: conv(x, k, (2, 2), "SAME").astype(jnp.float32)  # noqa: E731
    assert_onnx_matches_jax(fn, _f((2, 6, 6, 8), ml_dtypes.bfloat16), _f((3, 3, 8, 4), ml_dtypes.bfloat16),
                            rtol=2e-2, atol=2e-2)


def test_int8_preferred_int32():
    x = RNG.integers(-128, 128, size=(2, 6, 6, 4)).astype(np.int8)
    k = RNG.integers(-128, 128, size=(3, 3, 4, 5)).astype(np.int8)
    fn = lambda x, k: conv(x, k, (2, 1), "SAME", preferred_element_type=jnp.int32)  # noqa: E731
    assert_onnx_matches_jax(fn, x, k)


def test_int32_conv():
    x = RNG.integers(-50, 50, size=(1, 5, 5, 2)).astype(np.int32)
    k = RNG.integers(-50, 50, size=(2, 2, 2, 3)).astype(np.int32)
    assert_onnx_matches_jax(lambda x, k: conv(x, k, (1, 1), "VALID"), x, k)


def test_dynamic_batch():
    b, = jax.export.symbolic_shape("b")
    specs = [jax.ShapeDtypeStruct((b, 8, 8, 3), np.float32), jax.ShapeDtypeStruct((3, 3, 3, 4), np.float32)]
    assert_onnx_matches_jax(lambda x, k: conv(x, k, (2, 2), "SAME"), _f((2, 8, 8, 3)), _f((3, 3, 3, 4)),
                            specs=specs, inputs_for_run=[[_f((5, 8, 8, 3)), _f((3, 3, 3, 4))]])


def test_dynamic_spatial_same_padding():
    b, h = jax.export.symbolic_shape("b, h")
    specs = [jax.ShapeDtypeStruct((b, h, h, 3), np.float32), jax.ShapeDtypeStruct((3, 3, 3, 4), np.float32)]
    assert_onnx_matches_jax(lambda x, k: conv(x, k, (2, 2), "SAME"), _f((2, 8, 8, 3)), _f((3, 3, 3, 4)),
                            specs=specs, inputs_for_run=[[_f((1, 7, 7, 3)), _f((3, 3, 3, 4))]])


def test_float64_dynamic_spatial_reports_clearly():
    from jaxconv.errors import UnsupportedError

    h, = jax.export.symbolic_shape("h")
    with jax.enable_x64(True):
        specs = [jax.ShapeDtypeStruct((1, h, h, 3), np.float64), jax.ShapeDtypeStruct((3, 3, 3, 4), np.float64)]
        with pytest.raises(UnsupportedError, match="float64 convolution with dynamic spatial dims"):
            assert_onnx_matches_jax(lambda x, k: conv(x, k, (2, 2), "SAME"), _f((1, 8, 8, 3), np.float64),
                                    _f((3, 3, 3, 4), np.float64), specs=specs)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_window_longer_than_input_gives_empty_result(dtype):
    # 9 rows, a 10-row kernel: zero output rows (ONNX Conv rejects this shape, so it is a constant).
    x = _f((2, 3, 9, 10)).astype(dtype)
    k = _f((3, 3, 10, 5)).astype(dtype)
    model = assert_onnx_matches_jax(lambda x, k: lax.conv_general_dilated(x, k, (1, 1), "VALID"), x, k)
    assert "Conv" not in onnx_op_types(model)


_NONFINITE_CONVS = {
    "padding": dict(padding=[(1, 1)]),
    "lhs_dilation": dict(padding=[(2, 0)], lhs_dilation=(2,)),
    "lhs_dilation_strided": dict(padding=[(4, 3)], lhs_dilation=(3,), window_strides=(2,)),
    "rhs_dilation": dict(padding=[(1, 2)], rhs_dilation=(2,)),
    "lhs_dilation_negative_padding": dict(padding=[(-1, 2)], lhs_dilation=(2,)),
    "lhs_dilation_groups": dict(padding=[(0, 0)], lhs_dilation=(2,), feature_group_count=2),
    "padding_wider_than_kernel": dict(padding=[(5, 5)], lhs_dilation=(2,)),
}


@pytest.mark.parametrize("nsp", [1, 2, 3])
@pytest.mark.parametrize("case", sorted(_NONFINITE_CONVS))
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64], ids=["f32", "f16", "f64"])
def test_nonfinite_kernel_meets_padding_and_holes_like_xla(dtype, case, nsp):
    """XLA on CPU skips padding and holes for float64 and for 1-D/2-D unit-stride lhs dilation
    (0 x inf never happens there), and multiplies them elsewhere (NaN); the ONNX graph does the same."""
    from elementwise_support import check

    kw = dict(_NONFINITE_CONVS[case])
    g = kw.pop("feature_group_count", 1)
    kw = {k: v * nsp for k, v in kw.items()}
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 2 * g) + (5,) * nsp).astype(dtype)
    w = rng.standard_normal((2 * g, 2) + (3,) * nsp).astype(dtype)
    w[(0, 0) + (0,) * nsp] = np.inf
    w[(1, 0) + (2,) * nsp] = -np.inf
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", dtype == np.float64)
    try:
        check(lambda x, w: lax.conv_general_dilated(x, w, kw.get("window_strides", (1,) * nsp), kw["padding"],
                                                    lhs_dilation=kw.get("lhs_dilation"), rhs_dilation=kw.get("rhs_dilation"),
                                                    feature_group_count=g),
              x, w, tol=(2e-3, 2e-3) if dtype == np.float16 else (1e-5, 1e-5))
    finally:
        jax.config.update("jax_enable_x64", before)
