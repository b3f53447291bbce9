"""A convolution's weight gradient (``jax.grad`` with respect to the kernel) as one Gemm per output position
(``ops/conv_weight_grad.py``) instead of an ONNX Conv whose kernel is the whole output gradient.

The products are the Conv's; only the order of the sums changes, so the numbers are compared with jax.jit
within the check's tolerance, with NaN and infinities in the input and the gradient in the same places,
and the float32 error against a float64 jax.jit no larger than XLA's own.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxconv.onnx.ops import conv_weight_grad
from lowering_check import assert_onnx_matches_jax, convert_and_run, onnx_op_types

NHWC = ("NHWC", "HWIO", "NHWC")
NCHW = ("NCHW", "OIHW", "NCHW")
# Sums of hundreds of terms of size ~1 that cancel to ~0.1: XLA's own float32 error there is ~5e-5
# (test_float32_error_no_larger_than_xla bounds ours by XLA's against float64).
ATOL = 1e-3


def _conv(dn, strides=(1, 1), padding="SAME", dilation=(1, 1), groups=1):
    return lambda x, w: lax.conv_general_dilated(x, w, strides, padding, rhs_dilation=dilation,
                                                 dimension_numbers=dn, feature_group_count=groups)


def _weight_grad(conv, kernel_shape):
    """The vjp with respect to the kernel as a function of (input, output gradient): the gradient alone."""
    def grad(x, g):
        _, vjp = jax.vjp(lambda w: conv(x, w), jnp.zeros(kernel_shape, x.dtype))
        return vjp(g)[0]
    return grad


# name: (dimension numbers, input shape, kernel shape, strides, padding, dilation)
CASES = {
    "nhwc_3x3_same": (NHWC, (8, 14, 14, 16), (3, 3, 16, 32), (1, 1), "SAME", (1, 1)),
    "nchw_3x3_same": (NCHW, (8, 16, 14, 14), (32, 16, 3, 3), (1, 1), "SAME", (1, 1)),
    "nhwc_3x3_batch1": (NHWC, (1, 12, 12, 3), (3, 3, 3, 8), (1, 1), "SAME", (1, 1)),
    "nhwc_1x1": (NHWC, (8, 7, 7, 16), (1, 1, 16, 8), (1, 1), "SAME", (1, 1)),
    "nhwc_5x5_valid": (NHWC, (8, 13, 11, 4), (5, 5, 4, 6), (1, 1), "VALID", (1, 1)),
    "nchw_5x5_explicit": (NCHW, (1, 4, 12, 13), (6, 4, 5, 5), (1, 1), ((2, 1), (0, 3)), (1, 1)),
    "nhwc_3x3_stride2": (NHWC, (8, 15, 14, 4), (3, 3, 4, 8), (2, 2), "SAME", (1, 1)),
    "nchw_3x3_stride2_valid": (NCHW, (1, 4, 15, 15), (8, 4, 3, 3), (2, 2), "VALID", (1, 1)),
    "nhwc_3x3_dilation2": (NHWC, (8, 15, 15, 4), (3, 3, 4, 8), (1, 1), "SAME", (2, 2)),
    "nhwc_negative_padding": (NHWC, (2, 14, 14, 4), (3, 3, 4, 8), (1, 1), ((-1, 1), (1, -2)), (1, 1)),
    "nwc_1d": (("NWC", "WIO", "NWC"), (4, 30, 8), (5, 8, 16), (1,), "SAME", (1,)),
}


def _values(shape, seed, edges=True, dtype=np.float32):
    """Normal values, with NaN, infinities and zeros of both signs at scattered places."""
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    if edges:
        flat = a.reshape(-1)
        places = np.random.default_rng(seed + 1).choice(flat.size, 6, replace=False)
        flat[places] = [np.nan, np.inf, -np.inf, -0.0, 0.0, -0.0]
    return a.astype(dtype)


def _case(name, edges=True, dtype=np.float32):
    """(the weight gradient of case ``name``, an input and an output gradient for it)."""
    dn, x_shape, kernel_shape, strides, padding, dilation = CASES[name]
    conv = _conv(dn, strides, padding, dilation)
    out = jax.eval_shape(conv, *(jax.ShapeDtypeStruct(s, dtype) for s in (x_shape, kernel_shape)))
    x, g = _values(x_shape, 0, edges, dtype), _values(out.shape, 7, edges, dtype)
    return _weight_grad(conv, kernel_shape), x, g


@pytest.mark.parametrize("name", list(CASES))
def test_weight_grad_is_gemms_and_matches_jax(name):
    grad, x, g = _case(name)
    ops = onnx_op_types(assert_onnx_matches_jax(grad, x, g, atol=ATOL))
    assert "Conv" not in ops and "Gemm" in ops, ops


def test_edge_values_land_where_jax_puts_them():
    """An inf in the gradient meets padding zeros in the border windows (NaN there, as in XLA), a NaN in
    the input spreads to every output it reaches; the rest stays finite."""
    grad, x, g = _case("nhwc_3x3_same", edges=False)
    g[0, 0, 5, 3] = np.inf  # top row: the window of kernel row 0 reads the padding row there
    x[1, 6, 6, 2] = np.nan
    ops, (got,) = convert_and_run(grad, x, g)
    want = np.asarray(jax.jit(grad)(x, g))
    assert "Conv" not in ops
    assert np.isnan(want).any() and np.isinf(want).any() and np.isfinite(want).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("name", ["nhwc_3x3_same", "nchw_5x5_explicit", "nhwc_3x3_stride2"])
def test_float32_error_no_larger_than_the_conv(name, monkeypatch):
    """Against a float64 jax.jit, the Gemms' float32 sums are as close as the Conv's they replace (ORT's
    im2col sums in the same order, so mostly the same bits) and within a few times XLA's error (XLA
    splits its sums: up to 3.4x closer on some shapes, 2x further on others)."""
    grad, x, g = _case(name, edges=False)
    _, (got,) = convert_and_run(grad, x, g)
    with monkeypatch.context() as patch:
        patch.setattr(conv_weight_grad, "applies", lambda *args: False)
        ops, (conv,) = convert_and_run(grad, x, g)
    assert "Conv" in ops
    xla = np.asarray(jax.jit(grad)(x, g))
    with jax.enable_x64(True):
        exact = np.asarray(jax.jit(grad)(x.astype(np.float64), g.astype(np.float64)))
    ours, theirs, before = (np.abs(a - exact).max() for a in (got, xla, conv))
    assert ours <= before and ours <= 4 * theirs, (ours, before, theirs)


def test_symbolic_batch():
    """A symbolic batch is the contracted features here: the Gemms take it as -1."""
    grad, x, g = _case("nhwc_3x3_same")
    b, = jax.export.symbolic_shape("b")
    specs = [jax.ShapeDtypeStruct((b, *a.shape[1:]), a.dtype) for a in (x, g)]
    model = assert_onnx_matches_jax(grad, x, g, specs=specs, inputs_for_run=[[x[:1], g[:1]]], atol=ATOL)
    assert "Conv" not in onnx_op_types(model)


def test_float16_computed_in_float32():
    grad, x, g = _case("nhwc_3x3_batch1", edges=False, dtype=np.float16)
    assert "Conv" not in onnx_op_types(assert_onnx_matches_jax(grad, x, g))


def test_float64_keeps_its_exact_path():
    """float64 has no ONNX Conv kernel: its shifted-slice MatMuls (which skip padding as XLA does) stay."""
    with jax.enable_x64(True):
        grad, x, g = _case("nhwc_3x3_batch1", dtype=np.float64)
        assert "Gemm" not in onnx_op_types(assert_onnx_matches_jax(grad, x, g))


def test_grouped_and_forward_convolutions_keep_the_conv():
    """A depthwise conv's weight gradient (batch groups) and a forward conv (many output positions) stay Conv.
    (No edge values: XLA spreads a NaN of one group's gradient to the other groups', the Conv does not.)"""
    conv = _conv(NHWC, groups=4)
    x, g = _values((2, 10, 10, 4), 0, edges=False), _values((2, 10, 10, 8), 1, edges=False)
    assert "Conv" in onnx_op_types(assert_onnx_matches_jax(_weight_grad(conv, (3, 3, 1, 8)), x, g, atol=ATOL))
    ops = onnx_op_types(assert_onnx_matches_jax(_conv(NHWC), x, _values((3, 3, 4, 8), 2)))
    assert ops.count("Conv") == 1 and "Gemm" not in ops


def test_forward_conv_of_a_constant_kernel_keeps_the_conv():
    """A model's layer on a 2x2 map (4 positions, 9 taps: the weight-gradient shape) keeps its Conv, which
    ORT fuses with the bias and activation and the layout rule keeps NCHW; a kernel given at run time
    (a training step's parameters) takes the Gemms."""
    x, w = _values((2, 2, 2, 4), 0), _values((3, 3, 4, 8), 1, edges=False)
    assert "Gemm" not in onnx_op_types(assert_onnx_matches_jax(lambda x: _conv(NHWC)(x, jnp.asarray(w)), x))
    assert "Conv" not in onnx_op_types(assert_onnx_matches_jax(_conv(NHWC), x, w))


@pytest.mark.parametrize("positions, taps, gemm",
                         [(9, 9, False), (16, 25, False), (9, 25, True), (1, 49, True)])
def test_size_rule(positions, taps, gemm):
    """The Gemms replace the Conv where the kernel has at least two taps per output position (measured:
    1.1x slower at one, even at two, faster below)."""
    side, k = int(positions ** 0.5), int(taps ** 0.5)
    x, w = _values((2, side + k - 1, side + k - 1, 4), 0, edges=False), _values((k, k, 4, 8), 1, edges=False)
    ops = onnx_op_types(assert_onnx_matches_jax(_conv(NHWC, padding="VALID"), x, w, atol=ATOL))
    assert ("Conv" not in ops) == gemm == (conv_weight_grad.MIN_TAPS_PER_POSITION * positions <= taps)


class _CNN(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(8, (3, 3))(x))
        x = nn.max_pool(x, (2, 2), (2, 2))
        x = nn.relu(nn.Conv(16, (3, 3), strides=(2, 2))(x))
        return nn.Dense(10)(x.reshape(x.shape[0], -1))


def test_flax_cnn_parameter_gradients():
    """A Flax CNN's training gradients: both weight gradients become Gemms; the forward convs and the
    input gradient stay Conv."""
    model = _CNN()
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 16, 16, 1)))

    def grads(x, y):
        return jax.grad(lambda p: jnp.mean((model.apply(p, x) - y) ** 2))(params)

    x, y = _values((4, 16, 16, 1), 3, edges=False), _values((4, 10), 4, edges=False)
    assert onnx_op_types(assert_onnx_matches_jax(grads, x, y, atol=ATOL)).count("Conv") == 3
