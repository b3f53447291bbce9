"""passes.clean_up keeps the graph outputs' types and shapes when it merges equal nodes."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir

from jaxconv.onnx import passes


def _two_equal_casts() -> ir.Model:
    """``squeeze(x, axes)`` (axes an input: no shape inferred for it) cast to int32 twice: once as the
    scalar output ``a``, once unshaped into a Neg."""
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([1]))
    axes = ir.Value(name="axes", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([1]))
    squeeze = ir.node("Squeeze", [x, axes])
    inner = ir.node("Cast", [squeeze.outputs[0]], {"to": ir.DataType.INT32})
    neg = ir.node("Neg", [inner.outputs[0]])
    out = ir.node("Cast", [squeeze.outputs[0]], {"to": ir.DataType.INT32})
    a, b = out.outputs[0], neg.outputs[0]
    a.name, a.type, a.shape = "a", ir.TensorType(ir.DataType.INT32), ir.Shape([])
    b.name, b.type, b.shape = "b", ir.TensorType(ir.DataType.INT32), ir.Shape([])
    graph = ir.Graph([x, axes], [b, a], nodes=[squeeze, inner, neg, out], opset_imports={"": 21}, name="g")
    return ir.Model(graph, ir_version=10)


def test_a_scalar_output_merged_with_an_equal_unshaped_value_keeps_its_shape():
    model = _two_equal_casts()
    passes.clean_up(model)
    assert sum(n.op_type == "Cast" for n in model.graph) == 1  # the two Casts were merged
    assert [o.name for o in model.graph.outputs] == ["b", "a"]
    assert [o.shape for o in model.graph.outputs] == [ir.Shape([]), ir.Shape([])]
    proto = ir.serde.serialize_model(model)
    onnx.checker.check_model(proto, full_check=True)
    import onnxruntime as ort

    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    b, a = sess.run(None, {"x": np.array([-7.9], np.float32), "axes": np.array([0], np.int64)})
    assert a == -7 and b == 7 and a.dtype == np.int32 and a.shape == ()
