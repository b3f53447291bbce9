"""stablehlo.sort, chlo.top_k and ApproxTopK lowered to stable TopK passes, compared with jax.jit.

Besides the usual tolerance check, every output must be bit-identical to jax.jit: sorting moves
values, it never computes them, so -0.0 vs +0.0, NaN placement and tie order all show.
"""

from __future__ import annotations

import os
import tempfile

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from jaxconv.errors import UnsupportedError
from lowering_check import assert_onnx_matches_jax, onnx_op_types, x64_for

SPECIALS = np.array([1.0, -0.0, 0.0, np.nan, -np.nan, 2.0, -np.inf, np.inf, 0.0, -0.0, 1.0, np.nan], np.float32)
TIES = np.array([3, 1, 2, 3, 1, 0, 2, 3, 1, 0, 0, 1])


def assert_bit_exact(fn, *args, opset=None):
    """assert_onnx_matches_jax, then the same outputs compared byte for byte."""
    from jaxconv.runtimes.onnxrt import OnnxRunner

    model = assert_onnx_matches_jax(fn, *args, opset=opset)
    got = OnnxRunner(model.SerializeToString()).run([np.asarray(a) for a in args])
    with x64_for(*args):
        expected = [np.asarray(e) for e in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.dtype == e.dtype and g.shape == e.shape, f"output_{i}: {g.dtype}{g.shape} != {e.dtype}{e.shape}"
        assert np.array_equal(g.view(np.uint8), e.view(np.uint8)), f"output_{i} not bit-identical:\n{g!r}\n{e!r}"
    return model


@pytest.mark.parametrize("opset", [21, 26])
def test_sort_and_argsort_nan_signed_zero_and_ties(opset):
    model = assert_bit_exact(lambda x: (jnp.sort(x), jnp.argsort(x)), SPECIALS, opset=opset)
    assert onnx_op_types(model).count("TopK") == 1


@pytest.mark.parametrize("opset", [21, 26])
def test_descending_sort_and_argsort(opset):
    assert_bit_exact(lambda x: (jnp.sort(x, descending=True), jnp.argsort(x, descending=True)), SPECIALS, opset=opset)


def test_lax_sort_single_operand():
    assert_bit_exact(lambda x: lax.sort(x), SPECIALS)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int16", "uint32", "int32", "int64", "uint64", "bool",
                                   "float16", "float64"])
def test_sort_argsort_top_k_dtypes(dtype):
    x = TIES.astype(dtype)
    assert_bit_exact(lambda v: (jnp.sort(v), jnp.argsort(v), jnp.argsort(v, descending=True), lax.top_k(v, 4)), x)


def test_wide_integers_stay_exact():
    # Neighbours that float64 cannot tell apart must keep their order.
    u = np.array([2**64 - 1, 2**63, 2**63 - 1, 2**64 - 2, 0, 1, 2**63 + 1, 2**63, 2**53 + 1, 2**53], np.uint64)
    i = np.array([2**63 - 1, -2**63, 2**62, 2**63 - 2, 0, -1, 2**53 + 1, 2**53, -2**53 - 1, -2**53], np.int64)
    assert_bit_exact(lambda v: (jnp.sort(v), jnp.argsort(v), lax.top_k(v, 3)), u)
    assert_bit_exact(lambda v: (jnp.sort(v), jnp.argsort(v), lax.top_k(v, 3)), i)


def test_bfloat16_sort():
    x = SPECIALS.astype(ml_dtypes.bfloat16)
    # bf16 results come back as f32 (exact); argsort/top_k indices show the order.
    assert_bit_exact(lambda v: (jnp.sort(v).astype(jnp.float32), jnp.argsort(v), lax.top_k(v, 5)[1]), x, opset=26)


def test_lexsort_and_multi_key_sort():
    keys = TIES.astype(np.int32)
    assert_bit_exact(lambda x, y: jnp.lexsort((x, y)), SPECIALS, keys)
    assert_bit_exact(lambda x, y: lax.sort((y, x), num_keys=2), SPECIALS, keys)
    assert_bit_exact(lambda x, y: lax.sort((y, x, jnp.arange(12)), num_keys=2), SPECIALS, keys)
    three = (TIES % 2).astype(np.uint8)
    assert_bit_exact(lambda a, b, c: lax.sort((a, b, c), num_keys=3), three, keys, SPECIALS)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_sort_along_each_axis(axis):
    x = np.random.default_rng(0).integers(0, 4, size=(3, 5, 4)).astype(np.float32)
    assert_bit_exact(lambda v: (jnp.sort(v, axis=axis), jnp.argsort(v, axis=axis, descending=True)), x)


def test_sort_with_symbolic_length():
    n = jax.export.symbolic_shape("n")[0]
    f = lambda v: (jnp.sort(v), jnp.argsort(v, descending=True))  # noqa: E731
    assert_onnx_matches_jax(f, SPECIALS, specs=[jax.ShapeDtypeStruct((n,), jnp.float32)],
                            inputs_for_run=[[SPECIALS[:5]]])


# ---- top_k -------------------------------------------------------------------------------------
@pytest.mark.parametrize("opset", [21, 26])
def test_top_k_total_order_with_signed_zero(opset):
    # lax.top_k orders by IEEE total order: +0.0 before -0.0, +NaN first.
    x = np.where(np.signbit(SPECIALS) & np.isnan(SPECIALS), np.float32(np.nan), SPECIALS)
    assert_bit_exact(lambda v: lax.top_k(v, 12), x.astype(np.float32), opset=opset)
    assert_bit_exact(lambda v: lax.top_k(v, 3), SPECIALS[np.isfinite(SPECIALS)], opset=opset)


def test_top_k_negative_nan_sorts_last_with_bitcast():
    # Needs BitCast (opset 26) to read the sign of a NaN.
    assert_bit_exact(lambda v: lax.top_k(v, 12), SPECIALS, opset=26)


def test_top_k_batched():
    x = np.random.default_rng(1).integers(-3, 3, size=(2, 3, 7)).astype(np.float32)
    assert_bit_exact(lambda v: lax.top_k(v, 4), x)


def test_approx_max_k_and_min_k():
    x = np.random.default_rng(2).integers(0, 6, size=(3, 8)).astype(np.float32)
    assert_bit_exact(lambda v: lax.approx_max_k(v, 3), x)
    assert_bit_exact(lambda v: lax.approx_min_k(v, 2, reduction_dimension=0), x)


# ---- what is not supported ---------------------------------------------------------------------
_ABS_COMPARATOR = """
module {
  func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = "stablehlo.sort"(%x) <{dimension = 0 : i64, is_stable = true}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %aa = stablehlo.abs %a : tensor<f32>
      %ab = stablehlo.add %a, %b : tensor<f32>
      %lt = stablehlo.compare LT, %aa, %ab, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    }) : (tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
"""


def test_arbitrary_comparator_is_reported():
    from jaxconv.onnx.convert import stablehlo_file_to_onnx

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "abs_sort.mlir")
        with open(path, "w") as f:
            f.write(_ABS_COMPARATOR)
        with pytest.raises(UnsupportedError) as info:
            stablehlo_file_to_onnx(path)
    message = str(info.value)
    assert "stablehlo.sort x1" in message
    assert "arbitrary comparators" in message and "stablehlo.abs in the comparator" in message  # |a| < a + b
    assert "\n" not in message


def test_comparator_reader_rejects_non_strict_order():
    from jaxconv.onnx.ops.sort import comparator_problem
    from jaxconv.stablehlo import ir as hir

    a, b = hir.Value(hir.TensorType("int32", ())), hir.Value(hir.TensorType("int32", ()))
    out = hir.Value(hir.TensorType("bool", ()))
    le = hir.Op("stablehlo.compare", [a, b], [out], {"comparison_direction": "LE", "compare_type": "SIGNED"}, [])
    problem = comparator_problem(hir.Block([a, b], [le], [out]))
    assert problem is not None and "strict LT/GT" in problem
