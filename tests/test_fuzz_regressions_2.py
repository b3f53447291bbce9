"""More differences the fuzzer and edge-value checks found, each a small program compared with jax.jit.

Fixed ones must match jax.jit bit for bit (zero signs, NaN places); named ones (README: Known differences,
conformance/fuzz/known.py) pin the difference so that a change in either runtime shows.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from tests.test_fuzz_regressions import _bits, _run

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_cholesky_with_an_infinite_pivot_zeroes_the_column_below(dtype):
    """LAPACK (OpenBLAS's potf2, as jax calls it) scales a column by 1/pivot and writes zeros when that is
    0: an inf pivot leaves zeros below it (also where the entry is ±inf), not inf/inf = NaN."""
    a = np.array([[np.inf, -2.98, 0.97], [-np.inf, 3.99, -2.47], [0.97, -2.47, 5.46]], dtype)
    b = np.array([[4.13, 1.21, -0.11], [1.21, np.inf, -np.inf], [-0.11, 0.46, 4.08]], dtype)
    for fn, x in ((lambda a: lax.linalg.cholesky(a, symmetrize_input=False), a),
                  (lambda a: jnp.linalg.cholesky(a, upper=True), b), (jnp.linalg.cholesky, b)):
        expected, actual = _run(fn, x)
        assert not np.isnan(expected[0]).all()
        np.testing.assert_allclose(_bits(actual[0]), _bits(expected[0]), rtol=1e-6)
        assert (np.isnan(actual[0]) == np.isnan(expected[0])).all()


def test_copysign_by_a_negative_nan_needs_opset_26():
    """Named (README: NaN bits): copysign(x, -NaN) is -|x| in jax.jit; without BitCast the artifact reads
    the NaN's sign as + (also inside a fori_loop body, as the fuzzer found it)."""
    x, s = np.array([np.inf, 2.0, -3.0], F64), np.array([-np.nan, -np.nan, 1.0], F64)
    for fn in (jnp.copysign, lambda x, s: lax.fori_loop(0, 2, lambda i, c: jnp.copysign(c, s), x)):
        expected, actual = _run(fn, x, s)
        assert expected[0].tolist() == [-np.inf, -2.0, 3.0] and actual[0].tolist() == [np.inf, 2.0, 3.0]
        expected, actual = _run(fn, x, s, opset=26)
        np.testing.assert_array_equal(_bits(actual[0]), _bits(expected[0]))


def test_nan_made_by_an_op_has_each_runtime_s_own_bits():
    """Named (README: NaN bits): XLA's f16 log(-1.013) is the NaN 0xFFFF, ONNX Runtime's is 0xFE00 (read
    with BitCast, opset 26; below it the artifact writes the positive quiet NaN 0x7E00)."""
    x = np.array([-1.013, 1.0], np.float16)
    fn = lambda x: lax.bitcast_convert_type(jnp.log(x), jnp.uint16)  # noqa: E731
    expected, actual = _run(fn, x)
    assert expected[0].tolist()[0] == 0xFFFF and actual[0].tolist()[0] == 0x7E00
    assert expected[0][1] == actual[0][1] == 0
    expected, actual = _run(fn, x, opset=26)
    assert actual[0].tolist() == [0xFE00, 0]


def test_a_bfloat16_dot_over_huge_values_keeps_inf_in_xla():
    """Named (SUM_ORDER, huge inputs): XLA's bf16 dot gives inf for 1.8e19 * 3.4e38 - 1.8e19 * 3.4e38 + 2
    (as with a fused multiply-add: inf + the exact finite product stays inf); the artifact rounds each product
    to ±inf first and gives NaN, which the convert makes 0. The fuzzer meets it as matmul+convert."""
    import ml_dtypes

    bf16 = ml_dtypes.bfloat16
    a = np.array([[-1.83747e19, -1.83747e19, 1, 1]]).astype(bf16)
    b = np.array([[-3.38953e38], [3.38953e38], [1], [1]]).astype(bf16)
    expected, actual = _run(lambda a, b: jnp.matmul(a, b).astype(jnp.uint16), a, b)
    assert expected[0].tolist() == [[65535]] and actual[0].tolist() == [[0]]
    expected, actual = _run(jnp.matmul, a, b)
    assert np.isposinf(expected[0].astype(np.float32)).all() and np.isnan(actual[0].astype(np.float32)).all()


def test_unsigned_division_by_a_broadcast_scalar_converts():
    """lax.div(u8[1,1,1], u8[]) broadcasts the divisor into the guarded division's Equal, Div and Where:
    removing both leading Unsqueezes left the Where's operands rank 0 with its result declared rank 3
    (onnx.checker error, exit 7)."""
    a, b = np.array([[[14]]], np.uint8), np.array(3, np.uint8)
    expected, actual = _run(lax.div, a, b)
    assert actual[0].shape == expected[0].shape == (1, 1, 1) and actual[0].tolist() == expected[0].tolist()
    expected, actual = _run(lax.div, a, np.array(0, np.uint8))
    assert actual[0].tolist() == expected[0].tolist()


def test_integer_remainder_by_a_broadcast_scalar_converts():
    """jnp.remainder(i16[1,1,1,1], i16[]) broadcasts the divisor into comparisons that meet in an Or: an
    operand made rank 4 through a Less of another removable Unsqueeze must not vouch for the Or's rank."""
    a = np.array([[[[6]]]], np.int16)
    for b in (-6, 4, -4, 0):
        expected, actual = _run(jnp.remainder, a, np.array(b, np.int16))
        assert actual[0].shape == expected[0].shape and actual[0].tolist() == expected[0].tolist(), b


def test_two_clamps_of_one_unsigned_input_convert():
    """Found by the fuzzer (exit 7, onnx.checker: nodes not topologically sorted): onnxscript's Min/Max ->
    Clip rule named both clamps' bounds x_min/x_max, and the second replaced the first's (minmax_rules.py)."""
    def fn(x):
        return lax.clamp(np.uint32(0), x, np.uint32(1)), lax.clamp(np.uint32(2), x, np.uint32(100))

    for v in (0, 5, 200):
        expected, actual = _run(fn, np.array(v, np.uint32))
        assert [a.tolist() for a in actual] == [e.tolist() for e in expected], v
    x = np.array([-3.0, 0.5, 7.0], np.float32)
    expected, actual = _run(lambda x: (jnp.minimum(jnp.maximum(x, 0.0), 1.0),
                                       jnp.minimum(jnp.maximum(x, 2.0), 6.0)), x)
    assert [a.tolist() for a in actual] == [e.tolist() for e in expected]


def test_xla_counts_negative_leading_zeros_after_a_division_by_zero():
    """Named (README): XLA folds clz of a negative constant to -32: clz(100 // argmin(x)) (100 // 0 is -2)
    and clz(argmin(x) - 7) for a one-element x; jax without jit and the artifact count 0 leading zeros."""
    def fn(x):
        return lax.clz(100 // jnp.argmin(x, axis=None))

    x = np.array(5, np.uint8)
    folded = 0 if jax.__version_info__ >= (0, 11) else -32  # jax 0.11.2's XLA counts 0, as the artifact does
    expected, actual = _run(fn, x)
    assert int(expected[0]) == folded and int(actual[0]) == 0 == int(fn(x))
    expected, actual = _run(lambda x: lax.clz(jnp.argmin(x, axis=None) - 7), x)
    assert int(expected[0]) == folded and int(actual[0]) == 0


def test_argmin_over_a_quotient_xla_flushes_to_zero():
    """1 / 1.8e308 is subnormal; XLA multiplies by that reciprocal and flushes it in the loop body, so
    [1, 0] / max ties at 0 and argmin is 0. The artifact kept 5.6e-309 (argmin 1) until it multiplied by
    the flushed reciprocal as XLA does (onnx/xla_division.py)."""
    x, d = np.array([[1.0, 0.0]], F64), np.array(1.79769313e308, F64)
    expected, actual = _run(lambda d, x: jnp.argmin(lax.fori_loop(0, 1, lambda i, c: c / d, x), axis=1), d, x)
    assert expected[0].tolist() == [0] and actual[0].tolist() == [0]
