"""convolution lowering: graph structure and refusals (the comparisons are rows in
conformance/cases/op_convolution.py)."""

from __future__ import annotations

import jax
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


def test_float64_without_conv_kernel():
    with jax.enable_x64(True):
        fn = lambda x, k: (conv(x, k, (2, 1), "SAME", rhs_dilation=(1, 2)),  # noqa: E731
                           conv(x, k[:, :, :1, :], (1, 1), "VALID", feature_group_count=3),
                           lax.conv_transpose(x, k, (2, 2), "SAME", dimension_numbers=NHWC))
        model = assert_onnx_matches_jax(fn, _f((2, 6, 7, 3), np.float64), _f((3, 3, 3, 3), np.float64))
    assert "Conv" not in onnx_op_types(model)


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
