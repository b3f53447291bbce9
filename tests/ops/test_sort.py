"""stablehlo.sort: graph structure and refusals (the comparisons, byte for byte, are rows in
conformance/cases/op_sort.py).
"""

from __future__ import annotations

import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.errors import UnsupportedError
from lowering_check import assert_onnx_matches_jax, onnx_op_types, x64_for

SPECIALS = np.array([1.0, -0.0, 0.0, np.nan, -np.nan, 2.0, -np.inf, np.inf, 0.0, -0.0, 1.0, np.nan], np.float32)


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
