"""The shapes the rules read (rewrites._infer_shapes): ONNX's shape inference with data propagation, and
without it where data propagation fails, so that one failing node does not leave every rule without shapes."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from jaxconv.onnx import rewrites


def _outer_product_of_constants() -> ir.Model:
    """``pos[:, None] * freq[None, :]`` of values computed from constants (a rotary table's angles), then
    used on an input: onnx's data propagation takes the Unsqueezes' float outputs for 1-D shapes and fails
    on the Mul ("Invalid rank for Mul broadcasting: (64) vs (16)")."""
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([64, 16]))

    def const(name, arr):
        v = ir.Value(name=name, const_value=ir.tensor(arr))
        v.type, v.shape = ir.TensorType(ir.DataType.from_numpy(arr.dtype)), ir.Shape(arr.shape)
        return v

    iota, zero = const("iota", np.arange(64, dtype=np.float32)), const("zero", np.array(0.0, np.float32))
    freq, half = const("freq", np.linspace(0, 1, 16, dtype=np.float32)), const("half", np.array(0.5, np.float32))
    ax1, ax0 = const("ax1", np.array([1], np.int64)), const("ax0", np.array([0], np.int64))
    offset = ir.node("Unsqueeze", [zero, ax0])  # a scalar broadcast as the lowering writes it
    pos = ir.node("Add", [iota, offset.outputs[0]])
    scale = ir.node("Unsqueeze", [half, ax0])
    scaled = ir.node("Mul", [freq, scale.outputs[0]])
    rows = ir.node("Unsqueeze", [pos.outputs[0], ax1])
    cols = ir.node("Unsqueeze", [scaled.outputs[0], ax0])
    angles = ir.node("Mul", [rows.outputs[0], cols.outputs[0]])
    out = ir.node("Mul", [x, angles.outputs[0]])
    out.outputs[0].name = "y"
    out.outputs[0].type = ir.TensorType(ir.DataType.FLOAT)
    graph = ir.Graph([x], [out.outputs[0]], nodes=[offset, pos, scale, scaled, rows, cols, angles, out],
                     initializers=[iota, zero, freq, half, ax1, ax0], opset_imports={"": 21})
    return ir.Model(graph, ir_version=10)


def test_data_propagation_fails_on_this_graph():
    proto = ir.serde.serialize_model(_outer_product_of_constants())
    with pytest.raises(Exception, match="Invalid rank for Mul broadcasting"):
        onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True, data_prop=True)


def test_shapes_are_inferred_without_data_propagation_where_it_fails():
    model = _outer_product_of_constants()
    rewrites._infer_shapes(model)
    shapes = {v.name: v.shape for node in model.graph for v in node.outputs}
    angles = [node for node in model.graph if node.op_type == "Mul"][1].outputs[0]
    assert angles.shape == ir.Shape([64, 16])
    assert all(shape is not None for shape in shapes.values()), shapes

