"""stablehlo.dynamic_pad (edge padding as operands; jax.export does not emit it, other frontends and
StableHLO's dynamic test data do), checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from jaxconv.errors import UnsupportedError
from jaxconv.onnx.convert import stablehlo_file_to_onnx
from jaxconv.runtimes.onnxrt import OnnxRunner

MODULE = """
func.func @main(%x: tensor<?x3xf32>, %v: tensor<f32>, %lo: tensor<2xi32>, %hi: tensor<2xi32>) -> tensor<?x?xf32> {
  %interior = stablehlo.constant dense<INTERIOR> : tensor<2xi32>
  %0 = stablehlo.dynamic_pad %x, %v, %lo, %hi, %interior
    : (tensor<?x3xf32>, tensor<f32>, tensor<2xi32>, tensor<2xi32>, tensor<2xi32>) -> tensor<?x?xf32>
  return %0 : tensor<?x?xf32>
}
"""


def _model(tmp_path, interior: str):
    path = tmp_path / "pad.mlir"
    path.write_text(MODULE.replace("INTERIOR", interior))
    model = stablehlo_file_to_onnx(str(path))
    return model


@pytest.mark.parametrize("rows,lo,hi", [(2, [1, 0], [0, 2]), (4, [0, 2], [3, 1]), (5, [-2, 1], [1, -1])])
def test_dynamic_pad_edges_from_operands(tmp_path, rows, lo, hi):
    x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
    (got,) = OnnxRunner(_model(tmp_path, "0").SerializeToString()).run(
        [x, np.float32(-7), np.array(lo, np.int32), np.array(hi, np.int32)])
    expected = np.pad(x, [(max(a, 0), max(b, 0)) for a, b in zip(lo, hi)], constant_values=-7)
    crop = tuple(slice(max(-a, 0), n - max(-b, 0)) for a, b, n in zip(lo, hi, expected.shape))
    expected = expected[crop]
    np.testing.assert_array_equal(got, expected)


def test_dynamic_pad_with_interior_padding_is_refused(tmp_path):
    with pytest.raises(UnsupportedError, match="dynamic_pad with interior padding"):
        _model(tmp_path, "[1, 0]")
