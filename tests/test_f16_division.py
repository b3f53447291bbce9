"""float16 division as XLA on CPU computes it: its algebraic simplifier turns ``a / c`` (a constant) into
``a * (1 / c)`` and ``a / sqrt(b)`` into ``a * rsqrt(b)``, the reciprocal rounded to float16 before the
product. A float16 norm written ``c / jnp.sqrt(var)`` differs in the last bit from IEEE division in about
a third of its elements (found by the fuzzer: norm_two_pass+dense_gate/f16/value, 5 of 2048 outputs of
the Dense after it beyond the float16 tolerance). The artifact must give jax.jit's bits."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tests.lowering_check import assert_same_bits, convert_and_run

EDGES = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, -65504.0, 6e-5, 6e-8, 1.0, -3.0, 1e-3], np.float16)


def _numbers(n: int, seed: int) -> np.ndarray:
    r = np.random.default_rng(seed)
    return np.concatenate([EDGES, r.standard_normal(n - EDGES.size) * 3]).astype(np.float16)


def _jit(fn, *args):
    return [np.asarray(o) for o in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]


def test_f16_divide_by_constant_is_jits_bits():
    x = _numbers(4096, 0)
    for c in (3.0, 7.0, 0.1, 1e-5, 0.0, -0.0, np.inf):
        def fn(x, c=np.float16(c)):
            return x / c
        _, got = convert_and_run(fn, x)
        assert_same_bits(got, _jit(fn, x))


def test_f16_divide_by_sqrt_is_jits_bits():
    a = _numbers(4096, 1)
    b = np.abs(_numbers(4096, 2))
    b[:EDGES.size] = EDGES  # -0, negatives and NaN under the root too

    def fn(a, b):
        return a / jnp.sqrt(b), jnp.sqrt(b)  # the root used twice: XLA still rewrites the division

    _, got = convert_and_run(fn, a, b)
    assert_same_bits(got, _jit(fn, a, b))


def test_f16_norm_over_broadcast_sqrt_is_jits_bits():
    r = np.random.default_rng(3)
    x = (r.standard_normal((64, 32)) * 2 + 1).astype(np.float16)
    x[0, 26] = 9.5078125  # the fuzzer's row: 31 ones and one outlier
    x[0, :26] = x[0, 27:] = 1.0
    g = (r.standard_normal(32) * 0.1).astype(np.float16)

    def fn(x):
        c = x - jnp.mean(x, -1, keepdims=True)
        return c / jnp.sqrt(jnp.mean(c * c, -1, keepdims=True) + np.float16(1e-5)) * g

    _, got = convert_and_run(fn, x)
    assert_same_bits(got, _jit(fn, x))


def test_f16_multiply_add_rounds_the_product_as_jax_op_by_op():
    """``a * b + c`` in float16: ONNX Runtime rounds the product to float16 before the sum, as JAX op by op
    does and as jax.jit does on most CPUs. On a CPU with AVX512-FP16, jax.jit contracts the two into one
    fused multiply-add (one rounding), so it differs there in the last bit of about one element in four;
    the check takes that difference as within float16's tolerance (the norm above once ended in ``+ g``
    and failed its same-bits assertion on such a CPU)."""
    import jaxconv

    r = np.random.default_rng(6)
    a, b, c = (r.standard_normal(4096).astype(np.float16) for _ in range(3))

    def fn(a, b, c):
        return a * b + c

    f32 = np.float32
    op_by_op = ((a.astype(f32) * b.astype(f32)).astype(np.float16).astype(f32) + c.astype(f32)).astype(np.float16)
    fused = (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float16)
    assert (op_by_op != fused).sum() > 100  # the inputs tell the two roundings apart
    _, got = convert_and_run(fn, a, b, c)
    assert_same_bits(got, [op_by_op])
    jit = _jit(fn, a, b, c)[0]
    assert np.array_equal(jit, op_by_op) or np.array_equal(jit, fused)
    jaxconv.to_onnx(fn, "f16[4096]", "f16[4096]", "f16[4096]")  # checked against jax.jit by default: raises on a mismatch


def test_the_premise_xla_divides_by_exp_as_the_lowering_takes_it():
    """jax 0.10's XLA makes a float16 ``a / exp(b)`` into ``a * exp(-b)``, jax 0.11.2's keeps the division:
    the compiled HLO says which, and the lowering's version rule must say the same."""
    from jaxconv.onnx.xla_division import divides_by_exp_as_a_product

    a = b = np.ones(16, np.float16)
    hlo = jax.jit(lambda a, b: a / jnp.exp(b)).lower(a, b).compile().as_text()
    assert (" divide(" in hlo) != divides_by_exp_as_a_product()


def test_f16_divide_by_exp_and_rsqrt_is_jits_bits():
    """XLA also makes a / rsqrt(b) into a * sqrt(b), and (jax 0.10) a / exp(b) into a * exp(-b)."""
    a = _numbers(4096, 4)
    b = _numbers(4096, 5)
    b[:EDGES.size] = EDGES[::-1]

    def fn(a, b):
        return a / jnp.exp(b), a / jax.lax.rsqrt(b)

    _, got = convert_and_run(fn, a, b)
    assert_same_bits(got, _jit(fn, a, b))


def test_f16_divide_by_a_broadcast_is_jits_bits():
    """``a / broadcast(b)`` is ``a * broadcast(1 / b)`` in XLA too (``jax.nn.softmax``'s sum, a row maximum):
    IEEE division differed in 17-28% of these elements."""
    x = _numbers(4096, 6).reshape(64, 64)
    y = (np.abs(_numbers(4096, 7)) + 1).astype(np.float16).reshape(64, 64)
    y[0, :EDGES.size] = EDGES  # zeros, infinities and NaN as divisors

    def fn(x, y):
        return (jax.nn.softmax(x, axis=-1), x / y[0], x / jnp.abs(x).max(-1, keepdims=True),
                x / y.sum(-1, keepdims=True))

    want = _jit(fn, x, y)
    ieee_row = (x.astype(np.float32) / y[0].astype(np.float32)).astype(np.float16)
    assert np.mean(ieee_row[1:] != want[1][1:]) > 0.1  # the premise: not IEEE division
    _, got = convert_and_run(fn, x, y)
    assert_same_bits(got, want)
