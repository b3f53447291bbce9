"""Cumulative products below opset 26 (no ONNX CumProd) multiply in XLA CPU's order.

XLA folds each output left to right from the init value, out[k] = out[k-1] * x[k], and splits
an axis longer than 16 into tiles of 16 (scan each tile, then multiply in the running product
of the tiles before it). Another association overflows or underflows at other places: on the row
[FLT_MAX, -FLT_MAX, FLT_MAX/7, -FLT_MIN, 3 FLT_MIN, ...] XLA gives +inf at index 4, a log-step
scan NaN (it multiplies -FLT_MIN * 3 FLT_MIN = -0 first, then -inf * -0).

The edge values below are powers of two (2^±100 for float32, 2^±1000 for float64, 2^±13 for
float16), ±1, ±0, ±inf and NaN: every partial product in any association is then exact, zero,
infinite or NaN, never a subnormal, so XLA's flushing of subnormals cannot hide or fake an order.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jaxconv
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_onnx_matches_jax, assert_same_bits

F32 = np.finfo(np.float32)
EXPONENT = {np.float16: 13, np.float32: 100, np.float64: 1000}


def _edges(shape, dtype=np.float32):
    """Random picks from the dtype's subnormal-free edge values (see the module docstring); zeros,
    infinities and NaN are rare, so that rows run long enough for XLA's tiles to show."""
    big = 2.0 ** EXPONENT[dtype]
    values = np.array([big, -big, 1 / big, -1 / big, 1.0, -1.0, 0.0, -0.0, np.inf, -np.inf, np.nan])
    weights = np.array([4, 4, 4, 4, 2, 2, 0.3, 0.3, 0.3, 0.3, 0.3])
    rng = np.random.default_rng(11)
    return rng.choice(values, size=shape, p=weights / weights.sum()).astype(dtype)


def _onnx_and_jit(fn, x, opset=None):
    """(ONNX Runtime's outputs of fn's ONNX, at the default opset unless given, jax.jit's), and the ONNX op types."""
    model = jaxconv.to_onnx(fn, jax.ShapeDtypeStruct(x.shape, x.dtype), opset=opset, check=False)
    got = OnnxRunner(model.SerializeToString()).run([x])
    want = jax.tree_util.tree_leaves(jax.jit(fn)(x))
    return got, [np.asarray(w) for w in want], {n.op_type for n in model.graph.node}


def test_the_check_passes_on_the_reported_cumprod():
    """The report: jaxconv's own check (edge inputs against jax.jit) failed on this function."""
    jaxconv.to_onnx(lambda x: jnp.cumprod(x, axis=1), jax.ShapeDtypeStruct((3, 7), jnp.float32))


def test_the_reported_edge_row_bit_for_bit():
    # the check's edge row, its subnormals flushed to zeros of the same sign (as XLA reads them)
    row = np.array([F32.max, -F32.max, F32.max / 7, -F32.tiny, 3 * F32.tiny, 0.0, -0.0], np.float32)
    x = np.stack([row, row[::-1], -row])

    def fn(v):
        return jnp.cumprod(v, axis=1)

    got, want, ops = _onnx_and_jit(fn, x)
    # premise: XLA multiplies in order (+inf at index 4); the underflowing pair alone gives -0,
    # and -inf * -0 is NaN, so pairing x[3] with x[4] first would give NaN there
    assert want[0][0, 4] == np.inf
    pair = np.asarray(jax.jit(lambda a, b: a * b)(row[3], row[4]))
    assert pair == 0 and np.signbit(pair)
    assert "CumProd" not in ops
    assert_same_bits(got, want, nan_signs=False)


@pytest.mark.parametrize("opset", [None, 26])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("n", [7, 16, 17, 40, 300])
def test_edge_values_bit_for_bit(n, reverse, opset):
    """At opset 26 too: ONNX Runtime's CumProd differed from jax.jit here (n = 7 reversed, 40, 300)."""
    x = _edges((32, n))
    got, want, ops = _onnx_and_jit(lambda v: lax.cumprod(v, axis=1, reverse=reverse), x, opset=opset)
    assert "CumProd" not in ops
    assert_same_bits(got, want, nan_signs=False)


@pytest.mark.parametrize("n", [5, 40])
def test_edge_values_along_axis_0_and_a_flipped_input(n):
    x = _edges((n, 3, 4))
    got, want, _ = _onnx_and_jit(lambda v: (jnp.cumprod(v, axis=0), jnp.cumprod(v[::-1], axis=0)), x)
    assert_same_bits(got, want, nan_signs=False)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_edge_values_in_other_float_dtypes(dtype, x64):
    x = _edges((16, 40), dtype)
    got, want, _ = _onnx_and_jit(lambda v: (lax.cumprod(v, axis=1), lax.cumprod(v, axis=1, reverse=True)), x)
    assert_same_bits(got, want, nan_signs=False)


@pytest.mark.parametrize("pad", [(40, 0), (0, 40)])
def test_an_init_value_and_exclusive_windows_in_xla_order(pad):
    """reduce_window's init value is the first factor; a window padded by its whole length is an exclusive scan."""
    x = _edges((16, 40))

    def fn(v):
        inclusive = lax.reduce_window(v, np.float32(2.0 ** 100), lax.mul, (1, 40), (1, 1), [(0, 0), (39, 0)])
        exclusive = lax.reduce_window(v, np.float32(1.0), lax.mul, (1, 40), (1, 1), [(0, 0), pad])
        return inclusive, exclusive

    got, want, _ = _onnx_and_jit(fn, x)
    assert_same_bits(got, want, nan_signs=False)


@pytest.mark.parametrize("pad", [(40, 0), (0, 40)])
def test_exclusive_windows_in_xla_order_at_opset_26(pad):
    """CumProd computes inclusive scans only: an exclusive one keeps XLA's order there too."""
    x = _edges((16, 40))
    got, want, _ = _onnx_and_jit(
        lambda v: lax.reduce_window(v, np.float32(1.0), lax.mul, (1, 40), (1, 1), [(0, 0), pad]), x, opset=26)
    assert_same_bits(got, want, nan_signs=False)


@pytest.mark.parametrize("n", [7, 64, 512, 4096])
def test_finite_random_products_stay_within_tolerance(n):
    x = (1.0 + 0.01 * np.random.default_rng(n).standard_normal((16, n))).astype(np.float32)
    assert_onnx_matches_jax(lambda v: (jnp.cumprod(v, axis=1), lax.cumprod(v, axis=1, reverse=True)), x)


def test_integer_products_wrap_like_xla():
    x = np.random.default_rng(5).integers(-2 ** 31, 2 ** 31, size=(4, 40), dtype=np.int64).astype(np.int32)
    got, want, _ = _onnx_and_jit(lambda v: (jnp.cumprod(v, axis=1), lax.cumprod(v, axis=1, reverse=True)), x)
    assert_same_bits(got, want)
