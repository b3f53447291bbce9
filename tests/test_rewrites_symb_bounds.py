"""rewrites.shapes: a Slice's bounds stacked by a Concat (StableHLO's dynamic_slice over a symbolic length:
``x[:, 0]``, ``lax.dynamic_slice_in_dim``) given as constants while the rules run, so that ``row_slices``
reads them as it does in a static model. The numbers are those of the graph without the change, bit for bit
(NaN, ±inf, -0.0, ±FLT_MAX, subnormals in the inputs), and jax.jit's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx_ir as ir
import pytest
from jax import lax

import jaxconv
from jaxconv.onnx.rewrites import _constants as constants
from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites import row_slices, shapes
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_bits, assert_same_floats

F32 = np.finfo(np.float32)


def _inputs(s: int) -> np.ndarray:
    x = np.random.default_rng(s).standard_normal((2, s, 8)).astype(np.float32)
    x[0, 0, :6] = [np.nan, np.inf, -np.inf, -0.0, F32.max, F32.smallest_subnormal]
    x[1, 0, :3] = [-F32.max, 0.0, -F32.smallest_subnormal]
    x[1, -1, :] = -0.0
    return x


def _first_token(x):
    """Row-wise work, then a classifier's first token (``x[:, 0]``: a dynamic_slice whose start 0 is clamped
    to ``[0, s - 1]``)."""
    y = jnp.tanh(x * 0.5) - jnp.mean(x, axis=-1, keepdims=True)
    return y[:, 0] * 2.0


def _first_two(x):
    """``lax.dynamic_slice_in_dim`` of two rows from row 0 (start clamped to ``[0, s - 2]``)."""
    return lax.dynamic_slice_in_dim(jnp.exp(x), 0, 2, axis=1) + 1.0


def _from_row_two(x):
    """Two rows from row 2: the start is clamped to ``s - 2`` for short sequences, so it stays computed."""
    return lax.dynamic_slice_in_dim(jnp.exp(x), 2, 2, axis=1) + 1.0


def _bounds_when_row_slices_runs(fn, monkeypatch, known_vector=None) -> tuple[list[bool], object]:
    """(for each Slice of the graph row_slices sees, whether its starts and ends are constants; the model)."""
    seen: list[bool] = []
    rewrite = row_slices.rewrite

    def recording(graph: ir.Graph, opset: int) -> int:
        for node in m.each_node(graph, "Slice"):
            seen.append(all(m.const(v) is not None for v in node.inputs[1:3]))
        return rewrite(graph, opset)

    with monkeypatch.context() as patch:
        patch.setattr(row_slices, "rewrite", recording)
        if known_vector is not None:
            patch.setattr(shapes, "_known_vector", known_vector)
        rows = 1 if fn is _first_token else 2  # JAX's dynamic_slice needs the rows it cuts
        model = jaxconv.to_onnx(fn, "f32[2,s,8]", constraints=[f"s >= {rows}"], check=False)
    return seen, model


def _without_concat(value, depth=0):
    if _reads_a_concat(value):
        return None
    arr = constants.evaluate(value)
    return arr if arr is not None and arr.dtype.kind in "iu" else None


def _reads_a_concat(value, depth=0) -> bool:
    node = m.producer(value)
    if node is None or depth > 16:
        return False
    return node.op_type == "Concat" or any(_reads_a_concat(v, depth + 1) for v in node.inputs if v is not None)


def _check(fn, model, plain, sizes):
    runner, plain_runner = OnnxRunner(model.SerializeToString()), OnnxRunner(plain.SerializeToString())
    for s in sizes:
        x = _inputs(s)
        got = runner.run([x])
        assert_same_bits(got, plain_runner.run([x]))
        assert_same_floats(got[0], jax.jit(fn)(x), 1e-6, 1e-6)  # a mean's sum: XLA adds in its own order


@pytest.mark.parametrize("fn, sizes", [(_first_token, (1, 2, 7)), (_first_two, (2, 3, 9))],
                         ids=["first_token", "first_two"])
def test_settled_starts_are_constants_for_row_slices(fn, sizes, monkeypatch):
    seen, model = _bounds_when_row_slices_runs(fn, monkeypatch)
    plain_seen, plain = _bounds_when_row_slices_runs(fn, monkeypatch, known_vector=_without_concat)
    assert seen and all(seen)
    assert not all(plain_seen)  # the Concat of the clamped starts hid them
    _check(fn, model, plain, sizes)


def test_a_start_clamped_by_the_size_stays_computed(monkeypatch):
    seen, model = _bounds_when_row_slices_runs(_from_row_two, monkeypatch)
    assert seen and not any(seen)
    runner = OnnxRunner(model.SerializeToString())
    for s in (2, 3, 4, 9):
        x = _inputs(s)
        assert_same_floats(runner.run([x])[0], jax.jit(_from_row_two)(x), 1e-6, 0)  # ORT's Exp, XLA's


I32 = np.iinfo(np.int32)


@pytest.mark.parametrize("start, size", [(-3, 2), (I32.max - 1, 4), (I32.min, -1), (1, I32.max)])
def test_stacked_and_summed_bounds_fold_as_runtime_computes_them(start, size):
    """``Slice(x, Concat(Unsqueeze(a)), Concat(Unsqueeze(a)) + [n])`` in int32, sums that wrap included."""
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([6, 3]))
    graph = ir.Graph([x], [], nodes=[], opset_imports={"": 21})
    a = m.new_initializer(graph, np.array(start, np.int32), "a")
    n = m.new_initializer(graph, np.array([size], np.int32), "n")
    axis = m.new_initializer(graph, np.array([0], np.int64), "axis")
    unsqueeze = ir.node("Unsqueeze", [a, axis])
    starts = ir.node("Concat", [unsqueeze.outputs[0]], {"axis": 0})
    ends = ir.node("Add", [starts.outputs[0], n])
    cut = ir.node("Slice", [x, starts.outputs[0], ends.outputs[0]])
    graph.extend([unsqueeze, starts, ends, cut])
    cut.outputs[0].name, cut.outputs[0].dtype = "y", ir.DataType.FLOAT
    graph.outputs.append(cut.outputs[0])
    plain = ir.serde.serialize_model(ir.Model(graph, ir_version=10)).SerializeToString()

    assert shapes.rewrite(graph) == 2
    assert all(m.const(v) is not None for v in cut.inputs[1:3])
    with np.errstate(over="ignore"):
        assert int(m.const(cut.inputs[2])[0]) == int(np.int32(start) + np.int32(size))
    folded = ir.serde.serialize_model(ir.Model(graph, ir_version=10)).SerializeToString()
    data = np.arange(18, dtype=np.float32).reshape(6, 3)
    data[0, 0], data[1, 1], data[2, 2] = np.nan, -0.0, -np.inf
    assert_same_bits(OnnxRunner(folded).run([data]), OnnxRunner(plain).run([data]))
