"""dot_general graph structure; triangular_solve and cholesky against jax.jit (their StableHLO ops need a
JAX lowering swapped in while the test runs). The dot_general comparisons are rows in conformance/cases/op_linalg.py."""

from __future__ import annotations

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from lowering_check import assert_onnx_matches_jax, assert_same_floats, convert_and_run, onnx_op_types

RNG = np.random.default_rng(0)


def _f(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def test_matmul_2d_uses_single_matmul():
    model = assert_onnx_matches_jax(lambda a, b: a @ b, _f((3, 4)), _f((4, 5)))
    assert "Einsum" not in onnx_op_types(model)
    assert onnx_op_types(model).count("MatMul") == 1


_NO_SUM = [  # dots with nothing to sum over: batch dimensions only, an outer product, a contraction of size 1
    ("bslh,sh->bslh", (2, 8, 3, 4), (8, 4), "b, 8, 3, 4", "8, 4"),
    ("bslh,sh->bslh", (2, 8, 3, 4), (8, 4), "b, s, 3, 4", "s, 4"),
    ("bi,bj->bij", (3, 5), (3, 2), "b, 5", "b, 2"),
    ("bik,bkj->bij", (3, 4, 1), (3, 1, 2), "b, 4, 1", "b, 1, 2"),
    ("ik,k->ik", (5, 4), (4,), "n, 4", "4"),
]


@pytest.mark.parametrize("equation,lhs,rhs,lhs_dims,rhs_dims", _NO_SUM)
def test_a_dot_with_nothing_to_sum_is_one_mul_without_reshapes(equation, lhs, rhs, lhs_dims, rhs_dims):
    """One product per element, broadcast into the result's layout: no shape computed at run time on any
    sizes (RoFormer's rotary einsum on a symbolic batch kept a Shape, Concat and Reshape pair around its
    Mul), no Reshape of the result, no MatMul (which adds -0 to +0), and jax.jit's bits, NaN, inf and -0
    included, at several symbolic sizes."""
    import jax

    fn = lambda a, b: jnp.einsum(equation, a, b)  # noqa: E731
    scope = jax.export.SymbolicScope()
    specs = [jax.ShapeDtypeStruct(jax.export.symbolic_shape(d, scope=scope), np.float32) for d in (lhs_dims, rhs_dims)]
    sizes = {"b": (1, 3), "s": (1, 8), "n": (1, 5)}
    for k in range(2):
        def grow(shape, dims):
            names = [d.strip() for d in dims.split(",")]
            return tuple(sizes[n][k] if n in sizes else d for n, d in zip(names, shape))

        a, b = _f(grow(lhs, lhs_dims)), _f(grow(rhs, rhs_dims))
        a.reshape(-1)[:3] = [np.nan, np.inf, -0.0][:a.size]
        b.reshape(-1)[:3] = [0.0, 2.0, np.inf][:b.size]
        ops, (got,) = convert_and_run(fn, a, b, specs=specs)
        assert ops["Mul"] == 1 and not ops["MatMul"] and not ops["Shape"] and not ops["Concat"], ops
        assert ops["Reshape"] + ops["Unsqueeze"] + ops["Squeeze"] <= 2, ops  # one per operand at most
        assert_same_floats(got, jax.jit(fn)(a, b), 0, 0)  # -0.0 * 2.0 stays -0.0


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
