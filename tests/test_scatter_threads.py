"""Combining scatters (segment sums, ``x.at[i].add``) at indices that may repeat run on one ONNX Runtime
thread (jaxconv.onnx.thread_count.colliding_scatter), and drop their out-of-range updates into scratch
rows where the updates outnumber the operand (jaxconv.onnx.ops.indexing).

ONNX Runtime 1.32 splits a ScatterND's updates over its intra-op threads; two threads combining into one
element race (a segment sum on two threads differed from the sequential sum in 3 of 200 runs, once by
2.6). The model records one thread, which jaxconv's sessions (the check among them) use: there, the
sums are the sequential ones, bit for bit, on every run."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnx_ir as ir
import pytest

import jaxconv
from jaxconv.onnx import thread_count
from jaxconv.runtimes.onnxrt import OnnxRunner

_N, _E, _F = 50, 600, 16


def _recorded(model: onnx.ModelProto) -> str | None:
    return {p.key: p.value for p in model.metadata_props}.get(thread_count.THREADS_KEY)


def _sequential_segment_sum(u: np.ndarray, ids: np.ndarray, n: int) -> np.ndarray:
    """float32 sums in update order, out-of-range ids dropped (XLA's scatter)."""
    out = np.zeros((n,) + u.shape[1:], np.float32)
    for k, i in enumerate(ids):
        if 0 <= i < n:
            out[i] = out[i] + u[k]
    return out


@pytest.mark.parametrize("reduce", ["sum", "max", "prod"])
def test_a_segment_reduction_records_one_thread(reduce):
    op = {"sum": jax.ops.segment_sum, "max": jax.ops.segment_max, "prod": jax.ops.segment_prod}[reduce]
    model = jaxconv.to_onnx(lambda u, ids: op(u, ids, _N), f"f32[{_E},{_F}]", f"i32[{_E}]", check=False)
    assert thread_count.colliding_scatter(ir.from_proto(model).graph) is not None
    assert _recorded(model) == "1"


def test_constant_indices_without_repeats_do_not_collide():
    """(Such a small model records one thread anyway, as one with no products and no big elementwise
    kernels: test_thread_count_elementwise.py.)"""
    model = jaxconv.to_onnx(lambda x: x.at[np.array([0, 2, 4])].add(1.0), "f32[6]", check=False)
    assert [n.op_type for n in model.graph.node] == ["ScatterND"]
    assert thread_count.colliding_scatter(ir.from_proto(model).graph) is None
    repeated = jaxconv.to_onnx(lambda x: x.at[np.array([0, 2, 0])].add(1.0), "f32[6]", check=False)
    assert thread_count.colliding_scatter(ir.from_proto(repeated).graph) is not None
    assert _recorded(repeated) == "1"


def test_a_segment_sum_is_the_sequential_sum_on_every_run():
    """Many updates per row, ids out of range on both sides: jaxconv's runner (the recorded thread)
    gives the float32 sums in update order, bit for bit, run after run, as jax.jit does."""
    rng = np.random.default_rng(0)
    u = rng.standard_normal((_E, _F)).astype(np.float32)
    ids = rng.integers(-5, _N + 5, _E).astype(np.int32)
    fn = jax.jit(lambda u, ids: jax.ops.segment_sum(u, ids, _N))
    model = jaxconv.to_onnx(fn, f"f32[{_E},{_F}]", f"i32[{_E}]")  # checked against jax.jit
    want = _sequential_segment_sum(u, ids, _N)
    np.testing.assert_array_equal(np.asarray(fn(u, ids)), want)
    runner = OnnxRunner(model.SerializeToString())
    for _ in range(30):
        np.testing.assert_array_equal(runner.run([u, ids])[0], want)


def test_many_updates_drop_out_of_range_rows_into_scratch_rows():
    """Updates outnumbering the result's elements: no select over the updates (a Where per update
    element), a padded operand and a Slice back; the edge values (NaN, inf, -0.0) in dropped updates
    leave no trace."""
    def fn(u, ids):
        return jax.ops.segment_sum(u, ids, _N)

    model = jaxconv.to_onnx(fn, f"f32[{_E},{_F}]", f"i32[{_E}]")
    ops = [n.op_type for n in model.graph.node]
    assert "Slice" in ops and ops.count("Where") == 1, ops  # the one Where picks each update's row
    u = np.full((_E, _F), np.nan, np.float32)
    ids = np.full(_E, _N + 3, np.int32)
    u[::3], ids[::3] = -0.0, 1
    got = OnnxRunner(model.SerializeToString()).run([u, ids])[0]
    np.testing.assert_array_equal(got, _sequential_segment_sum(u, ids, _N))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(np.asarray(jax.jit(fn)(u, ids))))


def test_few_updates_into_a_large_operand_keep_the_select():
    """``x.at[i].add(v)`` of a few rows into many: the select over the updates costs less than copying
    the operand twice."""
    model = jaxconv.to_onnx(lambda x, i, v: x.at[i].add(v), "f32[1000,16]", "i32[4]", "f32[4,16]")
    ops = [n.op_type for n in model.graph.node]
    assert "Slice" not in ops and "Pad" not in ops, ops
    x = np.zeros((1000, 16), np.float32)
    i = np.array([3, 1003, -1, 3], np.int32)
    v = np.arange(64, dtype=np.float32).reshape(4, 16)
    got = OnnxRunner(model.SerializeToString()).run([x, i, v])[0]
    np.testing.assert_array_equal(got, np.asarray(jax.jit(lambda x, i, v: x.at[i].add(v))(x, i, v)))
    assert jnp.isfinite(got).all()
