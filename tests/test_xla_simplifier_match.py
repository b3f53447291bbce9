"""Constant chains, nested divisions and products by a converted bool, computed as jax.jit computes them.

XLA's algebraic simplifier rewrites the program before running it: ``(x * 0.1) * 3`` is ``x * 0.3``,
``(x + 0.1) + 3`` is ``x + 3.1``, ``(x / 3) * 3`` is ``x``, ``(a / b) / c`` is ``a / (b * c)``, and a
product by a bool converted to float is a select, so a NaN at a False position is dropped (optax's
onecycle schedules at a NaN step are 0 in jax.jit). Each case asserts its premise (jax.jit differs from
the program's order, or matches it for the negative cases) and then the ONNX, bit for bit.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxconv
from jaxconv.runtimes.onnxrt import OnnxRunner

RNG = np.random.default_rng(0)
ROW = (RNG.standard_normal(256) + 2).astype(np.float32)
FULL_1 = RNG.standard_normal((64, 256)).astype(np.float32)
FULL_2 = RNG.standard_normal((64, 256)).astype(np.float32)


def _run(fn, *args, x64=False):
    with jax.enable_x64(x64):
        specs = [jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype) for a in args]
        model = jaxconv.to_onnx(fn, *specs, check=False)
        want = np.asarray(jax.jit(fn)(*args))
    got = OnnxRunner(model.SerializeToString()).run([np.asarray(a) for a in args])[0]
    return got, want, model


def _assert_bits(got, want):
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def _normal(*shape, dtype=np.float32, shift=0.0):
    return (RNG.standard_normal(shape) + shift).astype(dtype)


# name: (function, the program's order in numpy (or None), whether XLA rewrites it, argument shifts)
REWRITTEN = {
    "(x * 0.1) * 3": (lambda x: (x * 0.1) * 3, lambda x, t: (x * t(0.1)) * t(3)),
    "(0.1 * x) * 3": (lambda x: (0.1 * x) * 3, lambda x, t: (x * t(0.1)) * t(3)),
    "3 * (x * 0.1)": (lambda x: 3 * (x * 0.1), lambda x, t: (x * t(0.1)) * t(3)),
    "(x * full) * full": (lambda x: (x * FULL_1.astype(x.dtype)) * FULL_2.astype(x.dtype),
                          lambda x, t: (x * FULL_1.astype(t)) * FULL_2.astype(t)),
    "(x + 0.1) + 3": (lambda x: (x + 0.1) + 3, lambda x, t: (x + t(0.1)) + t(3)),
    "3 + (0.1 + x)": (lambda x: 3 + (0.1 + x), lambda x, t: (x + t(0.1)) + t(3)),
    "(x - 0.1) + 3": (lambda x: (x - 0.1) + 3, lambda x, t: (x - t(0.1)) + t(3)),
    "(x + 0.1) - 3": (lambda x: (x + 0.1) - 3, lambda x, t: (x + t(0.1)) - t(3)),
    "(x - 0.1) - 3": (lambda x: (x - 0.1) - 3, lambda x, t: (x - t(0.1)) - t(3)),
    "(0.1 - x) + 3": (lambda x: (0.1 - x) + 3, lambda x, t: (t(0.1) - x) + t(3)),
    "(0.1 - x) - 3": (lambda x: (0.1 - x) - 3, lambda x, t: (t(0.1) - x) - t(3)),
    "(x + full) + full": (lambda x: (x + FULL_1.astype(x.dtype)) + FULL_2.astype(x.dtype),
                          lambda x, t: (x + FULL_1.astype(t)) + FULL_2.astype(t)),
    "((x * 0.1) * 3) * 7": (lambda x: ((x * 0.1) * 3) * 7, lambda x, t: ((x * t(0.1)) * t(3)) * t(7)),
    "(x / 0.1) * 3": (lambda x: (x / 0.1) * 3, lambda x, t: (x / t(0.1)) * t(3)),
    "(x * 3) / 0.1": (lambda x: (x * 3) / 0.1, lambda x, t: (x * t(3)) / t(0.1)),
    "(a / b) / c": (lambda a, b, c: (a / b) / c, lambda a, b, c, t: (a / b) / c),
    "a / (b / c)": (lambda a, b, c: a / (b / c), lambda a, b, c, t: a / (b / c)),
    "(a / b) / (c / d)": (lambda a, b, c, d: (a / b) / (c / d), lambda a, b, c, d, t: (a / b) / (c / d)),
    "((a / b) / c) / d": (lambda a, b, c, d: ((a / b) / c) / d, lambda a, b, c, d, t: ((a / b) / c) / d),
    "1 / (b / c)": (lambda b, c: 1 / (b / c), lambda b, c, t: t(1) / (b / c)),
    "(1 / b) / c": (lambda b, c: (1 / b) / c, lambda b, c, t: (t(1) / b) / c),
}


def _args(fn, dtype):
    n = fn.__code__.co_argcount
    return [_normal(64, 256, dtype=dtype, shift=3.0 if k else 0.0) for k in range(n)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", list(REWRITTEN))
def test_rewritten_forms_are_jax_jits_bit_for_bit(name, dtype):
    fn, program_order = REWRITTEN[name]
    args = _args(fn, dtype)
    got, want, _ = _run(fn, *args, x64=dtype == np.float64)
    with np.errstate(all="ignore"):
        assert not np.array_equal(want, program_order(*args, dtype))  # the premise: XLA rewrote it
    _assert_bits(got, want)


CHAINS = [name for name in REWRITTEN if "/ b" not in name and "/ c" not in name]  # not the nested divisions


@pytest.mark.parametrize("name", CHAINS)
def test_float16_chains_fold_their_constants_in_float16(name):
    """XLA's simplifier folds float16 constant chains as float32 ones, the constants folded in float16; the
    lowering computes each float16 op in float32 between Casts, and the rule reads through them."""
    fn, program_order = REWRITTEN[name]
    args = _args(fn, np.float16)
    got, want, _ = _run(fn, *args)
    with np.errstate(all="ignore"):
        assert not np.array_equal(want, program_order(*args, np.float16))  # the premise: XLA rewrote it
    _assert_bits(got, want)


@pytest.mark.parametrize("fn", [
    lambda x: (x + 3.1).astype(jnp.float32) + 1.7,
    lambda x: (x * 3.1).astype(jnp.float32) * 1.7,
], ids=["add", "multiply"])
def test_a_bfloat16_op_read_as_float32_folds_into_a_float32_chain(fn):
    """XLA computes the bfloat16 op in float32 and hands that value to the convert (``xla_bfloat16``); the
    float32 chain that follows folds into it (``bf16(3.1) + 1.7`` in float32)."""
    import ml_dtypes

    x = _normal(64, 256, dtype=ml_dtypes.bfloat16)
    got, want, _ = _run(fn, x)
    _assert_bits(got, want)


@pytest.mark.parametrize("fn", [lambda x: (x * 3.1) * 1.7, lambda x: (x + 3.1) + 1.7], ids=["multiply", "add"])
def test_bfloat16_chains_round_after_each_op(fn):
    """XLA rounds each bfloat16 op before the next reads it, so it folds nothing there."""
    import ml_dtypes

    x = _normal(64, 256, dtype=ml_dtypes.bfloat16)
    got, want, _ = _run(fn, x)
    with jax.disable_jit():
        op_by_op = np.asarray(fn(jnp.asarray(x)))
    np.testing.assert_array_equal(want.astype(np.float32), op_by_op.astype(np.float32))  # the premise
    _assert_bits(got.astype(np.float32), want.astype(np.float32))


NOT_REWRITTEN = {
    "(x * row) * row": lambda x: (x * ROW) * (ROW + 1),
    "(x * 0.1) * full": lambda x: (x * 0.1) * FULL_2,
    "(x * full) * 3": lambda x: (x * FULL_1) * 3,
    "(x * s) * 3, s an input": lambda x, s: (x * s[0, 0]) * 3,
    "3 - (x + 0.1)": lambda x: 3 - (x + 0.1),
    "(x + row) + row": lambda x: (x + ROW) + (ROW + 1),
    "(x + 0.1) + full": lambda x: (x + 0.1) + FULL_2,
    "(a * 0.1) * (b * 3.7)": lambda a, b: (a * np.float32(0.1)) * (b * np.float32(3.7)),  # broadcast scalars
}


@pytest.mark.parametrize("name", list(NOT_REWRITTEN))
def test_forms_xla_keeps_are_computed_as_written(name):
    fn = NOT_REWRITTEN[name]
    args = _args(fn, np.float32)
    got, want, _ = _run(fn, *args)
    np.testing.assert_array_equal(want, fn(*args))  # the premise: numpy's float32, in the program's order
    _assert_bits(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_a_product_of_two_products_by_full_constants_pairs_them(dtype):
    """``(a * C1) * (b * C2)`` with constants of the product's shape: XLA computes ``(a * b) * (C1 * C2)``."""
    def fn(a, b):
        return (a * FULL_1.astype(a.dtype)) * (b * FULL_2.astype(a.dtype))

    args = _args(fn, dtype)
    got, want, _ = _run(fn, *args, x64=dtype == np.float64)
    a, b = args
    assert not np.array_equal(want, (a * FULL_1.astype(dtype)) * (b * FULL_2.astype(dtype)))  # the premise
    np.testing.assert_array_equal(want, (a * b) * (FULL_1.astype(dtype) * FULL_2.astype(dtype)))
    _assert_bits(got, want)


@pytest.mark.parametrize("shape", [(1,), (1, 1, 1)])
def test_a_product_of_two_scaled_one_element_values_pairs_the_scalars(shape):
    """Over one element a broadcast scalar is a constant to XLA: ``(a * 0.125) * (b * 0.5)`` is
    ``(a * b) * 0.0625``, which overflows at 2e19 where the program's order gives 5e37."""
    def fn(a, b):
        return (a * np.float32(0.125)) * (b * np.float32(0.5))

    huge = np.full(shape, 2e19, np.float32)
    got, want, _ = _run(fn, huge, huge)
    assert np.isinf(want).all() and np.isfinite((huge * np.float32(0.125)) * (huge * np.float32(0.5))).all()
    _assert_bits(got, want)
    for _ in range(20):  # rounding: (a * b) * (0.1 * 3.7) against (a * 0.1) * (b * 3.7)
        a, b = _normal(*shape), _normal(*shape)
        got, want, _ = _run(lambda a, b: (a * np.float32(0.1)) * (b * np.float32(3.7)), a, b)
        _assert_bits(got, want)


@pytest.mark.parametrize("n", [8, 3])
def test_the_square_of_a_one_row_mean_is_the_squared_sum_over_n_squared(n):
    """Flax's one-pass variance of one row, ``mean(x * x) - mean(x)**2``: XLA squares the sum and scales it by
    ``(1 / n)**2``, so the square overflows (inf - inf: NaN) where ``(sum / n)**2`` would not. Found by the
    fuzzer as norm_one_pass/f32/nan: an eps-free one-pass norm of [1, 1, 8] gave its offset, jax.jit NaN."""
    def fn(x):
        m = jnp.mean(x, -1, keepdims=True)
        return jnp.mean(x * x, -1, keepdims=True) - m * m

    x = np.ones((1, 1, n), np.float32)
    x[0, 0, 1:3] = [-4.3e18, -1.92e19]
    got, want, _ = _run(fn, x)
    assert np.isnan(want).all()
    _assert_bits(got, want)


def test_a_one_row_mean_squared_rounds_as_xla_pairs_it():
    """``mean(x)**2`` of three elements: ``(s * s) * (1/3 * 1/3)``, bit for bit (the sum of three in either
    order; the program's ``(s / 3)**2`` differs from jax.jit in some of these rows)."""
    def fn(x):
        m = jnp.mean(x, -1, keepdims=True)
        return m * m

    differ = 0
    for _ in range(30):
        x = _normal(1, 1, 3, shift=2.0)
        got, want, _ = _run(fn, x)
        s = x.sum(-1, keepdims=True, dtype=np.float32)
        differ += not np.array_equal(want, (s / np.float32(3)) * (s / np.float32(3)))
        _assert_bits(got, want)
    assert differ  # the premise


def test_a_one_pass_norm_of_one_row_overflowing_its_mean_square_is_nan():
    """The fuzzer's program (seed 8086024284): the norm's output is NaN in jax.jit, not its offset."""
    b = (np.random.default_rng(191770788).standard_normal(8) * 0.1).astype(np.float32)

    def fn(x):
        m, m2 = jnp.mean(x, -1, keepdims=True), jnp.mean(jax.lax.square(x), -1, keepdims=True)
        return (x - m) * jax.lax.rsqrt(jnp.maximum(m2 - m * m, 0.0) + 0.0) * jnp.ones(8, jnp.float32) + b

    x = np.array([1.0, -4.326632e18, -1.9178188e19, 1, 1, 1, 1, 1], np.float32).reshape(1, 1, 8)
    got, want, _ = _run(fn, x)
    assert np.isnan(want).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def test_a_constant_division_undone_by_its_product_is_the_identity():
    x = _normal(64, 256)
    got, want, _ = _run(lambda x: (x / 3) * 3, x)
    assert (want == x).all()  # the premise
    assert not ((x / np.float32(3)) * np.float32(3) == x).all()
    _assert_bits(got, x)


def test_a_chain_folded_to_zero_keeps_negative_zero():
    """``(x + 0.5) - 0.5`` is ``x + 0``, which XLA drops: -0 stays -0."""
    x = np.array([-0.0, 0.0, 1.0, -1e-9, np.nan, -np.inf], np.float32)
    got, want, _ = _run(lambda x: (x + 0.5) - 0.5, x)
    assert np.signbit(want[0])  # the premise
    _assert_bits(got, want)


def test_a_root_divisor_is_not_a_nested_division():
    a, b, c = _args(lambda a, b, c: 0, np.float32)
    _, _, model = _run(lambda a, b, c: (a / b) / jnp.sqrt(c), a, b, c)
    assert sum(n.op_type == "Div" for n in model.graph.node) == 2


# ---- a product by a bool converted to float is a select ----------------------------------------------
MASK = np.array([True, False, True, False, False, True])
VALUES = np.array([-0.0, np.nan, -2.0, np.inf, -3.0, 5.0], np.float32)


@pytest.mark.parametrize("fn", [
    lambda m, v: m * v,
    lambda m, v: v * m.astype(jnp.float32),
    lambda m, v: jnp.dot(m, v),
    lambda m, v: jnp.dot(v, m.astype(jnp.float32)),
    lambda m, v: jnp.einsum("bi,bi->b", jnp.stack([m, ~m]).astype(jnp.float32), jnp.stack([v, v])),
], ids=["mask * v", "v * float mask", "dot", "dot, mask second", "batched dot"])
def test_products_by_a_converted_bool_drop_what_is_not_selected(fn):
    got, want, _ = _run(fn, MASK, VALUES)
    assert not np.isnan(want).all()  # the premise: the NaN and inf at False positions are gone
    _assert_bits(got, want)


@pytest.mark.parametrize("fn", [
    lambda m, v: m[1] * v,
    lambda m, v: m[None] * jnp.stack([v, v]),
    lambda m, v: jnp.stack([m, m]).astype(jnp.float32) @ v,
], ids=["broadcast scalar mask", "broadcast row mask", "matrix-vector product"])
def test_products_xla_keeps_propagate_nan(fn):
    got, want, _ = _run(fn, MASK, VALUES)
    assert np.isnan(want).any()  # the premise: computed as a product
    np.testing.assert_array_equal(got, want)


def test_optax_onecycle_schedules_at_a_nan_step_pass_the_default_check():
    optax = pytest.importorskip("optax")
    for schedule in (optax.cosine_onecycle_schedule(100, 0.1), optax.linear_onecycle_schedule(100, 0.1)):
        nan = np.float32(np.nan)
        assert float(jax.jit(schedule)(nan)) == 0.0  # the premise
        model = jaxconv.to_onnx(schedule, jax.ShapeDtypeStruct((), jnp.float32))
        got = OnnxRunner(model.SerializeToString()).run([np.asarray(nan)])[0]
        assert float(got) == 0.0
