"""The broadcast rewrite on hand-built graphs: unique initializer names, no Expand moved onto bfloat16."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort

from jaxconv.onnx.rewrites import broadcasts


def _input(name: str, dtype: ir.DataType, shape: list[int]) -> ir.Value:
    return ir.Value(name=name, type=ir.TensorType(dtype), shape=ir.Shape(shape))


def _model(graph: ir.Graph) -> ir.Model:
    return ir.Model(graph, ir_version=10)


def test_one_constant_shrunk_two_ways_gets_two_initializers_that_run():
    x = _input("x", ir.DataType.FLOAT, [4, 4])
    y = _input("y", ir.DataType.FLOAT, [4, 1])
    full = np.full((4, 4), 3.0, np.float32)
    c = ir.Value(name="c", const_value=ir.tensor(full), type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([4, 4]))
    add_x = ir.node("Add", [x, c])
    add_y = ir.node("Add", [y, c])
    out_x, out_y = add_x.outputs[0], add_y.outputs[0]
    out_x.name, out_y.name = "out_x", "out_y"
    for v in (out_x, out_y):
        v.type, v.shape = ir.TensorType(ir.DataType.FLOAT), ir.Shape([4, 4])
    graph = ir.Graph([x, y], [out_x, out_y], nodes=[add_x, add_y], initializers=[c], name="g",
                     opset_imports={"": 21})
    assert broadcasts.rewrite(graph) == 2
    names = [v.name for v in graph.initializers.values()]
    assert len(names) == len(set(names))
    proto = ir.serde.serialize_model(_model(graph))
    onnx.checker.check_model(proto, full_check=True)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    xv = np.arange(16, dtype=np.float32).reshape(4, 4)
    yv = np.arange(4, dtype=np.float32).reshape(4, 1)
    got_x, got_y = sess.run(None, {"x": xv, "y": yv})
    np.testing.assert_array_equal(got_x, xv + full)
    np.testing.assert_array_equal(got_y, yv + full)


def test_cast_to_bfloat16_is_not_moved_below_an_expand():
    a = _input("a", ir.DataType.FLOAT, [1, 3])
    shape = ir.Value(name="s", const_value=ir.tensor(np.array([4, 3], np.int64)),
                     type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([2]))
    expand = ir.node("Expand", [a, shape])
    cast = ir.node("Cast", [expand.outputs[0]], {"to": ir.DataType.BFLOAT16})
    cast.outputs[0].type = ir.TensorType(ir.DataType.BFLOAT16)
    cast.outputs[0].name = "out"
    graph = ir.Graph([a], [cast.outputs[0]], nodes=[expand, cast], initializers=[shape], name="g", opset_imports={"": 21})
    broadcasts.rewrite(graph)
    assert [n.op_type for n in graph] == ["Expand", "Cast"]
