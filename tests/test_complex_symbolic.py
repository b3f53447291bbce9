"""Complex values with symbolic sizes in the ONNX lowering: FFTs over a symbolic batch, complex products
and matrix products on symbolic dimensions, run at several sizes and compared with jax.jit; an FFT over
a symbolic axis is refused by name."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lowering_check import assert_onnx_matches_jax


def cplx(shape, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(np.complex64)


def real(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def test_rfft_over_a_symbolic_batch():
    model = assert_onnx_matches_jax(jnp.fft.rfft, real((3, 64)), specs=["f32[b,64]"],
                                    inputs_for_run=[[real((1, 64), 1)], [real((7, 64), 2)]])
    dims = [d.dim_param or d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    assert dims == ["b", 33, 2]  # the (re, im) pair axis follows the symbolic batch


def test_irfft_fft2_and_rfft2_over_a_symbolic_batch():
    assert_onnx_matches_jax(lambda x: jnp.fft.irfft(x, n=64), cplx((2, 33)), specs=["c64[b,33]"],
                            inputs_for_run=[[cplx((5, 33), 1)]])
    assert_onnx_matches_jax(jnp.fft.fft2, cplx((2, 6, 8)), specs=["c64[b,6,8]"],
                            inputs_for_run=[[cplx((1, 6, 8), 1)]])
    assert_onnx_matches_jax(lambda x: jnp.abs(jnp.fft.rfft2(x)), real((2, 8, 16)), specs=["f32[b,8,16]"],
                            inputs_for_run=[[real((3, 8, 16), 1)]])


def test_complex_arithmetic_on_a_symbolic_length():
    def f(x, y):
        return x * y, x / (y + 1), jnp.exp(x) - jnp.conj(y), jnp.sum(x * y)

    assert_onnx_matches_jax(f, cplx(5), cplx(5, 1), specs=["c64[n]", "c64[n]"],
                            inputs_for_run=[[cplx(1, 2), cplx(1, 3)], [cplx(9, 4), cplx(9, 5)]])


def test_complex_matrix_product_with_a_symbolic_batch():
    def f(a, b):
        return jnp.einsum("bij,bjk->bik", a, b), a @ jnp.ones((4, 2), jnp.complex64)

    assert_onnx_matches_jax(f, cplx((2, 3, 4)), cplx((2, 4, 5), 1), specs=["c64[b,3,4]", "c64[b,4,5]"],
                            inputs_for_run=[[cplx((6, 3, 4), 2), cplx((6, 4, 5), 3)]])


def test_complex_reductions_over_a_symbolic_axis():
    """A complex cumsum over a symbolic axis is a dynamic_reduce_window custom call (forward and reversed)."""
    def f(x):
        return (jnp.sum(x, axis=1), jnp.cumsum(x, axis=1), jnp.mean(x, axis=0),
                jax.lax.cumsum(x, axis=0, reverse=True))

    assert_onnx_matches_jax(f, cplx((3, 4)), specs=["c64[b,n]"], inputs_for_run=[[cplx((2, 7), 1)]])


def test_complex_cumulative_product_over_a_symbolic_axis_is_refused_by_name():
    from jaxconv.api import to_onnx
    from jaxconv.errors import UnsupportedError

    with pytest.raises(UnsupportedError, match=r"dynamic_reduce_window on complex values: only a sum"):
        to_onnx(lambda x: jnp.cumprod(x, axis=1), "c64[b,n]", check=False)


FFT_OVER_N = """
module @m {
  func.func public @main(%x: tensor<?xcomplex<f32>>) -> tensor<?xcomplex<f32>> {
    %0 = stablehlo.fft %x, type = FFT, length = [8] : (tensor<?xcomplex<f32>>) -> tensor<?xcomplex<f32>>
    return %0 : tensor<?xcomplex<f32>>
  }
}
"""


def test_fft_over_a_symbolic_axis_is_refused_by_name(tmp_path):
    """JAX cannot export one (fft_length must be constant); a StableHLO file that has one is refused."""
    from jaxconv.errors import UnsupportedError
    from jaxconv.onnx.convert import stablehlo_file_to_onnx

    path = tmp_path / "fft.mlir"
    path.write_text(FFT_OVER_N)
    with pytest.raises(UnsupportedError, match=r"stablehlo\.fft .*fft over a dynamic axis is not lowered"):
        stablehlo_file_to_onnx(str(path))
