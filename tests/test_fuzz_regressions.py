"""Differences the fuzzer found (scripts/fuzz.py), each reduced to a small program compared with jax.jit.

Every program goes through the whole ``jaxconv.to_onnx`` pipeline (lowering, rewrites, clean-up)
and runs in ONNX Runtime; outputs must equal jax.jit's bit for bit where the lowering matches
XLA (zero signs, NaN places), or show the named difference where conformance/fuzz/known.py
names it.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import jaxconv
from jaxconv.runtimes.onnxrt import OnnxRunner

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32 = np.dtype(np.float16), np.dtype(np.float32)


def _run(fn: Callable[..., Any], *args: np.ndarray, opset: int | None = None
         ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(jax.jit's outputs, ONNX Runtime's outputs of jaxconv's ONNX) on ``args``."""
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args]
    model = jaxconv.to_onnx(fn, *specs, check=False, opset=opset)
    expected = [np.asarray(o) for o in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]
    return expected, OnnxRunner(model.SerializeToString()).run(list(args))


def _bits(a: np.ndarray) -> np.ndarray:
    """Values as float64 with -0 told from +0 (NaNs compare equal)."""
    wide = np.asarray(a).astype(np.float64)
    return np.where(wide == 0, np.copysign(1.0, wide) * 1e-300, wide)


def assert_exact(fn: Callable[..., Any], *args: np.ndarray) -> None:
    """jax.jit and the ONNX agree exactly: same values, zero signs and NaN places."""
    expected, actual = _run(fn, *args)
    for k, (e, a) in enumerate(zip(expected, actual)):
        assert e.dtype == a.dtype and e.shape == a.shape, k
        np.testing.assert_array_equal(_bits(a), _bits(e), err_msg=f"output {k}")


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
def test_sum_over_extent_one_dims_keeps_negative_zero(dtype):
    """XLA folds a sum over dims of extent 1 to a reshape (its +0 init unused): a sum of one -0 is -0."""
    x = np.array([-0.0, 0.0, -1.0, 2.0], np.float64).astype(dtype)
    assert_exact(lambda x: (jnp.sum(x.reshape(1, 4, 1), axis=2), jnp.sum(x[:1]),
                            jnp.sum(x.reshape(4, 1, 1), axis=(1, 2)), jnp.sum(x.reshape(2, 2), axis=1)), x)


def test_clip_of_negative_zero_at_a_zero_bound():
    """jnp.clip(-0., 0., 1.) is +0 in XLA (max(-0, +0) = +0)."""
    x = np.array([-0.0, 1.0], np.float32)
    assert_exact(lambda x: jnp.clip(x, 0.0, 1.0), x)


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
def test_cumsum_over_extent_one_axis(dtype):
    """A running sum keeps its operand over an axis of extent 1 (f32/f16: -0 stays -0); bf16 adds +0."""
    x = np.array([-0.0, 0.0, -1.0], np.float64).astype(dtype)
    assert_exact(lambda x: (jnp.cumsum(x.reshape(1, 3), axis=0), jnp.cumsum(x[:1])), x)


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
def test_one_element_sum_windows_with_padding(dtype):
    """XLA folds a sum over one-element windows at unit stride to the padded operand (f32/f16: -0 stays -0);
    strided or base-dilated windows add the +0 init (found as where -> reduce_window_add -> atan2)."""
    x = np.array([-0.0, 1.0, -0.0, -2.5], np.float64).astype(dtype)
    zero = np.array(0, dtype)
    assert_exact(lambda x: (lax.reduce_window(x, zero, lax.add, (1,), (1,), ((1, 2),)),
                            lax.reduce_window(x, zero, lax.add, (1,), (1,), ((-1, 1),)),
                            lax.reduce_window(x, zero, lax.add, (1,), (2,), ((0, 0),)),
                            lax.reduce_window(x, zero, lax.add, (1,), (1,), ((1, 0),), base_dilation=(2,)),
                            jnp.arctan2(lax.reduce_window(x, zero, lax.add, (1,), (1,), ((1, 0),)), -0.0)), x)


def test_float64_dot_with_a_float32_result_multiplies_in_float64():
    """matmul(f64, f64, preferred_element_type=f32): XLA multiplies in f64 (7.5e-155 x -1.3e154 is -1, not
    0 x -inf)."""
    with jax.enable_x64(True):
        a = np.array([7.45834073e-155, 2.0], np.float64)
        b = np.array([[-1.34078079e154], [1e300]], np.float64)
        assert_exact(lambda a, b: (jnp.matmul(a[:1], b[:1], preferred_element_type=jnp.float32),
                                   jnp.matmul(a, b, preferred_element_type=jnp.float32)), a, b)


# ---- named differences (conformance/fuzz/known.py, README "Known differences") ---------------------------
def _conv(padding: list[tuple[int, int]]) -> Callable[..., Any]:
    return lambda x, w: lax.conv_general_dilated(x, w, (1,), padding)


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
def test_conv_padding_times_inf_depends_on_the_shape_in_xla(dtype):
    """Named conv-zeros: XLA skips the padding of a conv of a 1x1 input (0 where padding meets an inf tap) but
    multiplies it for a 3-tap kernel over 4 elements (0 x inf = NaN); ONNX Runtime's Conv multiplies both."""
    one = (np.ones((1, 1, 1)).astype(dtype), np.full((1, 1, 1), np.inf).astype(dtype))
    expected, actual = _run(_conv([(1, 1)]), *one)
    assert np.asarray(expected[0], np.float64).tolist() == [[[0.0, np.inf, 0.0]]]
    assert np.isnan(np.asarray(actual[0], np.float64)[0, 0, [0, 2]]).all()
    w = np.ones((1, 1, 3)).astype(dtype)
    w[..., 0] = np.inf
    four = (np.ones((1, 1, 4)).astype(dtype), w)
    expected, actual = _run(_conv([(3, 3)]), *four)
    np.testing.assert_array_equal(_bits(actual[0]), _bits(expected[0]))
    assert np.isnan(np.asarray(expected[0], np.float64)).any()


def test_zero_sign_of_a_dot_depends_on_the_shape_in_xla():
    """Named: all products -0; XLA keeps -0 for [1,3]x[3,3], gives +0 for [2,8]x[8,4]; ONNX Runtime +0."""
    small = (np.full((1, 3), -0.0, np.float32), np.ones((3, 3), np.float32))
    expected, actual = _run(jnp.matmul, *small)
    assert np.signbit(expected[0]).all() and not np.signbit(actual[0]).any()
    large = (np.full((2, 8), -0.0, np.float32), np.ones((8, 4), np.float32))
    expected, actual = _run(jnp.matmul, *large)
    assert not np.signbit(expected[0]).any() and not np.signbit(actual[0]).any()


def test_sinh_overflows_early_in_xla():
    """Named: sinh(89.415985) is 3.40282e38 (below FLT_MAX); XLA's float32 sinh overflows to inf."""
    x = np.array([89.415985, 89.0, -89.415985], np.float32)
    expected, actual = _run(jnp.sinh, x)
    assert np.isinf(expected[0][[0, 2]]).all() and np.isfinite(actual[0]).all()
    assert np.allclose(actual[0], np.sinh(x.astype(np.float64)), rtol=1e-6)


def test_tan_in_a_loop_body_differs_from_xla_straight_tan():
    """Named tan-in-loop: XLA's float32 tan in a 5-trip while loop is off its own tan (one ulp, magnified)."""
    x = np.array([[0.9784978]], np.float32)

    def loop(v):
        return lax.while_loop(lambda s: s[0] < 5, lambda s: (s[0] + 1, jnp.tan(s[1])), (0, v))[1]

    def straight(v):
        return jnp.tan(jnp.tan(jnp.tan(jnp.tan(jnp.tan(v)))))

    expected, actual = _run(loop, x)
    assert np.array_equal(np.asarray(jax.jit(straight)(x)), actual[0])  # the artifact is XLA's straight tan
    assert not np.allclose(expected[0], actual[0], rtol=1e-3)


def test_top_k_orders_a_negative_nan_like_a_positive_one_below_opset_26():
    """Named (README: NaN bits): bf16 top_k of [1, -NaN, inf, 1]; jax.jit puts -NaN last, opset 21 first."""
    x = np.array([[[1.0, -np.nan, np.inf, 1.0]]]).astype(BF16)
    expected, actual = _run(lambda x: lax.top_k(x, 2)[0], x)
    assert np.asarray(expected[0], np.float64).tolist() == [[[np.inf, 1.0]]]
    assert np.isnan(np.asarray(actual[0], np.float64)[0, 0, 0])
    expected, actual = _run(lambda x: lax.top_k(x, 2)[0], x, opset=26)  # BitCast reads the sign
    np.testing.assert_array_equal(_bits(actual[0]), _bits(expected[0]))


def test_bfloat16_window_sums_over_two_active_dims_follow_a_shape_dependent_order():
    """Named window-2d: XLA sums this bf16 (3,2) SAME window over (2,5) column by column, rounding every step
    (0.08203 where row-major gives 0.07813, the artifact's); 1-D windows match bit for bit."""
    x = np.array([1.0, 1.578125, -0.84765625, 1.0, 1.0, 1.0, -0.0194091796875, -0.6328125, 1.0, 1.0])
    x = x.astype(BF16)
    zero = np.array(0, BF16)
    two = lambda x: lax.reduce_window(x.reshape(2, 5), zero, lax.add, (3, 2), (1, 1), "SAME")  # noqa: E731
    expected, actual = _run(two, x)
    e, a = (np.asarray(v, np.float64).ravel() for v in (expected[0], actual[0]))
    assert e[1] == 0.08203125 and a[1] == 0.078125 and np.allclose(a, e, rtol=0.05, atol=0.01)
    assert_exact(lambda x: lax.reduce_window(x, zero, lax.add, (3,), (1,), "SAME"), x)


def test_bfloat16_last_bit_differences_magnified_by_cos_and_remainder():
    """Named last-bit: XLA's bf16 acos(-0.5195) is 2.125, the artifact's the correctly rounded 2.1094 (true
    2.1171); cos turns that ulp into 3%. A bf16 scatter-multiply with a repeated index rounds after each
    update in XLA (-0.03516), once in the artifact (-0.03491, exact -0.03498); remainder(1, .) magnifies
    it."""
    x = np.array([-0.51953125]).astype(BF16)
    expected, actual = _run(lambda x: (jnp.arccos(x), jnp.cos(jnp.arccos(x))), x)
    assert float(expected[0][0]) == 2.125 and float(actual[0][0]) == 2.109375
    assert float(expected[1][0]) == -0.52734375 and float(actual[1][0]) == -0.51171875
    idx = np.array([0, 0], np.int8)
    u, v = np.array([[[0.21484375]]]).astype(BF16), np.array([[[-0.7578125]]]).astype(BF16)

    def scatter(i, u, v):
        y = v.at[i].mul(u, mode="clip")
        return y, jnp.remainder(1.0, y)

    expected, actual = _run(scatter, idx, u, v)
    assert float(expected[0].ravel()[0]) == -0.03515625 and float(actual[0].ravel()[0]) == -0.034912109375
    assert float(expected[1].ravel()[0]) == -0.01953125 and abs(float(actual[1].ravel()[0]) + 0.01245) < 1e-4


def test_half_float_scatter_add_to_a_repeated_index_rounds_once():
    """Named repeated-index: XLA adds f16 updates to one row one at a time (-3.455 + 1 - 255.9 + 255.9 rounds
    to -2.375 at 256's ulp), the artifact sums in f32 and rounds once (-2.455, the exact result)."""
    x = np.array([[-3.455078125], [1.0], [1.0]], np.float16)
    u = np.array([[1.0], [-255.875], [255.875]], np.float16)
    expected, actual = _run(lambda x, i, u: x.at[i].add(u, mode="drop"), x, np.array([0, 0, 0], np.int32), u)
    assert float(expected[0][0, 0]) == -2.375 and float(actual[0][0, 0]) == np.float16(-2.455078125)
    assert_exact(lambda x, i, u: x.at[i].add(u, mode="drop"), x, np.array([0, 1, 2], np.int32), u)


def test_signbit_of_a_negative_nan_needs_opset_26():
    """Named (README: NaN bits): signbit(-NaN) is True in jax.jit, the artifact without BitCast says False."""
    x = np.array([1.0, -np.nan, np.nan, -0.0], np.float32)
    expected, actual = _run(jnp.signbit, x)
    assert expected[0].tolist() == [False, True, False, True]
    assert actual[0].tolist() == [False, False, False, True]
    expected, actual = _run(jnp.signbit, x, opset=26)
    assert actual[0].tolist() == expected[0].tolist()


@pytest.mark.parametrize("dtype", [F32, F16], ids=str)
def test_xla_rewrites_a_division_by_a_quotient(dtype):
    """jax.jit computes (a / b) / c as a / (b * c): 6.1e-5 / 16376 / 0 is inf there, NaN in IEEE
    arithmetic (jax without jit: 6.1e-5 / 16376 underflows to 0 in f16, 1e-30 / 1e30 in f32). The float32
    artifact divides as XLA does (onnx/xla_reassociation.py); float16, computed through casts, is named
    (README: the program's order)."""
    a = np.array([6.104e-05 if dtype == F16 else 1e-30, 1.0], dtype)
    b = np.array([16376.0 if dtype == F16 else 1e30, 2.0], dtype)
    c = np.array([0.0, 4.0], dtype)
    expected, actual = _run(lambda a, b, c: a / b / c, a, b, c)
    eager = np.asarray(jnp.asarray(a) / jnp.asarray(b) / jnp.asarray(c))
    assert np.isinf(expected[0][0]) and np.isnan(eager[0])
    assert np.isnan(actual[0][0]) if dtype == F16 else np.isposinf(actual[0][0])
    assert actual[0][1] == expected[0][1] == eager[1]
