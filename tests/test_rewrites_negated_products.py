"""The SiLU rule (rewrites.activations.negated_products): the Neg of ``y = x @ W`` (W constant) folded into
``-W``, ``y``'s other readers negated to match; the numbers of the graph without it bit for bit (NaN,
±inf, -0.0 and ±FLT_MAX in the input and in the weight), jax.jit's within the converter's tolerance."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxconv.onnx.rewrites import activations
from lowering_check import assert_same_bits, assert_same_floats, convert_and_run

BIG = np.finfo(np.float32).max


def _plain(monkeypatch, fn, *inputs):
    with monkeypatch.context() as patch:
        patch.setattr(activations, "negated_products", lambda graph: 0)
        return convert_and_run(fn, *inputs)


def _weights(rows: int = 16, cols: int = 24) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    w_gate = rng.standard_normal((rows, cols)).astype(np.float32) * 0.3
    w_up = rng.standard_normal((rows, cols)).astype(np.float32) * 0.3
    w_gate[2, 5] = -0.0
    w_gate[3, 7] = np.inf
    w_gate[4, 9] = BIG
    w_gate[5, 11] = np.nan
    return w_gate, w_up


def _input(rows: int = 16) -> np.ndarray:
    x = np.random.default_rng(4).standard_normal((2, 6, rows)).astype(np.float32) * 4
    x[0, 0, :6] = [np.nan, np.inf, -np.inf, -0.0, 0.0, BIG]
    x[1, 2, :] = 0.0
    x[1, 3, :] = -0.0
    x[1, 4, 4] = -BIG
    return x


def _swiglu(silu):
    w_gate, w_up = _weights()
    w_down = np.random.default_rng(5).standard_normal((24, 16)).astype(np.float32)

    def fn(x):
        return (silu(x @ w_gate) * (x @ w_up)) @ w_down
    return fn


def _check(monkeypatch, fn, x):
    ops, got = convert_and_run(fn, x)
    assert ops["Neg"] == 0, ops
    plain_ops, plain = _plain(monkeypatch, fn, x)
    assert plain_ops["Neg"] == 1, plain_ops
    assert_same_bits(got, plain, nan_signs=False)
    want = np.asarray(jax.jit(fn)(x))
    assert_same_floats(got[0], want, 1e-5, 1e-6)
    return ops


def test_jax_silu_drops_the_neg(monkeypatch):
    """jax.nn.silu: ``y / (1 + exp(-y))``; the Add becomes ``-1 - e``."""
    ops = _check(monkeypatch, _swiglu(jax.nn.silu), _input())
    assert ops["Sub"] == 1 and ops["Exp"] == 1, ops


def test_keras_silu_by_a_reciprocal_drops_the_neg(monkeypatch):
    """keras: ``y * (1 / (1 + exp(-y)))``; the denominator is negated (ORT still fuses the Mul into a Div)."""
    ops = _check(monkeypatch, _swiglu(lambda y: y * (1.0 / (1.0 + jnp.exp(-y)))), _input())
    assert ops["Sub"] == 1, ops


def test_a_product_read_another_way_or_by_a_variable_weight_keeps_its_neg():
    w_gate, _ = _weights()

    def other_reader(x):
        y = x @ w_gate
        return (y / (1.0 + jnp.exp(-y)) + jnp.sin(y)) @ w_gate.T

    def variable(x, w):
        y = x @ w
        return (y / (1.0 + jnp.exp(-y))) @ w.T

    def shown(x):  # x @ (-W) is +0.0 where -(x @ W) is -0.0: an output shows the sign
        y = x @ w_gate
        return y / (1.0 + jnp.exp(-y))

    def shifted(x):  # 0.5 - e can be zero: -(0.5 - e) and -0.5 + e differ in a zero's sign
        y = x @ w_gate
        return (y / (0.5 - jnp.exp(-y))) @ w_gate.T

    x = _input()
    for fn, args in ((other_reader, (x,)), (variable, (x, w_gate)), (shown, (x,)), (shifted, (x,))):
        ops, got = convert_and_run(fn, *args)
        assert ops["Neg"] == 1, (fn.__name__, ops)
        assert_same_floats(got[0], np.asarray(jax.jit(fn)(*args)), 1e-4, 1e-5)


def _conv_input() -> np.ndarray:
    x = np.random.default_rng(6).standard_normal((2, 8, 8, 4)).astype(np.float32) * 3
    x[0, 0, 0, :] = [np.nan, np.inf, -np.inf, -0.0]
    x[0, 3, 3, :] = 0.0
    x[1, 5, :, 2] = BIG
    x[1, 6, :, :] = -0.0
    return x


def _cnn(silu):
    """A 3x3 convolution with its bias, a 1x1 convolution (a MatMul between Reshapes once lowered) and a
    squeeze-excite gate ``sigmoid(conv(mean))`` written as ``1 / (1 + exp(-z))``, NHWC, spatial mean out."""
    rng = np.random.default_rng(7)
    w1, b1 = rng.standard_normal((3, 3, 4, 8)).astype(np.float32) * 0.3, rng.standard_normal(8).astype(np.float32)
    w2 = rng.standard_normal((1, 1, 8, 8)).astype(np.float32) * 0.3
    w3 = rng.standard_normal((1, 1, 8, 8)).astype(np.float32) * 0.3
    w1[0, 1, 2, 3] = -0.0
    dims = ("NHWC", "HWIO", "NHWC")

    def conv(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dims)

    def fn(x):
        h = silu(conv(x, w1) + b1)
        h = silu(conv(h, w2))
        gate = 1.0 / (1.0 + jnp.exp(-conv(jnp.mean(h, axis=(1, 2), keepdims=True), w3)))
        return jnp.mean(h * gate, axis=(1, 2))
    return fn


def test_a_convolutions_silu_and_gate_drop_their_negs(monkeypatch):
    """keras-hub EfficientNet's form: each Neg of a Conv's output (bias folded in, weights transposed at run time
    until the clean-up) or of a pointwise convolution's MatMul read through a Reshape goes into the weights."""
    for silu in (jax.nn.silu, lambda y: y * (1.0 / (1.0 + jnp.exp(-y)))):
        fn = _cnn(silu)
        x = _conv_input()
        ops, got = convert_and_run(fn, x)
        plain_ops, plain = _plain(monkeypatch, fn, x)
        assert plain_ops["Neg"] == 3 and ops["Neg"] == 0, (plain_ops, ops)
        assert_same_bits(got, plain, nan_signs=False)
        assert_same_floats(got[0], np.asarray(jax.jit(fn)(x)), 1e-4, 1e-5)
