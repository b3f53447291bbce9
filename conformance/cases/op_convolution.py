"""Op rows: convolution layouts, strides, padding, dilations, groups, transposed convs, dtypes, dynamic dims."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from conformance.case import op_row

RNG = np.random.default_rng(3)
NHWC = ("NHWC", "HWIO", "NHWC")
Spec = jax.ShapeDtypeStruct


def _f(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def conv(x, k, strides=(1, 1), padding="SAME", dn=NHWC, **kw):
    return lax.conv_general_dilated(x, k, strides, padding, dimension_numbers=dn, **kw)


for dn in [("NCHW", "OIHW", "NCHW"), ("NHWC", "OIHW", "NCHW"), ("NCHW", "HWIO", "NHWC"), ("HWNC", "IOHW", "CNHW")]:
    lhs_shape = {"NCHW": (2, 3, 7, 6), "NHWC": (2, 7, 6, 3), "HWNC": (7, 6, 2, 3)}[dn[0]]
    rhs_shape = {"OIHW": (4, 3, 3, 2), "HWIO": (3, 2, 3, 4), "IOHW": (3, 4, 3, 2)}[dn[1]]
    op_row(f"conv.layout.{'_'.join(dn)}", lambda x, k, dn=dn: conv(x, k, (1, 2), "SAME", dn), _f(lhs_shape), _f(rhs_shape))

op_row("conv.explicit_negative_padding", lambda x, k: conv(x, k, (1, 1), ((2, -1), (0, 3))), _f((1, 8, 7, 2)), _f((3, 2, 2, 3)))
op_row("conv.rhs_dilation", lambda x, k: conv(x, k, (1, 1), "SAME", rhs_dilation=(2, 3)), _f((2, 10, 11, 3)), _f((3, 3, 3, 5)))
op_row("conv.lhs_dilation", lambda x, k: conv(x, k, (1, 1), ((1, 2), (2, 0)), lhs_dilation=(2, 3)), _f((2, 5, 4, 3)),
       _f((3, 2, 3, 2)))
for k, (strides, padding) in enumerate([((2, 2), "SAME"), ((2, 2), "VALID"), ((1, 1), "SAME"), ((3, 2), ((1, 0), (2, 1)))]):
    op_row(f"conv.transpose.{k}", lambda x, w, s=strides, p=padding: lax.conv_transpose(x, w, s, p, dimension_numbers=NHWC),
           _f((2, 5, 6, 3)), _f((3, 3, 3, 4)))
op_row("conv.depthwise", lambda x, k: conv(x, k, (1, 1), "SAME", feature_group_count=6), _f((2, 7, 7, 6)), _f((3, 3, 1, 6)))
op_row("conv.grouped_multiplier", lambda x, k: conv(x, k, (2, 2), "SAME", feature_group_count=2), _f((2, 8, 8, 4)),
       _f((3, 3, 2, 6)))
op_row("conv.dilated_depthwise_nchw",
       lambda x, k: conv(x, k, (1, 1), "SAME", ("NCHW", "OIHW", "NCHW"), rhs_dilation=(2, 2), feature_group_count=3),
       _f((1, 3, 9, 9)), _f((3, 1, 3, 3)))
op_row("conv.batch_group_count", lambda x, k: conv(x, k, (1, 1), "VALID", batch_group_count=2), _f((4, 6, 5, 3)),
       _f((2, 2, 3, 6)))
op_row("conv.gradients_strided_grouped",
       jax.grad(lambda x, k: jnp.sum(conv(x, k, (2, 2), "SAME", feature_group_count=2) ** 2), argnums=(0, 1)),
       _f((2, 7, 8, 4)), _f((3, 3, 2, 4)))
op_row("conv.1d", lambda x, k: lax.conv_general_dilated(x, k, (2,), "SAME", dimension_numbers=("NWC", "WIO", "NWC")),
       _f((2, 11, 3)), _f((5, 3, 4)))
op_row("conv.3d", lambda x, k: lax.conv_general_dilated(x, k, (1, 2, 1), "SAME", dimension_numbers=("NDHWC", "DHWIO", "NDHWC")),
       _f((1, 5, 6, 4, 2)), _f((3, 3, 2, 2, 3)))
op_row("conv.float64_batch_groups", lambda x, k: conv(x, k, (1, 1), "VALID", batch_group_count=2),
       _f((4, 6, 5, 3), np.float64), _f((2, 2, 3, 6), np.float64))
op_row("conv.float16", lambda x, k: conv(x, k, (1, 1), "SAME"), _f((2, 6, 6, 8), np.float16), _f((3, 3, 8, 4), np.float16),
       tol=(1e-2, 1e-2))
op_row("conv.bfloat16_preferred_float32", lambda x, k: conv(x, k, (1, 1), "SAME", preferred_element_type=jnp.float32),
       _f((2, 6, 6, 8), ml_dtypes.bfloat16), _f((3, 3, 8, 4), ml_dtypes.bfloat16))
op_row("conv.bfloat16_result", lambda x, k: conv(x, k, (2, 2), "SAME").astype(jnp.float32),
       _f((2, 6, 6, 8), ml_dtypes.bfloat16), _f((3, 3, 8, 4), ml_dtypes.bfloat16), tol=(2e-2, 2e-2))
op_row("conv.int8_preferred_int32", lambda x, k: conv(x, k, (2, 1), "SAME", preferred_element_type=jnp.int32),
       RNG.integers(-128, 128, size=(2, 6, 6, 4)).astype(np.int8), RNG.integers(-128, 128, size=(3, 3, 4, 5)).astype(np.int8))
op_row("conv.int32", lambda x, k: conv(x, k, (1, 1), "VALID"), RNG.integers(-50, 50, size=(1, 5, 5, 2)).astype(np.int32),
       RNG.integers(-50, 50, size=(2, 2, 2, 3)).astype(np.int32))

_B, _H = jax.export.symbolic_shape("b, h")
op_row("conv.dynamic_batch", lambda x, k: conv(x, k, (2, 2), "SAME"), _f((2, 8, 8, 3)), _f((3, 3, 3, 4)),
       specs=[Spec((_B, 8, 8, 3), np.float32), Spec((3, 3, 3, 4), np.float32)], runs=[[_f((5, 8, 8, 3)), _f((3, 3, 3, 4))]])
op_row("conv.dynamic_spatial_same", lambda x, k: conv(x, k, (2, 2), "SAME"), _f((2, 8, 8, 3)), _f((3, 3, 3, 4)),
       specs=[Spec((_B, _H, _H, 3), np.float32), Spec((3, 3, 3, 4), np.float32)],
       runs=[[_f((1, 7, 7, 3)), _f((3, 3, 3, 4))]])

NONFINITE_CONVS = {
    "padding": dict(padding=[(1, 1)]),
    "lhs_dilation": dict(padding=[(2, 0)], lhs_dilation=(2,)),
    "lhs_dilation_strided": dict(padding=[(4, 3)], lhs_dilation=(3,), window_strides=(2,)),
    "rhs_dilation": dict(padding=[(1, 2)], rhs_dilation=(2,)),
    "lhs_dilation_negative_padding": dict(padding=[(-1, 2)], lhs_dilation=(2,)),
    "lhs_dilation_groups": dict(padding=[(0, 0)], lhs_dilation=(2,), feature_group_count=2),
    "padding_wider_than_kernel": dict(padding=[(5, 5)], lhs_dilation=(2,)),
}


def _nonfinite_row(dtype, case: str, nsp: int) -> None:
    """XLA on CPU skips padding and holes for float64 and for 1-D/2-D unit-stride lhs dilation
    (0 x inf never happens there), and multiplies them elsewhere (NaN); the ONNX graph does the same."""
    kw = dict(NONFINITE_CONVS[case])
    g = kw.pop("feature_group_count", 1)
    kw = {k: v * nsp for k, v in kw.items()}
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 2 * g) + (5,) * nsp).astype(dtype)
    w = rng.standard_normal((2 * g, 2) + (3,) * nsp).astype(dtype)
    w[(0, 0) + (0,) * nsp] = np.inf
    w[(1, 0) + (2,) * nsp] = -np.inf

    def fn(x, w):
        return lax.conv_general_dilated(x, w, kw.get("window_strides", (1,) * nsp), kw["padding"],
                                        lhs_dilation=kw.get("lhs_dilation"), rhs_dilation=kw.get("rhs_dilation"),
                                        feature_group_count=g)

    op_row(f"conv.nonfinite_kernel.{case}.{nsp}d.{np.dtype(dtype).name}", fn, x, w, expect="allclose",
           tol=(2e-3, 2e-3) if dtype == np.float16 else (1e-5, 1e-5))


for _dtype in (np.float32, np.float16, np.float64):
    for _case in sorted(NONFINITE_CONVS):
        for _nsp in (1, 2, 3):
            _nonfinite_row(_dtype, _case, _nsp)
