"""Quantized StableHLO (``!quant.uniform``) through the ONNX lowering.

Expected numbers come from StableHLO's own test data (the interpreter's results) or from the
formulas of StableHLO's legalize-quant-to-math pass written out here in numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

from jaxconv.errors import UnsupportedError
from jaxconv.onnx.convert import stablehlo_file_to_onnx
from jaxconv.runtimes.onnxrt import OnnxRunner
from jaxconv.stablehlo.quant_types import parse


def _run(tmp_path, text: str, *inputs: np.ndarray) -> list[np.ndarray]:
    path = tmp_path / "quant.mlir"
    path.write_text(text)
    model = stablehlo_file_to_onnx(str(path))
    _record({n.op_type for n in model.graph.node})
    return OnnxRunner(model.SerializeToString()).run(list(inputs))


def _record(onnx_ops: set[str]) -> None:
    """Count the quantize/dequantize lowerings as exercised for the coverage check."""


def _quantize(x: np.ndarray, scale: np.ndarray, zp: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """legalize-quant-to-math: round_half_even(clamp(x / scale + zp)) in float32."""
    y = x.astype(np.float32) / scale.astype(np.float32) + zp.astype(np.float32)
    return np.round(np.clip(y, np.float32(lo), np.float32(hi))).astype(np.float32)


def test_parse_per_tensor_per_axis_and_storage_range():
    q = parse("!quant.uniform<i8:f32, 0.0039188104517319626:-128>")
    assert (q.bits, q.signed, q.storage_min, q.storage_max) == (8, True, -128, 127)
    assert (q.zero_points, q.axis) == ((-128,), None)
    q = parse("!quant.uniform<i8<-127:127>:f32:1, {0.1:-30, 0.5:-20}>")
    assert (q.storage_min, q.axis, q.scales, q.zero_points) == (-127, 1, (0.1, 0.5), (-30, -20))
    q = parse("!quant.uniform<u4:f32, 1.5E-5>")
    assert (q.signed, q.bits, q.storage_max, q.zero_points, q.carrier) == (False, 4, 15, (0,), "uint8")
    with pytest.raises(ValueError, match="storage width"):
        parse("!quant.uniform<i64:f32, 1.0>")


# @main of quantized/add_qi8.mlir: two quantizations with different scales, an add into a third.
ADD = """
func.func @main(%a: tensor<11xf32>, %b: tensor<11xf32>) -> tensor<11xf32> {
  %0 = stablehlo.uniform_quantize %b : (tensor<11xf32>) -> tensor<11x!quant.uniform<i8:f32, 0.0039188104517319626:-128>>
  %1 = stablehlo.uniform_quantize %a : (tensor<11xf32>) -> tensor<11x!quant.uniform<i8:f32, 0.0039172410964965817:-128>>
  %2 = stablehlo.add %1, %0 : (tensor<11x!quant.uniform<i8:f32, 0.0039172410964965817:-128>>, tensor<11x!quant.uniform<i8:f32, 0.0039188104517319626:-128>>) -> tensor<11x!quant.uniform<i8:f32, 0.0077341673420924769:-128>>
  %3 = stablehlo.uniform_dequantize %2 : (tensor<11x!quant.uniform<i8:f32, 0.0077341673420924769:-128>>) -> tensor<11xf32>
  return %3 : tensor<11xf32>
}
"""


ADD_A = np.array([0, -0.0, 1, 0.125, 0.1, 3.14159274, np.inf, np.inf, -np.inf, np.inf, 1.4013e-45], np.float32)
ADD_B = np.array([0, -0.0, 7, 0.75, 0.3, 3.14159274, 0, np.inf, -np.inf, -np.inf, -1.4013e-45], np.float32)
ADD_EXPECTED = np.array([0, 0, 1.97221267, 0.873960912, 0.402176708, 1.97221267, 0.997707605, 1.97221267, 0,
                         0.997707605, 0], np.float32)


def test_quantized_add_matches_the_stablehlo_test_data(tmp_path):
    (got,) = _run(tmp_path, ADD, ADD_A, ADD_B)
    np.testing.assert_array_equal(got, ADD_EXPECTED)


# @main of one quantized/dot_general_dtypes_and_precision_*.mlir: an integer dot product
DOT = """
func.func @main(%a: tensor<1x3x4xf32>, %b: tensor<1x4x3xf32>) -> tensor<1xf32> {
  %0 = stablehlo.uniform_quantize %b : (tensor<1x4x3xf32>) -> tensor<1x4x3x!quant.uniform<i8:f32, 0.0039153145808799592>>
  %1 = stablehlo.uniform_quantize %a : (tensor<1x3x4xf32>) -> tensor<1x3x4x!quant.uniform<i8:f32, 0.0039166809297075458>>
  %2 = stablehlo.dot_general %1, %0, batching_dims = [0] x [0], contracting_dims = [2, 1] x [1, 2] : (tensor<1x3x4x!quant.uniform<i8:f32, 0.0039166809297075458>>, tensor<1x4x3x!quant.uniform<i8:f32, 0.0039153145808799592>>) -> tensor<1x!quant.uniform<i32:f32, 1.533503795273843E-5>>
  %3 = stablehlo.uniform_quantize %2 : (tensor<1x!quant.uniform<i32:f32, 1.533503795273843E-5>>) -> tensor<1x!quant.uniform<i8:f32, 0.0051740104076909085:-20>>
  %4 = stablehlo.uniform_dequantize %3 : (tensor<1x!quant.uniform<i8:f32, 0.0051740104076909085:-20>>) -> tensor<1xf32>
  return %4 : tensor<1xf32>
}
"""


def test_quantized_dot_general_matches_the_stablehlo_test_data(tmp_path):
    a = np.array([[[-1.02716792, -0.84180355, -1.21495497, 1.22473526],
                   [1.533764, 3.72483683, -3.63489795, 1.59403718], [-2.40816736, -1.31785822, -1.78571689, 0.202816486]]], np.float32)
    b = np.array([[[2.14761162, 2.50920868, -4.64897203], [1.72184336, -1.84444284, -1.14315307],
                   [-1.28549385, 2.20468378, 1.76219583], [-3.49526167, -2.27656484, 2.42410755]]],
                 np.float32)
    (got,) = _run(tmp_path, DOT, a, b)
    np.testing.assert_array_equal(got, np.array([-0.558793128], np.float32))


def test_per_axis_quantize_adds_the_zero_point_before_rounding(tmp_path):
    """Per-axis scales along dim 1; x / scale lands on .5 ties, where an odd zero point decides."""
    text = """
func.func @main(%x: tensor<3x2xf32>) -> (tensor<3x2xf32>) {
  %0 = stablehlo.uniform_quantize %x : (tensor<3x2xf32>) -> tensor<3x2x!quant.uniform<i8:f32:1, {0.5:1, 0.25:-3}>>
  %1 = stablehlo.uniform_dequantize %0 : (tensor<3x2x!quant.uniform<i8:f32:1, {0.5:1, 0.25:-3}>>) -> tensor<3x2xf32>
  return %1 : tensor<3x2xf32>
}
"""
    x = np.array([[0.25, 0.125], [-0.75, 40.0], [100.0, -0.375]], np.float32)
    scale, zp = np.array([0.5, 0.25], np.float32), np.array([1, -3], np.float32)
    q = _quantize(x, scale, zp, -128, 127)
    expected = (q - zp) * scale
    (got,) = _run(tmp_path, text, x)
    np.testing.assert_array_equal(got, expected)
    assert got[0, 0] == 0.5  # round(0.5 + 1) = 2, not round(0.5) + 1 = 1 as QuantizeLinear would give


def test_quantized_constant_keeps_its_storage_integers(tmp_path):
    text = """
func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
  %c = "stablehlo.constant"() {value = dense<[16777217, -7, 3]> : tensor<3xi32>} : () -> tensor<3x!quant.uniform<i32:f32, 0.5:2>>
  %0 = stablehlo.uniform_dequantize %c : (tensor<3x!quant.uniform<i32:f32, 0.5:2>>) -> tensor<3xf32>
  %1 = stablehlo.add %0, %x : tensor<3xf32>
  return %1 : tensor<3xf32>
}
"""
    (got,) = _run(tmp_path, text, np.zeros(3, np.float32))
    np.testing.assert_array_equal(got, np.array([8388607.5, -4.5, 0.5], np.float32))


def test_requantize_and_elementwise_op_in_float(tmp_path):
    """tanh on a quantized value: dequantize, tanh, quantize; then a requantization to another scale."""
    text = """
func.func @main(%x: tensor<5xf32>) -> tensor<5xf32> {
  %0 = stablehlo.uniform_quantize %x : (tensor<5xf32>) -> tensor<5x!quant.uniform<i8:f32, 0.03:5>>
  %1 = stablehlo.tanh %0 : (tensor<5x!quant.uniform<i8:f32, 0.03:5>>) -> tensor<5x!quant.uniform<i8:f32, 0.01:-7>>
  %2 = stablehlo.uniform_quantize %1 : (tensor<5x!quant.uniform<i8:f32, 0.01:-7>>) -> tensor<5x!quant.uniform<u8:f32, 0.02:100>>
  %3 = stablehlo.uniform_dequantize %2 : (tensor<5x!quant.uniform<u8:f32, 0.02:100>>) -> tensor<5xf32>
  return %3 : tensor<5xf32>
}
"""
    x = np.array([-3.0, -0.4, 0.0, 0.33, 2.0], np.float32)
    q0 = _quantize(x, np.float32(0.03), np.float32(5), -128, 127)
    t = np.tanh((q0 - 5) * np.float32(0.03))
    q1 = _quantize(t, np.float32(0.01), np.float32(-7), -128, 127)
    merged = np.float32(0.01 / 0.02)
    merged_zp = np.float32(100 - (-7) * (0.01 / 0.02))
    q2 = np.round(np.clip(q1 * merged + merged_zp, 0, 255))
    (got,) = _run(tmp_path, text, x)
    np.testing.assert_allclose(got, (q2 - 100) * np.float32(0.02), rtol=0, atol=1e-7)


def test_quantized_op_without_a_lowering_is_named(tmp_path):
    text = """
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.uniform_quantize %x : (tensor<4xf32>) -> tensor<4x!quant.uniform<i8:f32, 0.5>>
  %1 = stablehlo.reverse %0, dims = [0] : tensor<4x!quant.uniform<i8:f32, 0.5>>
  %2 = stablehlo.uniform_dequantize %1 : (tensor<4x!quant.uniform<i8:f32, 0.5>>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}
"""
    path = tmp_path / "q.mlir"
    path.write_text(text)
    with pytest.raises(UnsupportedError, match=r"stablehlo\.reverse x1 \(no quantized form"):
        stablehlo_file_to_onnx(str(path))


def test_quantized_argument_and_bitcast_to_storage(tmp_path):
    """A quantized graph input holds its storage integers; bitcast_convert to and from i8 (as TF's
    quantizer emits) keeps them."""
    text = """
func.func @main(%q: tensor<4x!quant.uniform<i8:f32, 0.5:1>>) -> (tensor<4xi8>, tensor<4xf32>) {
  %0 = stablehlo.bitcast_convert %q : (tensor<4x!quant.uniform<i8:f32, 0.5:1>>) -> tensor<4xi8>
  %1 = stablehlo.bitcast_convert %0 : (tensor<4xi8>) -> tensor<4x!quant.uniform<i8:f32, 0.5:1>>
  %2 = stablehlo.uniform_dequantize %1 : (tensor<4x!quant.uniform<i8:f32, 0.5:1>>) -> tensor<4xf32>
  return %0, %2 : tensor<4xi8>, tensor<4xf32>
}
"""
    q = np.array([-128, 0, 1, 127], np.int8)
    bits, values = _run(tmp_path, text, q)
    np.testing.assert_array_equal(bits, q)
    np.testing.assert_array_equal(values, (q.astype(np.float32) - 1) * np.float32(0.5))


def _q(x: np.ndarray, scale: float, zp: int) -> np.ndarray:
    return _quantize(x, np.float32(scale), np.float32(zp), -128, 127).astype(np.int64)


def test_dot_general_with_a_zero_point_is_exact_integer_arithmetic(tmp_path):
    """An lhs zero point (StableHLO requires none on the rhs) and a long contraction: the int32 dot of
    the centred operands, as legalize-quant-to-math computes it; float loses integers past 2**24."""
    k = 4096
    text = f"""
func.func @main(%a: tensor<2x{k}xf32>, %b: tensor<{k}x3xf32>) -> tensor<2x3xf32> {{
  %0 = stablehlo.uniform_quantize %a : (tensor<2x{k}xf32>) -> tensor<2x{k}x!quant.uniform<i8:f32, 0.5:-3>>
  %1 = stablehlo.uniform_quantize %b : (tensor<{k}x3xf32>) -> tensor<{k}x3x!quant.uniform<i8:f32, 0.25>>
  %2 = stablehlo.dot_general %0, %1, contracting_dims = [1] x [0] : (tensor<2x{k}x!quant.uniform<i8:f32, 0.5:-3>>, tensor<{k}x3x!quant.uniform<i8:f32, 0.25>>) -> tensor<2x3x!quant.uniform<i32:f32, 0.125>>
  %3 = stablehlo.uniform_dequantize %2 : (tensor<2x3x!quant.uniform<i32:f32, 0.125>>) -> tensor<2x3xf32>
  return %3 : tensor<2x3xf32>
}}
"""
    rng = np.random.default_rng(0)
    a = rng.uniform(55, 63, size=(2, k)).astype(np.float32)
    b = rng.uniform(25, 31, size=(k, 3)).astype(np.float32)
    acc = (_q(a, 0.5, -3) + 3) @ _q(b, 0.25, 0)
    assert acc.max() > 2 ** 24
    (got,) = _run(tmp_path, text, a, b)
    np.testing.assert_array_equal(got, acc.astype(np.float32) * np.float32(0.125))


def test_nhwc_convolution_is_integer_arithmetic_with_the_input_zero_point_padded(tmp_path):
    """SAME padding pads the input with its zero point (a zero after centring); kernel zero point 0."""
    text = """
func.func @main(%x: tensor<1x4x4x512xf32>, %w: tensor<3x3x512x2xf32>) -> tensor<1x4x4x2xf32> {
  %0 = stablehlo.uniform_quantize %x : (tensor<1x4x4x512xf32>) -> tensor<1x4x4x512x!quant.uniform<i8:f32, 0.5:7>>
  %1 = stablehlo.uniform_quantize %w : (tensor<3x3x512x2xf32>) -> tensor<3x3x512x2x!quant.uniform<i8:f32, 0.25>>
  %2 = stablehlo.convolution(%0, %1) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x4x4x512x!quant.uniform<i8:f32, 0.5:7>>, tensor<3x3x512x2x!quant.uniform<i8:f32, 0.25>>) -> tensor<1x4x4x2x!quant.uniform<i32:f32, 0.125>>
  %3 = stablehlo.uniform_dequantize %2 : (tensor<1x4x4x2x!quant.uniform<i32:f32, 0.125>>) -> tensor<1x4x4x2xf32>
  return %3 : tensor<1x4x4x2xf32>
}
"""
    rng = np.random.default_rng(1)
    x = rng.uniform(40, 60, size=(1, 4, 4, 512)).astype(np.float32)
    w = rng.uniform(20, 30, size=(3, 3, 512, 2)).astype(np.float32)
    centred = np.pad(_q(x, 0.5, 7) - 7, [(0, 0), (1, 1), (1, 1), (0, 0)])
    patches = np.lib.stride_tricks.sliding_window_view(centred, (3, 3), axis=(1, 2))  # 1,4,4,512,3,3
    acc = np.einsum("bhwcij,ijco->bhwo", patches, _q(w, 0.25, 0))
    assert acc.max() > 2 ** 24
    (got,) = _run(tmp_path, text, x, w)
    np.testing.assert_array_equal(got, acc.astype(np.float32) * np.float32(0.125))


@pytest.mark.parametrize("storage", ["i8", "u8", "i16", "u16", "i32"])
def test_dequantize_feeding_a_transpose_loads_in_onnx_runtime(tmp_path, storage):
    """ONNX Runtime's QDQ propagation puts a QuantizeLinear after a Transpose that a DequantizeLinear
    feeds; for int8 and int32 storage it then cannot load its own model, so those dequantize by
    arithmetic."""
    q = f"!quant.uniform<{storage}:f32, 0.5>"
    text = f"""
func.func @main(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {{
  %0 = stablehlo.uniform_quantize %x : (tensor<2x3xf32>) -> tensor<2x3x{q}>
  %1 = stablehlo.uniform_dequantize %0 : (tensor<2x3x{q}>) -> tensor<2x3xf32>
  %2 = stablehlo.transpose %1, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return %2 : tensor<3x2xf32>
}}
"""
    x = np.array([[0.0, 1.0, 2.5], [3.0, 7.25, 60.0]], np.float32)
    (got,) = _run(tmp_path, text, x)
    np.testing.assert_array_equal(got, (np.round(x / 0.5) * 0.5).T)


def test_quantized_portable_artifact(tmp_path):
    """A .mlirbc portable artifact with quantized types reads like the text."""
    from jaxlib.mlir.dialects import stablehlo as shlo

    path = tmp_path / "add.mlirbc"
    path.write_bytes(shlo.serialize_portable_artifact_str("module {\n" + ADD + "\n}\n", shlo.get_current_version()))
    (got,) = OnnxRunner(stablehlo_file_to_onnx(str(path)).SerializeToString()).run([ADD_A, ADD_B])
    np.testing.assert_array_equal(got, ADD_EXPECTED)
