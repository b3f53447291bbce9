"""jaxconv.onnx.rewrites._bounds: bounds on the magnitude of a graph's values (NaN let through, no infinity),
checked against the values ONNX Runtime computes on extreme inputs."""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from jaxconv.onnx.rewrites import _bounds

_TABLE = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
_W = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)


def _model(nodes, inputs, output, inits):
    outputs = [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)]
    tensors = [numpy_helper.from_array(v, k) for k, v in inits.items()]
    graph = helper.make_graph(nodes, "g", inputs, outputs, tensors)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _run(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _bound_and_run(model, feeds):
    """(the bound of the graph's output, ONNX Runtime's output on ``feeds``)."""
    return _bounds.magnitude(ir.from_proto(model).graph.outputs[0]), _run(model, feeds)


_IDS = helper.make_tensor_value_info("ids", TensorProto.INT32, [2, 5])
_X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 4])


def _lookup_chain():
    """Gather of a table, a NaN fill, a product by a constant, tanh, softmax, a layer norm, sums."""
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"]),
             helper.make_node("Less", ["ids", "zero"], ["neg"]),
             helper.make_node("Unsqueeze", ["neg", "last"], ["neg3"]),
             helper.make_node("Where", ["neg3", "nan", "e"], ["f"]),
             helper.make_node("MatMul", ["f", "w"], ["p"]),
             helper.make_node("Softmax", ["p"], ["s"], axis=-1),
             helper.make_node("Tanh", ["p"], ["t"]),
             helper.make_node("Add", ["s", "t"], ["u"]),
             helper.make_node("Mul", ["u", "p"], ["v"]),
             helper.make_node("LayerNormalization", ["v", "g", "b"], ["n"], axis=-1),
             helper.make_node("Sum", ["n", "v", "u"], ["out"])]
    inits = {"table": _TABLE, "zero": np.array(0, np.int32), "last": np.array([2], np.int64),
             "nan": np.array(np.nan, np.float32), "w": _W, "g": np.array([2.0, -1.0, 0.5], np.float32),
             "b": np.array([0.0, 3.0, -1.0], np.float32)}
    return _model(nodes, [_IDS], "out", inits)


def test_a_lookup_chain_is_bounded_and_the_bound_holds():
    model = _lookup_chain()
    ids = np.random.default_rng(2).integers(-1, 10, (2, 5)).astype(np.int32)
    ids[0, 0] = -1  # a NaN row
    bound, out = _bound_and_run(model, {"ids": ids})
    p = np.max(np.abs(_TABLE)) * np.max(np.sum(np.abs(_W), axis=0))
    v = 2 * p
    expected = math.sqrt(3) * 2 + 3 + v + 2  # the norm, v, u
    assert expected <= bound <= expected * 1.2
    assert np.isnan(out[0, 0]).all() and np.nanmax(np.abs(out)) <= bound


@pytest.mark.parametrize("case", ["float input", "divided by data", "square root", "exp of big", "overflow"])
def test_unbounded_values(case):
    """A float input, a division by a computed value, a square root (NaN of a negative is fine, but it is not
    known here), exp of a value up to 1000, a product that overflows float32: no bound."""
    gather = helper.make_node("Gather", ["table", "ids"], ["e"])
    inits = {"table": _TABLE, "big": np.array(1e30, np.float32), "k": np.array(1000.0, np.float32)}
    if case == "float input":
        model = _model([helper.make_node("Tanh", ["x"], ["t"]), helper.make_node("Add", ["x", "t"], ["out"])],
                       [_X], "out", {})
    else:
        last = {"divided by data": helper.make_node("Div", ["e", "e"], ["out"]),
                "square root": helper.make_node("Sqrt", ["e"], ["out"]),
                "exp of big": helper.make_node("Exp", ["ek"], ["out"]),
                "overflow": helper.make_node("Mul", ["eb", "eb"], ["out"])}[case]
        extra = [helper.make_node("Mul", ["e", "k"], ["ek"]), helper.make_node("Mul", ["e", "big"], ["eb"])]
        model = _model([gather, *extra, last], [_IDS], "out", inits)
    assert _bounds.magnitude(ir.from_proto(model).graph.outputs[0]) == math.inf


def test_bounded_whatever_the_operand():
    """Softmax, tanh and a layer norm bound their output even of an unbounded input (a float input)."""
    nodes = [helper.make_node("Softmax", ["x"], ["s"], axis=-1), helper.make_node("Tanh", ["x"], ["t"]),
             helper.make_node("LayerNormalization", ["x", "g"], ["n"], axis=-1),
             helper.make_node("Sum", ["s", "t", "n"], ["out"])]
    model = _model(nodes, [_X], "out", {"g": np.full(4, 3.0, np.float32)})
    x = np.random.default_rng(3).standard_normal((2, 5, 4)).astype(np.float32) * 1e30
    x[0, 0, 0] = np.inf
    bound, out = _bound_and_run(model, {"x": x})
    assert bound == pytest.approx((1 + 1 + math.sqrt(4) * 3 * _bounds.ROUNDING) * _bounds.ROUNDING)
    assert np.nanmax(np.abs(out)) <= bound and np.isfinite(out[1]).all()


def test_reductions():
    """A sum over an axis of 5 grows the bound five times, a mean keeps it (each times the rounding
    margin)."""
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"]),
             helper.make_node("ReduceSum", ["e", "axis"], ["s"], keepdims=1),
             helper.make_node("ReduceMean", ["e", "axis"], ["m"], keepdims=1),
             helper.make_node("Concat", ["s", "m"], ["out"], axis=1)]
    model = _model(nodes, [_IDS], "out", {"table": _TABLE, "axis": np.array([1], np.int64)})
    graph = ir.from_proto(model).graph
    for v in graph:  # the reduced axis' size, as shape inference gives it
        if v.op_type == "Gather":
            v.outputs[0].shape = ir.Shape([2, 5, 4])
    largest = float(np.max(np.abs(_TABLE)))
    assert _bounds.magnitude(graph.outputs[0]) == pytest.approx(5 * largest * _bounds.ROUNDING)
    ids = np.random.default_rng(4).integers(0, 10, (2, 5)).astype(np.int32)
    assert np.max(np.abs(_run(model, {"ids": ids}))) <= 5 * largest * _bounds.ROUNDING


@pytest.mark.parametrize("limits", ["min only", "max only", "both", "computed min"])
def test_clip(limits):
    """Clip(x, lo, hi) lies in [lo, hi] where both are given; with one limit, x's bound or the limit's (a max
    of 1 leaves -100 as it is)."""
    lo, hi = np.array(-2.0, np.float32), np.array(1.0, np.float32)
    names = {"min only": ["e", "lo"], "max only": ["e", "", "hi"], "both": ["e", "lo", "hi"],
             "computed min": ["e", "big", "hi"]}[limits]
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e0"]),
             helper.make_node("Mul", ["e0", "k"], ["e"]), helper.make_node("Mul", ["e0", "k2"], ["big0"]),
             helper.make_node("ReduceMax", ["big0"], ["big"], keepdims=0),
             helper.make_node("Clip", names, ["out"])]
    inits = {"table": _TABLE, "k": np.array(100.0, np.float32), "k2": np.array(1e4, np.float32), "lo": lo,
             "hi": hi}
    model = _model(nodes, [_IDS], "out", inits)
    largest = float(np.max(np.abs(_TABLE)))
    want = {"min only": 100 * largest * _bounds.ROUNDING, "max only": 100 * largest * _bounds.ROUNDING,
            "both": 2.0, "computed min": 1e4 * largest * _bounds.ROUNDING}[limits]
    bound = _bounds.magnitude(ir.from_proto(model).graph.outputs[0])
    assert bound == pytest.approx(want)
    ids = np.arange(10, dtype=np.int32).reshape(2, 5)
    assert np.max(np.abs(_run(model, {"ids": ids}))) <= bound


@pytest.mark.parametrize("masked", [False, True, "moved"])
def test_attention_probabilities_over_any_length_keep_the_bound_of_v(masked):
    """Softmax probabilities (times a 0/1 mask; moved by Transposes that keep the last axis last) @ v over a
    contracted length not known when converting: each result is a convex combination of v's rows, so it is
    bounded by v (a sum of ``s`` products would have no bound without ``s``); ORT's results at s = 1, 7 and
    300 stay within it."""
    ids = helper.make_tensor_value_info("ids", TensorProto.INT32, [2, "s"])
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"]),
             helper.make_node("MatMul", ["e", "w"], ["v"]),
             helper.make_node("Transpose", ["v"], ["vt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["v", "vt"], ["scores"]),
             helper.make_node("Softmax", ["scores"], ["p"], axis=-1)]
    probs = "p"
    if masked:
        nodes += [helper.make_node("Greater", ["scores", "zero"], ["keep"]),
                  helper.make_node("Cast", ["keep"], ["keepf"], to=TensorProto.FLOAT),
                  helper.make_node("Mul", ["p", "keepf"], ["pm"])]
        probs = "pm"
    if masked == "moved":  # [b, s, s] -> [s, b, s] and back, as a head-major layout moves them
        nodes += [helper.make_node("Transpose", [probs], ["pt"], perm=[1, 0, 2]),
                  helper.make_node("Transpose", ["pt"], ["pb"], perm=[1, 0, 2])]
        probs = "pb"
    nodes.append(helper.make_node("MatMul", [probs, "v"], ["out"]))
    model = _model(nodes, [ids], "out", {"table": _TABLE, "w": _W, "zero": np.array(0.0, np.float32)})
    graph = ir.from_proto(model).graph
    v_bound = float(np.max(np.abs(_TABLE))) * float(np.max(np.sum(np.abs(_W), axis=0))) * _bounds.ROUNDING
    assert _bounds.magnitude(graph.outputs[0]) == pytest.approx(v_bound * _bounds.ROUNDING)
    for s in (1, 7, 300):
        ids_in = np.random.default_rng(s).integers(0, 10, (2, s)).astype(np.int32)
        assert np.max(np.abs(_run(model, {"ids": ids_in}))) <= v_bound * _bounds.ROUNDING
    nodes[4] = helper.make_node("Softmax", ["scores"], ["p"], axis=1)  # over the rows: not a convex combination
    model = _model(nodes, [ids], "out", {"table": _TABLE, "w": _W, "zero": np.array(0.0, np.float32)})
    assert _bounds.magnitude(ir.from_proto(model).graph.outputs[0]) == math.inf


def _rms(eps: float, divisor_from_x: bool = True):
    """x / sqrt(mean(x**2) + eps) over the last axis, then / sqrt(4) computed from a constant (a head's
    scale before the folding)."""
    nodes = [helper.make_node("Pow", ["x", "two"], ["sq"]),
             helper.make_node("ReduceMean", ["sq" if divisor_from_x else "y", "last"], ["ms"], keepdims=1),
             helper.make_node("Add", ["ms", "eps"], ["me"]),
             helper.make_node("Sqrt", ["me"], ["rms"]),
             helper.make_node("Div", ["x", "rms"], ["n"]),
             helper.make_node("Sqrt", ["four"], ["two_c"]),
             helper.make_node("Div", ["n", "two_c"], ["out"])]
    inits = {"two": np.array(2.0, np.float32), "last": np.array([-1], np.int64), "eps": np.array(eps, np.float32),
             "four": np.array(4.0, np.float32)}
    inputs = [_X] + ([] if divisor_from_x else [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 4])])
    return _model(nodes, inputs, "out", inits)


def test_an_rms_norm_is_bounded_by_the_root_of_its_row_and_the_bound_holds():
    x = np.random.default_rng(2).standard_normal((2, 5, 4)).astype(np.float32)
    x[0, 0] = [1e30, 0.0, 0.0, 0.0]  # the squares overflow: 0 and NaN
    x[0, 1] = [5.0, 0.0, 0.0, 0.0]  # one element carries the row: sqrt(4) / 2
    x[0, 2] = [np.nan, 1.0, 2.0, 3.0]
    x[1, 0] = 0.0
    bound, out = _bound_and_run(_rms(1e-6), {"x": x})
    assert bound == pytest.approx(math.sqrt(4) / 2 * _bounds.ROUNDING ** 2)
    assert np.nanmax(np.abs(out)) <= bound and np.isclose(np.nanmax(np.abs(out)), 1.0, rtol=1e-5)
    assert not np.isinf(out).any()


@pytest.mark.parametrize("case", ["no epsilon", "another row's mean"])
def test_a_division_by_another_computed_value_bounds_nothing(case):
    model = _rms(0.0) if case == "no epsilon" else _rms(1e-6, divisor_from_x=False)
    assert _bounds.magnitude(ir.from_proto(model).graph.outputs[0]) == math.inf


def test_a_conv_grows_by_its_largest_kernel_sum_and_the_bound_holds():
    """A patch embedding (stride = kernel, a bias): each output a kernel's products plus the bias, at most the
    input's bound times the largest sum of one output channel's kernel magnitudes, plus the bias."""
    w = np.random.default_rng(3).standard_normal((6, 3, 2, 2)).astype(np.float32)
    b = np.random.default_rng(4).standard_normal(6).astype(np.float32)
    nodes = [helper.make_node("Tanh", ["x"], ["t"]),
             helper.make_node("Transpose", ["w_hwio"], ["w"], perm=[3, 2, 0, 1]),  # laid out from jax's HWIO
             helper.make_node("Conv", ["t", "w", "b"], ["out"], kernel_shape=[2, 2], strides=[2, 2])]
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])
    model = _model(nodes, [x_info], "out", {"w_hwio": np.ascontiguousarray(w.transpose(2, 3, 1, 0)), "b": b})
    worst = np.sign(w[np.argmax(np.abs(w).reshape(6, -1).sum(1))])[None] * 50.0  # tanh -> +-1 on that kernel
    x = np.tile(worst, (1, 1, 2, 2)).astype(np.float32)
    bound, out = _bound_and_run(model, {"x": x})
    expected = float(np.max(np.abs(w.astype(np.float64)).reshape(6, -1).sum(1))) + float(np.max(np.abs(b)))
    assert bound == pytest.approx(expected * _bounds.ROUNDING)  # (tanh at most 1, the Conv one rounding step)
    assert np.abs(out).max() <= bound and np.abs(out).max() > 0.5 * expected
