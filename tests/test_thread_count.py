"""jaxconv.onnx.thread_count: a model made of small products (an RNN cell in a Scan) records one
intra-op thread in its metadata, and jaxconv's ONNX Runtime sessions use it when no count is asked for."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest

import jaxconv
from jaxconv.onnx import thread_count
from jaxconv.runtimes.onnxrt import OnnxRunner, default_threads, session_options

_RNG = np.random.default_rng(0)


def _w(*shape):
    return (_RNG.standard_normal(shape) * 0.1).astype(np.float32)


def _rnn(steps=32, batch=4, width=64):
    wx, wh = _w(width, width), _w(width, width)

    def fn(xs):
        def cell(h, x):
            h = jnp.tanh(x @ wx + h @ wh)
            return h, h

        return jax.lax.scan(cell, jnp.zeros((batch, width), jnp.float32), xs)[1]

    return fn, np.asarray(_RNG.standard_normal((steps, batch, width)), np.float32)


def _recorded_in(model: onnx.ModelProto) -> str | None:
    return {p.key: p.value for p in model.metadata_props}.get(thread_count.THREADS_KEY)


def test_a_scan_of_small_products_records_one_thread_and_matches_jax():
    fn, xs = _rnn()
    model = jaxconv.to_onnx(fn, xs)
    assert _recorded_in(model) == "1"
    runner = OnnxRunner(model.SerializeToString())
    (got,) = runner.run([xs])
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(xs)), rtol=1e-5, atol=1e-6)


def test_big_products_record_nothing():
    w1, w2 = _w(1024, 1024), _w(1024, 1024)
    x = np.ones((32, 1024), np.float32)  # 67 MFLOP per product
    model = jaxconv.to_onnx(lambda a: jnp.tanh(a @ w1) @ w2, x, check=False)
    assert _recorded_in(model) is None


def test_a_big_product_outweighing_a_small_scan_records_nothing():
    fn, xs = _rnn(steps=4)
    big = _w(2048, 2048)

    def both(a, b):
        return fn(a), b @ big  # 4 steps x 2 x 0.5 MFLOP against 537 MFLOP

    model = jaxconv.to_onnx(both, xs, np.ones((64, 2048), np.float32), check=False)
    assert _recorded_in(model) is None


def test_unknown_sizes_record_nothing():
    fn, xs = _rnn()
    model = jaxconv.to_onnx(fn, "f32[t,4,64]", check=False)
    assert _recorded_in(model) is None


def test_recorded_reads_bytes_and_files_without_the_graph(tmp_path):
    fn, xs = _rnn()
    model = jaxconv.to_onnx(fn, xs, check=False)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    assert thread_count.recorded(model.SerializeToString()) == 1
    assert thread_count.recorded(str(path)) == 1
    del model.metadata_props[:]
    assert thread_count.recorded(model.SerializeToString()) is None
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\xff" * 40)
    assert thread_count.recorded(str(garbage)) is None
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(path.read_bytes()[:-7])
    assert thread_count.recorded(str(truncated)) in (1, None)  # metadata may sit before the cut
    assert thread_count.recorded(str(tmp_path / "missing.onnx")) is None


@pytest.mark.parametrize("value,expected", [("1", 1), ("3", 3), ("0", None), ("-2", None), ("two", None)])
def test_recorded_takes_only_a_positive_count(value, expected):
    fn, xs = _rnn()
    model = jaxconv.to_onnx(fn, xs, check=False)
    for p in model.metadata_props:
        if p.key == thread_count.THREADS_KEY:
            p.value = value
    assert thread_count.recorded(model.SerializeToString()) == expected


def test_session_options_use_the_record_unless_a_count_is_asked_for():
    fn, xs = _rnn()
    data = jaxconv.to_onnx(fn, xs, check=False).SerializeToString()
    assert session_options(model=data).intra_op_num_threads == 1
    assert session_options(2, model=data).intra_op_num_threads == 2
    plain = session_options().intra_op_num_threads
    assert plain == (default_threads() or 0)


def test_skip_unknown_weighs_only_the_products_of_known_sizes():
    """recommend(skip_unknown=True), the estimate rewrite rules ask for before every value has a shape:
    a product of unknown size is left out instead of making the answer None."""
    import onnx_ir as ir

    small = ir.Value(name="small", shape=ir.Shape([4, 8]), type=ir.TensorType(ir.DataType.FLOAT))
    w = ir.Value(name="w", shape=ir.Shape([8, 8]), type=ir.TensorType(ir.DataType.FLOAT))
    unknown = ir.Value(name="unknown", type=ir.TensorType(ir.DataType.FLOAT))
    nodes = [ir.node("MatMul", [small, w]), ir.node("MatMul", [unknown, w])]
    model = ir.Model(ir.Graph([small, unknown, w], [n.outputs[0] for n in nodes], nodes=nodes), ir_version=10)
    assert thread_count.recommend(model) is None
    assert thread_count.recommend(model, skip_unknown=True) == 1
