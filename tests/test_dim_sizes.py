"""jaxconv.onnx.dim_sizes: symbolic dimensions' sizes from the inputs' (names, jax.export's expressions,
and the names shape inference made up that an op equates to a known dimension)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from jaxconv.onnx import dim_sizes, thread_count


@pytest.mark.parametrize("name,expected", [
    ("b", 3), ("64*b", 192), ("b + 1", 4), ("floordiv(b*s, 4)", 3), ("mod(b, 2)", 1), ("max(b, 1)", 3),
    ("non_negative(b - 4)", 0), ("- s + b", -2), ("2*b*s - 3", 27),
    ("unk__3", None), ("b**2", None), ("__import__('os')", None), ("floordiv(b, 0)", None), ("b +", None),
    ("c*b", None), ("max(b, key=1)", None), ("1.5*b", None), (None, None)])
def test_dimension_expressions(name, expected):
    assert dim_sizes.size_of(name, {"b": 3, "s": 5}) == expected


def _value(name, dims, const=None):
    value = ir.Value(name=name, shape=ir.Shape(dims), type=ir.TensorType(ir.DataType.FLOAT))
    if const is not None:
        value.const_value = ir.tensor(np.asarray(const, np.int64))
        value.type = ir.TensorType(ir.DataType.INT64)
    return value


def _node(op, inputs, out_dims, **attrs):
    node = ir.node(op, inputs, attributes=attrs)
    node.outputs[0].shape = ir.Shape(out_dims)
    node.outputs[0].type = ir.TensorType(ir.DataType.FLOAT)
    return node


def _graph():
    """Conv -> Transpose -> Slice -> MatMul, each output's batch a name shape inference made up, and an Add
    that broadcasts a [1, ...] operand (its 1 equates nothing)."""
    x, w = _value("x", ["b", 8, 16, 16]), _value("w", [32, 8, 3, 3])
    conv = _node("Conv", [x, w], ["unk__1", 32, 16, 16], pads=[1, 1, 1, 1])
    nhwc = _node("Transpose", [conv.outputs[0]], ["unk__2", 16, 16, 32], perm=[0, 2, 3, 1])
    starts, ends, axes = _value("st", [1], [0]), _value("en", [1], [16]), _value("ax", [1], [3])
    half = _node("Slice", [nhwc.outputs[0], starts, ends, axes], ["unk__3", 16, 16, 16])
    one = _value("one", [1, 16, 16, 16])
    added = _node("Add", [half.outputs[0], one], ["unk__4", 16, 16, 16])
    m = _value("m", [16, 64])
    product = _node("MatMul", [added.outputs[0], m], ["unk__5", 16, 16, 64])
    nodes = [conv, nhwc, half, added, product]
    return ir.Graph([x, w, starts, ends, axes, one, m], [product.outputs[0]], nodes=nodes)


def test_made_up_names_take_the_sizes_ops_equate_them_to():
    found = dim_sizes.with_equated(_graph(), {"b": 3})
    assert found == {"b": 3, **{f"unk__{k}": 3 for k in range(1, 6)}}


def test_products_on_made_up_names_are_weighed():
    graph = _graph()
    conv = 2.0 * 3 * 32 * 16 * 16 * 8 * 3 * 3
    product = 2.0 * 3 * 16 * 16 * 16 * 64
    kernel, weight = 4.0 * 32 * 8 * 3 * 3, 4.0 * 16 * 64  # the right operands' float32 bytes
    assert thread_count.kernels_of(graph, sizes={"b": 3}).products == [(conv, 1, kernel), (product, 1, weight)]
    assert thread_count.weigh(graph) is None  # no size for b: unknown


def test_a_scans_stacked_rows_take_its_steps_and_its_body_rows():
    """A Scan over ``xs [t, b, 16]`` whose stacked output shape inference left as ``[unk__1, unk__2, 16]``:
    the rows are the steps, each row the body's output ``[b, 16]``; the carry out is its initial value."""
    h0, xs = _value("h0", ["b", 16]), _value("xs", ["t", "b", 16])
    h, x = _value("h", ["b", 16]), _value("x", ["b", 16])
    step = _node("Add", [h, x], ["b", 16])
    row = _node("Identity", [step.outputs[0]], ["b", 16])
    body = ir.Graph([h, x], [step.outputs[0], row.outputs[0]], nodes=[step, row])
    scan = ir.node("Scan", [h0, xs], attributes={"body": ir.AttrGraph("body", body), "num_scan_inputs": 1},
                   num_outputs=2)
    for out, dims in zip(scan.outputs, (["unk__3", 16], ["unk__1", "unk__2", 16])):
        out.shape, out.type = ir.Shape(dims), ir.TensorType(ir.DataType.FLOAT)
    graph = ir.Graph([h0, xs], list(scan.outputs), nodes=[scan])
    assert dim_sizes.with_equated(graph, {"b": 3, "t": 7}) == {"b": 3, "t": 7, "unk__1": 7, "unk__2": 3, "unk__3": 3}


def test_polynomials_of_sizes():
    b, s = dim_sizes.Poly.name("b"), dim_sizes.Poly.name("s")
    flops = 2.0 * (64 * b) * 128 * s - b + 3
    assert flops.value({"b": 3, "s": 5}) == 2 * 64 * 3 * 128 * 5 - 3 + 3
    assert flops.value({"b": 3}) is None
    assert (b * s) * b == b * (s * b) and (b * s) * b != b * s and b - b == 0 and b * 1 == b
    assert dim_sizes.Poly.from_json(flops.to_json()) == flops
    assert dim_sizes.size_of("64*b + s", {"b": b, "s": s}) == 64 * b + s
    assert dim_sizes.size_of("floordiv(b, 2)", {"b": b}) is None  # not a polynomial
    assert dim_sizes.size_of("floordiv(6*b*s, 2*s)", {"b": b, "s": s}) == 3 * b  # an exact quotient is
    assert dim_sizes.size_of("floordiv(6*b*s, 4*s)", {"b": b, "s": s}) is None
    assert dim_sizes.size_of("floordiv(6*b, s)", {"b": b, "s": s}) is None
    assert dim_sizes.size_of("floordiv(6*b, b + s)", {"b": b, "s": s}) is None
    assert dim_sizes.size_of("floordiv(12, 2*b)", {"b": b}) is None
    assert dim_sizes.size_of("max(b, 1)", {"b": b}) is None


@pytest.mark.parametrize("data", [[[1, {"b": 0}]], [[1, {"b": 1.5}]], [["1", {}]], [[1, {3: 1}]], 7, [[1]]])
def test_malformed_polynomials_are_refused(data):
    with pytest.raises((ValueError, TypeError, KeyError, AttributeError)):
        dim_sizes.Poly.from_json(data)


def test_a_reshape_target_computed_from_shapes_is_read():
    """``x.reshape(b, 4, s * 1, 32)`` on symbolic sizes: the target is a Concat of Shape slices, a constant
    and a ReduceProd (axes ``[0]``); the output's made-up names take b and s."""
    x = _value("x", ["b", 4, "s", 1, 32])
    shape_b = ir.node("Shape", [x], attributes={"start": 0, "end": 1})
    shape_s = ir.node("Shape", [x], attributes={"start": 2, "end": 3})
    four, one, axis0, last = (_value(n, [1], v) for n, v in (("four", [4]), ("one", [1]), ("ax", [0]), ("w", [32])))
    s_one = ir.node("Concat", [shape_s.outputs[0], one], attributes={"axis": 0})
    prod = ir.node("ReduceProd", [s_one.outputs[0], axis0], attributes={"keepdims": 1})
    target = ir.node("Concat", [shape_b.outputs[0], four, prod.outputs[0], last], attributes={"axis": 0})
    reshape = _node("Reshape", [x, target.outputs[0]], ["unk__1", 4, "unk__2", 32])
    nodes = [shape_b, shape_s, s_one, prod, target, reshape]
    graph = ir.Graph([x, four, one, axis0, last], [reshape.outputs[0]], nodes=nodes)
    assert dim_sizes.shape_entries(target.outputs[0]) == ["b", 4, "(s)*(1)", 32]
    assert dim_sizes.with_equated(graph, {"b": 3, "s": 5}) == {"b": 3, "s": 5, "unk__1": 3, "unk__2": 5}
    axis1 = _value("ax1", [1], [1])
    prod.replace_input_with(1, axis1)  # not all of the 1-D tensor: not read
    assert dim_sizes.shape_entries(target.outputs[0]) is None


@pytest.mark.parametrize("allowzero", [0, 1])
def test_a_reshape_targets_zeros_and_minus_one(allowzero):
    """Flax NNX's attention: ``[b, 4, s, 1, 32]`` reshaped to ``[0, 4, -1, 32]``. The 0 copies the input's
    b (allowzero off; with allowzero on it is a size of 0, and a -1 beside it is no size), the -1 is what
    the input's size leaves for it: s, and the product that reads it is weighed (it was not before: the
    -1 equated nothing, and a 0 made the output's first dimension 0 whatever allowzero said)."""
    x = _value("x", ["b", 4, "s", 1, 32])
    target = _value("target", [4], [0, 4, -1, 32])
    reshape = _node("Reshape", [x, target], ["unk__1", 4, "unk__2", 32], allowzero=allowzero)
    w = _value("w", [32, 8])
    product = _node("MatMul", [reshape.outputs[0], w], ["unk__1", 4, "unk__2", 8])
    graph = ir.Graph([x, target, w], [product.outputs[0]], nodes=[reshape, product])
    found = dim_sizes.with_equated(graph, {"b": 3, "s": 5})
    if allowzero:
        assert found["unk__1"] == 0 and "unk__2" not in found
        return
    assert found["unk__1"] == 3 and found["unk__2"] == 5
    b, s = dim_sizes.Poly.name("b"), dim_sizes.Poly.name("s")
    assert thread_count.kernels_of(graph, sizes={"b": b, "s": s}).products == [(2 * b * 4 * s * 32 * 8, 1, 4.0 * 32 * 8)]
