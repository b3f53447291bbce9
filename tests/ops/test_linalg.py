"""dot_general lowering: every layout, dynamic dims, mixed and narrow dtypes, compared with jax.jit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from lowering_check import assert_onnx_matches_jax, onnx_op_types

RNG = np.random.default_rng(0)


def _f(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _i(shape, dtype, lo=-8, hi=8):
    return RNG.integers(lo, hi, size=shape).astype(dtype)


def test_matmul_2d_uses_single_matmul():
    model = assert_onnx_matches_jax(lambda a, b: a @ b, _f((3, 4)), _f((4, 5)))
    assert "Einsum" not in onnx_op_types(model)
    assert onnx_op_types(model).count("MatMul") == 1


@pytest.mark.parametrize("eq,shapes", [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij,kj->ik", [(3, 4), (5, 4)]),
    ("ji,jk->ik", [(4, 3), (4, 5)]),
    ("i,i->", [(6,), (6,)]),
    ("i,ij->j", [(4,), (4, 3)]),
    ("ij,j->i", [(3, 4), (4,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("abcd,cdbe->bae", [(2, 3, 4, 5), (4, 5, 3, 6)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 8), (2, 3, 5, 8)]),
    ("bqhd,bkhd->bhqk", [(2, 4, 3, 8), (2, 5, 3, 8)]),
    ("xbij,bjk->bxik", [(3, 2, 4, 5), (2, 5, 6)]),
    ("ijk,ijk->k", [(2, 3, 4), (2, 3, 4)]),
])
def test_layouts(eq, shapes):
    assert_onnx_matches_jax(lambda a, b: jnp.einsum(eq, a, b), *[_f(s) for s in shapes])


def test_dot_general_explicit_dimension_numbers():
    def fn(a, b):
        return lax.dot_general(a, b, (((2, 0), (1, 3)), ((1,), (0,))))

    assert_onnx_matches_jax(fn, _f((4, 2, 5, 3)), _f((2, 5, 6, 4)))


def test_dynamic_batch_and_contracting_dims():
    b, k = jax.export.symbolic_shape("b, k")
    specs = [jax.ShapeDtypeStruct((b, 3, k), np.float32), jax.ShapeDtypeStruct((b, k, 5), np.float32)]
    fn = lambda x, y: jnp.einsum("bmk,bkn->bmn", x, y)  # noqa: E731
    assert_onnx_matches_jax(fn, _f((2, 3, 4)), _f((2, 4, 5)), specs=specs,
                            inputs_for_run=[[_f((3, 3, 7)), _f((3, 7, 5))]])


def test_dynamic_free_dims_flattened():
    b, = jax.export.symbolic_shape("b")
    specs = [jax.ShapeDtypeStruct((b, 4, 3), np.float32), jax.ShapeDtypeStruct((3, 2, 5), np.float32)]
    fn = lambda x, y: jnp.einsum("abk,kcd->abcd", x, y)  # noqa: E731
    assert_onnx_matches_jax(fn, _f((2, 4, 3)), _f((3, 2, 5)), specs=specs,
                            inputs_for_run=[[_f((5, 4, 3)), _f((3, 2, 5))]])


def test_float64():
    with jax.enable_x64(True):
        assert_onnx_matches_jax(lambda a, b: a @ b, _f((3, 7), np.float64), _f((7, 2), np.float64))


def test_float16():
    assert_onnx_matches_jax(lambda a, b: a @ b, _f((4, 16), np.float16), _f((16, 3), np.float16))


def test_bfloat16_rounds_once_like_xla():
    a, b = _f((4, 32), ml_dtypes.bfloat16), _f((32, 3), ml_dtypes.bfloat16)
    # XLA fuses the widening into the dot, so compare at bf16 precision.
    assert_onnx_matches_jax(lambda a, b: (a @ b).astype(jnp.float32), a, b, rtol=2e-2, atol=1e-2)


def test_bfloat16_preferred_float32():
    fn = lambda a, b: jnp.einsum("bij,bjk->bik", a, b, preferred_element_type=jnp.float32)  # noqa: E731
    assert_onnx_matches_jax(fn, _f((2, 3, 16), ml_dtypes.bfloat16), _f((2, 16, 5), ml_dtypes.bfloat16))


def test_int8_preferred_int32():
    fn = lambda a, b: lax.dot(a, b, preferred_element_type=jnp.int32)  # noqa: E731
    assert_onnx_matches_jax(fn, _i((3, 50), np.int8, -128, 127), _i((50, 4), np.int8, -128, 127))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32])
def test_integer_dtypes_wrap_like_xla(dtype):
    info = np.iinfo(dtype)
    a = _i((3, 9), dtype, max(info.min, -1000), min(info.max, 1000))
    b = _i((9, 4), dtype, max(info.min, -1000), min(info.max, 1000))
    assert_onnx_matches_jax(lambda a, b: a @ b, a, b)


@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
def test_64_bit_integers(dtype):
    with jax.enable_x64(True):
        assert_onnx_matches_jax(lambda a, b: a @ b, _i((3, 5), dtype, 0, 1000), _i((5, 2), dtype, 0, 1000))


def test_bool_dot():
    fn = lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())))  # noqa: E731
    a = RNG.random((3, 4)) < 0.3
    b = RNG.random((4, 5)) < 0.3
    assert_onnx_matches_jax(fn, a, b)


def test_zero_size_contraction():
    assert_onnx_matches_jax(lambda a, b: a @ b, _f((3, 0)), _f((0, 2)))


# ---- triangular_solve and cholesky -------------------------------------------------------------------
# On CPU, JAX calls LAPACK through custom calls; the fixture below makes it emit the StableHLO ops
# (as it does for other platforms), which XLA CPU also runs, so jax.jit stays the reference.

@pytest.fixture
def stablehlo_linalg():
    from jax._src.interpreters import mlir

    cpu = mlir._platform_specific_lowerings["cpu"]
    prims = (lax.linalg.triangular_solve_p, lax.linalg.cholesky_p)
    saved = {p: cpu.pop(p) for p in prims if p in cpu}
    try:
        yield
    finally:
        cpu.update(saved)


def _well_conditioned(shape, dtype=np.float32):
    return (_f(shape) + 4 * np.eye(shape[-1], dtype=np.float32)).astype(dtype)


@pytest.mark.parametrize("left_side", [True, False])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("transpose_a,unit_diagonal", [(False, False), (True, True)])
def test_triangular_solve(stablehlo_linalg, left_side, lower, transpose_a, unit_diagonal):
    a = _well_conditioned((2, 5, 5))
    b = _f((2, 5, 3) if left_side else (2, 3, 5))
    f = lambda a, b: lax.linalg.triangular_solve(a, b, left_side=left_side, lower=lower, transpose_a=transpose_a,
                                                 unit_diagonal=unit_diagonal)
    assert_onnx_matches_jax(f, a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float64, ml_dtypes.bfloat16])
def test_triangular_solve_dtypes(stablehlo_linalg, dtype):
    a, b = _well_conditioned((4, 4), dtype), _f((4, 1)).astype(dtype)
    f = lambda a, b: lax.linalg.triangular_solve(a, b, left_side=True, lower=False, unit_diagonal=True)
    assert_onnx_matches_jax(f, a, b, rtol=2e-2 if dtype == ml_dtypes.bfloat16 else None)


def test_cholesky(stablehlo_linalg):
    a = _f((3, 6, 6))
    spd = a @ np.swapaxes(a, -1, -2) + 0.5 * np.eye(6, dtype=np.float32)
    assert_onnx_matches_jax(lambda x: lax.linalg.cholesky(x, symmetrize_input=False), spd.astype(np.float32),
                            rtol=1e-4, atol=1e-5)


def _upper_cholesky():
    """A primitive lowered to stablehlo.cholesky with lower = false (JAX itself always asks for lower)."""
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import hlo
    from jax.extend.core import Primitive
    from jax.interpreters import mlir

    prim = Primitive("upper_cholesky_for_test")
    prim.def_abstract_eval(lambda x: x)
    mlir.register_lowering(prim, lambda ctx, x: [hlo.cholesky(x, lower=ir.BoolAttr.get(False))])
    return prim.bind


def test_upper_cholesky():
    upper = _upper_cholesky()
    a = _f((5, 5))
    spd = (a @ a.T + 0.5 * np.eye(5)).astype(np.float32)
    assert_onnx_matches_jax(lambda x: jnp.triu(upper(x)), spd, rtol=1e-4, atol=1e-5)


def test_complex_triangular_solve_matches_jax(stablehlo_linalg):
    a = (_well_conditioned((3, 3)) + 1j * _f((3, 3))).astype(np.complex64)
    assert_onnx_matches_jax(lambda a, b: lax.linalg.triangular_solve(a, b, left_side=True, lower=True), a, a,
                            rtol=1e-4, atol=1e-5)
