"""jaxconv.onnx.rewrites.activations: jax.nn.hard_swish (and Keras' ``* (1 / 6)`` form) as HardSwish, which
ORT fuses into the Conv before it; and a Relu's -0 fix dropped through a Pad (a padded depthwise Conv reads it).

HardSwish rounds differently from ``x * relu6(x + 3) / 6`` (ORT: ``x * max(0, min(1, x / 6 + 0.5))``): the
results are within the float32 tolerance of jax.jit, not bit for bit; NaN, infinities and zero signs agree.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jaxconv
from jaxconv.compare import tolerance
from jaxconv.onnx.rewrites import activations
from lowering_check import assert_same_floats, without_rule
from lowering_check import convert_and_run as _convert

_plain = without_rule(activations)
_BIG = np.finfo(np.float32).max
EDGES = np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1e-39, -1e-39, 1e-45, -1e-45, _BIG, -_BIG,
                  -3.0, 3.0, -2.9999998, -3.0000002, 2.9999998, 3.0000002, -2.9999995, 1.0, -1.0], np.float32)


def _x(shape=(4, 64)) -> np.ndarray:
    x = (np.random.default_rng(5).standard_normal(shape) * 4).astype(np.float32)
    x.reshape(-1)[:EDGES.size] = EDGES
    return x


def _assert_close_to_jit(fn, got: list[np.ndarray], *inputs: np.ndarray) -> None:
    """Within the float32 tolerance of jax.jit: NaN places, infinities and zero signs the same."""
    want = np.asarray(jax.jit(fn)(*inputs))
    (out,) = got
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(out) & (out > 0), np.isinf(want) & (want > 0))
    np.testing.assert_array_equal(np.isinf(out) & (out < 0), np.isinf(want) & (want < 0))
    zeros = (out == 0) & (want == 0)
    np.testing.assert_array_equal(np.signbit(out[zeros]), np.signbit(want[zeros]))
    finite = np.isfinite(want)
    # XLA on the CPU reads subnormals as zeros (jax.jit gives a zero where ORT keeps x * 0.5)
    assert_same_floats(out[finite], want[finite], *tolerance("float32"))


def _keras_hard_swish(x):
    return x * (jnp.minimum(jax.nn.relu(x + 3.0), 6.0) * (1.0 / 6.0))


@pytest.mark.parametrize("fn", [
    jax.nn.hard_swish,
    _keras_hard_swish,
    lambda x: (jax.nn.relu6(3.0 + x) / 6.0) * x,
    lambda x: x * (jnp.clip(x + 3.0, 0.0, 6.0) / 6.0),
], ids=["jax.nn", "keras 1/6", "operands swapped", "clip"])
def test_hard_swish_becomes_one_op(monkeypatch, fn):
    x = _x()
    ops, got = _convert(fn, x)
    _assert_close_to_jit(fn, got, x)
    plain_ops, _ = _plain(monkeypatch, fn, x)
    assert "HardSwish" not in plain_ops
    assert ops["HardSwish"] == 1 and "Min" not in ops and "Relu" not in ops


def test_a_dense_layer_with_a_bias_then_hard_swish():
    """``x @ W + b`` then hard_swish: XLA adds ``b + 3`` in one constant, matched as ``x + 3`` still."""
    rng = np.random.default_rng(8)
    w = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    fn = lambda x: jax.nn.hard_swish(x @ w + b)  # noqa: E731
    x = _x()
    ops, got = _convert(fn, x)
    assert ops["HardSwish"] == 1 and "Min" not in ops
    _assert_close_to_jit(fn, got, x)


def test_every_float_near_minus_three_within_tolerance():
    """Where hard_swish leaves zero, ORT's ``x / 6 + 0.5`` cancels: up to 25% relative, 6e-8 absolute."""
    lo, hi = np.array([-3.0001, -2.9999], np.float32)
    bits = np.arange(lo.view(np.int32), hi.view(np.int32), -1, dtype=np.int32)
    x = np.concatenate([bits.view(np.float32), _x().reshape(-1)])
    ops, got = _convert(jax.nn.hard_swish, x)
    assert ops["HardSwish"] == 1
    _assert_close_to_jit(jax.nn.hard_swish, got, x)


def test_a_product_scaled_after_it_stays():
    """``x * relu6(x + 3) / 6`` overflows to inf for huge x where HardSwish returns x: not matched."""
    fn = lambda x: x * jax.nn.relu6(x + 3.0) / 6.0  # noqa: E731
    x = _x()
    ops, got = _convert(fn, x)
    assert "HardSwish" not in ops
    _assert_close_to_jit(fn, got, x)


def test_a_hard_sigmoid_gate_on_another_tensor_stays():
    """``hard_sigmoid(x) * y``: ORT's rounding near x = -3 would be off by up to 1e-7 |y|, past the
    tolerance for large y."""
    fn = lambda x, y: jax.nn.hard_sigmoid(x) * y  # noqa: E731
    x = _x()
    y = np.full_like(x, 1e4)
    ops, got = _convert(fn, x, y)
    assert "HardSwish" not in ops and "HardSigmoid" not in ops
    (out,) = got
    assert_same_floats(out, np.asarray(jax.jit(fn)(x, y)), *tolerance("float32"))


def test_hard_swish_read_twice_stays():
    """The clamp also read elsewhere (an output): nothing replaced."""
    def fn(x):
        r = jax.nn.relu6(x + 3.0)
        return x * (r / 6.0), r
    x = _x()
    ops, _ = _convert(fn, x)
    assert "HardSwish" not in ops


def _conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                    feature_group_count=w.shape[-1] if w.shape[-2] == 1 else 1)


@pytest.mark.parametrize("batch", ["2", "b"])
def test_a_mobilenet_block_checks(batch):
    """conv, an affine step, hard-swish, padded depthwise conv, hard-swish: converted with the check, on a
    static batch and a symbolic one (whose shapes ONNX's inference and the symbolic rule name apart)."""
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((1, 1, 8, 16)).astype(np.float32)
    w2 = rng.standard_normal((3, 3, 1, 16)).astype(np.float32)

    def block(x):
        y = _keras_hard_swish(_conv(x, w1) * 0.5 + 0.1)
        y = jnp.pad(y, ((0, 0), (1, 1), (1, 1), (0, 0)))
        return jax.nn.hard_swish(_conv(y, w2))

    x = (rng.standard_normal((2, 12, 12, 8)) * 3).astype(np.float32)
    # no +-FLT_MAX here: a convolution's sum of such terms reaches inf - inf or not by the order ORT's and
    # XLA's kernels add in (AVX-512 and AVX2 differ); the check's own edge inputs hold them
    x.reshape(-1)[:EDGES.size] = np.where(np.abs(EDGES) == _BIG, 1e30, EDGES)
    model = jaxconv.to_onnx(block, f"f32[{batch},12,12,8]", check=True)
    assert sum(n.op_type == "HardSwish" for n in model.graph.node) == 2
    _, got = _convert(block, x)
    _assert_close_to_jit(block, got, x)


def test_a_relu_padded_into_a_conv_keeps_no_zero_sign_fix(monkeypatch):
    """relu, Pad, depthwise Conv (keras-hub's MobileNetV3): the Pad carries a zero's sign to the Conv,
    which sums it away, so the -0 fix goes (no Abs after the Relu); the same bits as without the rule."""
    w = np.random.default_rng(4).standard_normal((3, 3, 1, 8)).astype(np.float32)

    def fn(x):
        return _conv(jnp.pad(jax.nn.relu(x), ((0, 0), (1, 1), (1, 1), (0, 0))), w)

    x = np.random.default_rng(6).standard_normal((2, 6, 6, 8)).astype(np.float32)
    x.reshape(-1)[:EDGES.size] = np.where(np.isfinite(EDGES), EDGES, 0.0)
    ops, got = _convert(fn, x)
    assert ops["Relu"] == 1 and "Abs" not in ops and "Where" not in ops
    _, before = _plain(monkeypatch, fn, x)
    np.testing.assert_array_equal(got[0], before[0])
