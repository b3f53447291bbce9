"""bfloat16 programs computed as jax.jit computes them on the CPU (``onnx/xla_bfloat16.py``).

XLA computes each bfloat16 arithmetic op in float32 and rounds it back, except for the program's own
converts to float32 of such a result, which get the float32 value before the rounding: a mixed-precision
norm's statistics, ``jax.nn.softmax``'s sum and ``(x @ w).astype(f32)`` see more precision than the
bfloat16 values they were written on. Each case first asserts its premise (jax.jit's value differs from
the rounded one, or equals it for the forms XLA keeps), then the ONNX against jax.jit.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import jaxconv
from jaxconv.runtimes.onnxrt import OnnxRunner

BF16, F32 = ml_dtypes.bfloat16, jnp.float32
RNG = np.random.default_rng(7)
X = (RNG.standard_normal((64, 128)) * 2).astype(BF16)
Y = (RNG.standard_normal((64, 128)) * 2).astype(BF16)
W = (RNG.standard_normal((128, 128)) * 0.1).astype(BF16)


def _onnx(fn, *args):
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args]
    model = jaxconv.to_onnx(fn, *specs, check=False)
    return np.asarray(OnnxRunner(model.SerializeToString()).run(list(args))[0]).astype(np.float32)


def _jit(fn, *args):
    return np.asarray(jax.jit(fn)(*args)).astype(np.float32)


def _layer_norm_of_residual(x, y):
    h = (x + y).astype(F32)  # the residual sum in bfloat16, its statistics in float32 (Flax's LayerNorm)
    centred = h - h.mean(-1, keepdims=True)
    return (centred * lax.rsqrt((centred * centred).mean(-1, keepdims=True) + 1e-5)).astype(BF16)


IN_FLOAT32 = {
    "(x + y).astype(f32)": lambda x, y: (x + y).astype(F32),
    "(x - y).astype(f32)": lambda x, y: (x - y).astype(F32),
    "(x * y).astype(f32) * 3": lambda x, y: (x * y).astype(F32) * 3.0,
    "(x / y).astype(f32)": lambda x, y: (x / y).astype(F32),
    "sqrt(|x|).astype(f32)": lambda x, y: jnp.sqrt(jnp.abs(x)).astype(F32),
    "(x @ w).astype(f32)": lambda x, y: (x @ W).astype(F32),
    "layer norm of a residual": _layer_norm_of_residual,
    "jax.nn.softmax": lambda x, y: jax.nn.softmax(x, axis=-1),
    "jnp.sum of a product": lambda x, y: (x * y).sum(-1).astype(F32),
}


@pytest.mark.parametrize("name", list(IN_FLOAT32))
def test_a_converted_bfloat16_result_is_its_float32_value(name):
    from jaxconv.onnx.xla_bfloat16 import dots_reach_converts_unrounded

    fn = IN_FLOAT32[name]
    got, want = _onnx(fn, X, Y), _jit(fn, X, Y)
    if name == "(x @ w).astype(f32)" and not dots_reach_converts_unrounded():
        _within_a_rounding(got, want)
        return
    np.testing.assert_array_equal(got, want)


def _within_a_rounding(got: np.ndarray, want: np.ndarray) -> None:
    """jax 0.11.2 rounds the product to bfloat16 (as the ONNX does), from a float32 sum that its CPU kernel
    (YNNPACK) adds in another order than ONNX Runtime's: a sum one float32 ulp away from a bfloat16 tie
    rounds the other way (1 of 8,192 elements here), one bfloat16 ulp apart."""
    assert np.mean(got == want) > 0.999
    ulp = np.abs(want.astype(BF16).astype(np.float32) - np.nextafter(want.astype(BF16), BF16(np.inf)).astype(
        np.float32))
    assert (np.abs(got - want) <= ulp).all()


@pytest.mark.parametrize("op", ["add", "multiply", "divide"])
def test_the_premise_jax_jit_does_not_round_before_the_convert(op):
    compute = {"add": lambda x, y: x + y, "multiply": lambda x, y: x * y, "divide": lambda x, y: x / y}[op]
    converted = _jit(lambda x, y: compute(x, y).astype(F32), X, Y)
    rounded = _jit(compute, X, Y)  # the bfloat16 result, then widened outside the program
    in_float32 = _jit(lambda x, y: compute(x.astype(F32), y.astype(F32)), X, Y)
    assert np.mean(converted != rounded) > 0.3
    np.testing.assert_array_equal(converted, in_float32)


def test_a_dot_reaches_the_convert_as_the_lowering_measured_it():
    """jax 0.10's XLA hands the convert the float32 product, jax 0.11.2's the rounded one: jax.jit gives one
    of the two in every element, the one the lowering takes for this jax."""
    from jaxconv.onnx.xla_bfloat16 import dots_reach_converts_unrounded

    converted = _jit(lambda x, y: (x @ W).astype(F32), X, Y)
    rounded = _jit(lambda x, y: x @ W, X, Y)
    in_float32 = _jit(lambda x, y: x.astype(F32) @ W.astype(F32), X, Y)
    assert np.mean(rounded != in_float32) > 0.3
    expected = in_float32 if dots_reach_converts_unrounded() else rounded
    np.testing.assert_array_equal(converted, expected)


def _conv(x, y):
    return lax.conv_general_dilated(x[None, None], W[None, None, :3, :3], (1, 1), "SAME").astype(F32)


@pytest.mark.parametrize("fn,rtol", [
    (lambda x, y: jnp.exp(x).astype(F32), 2.5e-7),
    (lambda x, y: lax.rsqrt(jnp.abs(x) + 1).astype(F32), 2.5e-7),
    (_conv, 1e-5),
], ids=["exp", "rsqrt", "convolution"])
def test_results_of_float32_kernels_are_float32_close(fn, rtol):
    """exp, rsqrt and a convolution reach the convert unrounded too; ONNX Runtime's float32 kernels differ
    from XLA's by an ulp or a summation order in some elements (as in float32 programs), far below
    bfloat16's rounding."""
    want, rounded = _jit(fn, X, Y), _jit(lambda x, y: fn(x, y).astype(BF16), X, Y)
    assert np.max(np.abs(rounded - want) / np.abs(want)) > 1e-3
    np.testing.assert_allclose(_onnx(fn, X, Y), want, rtol=rtol, atol=1e-6)


KEPT_ROUNDED = {
    "reshape between": lambda x, y: (x + y).reshape(128, 64).astype(F32),
    "maximum between": lambda x, y: jnp.maximum(x + y, 0.0).astype(F32),
    "the program's own convert pair": lambda x, y: (x * 2.5).astype(F32).astype(BF16).astype(F32) + 1.0,
    "a cumulative sum": lambda x, y: lax.cumsum(x + y, 1).astype(F32),
    "a convert to float64": lambda x, y: (x + y).astype(jnp.float64),
}


@pytest.mark.parametrize("name", list(KEPT_ROUNDED))
def test_forms_xla_rounds_stay_rounded(name):
    fn = KEPT_ROUNDED[name]
    with jax.enable_x64(name == "a convert to float64"):
        want = _jit(fn, X, Y)
        got = _onnx(fn, X, Y)
    np.testing.assert_array_equal(got, want)
