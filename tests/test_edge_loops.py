"""``edge_loops``: which loops may keep edge values from ending, read from a jaxpr and from an ONNX model."""

from __future__ import annotations

import jax
import numpy as np
from jax import lax
from onnx import TensorProto, helper, numpy_helper

import jaxconv
from jaxconv import edge_loops


def chained(x):
    """A loop bounded by its counter whose result bounds a second loop: the first loop's trip count reads
    x, so its carry does too (1.0 doubled up to 50 times), and the second loop may run 2**50 trips."""
    c = lax.while_loop(lambda c: (c[0] < 50) & (c[1] < x.sum()), lambda c: (c[0] + 1, c[1] * 2.0 + 1.0), (0, 1.0))[1]
    return lax.while_loop(lambda v: v[0] < c, lambda v: (v[0] + 1.0, v[1] * 0.5), (0.0, x))[1]


def test_the_result_of_a_loop_whose_trip_count_reads_the_inputs_reads_them_too():
    spec, flat = [jax.ShapeDtypeStruct((4,), np.float32)], [np.zeros(4, np.float32)]
    found = edge_loops.data_dependent_loops(chained, spec, flat)
    assert found and len(found) == 1 and "test_edge_loops.py" in found[0], found


def test_counted_trips():
    assert edge_loops.counted_trips(0, 50, 1) == 50
    assert edge_loops.counted_trips(np.int32(3), np.int64(10), 2) == 4
    assert edge_loops.counted_trips(10, 0, 1) == 0
    assert edge_loops.counted_trips(0, 10, 0) is None and edge_loops.counted_trips(0, 10, -1) is None
    assert edge_loops.counted_trips(0, 1.5, 1) is None
    assert edge_loops.counted_trips(0, edge_loops.MAX_EDGE_TRIPS + 1, 1) is None


def _loop_model(m_input=None, m_const=None, cond_reads_x=True):
    """y = Loop(M, cond, y0=x): each trip doubles y; the body's condition is sum(y) < 100 (reads x) or True."""
    body_nodes = [helper.make_node("Mul", ["y_in", "two"], ["y_out"])]
    if cond_reads_x:
        body_nodes += [helper.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0),
                       helper.make_node("Less", ["s", "hundred"], ["cond_out"])]
    else:
        body_nodes += [helper.make_node("Identity", ["cond_in"], ["cond_out"])]
    body = helper.make_graph(
        body_nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("y_in", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("y_out", TensorProto.FLOAT, [4])])
    inits = [numpy_helper.from_array(np.float32(2), "two"), numpy_helper.from_array(np.float32(100), "hundred"),
             numpy_helper.from_array(np.bool_(True), "true")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])]
    m = ""
    if m_const is not None:
        inits.append(numpy_helper.from_array(np.int64(m_const), "m"))
        m = "m"
    if m_input:
        inputs.append(helper.make_tensor_value_info("n", TensorProto.INT64, []))
        m = "n"
    loop = helper.make_node("Loop", [m, "true", "x"], ["y"], name="the_loop", body=body)
    graph = helper.make_graph([loop], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def test_onnx_loops():
    assert edge_loops.onnx_open_loops(_loop_model()) == ["the_loop"]  # no M, the condition reads x
    assert edge_loops.onnx_open_loops(_loop_model(m_const=10)) == []  # at most 10 trips
    assert edge_loops.onnx_open_loops(_loop_model(m_const=10 ** 9)) == ["the_loop"]
    assert edge_loops.onnx_open_loops(_loop_model(m_const=10 ** 9, cond_reads_x=False)) == []  # 10**9 trips, always
    assert edge_loops.onnx_open_loops(_loop_model(m_input=True, cond_reads_x=False)) == ["the_loop"]  # M is an input


def test_onnx_loops_of_jaxconv_lowered_whiles():
    """jaxconv lowers a ``while`` to a Loop without M: the rule reads the body's condition."""
    def counted(x):
        return lax.fori_loop(0, jax.numpy.int32(3), lambda i, c: c * 0.5 + 1.0, x)

    def at_most(limit):
        return lambda x: lax.while_loop(lambda c: (c[0] < limit) & (c[1].sum() < 100.0),
                                        lambda c: (c[0] + 1, c[1] * 2.0), (0, x))[1]

    for fn, open_ in ((counted, False), (at_most(50), False), (at_most(edge_loops.MAX_EDGE_TRIPS + 1), True),
                      (chained, True)):
        model = jaxconv.to_onnx(fn, "f32[4]", check=False)
        assert bool(edge_loops.onnx_open_loops(model)) == open_, fn
