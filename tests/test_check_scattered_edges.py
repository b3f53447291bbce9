"""The second edge set moves the edge values onto other elements of a big input.

In the first edge set a big input holds them at its even elements, value k at element 2k (cycling):
in a [64, 4] float32 input, column 0 holds only every other value of the list, never -inf. A
program that keeps column 0 (a mask, a slice) saw no -inf, so an artifact wrong on -inf there
passed. The second set puts them on a seeded random half of the elements.
"""

from __future__ import annotations

import math

import numpy as np

from jaxconv import check_inputs
from jaxconv.check_inputs import edge_sets, edge_values
from jaxconv.program import trace
from jaxconv.verify import check_runner


def _sets(spec):
    program = trace(lambda x: x * 2, [spec])
    return program, edge_sets(program.signature, {}, 0)


def test_column_0_of_the_first_set_never_holds_minus_inf():
    """The premise: the even-element layout binds each value to one residue class of positions."""
    _, sets = _sets("f32[64,4]")
    first = sets[0].arrays[0]
    assert np.isnan(first[:, 0]).any() and np.isposinf(first[:, 0]).any()
    assert not np.isneginf(first[:, 0]).any()


def test_a_big_input_gets_a_second_set_with_every_value_elsewhere():
    _, sets = _sets("f32[64,4]")
    assert len(sets) == 2 and [s.label for s in sets] == ["edge", "edge"]
    first, second = sets[0].arrays[0], sets[1].arrays[0]
    assert first.shape == second.shape == (64, 4) and second.dtype == np.float32
    values = edge_values("float32")
    for v in values:  # each value still there, and somewhere it was not before
        here = (np.isnan(second) if np.isnan(v) else (second == v) & (np.signbit(second) == np.signbit(v)))
        before = (np.isnan(first) if np.isnan(v) else (first == v) & (np.signbit(first) == np.signbit(v)))
        assert here.any() and (here & ~before).any(), v
    assert np.isneginf(second[:, 0]).any() and np.isnan(second[:, 0]).any() and np.isposinf(second[:, 0]).any()
    # about half of the elements hold edge values, as in the first set
    assert (second != first).sum() > second.size // 4


def test_a_small_input_alone_gets_no_second_set_and_one_beside_a_big_one_starts_elsewhere():
    program = trace(lambda x: x * 2, ["f32[6]"])
    assert len(edge_sets(program.signature, {}, 0)) == 1  # 6 elements: held in turn, NaN and inf among them
    program = trace(lambda x, y: (x * 2, y * 2), ["f32[6]", "f32[64]"])
    first, second = edge_sets(program.signature, {}, 0)
    values = edge_values("float32")
    start = check_inputs.SCATTERED_START
    assert np.array_equal(first.arrays[0], values[:6], equal_nan=True)
    assert np.array_equal(second.arrays[0], values[start:start + 6], equal_nan=True)


def test_integers_and_bools_scatter_too():
    program = trace(lambda x, b: (x * 2, b), ["i32[40]", "bool[40]"])
    first, second = edge_sets(program.signature, {}, 0)
    x, b = second.arrays
    info = np.iinfo(np.int32)
    assert (x == info.min).any() and (x == info.max).any() and b.any() and not b.all()
    assert not np.array_equal(x, first.arrays[0])
    assert math.prod(x.shape) == 40


class _MinusInfBug:
    """An artifact for ``x[:, 0] * 2`` that returns NaN where column 0 holds -inf (jax.jit: -inf)."""

    kind = "numpy"

    def run(self, inputs):
        col = inputs[0][:, 0]
        with np.errstate(all="ignore"):
            return [np.where(np.isneginf(col), np.float32(np.nan), col * np.float32(2))]


def test_the_check_catches_a_bug_only_on_minus_inf_in_column_0():
    program = trace(lambda x: x[:, 0] * 2, ["f32[64,4]"])
    report = check_runner(_MinusInfBug(), "col0", program.fn, program.arg_specs, program.signature)
    assert not report.ok, report.table()
    rows = [(r.inputs, r.verdict) for r in report.rows]
    assert rows == [("random", "ok"), ("edge", "ok"), ("edge", "mismatch")], report.table()
    bad = [r for r in report.rows if not r.ok]
    assert "NaN positions differ" in bad[0].note and "jax.jit -inf, artifact nan" in bad[0].note, bad[0].note


def test_the_second_set_catches_ort_float64_log_softmax_after_a_mask(x64):
    """ONNX Runtime's float64 LogSoftmax is wrong on rows with NaN or inf (a log clamped at 1e-20:
    ``[1, NaN, 2]`` gives ``[45.05, NaN, 46.05]``). After a mask keeping the last two of 4 columns,
    the first set's kept elements hold no NaN/inf combination that shows it; the second set does."""
    import jax
    import jax.numpy as jnp
    from onnx import TensorProto, helper, numpy_helper

    from jaxconv.runtimes.onnxrt import OnnxRunner

    mask = np.zeros((16, 4), bool)
    mask[:, 2:] = True
    nodes = [helper.make_node("Constant", [], ["m"], value=numpy_helper.from_array(mask, "m")),
             helper.make_node("Constant", [], ["ninf"], value=numpy_helper.from_array(np.array(-np.inf), "ninf")),
             helper.make_node("Where", ["m", "x", "ninf"], ["y"]),
             helper.make_node("LogSoftmax", ["y"], ["output_0"], axis=-1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [16, 4])],
                              [helper.make_tensor_value_info("output_0", TensorProto.DOUBLE, [16, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    program = trace(lambda x: jax.nn.log_softmax(jnp.where(jnp.asarray(mask), x, -jnp.inf), axis=-1), ["f64[16,4]"])
    report = check_runner(OnnxRunner(model.SerializeToString()), "m.onnx", program.fn, program.arg_specs,
                          program.signature)
    assert [(r.inputs, r.verdict) for r in report.rows] == [("random", "ok"), ("edge", "ok"), ("edge", "mismatch")], (
        report.table())


def test_integer_scalars_see_max_zero_and_min():
    """A scalar takes one value per edge set; the float positions (NaN, inf) hold -2, -1 and MIN + 1 in the
    integer list, so an integer scalar never saw MAX or 0 (a loop bound, an index, a shift amount)."""
    program = trace(lambda n, m: (n + 1, m + 1), ["i32[]", "i32[]"])
    sets = edge_sets(program.signature, {}, 0)
    info = np.iinfo(np.int32)
    assert [int(s.arrays[0]) for s in sets] == [info.min, info.max, 0]
    assert [int(s.arrays[1]) for s in sets] == [-100, info.max, info.min]
    program = trace(lambda n, x: (n + 1, x * 2), ["u8[]", "f32[]"])
    sets = edge_sets(program.signature, {}, 0)
    assert [int(s.arrays[0]) for s in sets] == [0, 255, 0]
    x = [float(s.arrays[1]) for s in sets]  # floats keep theirs: 1.0, inf, NaN
    assert x[0] == 1.0 and np.isinf(x[1]) and np.isnan(x[2])
