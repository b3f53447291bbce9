"""The rules' readings of values computed from constants: ``_intervals`` (bounds whatever the inputs) and
``_constants`` (exact values), each checked against ONNX Runtime running the same graph."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from jaxconv.onnx.rewrites import _constants as constants
from jaxconv.onnx.rewrites import _intervals as intervals
from jaxconv.runtimes.onnxrt import OnnxRunner

_SHAPE = [3, 4]
_EDGES = np.array([0.0, -0.0, 1.0, -1.0, 0.5, 1e9, -1e9, np.inf, -np.inf, 3e38, -3e38, 1e-40], np.float32)
_ARITH = ("Add", "Sub", "Mul", "Min", "Max")
_COMPARE = ("Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Equal")
_LOGIC = ("And", "Or", "Xor")


class _Program:
    """A random graph over a float input ``x``, a bool input ``b`` and constants of edge values."""

    def __init__(self, rng: np.random.Generator):
        self.rng, self.nodes, self.inits = rng, [], []
        self.floats, self.bools = ["x"], ["b"]

    def _name(self) -> str:
        return f"v{len(self.nodes) + len(self.inits)}"

    def _const(self, kind: str) -> str:
        name = self._name()
        shape = [[], [1, 4], _SHAPE][self.rng.integers(3)]
        if kind == "f":
            arr = self.rng.choice(_EDGES, size=shape).astype(np.float32)
        else:
            arr = self.rng.random(shape) < 0.5
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def _pick(self, kind: str) -> str:
        pool = self.floats if kind == "f" else self.bools
        return self._const(kind) if self.rng.random() < 0.3 else pool[self.rng.integers(len(pool))]

    def _add(self, op: str, inputs: list[str], kind: str, **attrs) -> None:
        out = self._name()
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        (self.floats if kind == "f" else self.bools).append(out)

    def grow(self, steps: int) -> str:
        for _ in range(steps):
            choice = self.rng.integers(7)
            if choice <= 1:
                self._add(str(self.rng.choice(_ARITH)), [self._pick("f"), self._pick("f")], "f")
            elif choice == 2:
                self._add(str(self.rng.choice(_COMPARE)), [self._pick("f"), self._pick("f")], "b")
            elif choice == 3:
                self._add(str(self.rng.choice(_LOGIC)), [self._pick("b"), self._pick("b")], "b")
            elif choice == 4:
                self._add("Where", [self._pick("b"), self._pick("f"), self._pick("f")], "f")
            elif choice == 5:
                self._add("Cast", [self._pick("b")], "f", to=TensorProto.FLOAT)
            elif self.rng.random() < 0.5:
                self._add("Neg", [self._pick("f")], "f")
            else:
                self._add("Not", [self._pick("b")], "b")
        return self.floats[-1] if self.rng.random() < 0.5 else self.bools[-1]

    def model(self, output: str) -> onnx.ModelProto:
        kind = TensorProto.FLOAT if output in self.floats else TensorProto.BOOL
        graph = helper.make_graph(
            self.nodes + [helper.make_node("Identity", [output], ["out"])], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, _SHAPE),
             helper.make_tensor_value_info("b", TensorProto.BOOL, _SHAPE)],
            [helper.make_tensor_value_info("out", kind, None)], self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def _bounds_of_output(proto: onnx.ModelProto) -> tuple[np.ndarray, np.ndarray]:
    model = ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(proto))  # as the rules see it
    return intervals.evaluate(model.graph.outputs[0])


@pytest.mark.parametrize("seed", range(6))
def test_every_run_lies_within_the_bounds(seed):
    rng = np.random.default_rng(seed)
    for _ in range(40):
        program = _Program(rng)
        proto = program.model(program.grow(int(rng.integers(1, 8))))
        lo, hi = _bounds_of_output(proto)
        runner = OnnxRunner(proto.SerializeToString())
        for _ in range(4):
            x = rng.choice(_EDGES, size=_SHAPE).astype(np.float32)
            x = np.where(rng.random(_SHAPE) < 0.5, rng.standard_normal(_SHAPE).astype(np.float32) * 100, x)
            b = rng.random(_SHAPE) < 0.5
            (got,) = runner.run([x, b])
            got = got.astype(np.float64)
            ok = np.isnan(got) | ((got >= lo) & (got <= hi))
            assert ok.all(), (onnx.helper.printable_graph(proto.graph), got, lo, hi)


def test_a_causal_mask_and_an_input_padding_mask_are_filled_where_the_causal_mask_is():
    causal = np.tril(np.ones((4, 4), bool))
    nodes = [helper.make_node("Unsqueeze", ["pad", "axes"], ["pad4"]),
             helper.make_node("And", ["causal", "pad4"], ["keep"]),
             helper.make_node("Not", ["keep"], ["fill"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("pad", TensorProto.BOOL, [2, 4])],
                              [helper.make_tensor_value_info("fill", TensorProto.BOOL, None)],
                              [numpy_helper.from_array(causal, "causal"),
                               numpy_helper.from_array(np.array([1, 2], np.int64), "axes")])
    model = ir.serde.deserialize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))
    fill = model.graph.outputs[0]
    np.testing.assert_array_equal(np.broadcast_to(intervals.evaluate(fill)[0] >= 1, (2, 1, 4, 4)),
                                  np.broadcast_to(~causal, (2, 1, 4, 4)))
    keep = fill.producer().inputs[0]
    assert not (intervals.evaluate(keep)[0] >= 1).any()  # the padding may remove any causal place


def _scatter_model(indices: np.ndarray, reduction: str | None) -> ir.Model:
    attrs = {} if reduction is None else {"reduction": reduction}
    nodes = [helper.make_node("Concat", ["a", "a2"], ["data"], axis=0),
             helper.make_node("ScatterND", ["data", "idx", "upd"], ["out"], **attrs)]
    inits = [numpy_helper.from_array(np.arange(8, dtype=np.float32).reshape(2, 4), "a"),
             numpy_helper.from_array(-np.arange(4, dtype=np.float32).reshape(1, 4), "a2"),
             numpy_helper.from_array(indices, "idx"),
             numpy_helper.from_array(np.full(indices.shape[:-1] + (4,) * (2 - indices.shape[-1]), 9, np.float32),
                                     "upd")]
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("indices", [[[0, 1], [2, 3], [-1, 0]], [[1], [0]]])
def test_concat_and_scatter_of_constants_evaluate_as_onnx_runtime_runs_them(indices):
    proto = _scatter_model(np.array(indices, np.int64), None)
    got = constants.evaluate(ir.serde.deserialize_model(proto).graph.outputs[0])
    (want,) = OnnxRunner(proto.SerializeToString()).run([])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("indices, reduction", [([[0, 1], [0, 1]], None), ([[0, 1], [0, -3]], None),
                                                 ([[0, 1]], "add"), ([[3, 0]], None)])
def test_a_scatter_whose_result_onnx_leaves_open_or_that_combines_is_not_evaluated(indices, reduction):
    """Repeated indices (-3 is 1 of 4) are undefined in ONNX; a reduction or an index out of range is left out."""
    proto = _scatter_model(np.array(indices, np.int64), reduction)
    assert constants.evaluate(ir.serde.deserialize_model(proto).graph.outputs[0]) is None


def test_a_lookup_padded_and_sliced_is_bounded_by_its_table_and_the_pad_value():
    """Gather at ids from the inputs (a table with jnp.take's NaN row: it bounds nothing), then a Pad with
    -1e10 and a Slice; every run lies within the bounds, and the padded columns are known exactly."""
    table = np.array([[0.5, -2.0], [3.0, 1.0], [np.nan, np.nan]], np.float32)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0),
             helper.make_node("Pad", ["rows", "pads", "fill"], ["padded"]),
             helper.make_node("Slice", ["padded", "starts", "ends", "axes"], ["out"])]
    inits = [numpy_helper.from_array(table, "table"),
             numpy_helper.from_array(np.array([0, 1, 0, 3], np.int64), "pads"),
             numpy_helper.from_array(np.array(-1e10, np.float32), "fill"),
             numpy_helper.from_array(np.array([1], np.int64), "starts"),
             numpy_helper.from_array(np.array([6], np.int64), "ends"),
             numpy_helper.from_array(np.array([1], np.int64), "axes")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [4])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    lo, hi = _bounds_of_output(proto)
    assert lo.shape == hi.shape == (4, 5)
    np.testing.assert_array_equal(lo[:, :1], -2.0)
    np.testing.assert_array_equal(hi[:, :1], 3.0)
    np.testing.assert_array_equal(lo[:, 2:], -1e10)
    np.testing.assert_array_equal(hi[:, 2:], -1e10)
    runner = OnnxRunner(proto.SerializeToString())
    for ids in ([0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 1]):
        (got,) = runner.run([np.array(ids, np.int64)])
        assert ((got >= lo) & (got <= hi)).all()
