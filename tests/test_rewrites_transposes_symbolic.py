"""jaxconv.onnx.rewrites.transposes under a symbolic batch: a Transpose that only moves a size-1 axis of
values read from an input becomes a Reshape (a copied batch size); one of a mask computed from shapes
alone stays, for the rules after it that fold such masks through a Transpose. ONNX Runtime's outputs
are the same values."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper

from jaxconv.onnx.rewrites import transposes
from jaxconv.runtimes.onnxrt import OnnxRunner


def _model(from_shape: bool) -> onnx.ModelProto:
    """``Transpose([b, 4, 3, 1, 5], perm [0, 3, 1, 2, 4])`` of the input (plus one), or of a mask that
    compares the input's batch size with 0, broadcast to the input's shape."""
    nodes = [helper.make_node("Unsqueeze", ["x", "axis3"], ["x5"])]
    if from_shape:
        nodes += [helper.make_node("Shape", ["x5"], ["shape"]),
                  helper.make_node("ConstantOfShape", ["shape"], ["ones"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
                  helper.make_node("Greater", ["ones", "zero"], ["y"])]
        out_type = TensorProto.BOOL
    else:
        nodes.append(helper.make_node("Add", ["x5", "one"], ["y"]))
        out_type = TensorProto.FLOAT
    nodes.append(helper.make_node("Transpose", ["y"], ["t"], perm=[0, 3, 1, 2, 4]))
    nodes.append(helper.make_node("Not" if from_shape else "Neg", ["t"], ["out"]))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4, 3, 5])],
        [helper.make_tensor_value_info("out", out_type, ["b", 1, 4, 3, 5])],
        [helper.make_tensor("axis3", TensorProto.INT64, [1], [3]), helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
         helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])],
        value_info=[helper.make_tensor_value_info("y", out_type, ["b", 4, 3, 1, 5])])  # as the lowering declares it
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))


def _rewritten(proto: onnx.ModelProto) -> tuple[list[str], onnx.ModelProto]:
    model = ir.serde.deserialize_model(proto)
    transposes.rewrite(model.graph)
    ir.passes.common.RemoveUnusedNodesPass()(model)
    return [n.op_type for n in model.graph], ir.serde.serialize_model(model)


def _run(proto: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return OnnxRunner(proto.SerializeToString()).run([x])[0]


def test_a_unit_axis_move_of_input_values_is_a_reshape_at_any_batch():
    proto = _model(from_shape=False)
    ops, rewritten = _rewritten(proto)
    assert "Transpose" not in ops and "Reshape" in ops, ops
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 4, 3, 5)).astype(np.float32)
        np.testing.assert_array_equal(_run(rewritten, x), _run(proto, x))


def test_a_mask_from_shapes_keeps_its_transpose():
    ops, _ = _rewritten(_model(from_shape=True))
    assert "Transpose" in ops, ops
