"""stablehlo.sort with comparators beyond JAX's usual one: computed keys, reversed arguments,
constants defined inside the comparator, and comparators that must be refused by name."""

from __future__ import annotations

import os

import numpy as np
import pytest

from conformance import testdata
from jaxconv.errors import UnsupportedError
from jaxconv.onnx.convert import stablehlo_file_to_onnx
from jaxconv.runtimes.onnxrt import OnnxRunner

TESTDATA = testdata.default_root()
needs_testdata = pytest.mark.skipif(not os.path.isdir(TESTDATA), reason=f"no StableHLO test data at {TESTDATA}")


def _sort_module(comparator: str, dtype: str = "f32", n: int = 7) -> str:
    return f"""
func.func @main(%x: tensor<{n}x{dtype}>, %i: tensor<{n}xi32>) -> (tensor<{n}x{dtype}>, tensor<{n}xi32>) {{
  %0:2 = "stablehlo.sort"(%x, %i) <{{dimension = 0 : i64, is_stable = true}}> ({{
  ^bb0(%a: tensor<{dtype}>, %b: tensor<{dtype}>, %c: tensor<i32>, %d: tensor<i32>):
{comparator}
  }}) : (tensor<{n}x{dtype}>, tensor<{n}xi32>) -> (tensor<{n}x{dtype}>, tensor<{n}xi32>)
  return %0#0, %0#1 : tensor<{n}x{dtype}>, tensor<{n}xi32>
}}
"""


def _run(tmp_path, text: str, *inputs: np.ndarray) -> list[np.ndarray]:
    path = tmp_path / "sort.mlir"
    path.write_text(text)
    return OnnxRunner(stablehlo_file_to_onnx(str(path)).SerializeToString()).run(list(inputs))


X = np.array([3.0, -1.0, -3.0, 2.0, 1.0, -2.0, 3.0], np.float32)
I = np.arange(7, dtype=np.int32)


def test_key_computed_in_the_comparator(tmp_path):
    """Descending by magnitude: LT on -|x| of each side; ties keep their order (stable)."""
    text = _sort_module("""
    %0 = stablehlo.abs %a : tensor<f32>
    %1 = stablehlo.negate %0 : tensor<f32>
    %2 = stablehlo.abs %b : tensor<f32>
    %3 = stablehlo.negate %2 : tensor<f32>
    %4 = stablehlo.compare LT, %1, %3, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %4 : tensor<i1>""")
    values, index = _run(tmp_path, text, X, I)
    order = np.argsort(-np.abs(X), kind="stable")
    np.testing.assert_array_equal(index, order)
    np.testing.assert_array_equal(values, X[order])


def test_reversed_arguments_sort_descending(tmp_path):
    text = _sort_module("""
    %0 = stablehlo.compare LT, %b, %a, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %0 : tensor<i1>""")
    values, index = _run(tmp_path, text, X, I)
    order = np.argsort(-X, kind="stable")
    np.testing.assert_array_equal(index, order)


def test_computed_key_then_second_operand(tmp_path):
    """Lexicographic: a key computed from x (x * x), then the index operand descending."""
    text = _sort_module("""
    %0 = stablehlo.multiply %a, %a : tensor<f32>
    %1 = stablehlo.multiply %b, %b : tensor<f32>
    %2 = stablehlo.compare LT, %0, %1, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %3 = stablehlo.compare EQ, %0, %1, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %4 = stablehlo.compare GT, %c, %d, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %5 = stablehlo.and %3, %4 : tensor<i1>
    %6 = stablehlo.or %2, %5 : tensor<i1>
    stablehlo.return %6 : tensor<i1>""")
    _, index = _run(tmp_path, text, X, I)
    order = np.lexsort((-I, X * X))
    np.testing.assert_array_equal(index, order)


@pytest.mark.parametrize("body,why", [
    ("""
    %0 = stablehlo.add %a, %b : tensor<f32>
    %1 = stablehlo.compare LT, %0, %a, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %1 : tensor<i1>""", "stablehlo.add in the comparator"),
    ("""
    %0 = stablehlo.negate %a : tensor<f32>
    %1 = stablehlo.compare LT, %0, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %1 : tensor<i1>""", "stablehlo.negate in the comparator"),
])
def test_comparators_that_are_not_orders_are_refused(tmp_path, body, why):
    path = tmp_path / "sort.mlir"
    path.write_text(_sort_module(body))
    with pytest.raises(UnsupportedError, match=r"stablehlo\.sort x1 \(sort comparator is not a lexicographic") as e:
        stablehlo_file_to_onnx(str(path))
    assert why in str(e.value)


@needs_testdata
@pytest.mark.parametrize("name", [
    "sort_float32_5.mlir",  # canonicalizing with distinct zero constants defined in the comparator
    "sort_int32_100_int32_100_float32_100.mlir",
    "dynamic/percentile_dynamic.mlir",  # a key made from the float's bits (bitcast_convert)
])
def test_sort_test_data_files_pass(name):
    r = testdata.run_file(name)
    assert r.status == "pass" and r.checks >= 1, f"{r.stage}: {r.error}"


@needs_testdata
@pytest.mark.parametrize("name", ["top_k_float32_5_chlo.mlir", "reduce_precision_float64.mlir"])
def test_test_data_that_needs_opset_26_says_so(name):
    """top_k's total order puts -NaN last: only BitCast (opset 26) reads a NaN's sign; the runner
    tries opset 26 and keeps the default opset's failure in the note."""
    r = testdata.run_file(name)
    assert r.status == "pass", f"{r.stage}: {r.error}"
    assert r.error.startswith("passes at opset 26 only; at the default opset: ")
