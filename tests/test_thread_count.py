"""jaxconv.onnx.thread_count: a model made of small products (an RNN cell in a Scan) records one
intra-op thread in its metadata, and jaxconv's ONNX Runtime sessions use it when no count is asked for."""

from __future__ import annotations

import json

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
    """A scan over a symbolic length is a Loop whose trip count the weighing does not know."""
    fn, xs = _rnn()
    model = jaxconv.to_onnx(fn, "f32[t,4,64]", check=False)
    assert _recorded_in(model) is None


def test_a_size_made_up_by_shape_inference_records_nothing():
    """A Concat along the symbolic axis: the product's rows are a name of no input (``f32[b, 64] -> 64``
    alone records one thread: test_a_symbolic_batch_mlp_records_by_its_width)."""
    narrow = _w(64, 64)
    model = jaxconv.to_onnx(lambda a: jnp.tanh(jnp.concatenate([a, a[:1]]) @ narrow), "f32[b,64]", check=False)
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


def _symbolic_product_graph(*products):
    """A graph of MatMuls ``[rows..., k] x [k, n]`` whose rows may name symbolic dimensions of its input."""
    import onnx_ir as ir

    names = sorted({d for rows, _, _ in products for d in rows if isinstance(d, str)})
    x = ir.Value(name="x", shape=ir.Shape([*names, 1]), type=ir.TensorType(ir.DataType.FLOAT))
    nodes = []
    for k, (rows, inner, n) in enumerate(products):
        a = ir.Value(name=f"a{k}", shape=ir.Shape([*rows, inner]), type=ir.TensorType(ir.DataType.FLOAT))
        w = ir.Value(name=f"w{k}", shape=ir.Shape([inner, n]), type=ir.TensorType(ir.DataType.FLOAT))
        nodes.append(ir.node("MatMul", [a, w]))
    inputs = [x] + [v for n in nodes for v in n.inputs]
    return ir.Graph(inputs, [n.outputs[0] for n in nodes], nodes=nodes)


@pytest.mark.parametrize("products,expected", [
    ([((2, "s"), 64, 64)] * 3, 1),  # q, k, v of width 64: 2.1 MFLOP each at 128
    ([((2, "s"), 128, 128)] * 3, None),  # of width 128: 8.4 MFLOP each at 128, a second thread gains
    ([((2, "s"), 128, 256)], None),  # a feed-forward product: 2.1 MFLOP at 16, 16.8 at 128
    ([(("b",), 784, 512)], None),  # an MLP's first layer: 103 MFLOP at 128
    ([(("b",), 64, 64)], 1),  # 1 MFLOP at 128
    ([(("b", "s"), 64, 64)], None),  # both symbolic: 16384 rows at 128
    ([((2, "s"), 128, 128)] * 3 + [((64,), 256, 512)], None),  # a fixed 16.8 MFLOP product outweighs them at 16
])
def test_symbolic_sizes_are_weighed_at_the_record_sizes(products, expected):
    graph = _symbolic_product_graph(*products)
    assert thread_count.recommend_graph(graph) is None  # unknown sizes, as the rules' estimate sees them
    assert thread_count.recommend_graph(graph, symbolic_sizes=thread_count.RECORD_SIZES) == expected


def _weights(*products):
    """(cost, saving) of a second thread for float32 ``(flops, right operand's elements)`` products as the
    module's docstring states them, none of them in a loop and no other kernel."""
    tc = thread_count
    cost = len(products) * tc.WAKE_SECONDS
    saving = sum(tc.SECOND_THREAD_SAVES * max(f / tc.CORE_FLOPS, 4 * n / tc.STREAM_BYTES) for f, n in products)
    return pytest.approx(cost), pytest.approx(saving)


def test_a_fixed_big_product_beside_growing_small_ones_needs_every_record_size():
    graph = _symbolic_product_graph(*[((2, "s"), 128, 128)] * 3, ((64,), 256, 512))
    fixed = (2 * 64 * 256 * 512, 256 * 512)
    for s in (16, 128):
        cost, saving = thread_count.weigh(graph, sizes={"s": s})
        assert (cost, saving) == _weights(*[(2 * 2 * s * 128 * 128, 128 * 128)] * 3, fixed)
    assert thread_count.recommend_graph(graph, symbolic_sizes=[16]) == 1  # 1 MFLOP each
    assert thread_count.recommend_graph(graph, symbolic_sizes=[16, 128]) is None  # 8.4 MFLOP each at 128


def test_a_symbolic_batch_mlp_records_by_its_width():
    wide, narrow = _w(784, 512), _w(64, 64)
    x = _RNG.standard_normal((3, 784)).astype(np.float32)
    assert _recorded_in(jaxconv.to_onnx(lambda a: jnp.tanh(a @ wide), "f32[b,784]", check=False)) is None
    model = jaxconv.to_onnx(lambda a: jnp.tanh(a @ narrow), "f32[b,64]", check=False)
    assert _recorded_in(model) == "1"
    # static: 2.4 MFLOP, but its 1.6 MB weight streams faster on two threads
    assert _recorded_in(jaxconv.to_onnx(lambda a: jnp.tanh(a @ wide), x, check=False)) is None
    tiny = jaxconv.to_onnx(lambda a: jnp.tanh(a @ wide[:64, :64]), x[:, :64], check=False)
    assert _recorded_in(tiny) == "1"


def _layers(width=128, count=3):
    ws = [_w(width, width) for _ in range(count)]

    def fn(x):
        for w in ws:
            x = jnp.tanh(x @ w)
        return x

    return fn


def test_a_symbolic_batch_records_one_thread_up_to_the_size_its_products_stay_small():
    """``[b, 64, 128] @ [128, 128]`` three times, a tanh after each: 2.1 MFLOP a product per batch row, so
    one thread up to b = 3 (a second thread saves 0.47 x 33 us a product, and costs 15 us a product and
    2 us a tanh), two from b = 4; no count for every size."""
    model = jaxconv.to_onnx(_layers(), "f32[b,64,128]", check=False)
    entries = {p.key: p.value for p in model.metadata_props}
    assert thread_count.THREADS_KEY not in entries
    data = model.SerializeToString()
    per_row = 2 * 64 * 128 * 128
    assert json.loads(entries[thread_count.BY_SIZE_KEY]) == {
        "one_thread_up_to": 2, "inputs": [["b", None, None]], "others": 3,
        "products": [[[[per_row, {"b": 1}]], [[3, {}]], [[4 * 128 * 128, {}]]]]}
    assert [thread_count.recorded(data, [(b, 64, 128)]) for b in (1, 3, 4, 8)] == [1, 1, None, None]
    # spinning during the run from about 0.7 ms of products to 3 ms: b = 22 (0.73 ms) and 64 (2.1 ms), not 16
    # (0.53 ms) or 128 (4.2 ms)
    record = thread_count.read_record(data)
    assert [record.spins([(b, 64, 128)]) for b in (1, 8, 16, 22, 64, 128)] == [False, False, False, True, True, False]
    assert record.threads([(22, 64, 128)]) is None
    assert thread_count.recorded(data) is None  # sizes unknown: ORT's count
    assert thread_count.recorded(data, [(2, 64)]) is None  # not the model's inputs


def test_two_symbolic_sizes_are_weighed_at_the_calls_sizes():
    """``f32[b, s, 128]``: the products grow with b * s, so b = 2 with s = 16 or 32 runs on one thread
    (as a static export at those sizes records), b = 16 with s = 64 on ORT's count."""
    model = jaxconv.to_onnx(_layers(), "f32[b,s,128]", check=False)
    data = model.SerializeToString()
    assert thread_count.read_record(data).inputs == (("b", "s", None),)
    assert [thread_count.recorded(data, [(b, s, 128)]) for b, s in ((2, 16), (2, 32), (16, 64), (64, 2))] == \
        [1, 1, None, 1]
    for b, s in ((2, 32), (16, 64)):
        static = jaxconv.to_onnx(_layers(), f"f32[{b},{s},128]", check=False)
        assert thread_count.recorded(static.SerializeToString()) == thread_count.recorded(data, [(b, s, 128)])


def test_no_size_record_where_the_smallest_size_weighs_two_threads():
    """Small products that grow with the sequence beside a fixed big one (268 MFLOP): two threads at every
    size, so no size up to which one thread wins."""
    graph = _symbolic_product_graph(*[((2, "s"), 64, 64)] * 3, ((256,), 512, 1024))
    assert thread_count.recommend_graph(graph, symbolic_sizes=[1]) is None
    assert thread_count.one_thread_up_to(graph) is None
    small = _symbolic_product_graph(*[((2, "s"), 64, 64)] * 3)
    assert thread_count.one_thread_up_to(small) == thread_count.SMALL_SIZES[-1]


def test_jaxconvs_runner_picks_the_session_by_the_call_sizes_and_matches_jax():
    fn = _layers()
    runner = OnnxRunner(jaxconv.to_onnx(fn, "f32[b,64,128]", check=False).SerializeToString())
    for batch, threads in ((2, 1), (16, default_threads() or 0), (1, 1)):
        x = _RNG.standard_normal((batch, 64, 128)).astype(np.float32)
        (got,) = runner.run([x])
        assert runner.session.get_session_options().intra_op_num_threads == threads
        np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(x)), rtol=1e-5, atol=1e-6)
    explicit = OnnxRunner(jaxconv.to_onnx(fn, "f32[b,64,128]", check=False).SerializeToString(), threads=2)
    explicit.run([np.ones((2, 64, 128), np.float32)])
    assert explicit.session.get_session_options().intra_op_num_threads == 2  # a count asked for wins


@pytest.mark.parametrize("value", ['{"inputs":[["b",null,null]]}', '{"inputs":[[0,null,null]],"products":[]}',
                                   '{"inputs":[["b",null,null]],"products":[[[[1,{"b":-1}]],[[1,{}]]]]}',
                                   '{"inputs":[["b",null,null]],"products":[[[["1",{"b":1}]],[[1,{}]]]]}',
                                   '{"inputs":[["b",null,null]],"products":7}', "four", "",
                                   '{"inputs":[["b",null,null]],"products":[]}',
                                   '{"inputs":[["b",null,null]],"products":[],"elementwise":7}',
                                   '{"inputs":[["b",null,null]],"products":[],"elementwise":[[[[1,{"b":1}]],[[1,{}]]]]}',
                                   '{"inputs":[["b",null,null]],"products":[],"elementwise":[[[[1,{"b":1}]],[[1,{}]],"x"]]}'])
def test_a_malformed_size_record_reads_as_none(value):
    model = jaxconv.to_onnx(_layers(), "f32[b,64,128]", check=False)
    for p in model.metadata_props:
        if p.key in (thread_count.BY_SIZE_KEY, thread_count.SPIN_KEY):
            p.value = value
    assert not thread_count.read_record(model.SerializeToString()).by_size
    assert thread_count.recorded(model.SerializeToString(), [(2, 64, 128)]) is None


def test_benchmark_sessions_take_the_count_for_their_inputs():
    from jaxconv.benchmark import ort_session

    data = jaxconv.to_onnx(_layers(), "f32[b,64,128]", check=False).SerializeToString()
    small, big = np.ones((2, 64, 128), np.float32), np.ones((32, 64, 128), np.float32)
    assert ort_session(data, None, False, inputs=[small]).get_session_options().intra_op_num_threads == 1
    assert ort_session(data, None, False, inputs=[big]).get_session_options().intra_op_num_threads == \
        (default_threads() or 0)


def test_products_on_dimensions_computed_from_symbolic_ones_are_weighed():
    """A reshape to ``[b * 64, 128]`` (OPT's feed-forward in Hugging Face Flax): shape inference names the
    rows ``64*b``, an expression of the input's ``b`` that the weighing evaluates."""
    ws = [_w(128, 128) for _ in range(3)]

    def fn(x):
        rows = x.reshape(-1, 128)
        for w in ws:
            rows = jnp.tanh(rows @ w)
        return rows.reshape(x.shape)

    model = jaxconv.to_onnx(fn, "f32[b,64,128]", check=False)
    shapes = {v.name: v.type.tensor_type.shape for v in model.graph.value_info}
    rows = {shapes[n.input[0]].dim[0].dim_param for n in model.graph.node if n.op_type == "MatMul"}
    assert rows == {"64*b"}
    data = model.SerializeToString()
    assert [thread_count.recorded(data, [(b, 64, 128)]) for b in (2, 4, 8)] == [1, None, None]


def _products_beside_other_kernels(others: int, *, dead: bool = False):
    """Two ``[128, 128] x [128, 512]`` products (16.8 MFLOP each) and a chain of ``others`` Tanh kernels on
    the first one's output, feeding the graph's output (or nothing, ``dead``: a rule's leftover)."""
    import onnx_ir as ir

    graph = _symbolic_product_graph(((128,), 128, 512), ((128,), 128, 512))
    value = graph.outputs[0]
    for _ in range(others):
        node = ir.node("Tanh", [value])
        node.outputs[0].shape, node.outputs[0].type = ir.Shape([128, 512]), ir.TensorType(ir.DataType.FLOAT)
        graph.append(node)
        value = node.outputs[0]
    if not dead:
        graph.outputs.append(value)
    return graph


def test_other_kernels_outweigh_what_a_second_thread_saves_on_the_products():
    """Each product saves 0.47 x 88 us on a second thread and costs 15 us for waking it; each other kernel
    costs 2 us: 26 of them outweigh the two products' 53 us (the small transformers of the zoo, GPT-2 and
    BLOOM, whose 16.8 MFLOP products used to weigh as big: 1.05-1.10x the wall time on two threads)."""
    assert thread_count.recommend_graph(_products_beside_other_kernels(20)) is None
    assert thread_count.recommend_graph(_products_beside_other_kernels(30)) == 1
    assert thread_count.recommend_graph(_products_beside_other_kernels(30, dead=True)) is None  # not run
