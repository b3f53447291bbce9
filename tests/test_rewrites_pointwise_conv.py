"""jaxconv.onnx.rewrites.pointwise_conv: a 1x1 convolution to fewer than 16 channels as a MatMul over the
pixels; ONNX Runtime's outputs within tolerance of jax.jit's (NaN, infinities and -0.0 in the input)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jaxconv
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_floats
from lowering_check import convert_and_run as _convert

_RNG = np.random.default_rng(0)
_W3 = _RNG.standard_normal((3, 3, 3, 8)).astype(np.float32) / 4


def _conv(x, w, stride=1):
    return jax.lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _head(channels: int, stride: int = 1, bias: bool = True):
    w1 = _RNG.standard_normal((1, 1, 8, channels)).astype(np.float32) / 3
    b1 = _RNG.standard_normal(channels).astype(np.float32) if bias else np.zeros(channels, np.float32)

    def fn(x):
        y = jax.nn.relu(_conv(x, _W3))
        return jax.nn.sigmoid(_conv(y, w1, stride) + b1)
    return fn


def _image(batch: int = 2) -> np.ndarray:
    x = np.random.default_rng(batch).standard_normal((batch, 12, 10, 3)).astype(np.float32)
    x[0, 3, 4, :] = [np.nan, np.inf, -np.inf]
    x[-1, 0, 0, 0] = -0.0
    return x


@pytest.mark.parametrize("channels, bias", [(1, True), (3, False), (15, True)])
def test_a_narrow_pointwise_conv_is_a_matmul(channels, bias):
    fn = _head(channels, bias=bias)
    x = _image()
    ops, (got,) = _convert(fn, x)
    assert ops["Conv"] == 1 and ops["MatMul"] == 1, ops  # the 3x3 Conv stays
    assert_same_floats(got, np.asarray(jax.jit(fn)(x)), 1e-5, 1e-6)


@pytest.mark.parametrize("channels, stride", [(16, 1), (4, 2)], ids=["16 channels", "strided"])
def test_other_convs_stay(channels, stride):
    fn = _head(channels, stride)
    x = _image()
    ops, (got,) = _convert(fn, x)
    assert ops["Conv"] == 2 and ops["MatMul"] == 0, ops
    assert_same_floats(got, np.asarray(jax.jit(fn)(x)), 1e-5, 1e-6)


def test_a_symbolic_batch_is_kept():
    fn = _head(2)
    model = jaxconv.to_onnx(fn, "f32[b,12,10,3]", check=False)
    assert sum(n.op_type == "MatMul" for n in model.graph.node) == 1
    run = OnnxRunner(model.SerializeToString())
    for batch in (1, 3):
        x = _image(batch)
        assert_same_floats(run.run([x])[0], np.asarray(jax.jit(fn)(x)), 1e-5, 1e-6)


@pytest.mark.parametrize("seed", [0, 2, 3, 7])
def test_nchw_model_converts_with_the_check(seed):
    """A channels-first pointwise head (as Flax and Haiku users write with NCHW data) through the default check.
    Its scale stays a Mul after the MatMul: folded into the weights (conv_affine's fold for a Conv), the
    products of the edge inputs' ±FLT_MAX overflow where jax.jit's do not (the check failed seeds 2, 3, 7)."""
    w = np.random.default_rng(seed).standard_normal((3, 8, 1, 1)).astype(np.float32)

    def fn(x):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "VALID") * 2.0

    model = jaxconv.to_onnx(fn, "f32[2,8,9,7]")
    assert [n.op_type for n in model.graph.node].count("MatMul") == 1
    x = np.random.default_rng(5).standard_normal((2, 8, 9, 7)).astype(np.float32)
    assert_same_floats(OnnxRunner(model.SerializeToString()).run([x])[0], np.asarray(jax.jit(fn)(x)), 1e-5, 1e-6)


def test_a_pointwise_conv_on_nhwc_input_stays():
    """Read straight from NHWC data (a Transpose before it): ORT's blocked Conv takes that layout in its stride."""
    w = _RNG.standard_normal((1, 1, 3, 2)).astype(np.float32)
    fn = lambda x: _conv(x, w)  # noqa: E731
    x = _image()
    ops, (got,) = _convert(fn, x)
    assert ops["Conv"] == 1 and ops["MatMul"] == 0, ops
    assert_same_floats(got, np.asarray(jax.jit(fn)(x)), 1e-5, 1e-6)
