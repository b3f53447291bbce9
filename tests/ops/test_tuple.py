"""stablehlo.tuple / get_tuple_element: JAX no longer emits them, other frontends still do."""


import numpy as np
import onnxruntime as ort

from jaxconv.onnx.convert import stablehlo_file_to_onnx, validate

MODULE = """
func.func public @main(%x: tensor<3xf32>, %n: tensor<i32>) -> (tensor<3xf32>, tensor<i32>) {
  %t = stablehlo.tuple %x, %n : tuple<tensor<3xf32>, tensor<i32>>
  %nested = stablehlo.tuple %t, %x : tuple<tuple<tensor<3xf32>, tensor<i32>>, tensor<3xf32>>
  %inner = stablehlo.get_tuple_element %nested[0] : (tuple<tuple<tensor<3xf32>, tensor<i32>>, tensor<3xf32>>) -> tuple<tensor<3xf32>, tensor<i32>>
  %a = stablehlo.get_tuple_element %inner[0] : (tuple<tensor<3xf32>, tensor<i32>>) -> tensor<3xf32>
  %b = stablehlo.get_tuple_element %inner[1] : (tuple<tensor<3xf32>, tensor<i32>>) -> tensor<i32>
  %c = stablehlo.get_tuple_element %nested[1] : (tuple<tuple<tensor<3xf32>, tensor<i32>>, tensor<3xf32>>) -> tensor<3xf32>
  %s = stablehlo.add %a, %c : tensor<3xf32>
  %m = stablehlo.multiply %b, %b : tensor<i32>
  return %s, %m : tensor<3xf32>, tensor<i32>
}
"""


def test_tuples_of_tuples_convert(tmp_path):
    path = tmp_path / "tuples.mlir"
    path.write_text(MODULE)
    model = stablehlo_file_to_onnx(str(path))
    validate(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.array([1.5, -2.0, 0.25], np.float32)
    names = [i.name for i in sess.get_inputs()]
    s, m = sess.run(None, dict(zip(names, [x, np.array(7, np.int32)])))
    np.testing.assert_array_equal(s, x + x)
    assert m == 49 and m.dtype == np.int32
