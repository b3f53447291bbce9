"""The ORT-oriented rewrites (jaxconv.onnx.rewrites): each fires on a small jax function and keeps
jax.jit's numbers, NaN, infinities and signed zeros included."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnx_ir as ir
import pytest

import jaxconv
from conformance.nets import lstm_cell
from jaxconv.onnx import rewrites
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_floats
from lowering_check import convert_and_run as _convert

NAN, INF = np.float32(np.nan), np.float32(np.inf)




def _same(got: np.ndarray, want: np.ndarray, rtol: float = 1e-6, atol: float = 0.0) -> None:
    assert_same_floats(got, want, rtol, atol)


def _rows() -> np.ndarray:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 6)).astype(np.float32) * 4
    x[1, 2] = NAN
    x[2, 0] = INF
    x[3, :] = -INF
    x[4, :3] = -INF
    x[5, 1:] = -0.0
    x[6, :2] = INF
    x[7] = [80, 81, -80, 0, 1e-30, -1e-30]  # large logits: exp overflows without the max shift
    return x


@pytest.mark.parametrize("fn, op", [(lambda x: jax.nn.softmax(x, axis=-1), "Softmax"),
                                    (lambda x: jax.nn.log_softmax(x, axis=-1), "LogSoftmax"),
                                    (lambda x: jax.nn.softmax(x, axis=0), "Softmax"),
                                    (lambda x: jax.nn.log_softmax(x, axis=0), "LogSoftmax")])
def test_softmax_ops_keep_nan_inf_rows(fn, op):
    x = _rows()
    ops, (got,) = _convert(fn, x)
    assert ops[op] == 1 and ops["Exp"] == 0 and ops["ReduceMax"] == 0, ops
    _same(got, jax.jit(fn)(x), rtol=2e-6, atol=1e-7)


def test_masked_softmax_matches_jax():
    def attend(logits, keep):
        return jax.nn.softmax(jnp.where(keep, logits, -jnp.inf), axis=-1)

    rng = np.random.default_rng(1)
    logits = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    keep = np.tril(np.ones((5, 5), bool))[None, None] & (rng.random((2, 3, 5, 5)) > 0.2)
    keep[0, 0, 2] = False  # a fully masked row: NaN in jax
    ops, (got,) = _convert(attend, logits, keep)
    assert ops["Softmax"] == 1, ops
    _same(got, jax.jit(attend)(logits, keep), rtol=2e-6, atol=1e-7)


def test_softmax_over_two_axes_is_left_alone():
    fn = lambda x: jax.nn.softmax(x, axis=(0, 1))  # noqa: E731
    x = _rows()[:4]
    ops, (got,) = _convert(fn, x)
    assert ops["Softmax"] == 0 and ops["Exp"] == 1, ops
    _same(got, jax.jit(fn)(x), rtol=2e-6, atol=1e-7)


def test_exp_shifted_by_another_value_is_not_softmax():
    fn = lambda x, c: jnp.exp(x - c) / jnp.sum(jnp.exp(x - c), axis=-1, keepdims=True)  # noqa: E731
    x, c = _rows()[:1], np.array([[10.0]], np.float32)
    ops, (got,) = _convert(fn, x, c)
    assert ops["Softmax"] == 0, ops
    _same(got, jax.jit(fn)(x, c), rtol=2e-6)


def _gelu_inputs() -> np.ndarray:
    x = np.concatenate([np.linspace(-12, 12, 2001, dtype=np.float32),
                        np.array([NAN, INF, -INF, -0.0, 0.0, 1e-30, -1e-30, 40, -40], np.float32)])
    return x.reshape(1, -1)


def test_gelu_tanh_becomes_the_gelu_op():
    fn = jax.nn.gelu
    x = _gelu_inputs()
    ops, (got,) = _convert(fn, x)
    assert ops["Gelu"] == 1 and ops["Tanh"] == 0, ops
    want = np.asarray(jax.jit(fn)(x))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)


def test_gelu_needs_opset_20():
    x = _gelu_inputs()
    ops, (got,) = _convert(jax.nn.gelu, x, opset=19)
    assert ops["Gelu"] == 0 and ops["Tanh"] == 1, ops
    np.testing.assert_allclose(got, jax.jit(jax.nn.gelu)(x), rtol=1e-5, atol=2e-6)


def test_float64_gelu_keeps_double_precision():
    # ORT's Gelu kernel for double is only float32-accurate (fuzz gelu/f64/value: 5e-8 relative)
    x = np.array([[-1.4155582686347752, -1.2, 0.3, 2.5, -3.0]], np.float64)
    with jax.enable_x64(True):
        ops, (got,) = _convert(jax.nn.gelu, x)
        want = np.asarray(jax.jit(jax.nn.gelu)(x))
    assert ops["Gelu"] == 0, ops
    np.testing.assert_allclose(got, want, rtol=1e-13)


def test_relu_keeps_jax_zero_signs_and_nan():
    x = np.array([[-0.0, 0.0, NAN, -1.0, 2.0, INF, -INF, 1e-30]], np.float32)
    for fn in (jax.nn.relu, lambda x: jnp.maximum(x, 0.0) * 3.0, lambda x: jnp.maximum(0.0, x) + x):
        _, (got,) = _convert(fn, x)
        _same(got, jax.jit(fn)(x))


@pytest.mark.parametrize("tail, relu", [("y = Identity(r)", False), ("y = Mul(r, three)", False),
                                        ("y = MatMul(r, w)", True), ("t = Transpose <perm=[1, 0]> (r)\n y = MatMul(w, t)", True)])
def test_max_zero_becomes_relu_only_where_zero_signs_are_unseen(tail, relu):
    # ORT's Relu(-0.0) is -0.0 (jax's max gives +0.0) and ORT drops an Add(+0.0) after it
    text = f"""<ir_version: 10, opset_import: ["" : 21]>
    g (float[2,2] x) => (float[2,2] y) <float[2,2] zero = {{0., 0., 0., 0.}}, float three = {{3.}}, float[2,2] w = {{1., 2., 3., 4.}}>
    {{ r = Max(x, zero)
    {tail} }}"""
    model = _ir_model(text)
    rewrites.apply(model, 21)
    ops = [n.op_type for n in model.graph]
    assert ("Relu" in ops) == relu and ("Max" in ops) != relu, ops


def test_relu_before_a_dense_layer_becomes_relu():
    rng = np.random.default_rng(2)
    w1 = rng.standard_normal((16, 8)).astype(np.float32)
    w2 = rng.standard_normal((8, 4)).astype(np.float32)
    fn = lambda x: jax.nn.relu(x @ w1 + 1.0) @ w2  # noqa: E731
    x = rng.standard_normal((4, 16)).astype(np.float32)
    x[0, 0] = NAN
    x[1] = -0.0  # relu gives (+/-)0 rows; the next layer's sums give +0.0 either way
    w1[:, 0] = 0.0
    ops, (got,) = _convert(fn, x)
    assert ops["Relu"] == 1, ops
    _same(got, jax.jit(fn)(x), rtol=1e-5, atol=1e-5)


def test_max_with_nonzero_constant_is_not_relu():
    fn = lambda x: jnp.maximum(x, 0.5)  # noqa: E731
    x = np.array([[-1.0, 0.2, 0.7, NAN]], np.float32)
    ops, (got,) = _convert(fn, x)
    assert ops["Relu"] == 0 and ops["Max"] == 1, ops
    _same(got, jax.jit(fn)(x))


def test_constant_broadcasts_stay_small():
    rng = np.random.default_rng(3)
    bias = rng.standard_normal(64).astype(np.float32)
    scale = rng.standard_normal((1, 64)).astype(np.float32)

    def fn(x):
        return (x + jnp.broadcast_to(bias, (32, 64))) * jnp.broadcast_to(scale, (32, 64))

    x = rng.standard_normal((32, 64)).astype(np.float32)
    model = jaxconv.to_onnx(fn, jax.ShapeDtypeStruct(x.shape, x.dtype), check=False)
    sizes = [int(np.prod(t.dims)) for t in model.graph.initializer]
    assert max(sizes) <= 64, sizes
    assert not [n for n in model.graph.node if n.op_type == "Expand"]
    (got,) = OnnxRunner(model.SerializeToString()).run([x])
    _same(got, jax.jit(fn)(x))


def _ir_model(nodes_text: str) -> ir.Model:
    return ir.from_proto(onnx.parser.parse_model(nodes_text))


def test_broadcast_constant_is_not_shrunk_when_it_sets_the_output_shape():
    # y = x[1,4] + c[3,4] (c's rows equal): the constant sets the output's first dim, so it must stay
    text = """<ir_version: 10, opset_import: ["" : 21]>
    g (float[1,4] x) => (float[3,4] y) <float[3,4] c = {1.,2.,3.,4.,1.,2.,3.,4.,1.,2.,3.,4.}> { y = Add(x, c) }"""
    model = _ir_model(text)
    rewrites.broadcasts.MIN_ELEMENTS, saved = 1, rewrites.broadcasts.MIN_ELEMENTS
    try:
        fired = rewrites.apply(model, 21)
    finally:
        rewrites.broadcasts.MIN_ELEMENTS = saved
    assert fired["broadcasts"] == 0
    assert model.graph.node(0).inputs[1].shape == ir.Shape([3, 4])


def test_apply_reports_nothing_on_a_graph_without_patterns():
    text = """<ir_version: 10, opset_import: ["" : 21]>
    g (float[2,4] x) => (float[2,4] y) { t = Exp(x)
    y = Neg(t) }"""
    model = _ir_model(text)
    assert not any(rewrites.apply(model, 21).values())
    assert [n.op_type for n in model.graph] == ["Exp", "Neg"]


def _loop_body_ops(model: onnx.ModelProto) -> collections.Counter:
    loop = next(n for n in model.graph.node if n.op_type in ("Loop", "Scan"))  # fixed trip counts: Scan
    body = next(a.g for a in loop.attribute if a.name == "body")
    return collections.Counter(n.op_type for n in body.node)


def _lstm_fn(seed: int, n_in: int = 6, hidden: int = 8):
    rng = np.random.default_rng(seed)
    wx = rng.standard_normal((n_in, 4 * hidden)).astype(np.float32) / 3
    wh = rng.standard_normal((hidden, 4 * hidden)).astype(np.float32) / 3
    b = rng.standard_normal(4 * hidden).astype(np.float32)

    def lstm(xs):
        zeros = jnp.zeros((xs.shape[1], hidden))
        (h, c), hs = jax.lax.scan(lstm_cell(wx, wh, b), (zeros, zeros), xs)
        return hs, h, c

    return lstm


def test_scan_input_projection_leaves_the_loop():
    rng = np.random.default_rng(4)
    wx = rng.standard_normal((6, 8)).astype(np.float32) / 3
    wh = rng.standard_normal((8, 8)).astype(np.float32) / 3

    def rnn(xs):
        def cell(h, x):
            h = jnp.tanh(x @ wx + h @ wh)
            return h, h

        return jax.lax.scan(cell, jnp.zeros((xs.shape[1], 8)), xs)

    xs = rng.standard_normal((7, 3, 6)).astype(np.float32)
    xs[2, 1, 0] = NAN
    model = jaxconv.to_onnx(rnn, jax.ShapeDtypeStruct(xs.shape, xs.dtype), check=False)
    outer = [n for n in model.graph.node if n.op_type == "MatMul"]
    assert any(n.input[0] == model.graph.input[0].name for n in outer), "xs @ wx is not computed before the Loop"
    assert _loop_body_ops(model)["MatMul"] == 1  # only h @ wh stays
    got = OnnxRunner(model.SerializeToString()).run([xs])
    for g, w in zip(got, jax.jit(rnn)(xs)):
        _same(g, w, rtol=1e-5, atol=1e-6)


def test_lstm_scan_becomes_the_lstm_op_with_an_exact_fallback():
    lstm = _lstm_fn(9)
    xs = np.random.default_rng(10).standard_normal((7, 3, 6)).astype(np.float32) * 2
    model = jaxconv.to_onnx(lstm, jax.ShapeDtypeStruct(xs.shape, xs.dtype), check=False)
    branch = next(n for n in model.graph.node if n.op_type == "If")
    graphs = {a.name: a.g for a in branch.attribute}
    assert [n.op_type for n in graphs["then_branch"].node].count("LSTM") == 1
    assert len({"Loop", "Scan"} & {n.op_type for n in graphs["else_branch"].node}) == 1
    runner = OnnxRunner(model.SerializeToString())
    for g, w in zip(runner.run([xs]), jax.jit(lstm)(xs)):  # the LSTM op: float32 rounding apart
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)
    odd = xs.copy()
    odd[2, 1, 0], odd[4, 0, 3], odd[5, 2, 1] = NAN, INF, -INF
    for g, w in zip(runner.run([odd]), jax.jit(lstm)(odd)):  # the exact Loop, NaN and inf included
        _same(g, w, rtol=1e-5, atol=1e-6)


def test_loop_invariant_nodes_leave_the_loop():
    rng = np.random.default_rng(5)
    w = rng.standard_normal((4, 4)).astype(np.float32)

    def fn(x, s, n):
        def body(i, y):
            return jnp.tanh(y @ w) + jnp.exp(s) * 2.0  # exp(s) * 2 reads only outer values
        return jax.lax.fori_loop(0, n, body, x)

    x, s, n = rng.standard_normal((2, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32), np.array(5, np.int32)
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (x, s, n)]
    model = jaxconv.to_onnx(fn, *specs, check=False)
    body = _loop_body_ops(model)
    assert body["Exp"] == 0 and body["Tanh"] == 1, body
    assert any(node.op_type == "Exp" for node in model.graph.node)
    (got,) = OnnxRunner(model.SerializeToString()).run([x, s, n])
    _same(got, jax.jit(fn)(x, s, n), rtol=1e-5, atol=1e-6)
    (got,) = OnnxRunner(model.SerializeToString()).run([x, s, np.array(0, np.int32)])  # zero trips
    _same(got, x)


@pytest.mark.parametrize("reducer, init", [(jax.lax.max, -np.inf), (jax.lax.min, np.inf)])
def test_pool_guard_runs_only_for_non_finite_inputs(reducer, init):
    def pool(x):
        return jax.lax.reduce_window(x, init, reducer, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    rng = np.random.default_rng(6)
    finite = rng.standard_normal((2, 6, 6, 3)).astype(np.float32)
    finite[0, 0, 0, 0] = -0.0
    model = jaxconv.to_onnx(pool, jax.ShapeDtypeStruct(finite.shape, finite.dtype), check=False)
    ops = collections.Counter(n.op_type for n in model.graph.node)
    assert ops["If"] == 1, ops  # one guard
    branch = next(n for n in model.graph.node if n.op_type == "If")
    guard, plain = (next(a.g for a in branch.attribute if a.name == k) for k in ("else_branch", "then_branch"))
    assert sum(n.op_type == "MaxPool" for n in guard.node) == 2, guard.node
    # finite inputs run one MaxPool: in the plain branch, or before the If, the plain branch its copy
    fast = [n.op_type for n in plain.node]
    assert fast == ["MaxPool"] and ops["MaxPool"] == 0 or fast == ["Identity"] and ops["MaxPool"] == 1, (fast, ops)
    runner = OnnxRunner(model.SerializeToString())
    odd = finite.copy()
    odd[0, 0, 0, 0] = NAN
    odd[0, 2:4, 2:4, 1] = -INF
    odd[1, 2:4, 0:2, 2] = INF
    odd[1, 4, 4, 0] = INF
    odd[1, 4, 5, 0] = -INF
    huge = np.full_like(finite, 3e38)  # finite, but the sum overflows: the guarded branch, same values
    for x in (finite, odd, huge):
        (got,) = runner.run([x])
        _same(got, jax.jit(pool)(x))


def test_op_on_two_broadcasts_runs_before_broadcasting():
    def fn(x):
        a = jnp.broadcast_to(x[:, :1], x.shape)
        b = jnp.broadcast_to(jnp.exp(x[:, 1:2]), x.shape)
        return a / b * x

    x = np.random.default_rng(7).standard_normal((5, 8)).astype(np.float32)
    x[1, 0], x[2, 1] = NAN, -INF
    model = jaxconv.to_onnx(fn, "f32[b,8]", check=False)
    div = next(n for n in model.graph.node if n.op_type == "Div")
    producers = {o: n.op_type for n in model.graph.node for o in n.output}
    assert "Expand" not in [producers.get(i) for i in div.input], "Div still reads full-size broadcasts"
    (got,) = OnnxRunner(model.SerializeToString()).run([x])
    _same(got, jax.jit(fn)(x))


def test_consecutive_nhwc_convs_stay_nchw():
    rng = np.random.default_rng(8)
    k1 = rng.standard_normal((3, 3, 4, 8)).astype(np.float32) / 6
    k2 = rng.standard_normal((3, 3, 8, 8)).astype(np.float32) / 8
    b1, b2 = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)

    def conv(x, k):
        return jax.lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def fn(x):
        y = jnp.tanh(conv(x, k1) + b1) * 2.0
        return conv(y, k2) + b2 - y

    x = rng.standard_normal((2, 8, 8, 4)).astype(np.float32)
    x[0, 1, 1, 1], x[1, 2, 2, 2] = NAN, -INF
    model = jaxconv.to_onnx(fn, jax.ShapeDtypeStruct(x.shape, x.dtype), check=False)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Transpose") == 2 and ops[0] == "Transpose" and ops[-1] == "Transpose", ops
    (got,) = OnnxRunner(model.SerializeToString()).run([x])
    _same(got, jax.jit(fn)(x), rtol=1e-5, atol=1e-5)


def test_zero_sign_fix_goes_where_no_consumer_sees_it():
    text = """<ir_version: 10, opset_import: ["" : 21]>
    g (float[2,2] x) => (float[2,2] y, float[2,2] z) <float zero = {0.}, float[2,2] w = {1., 2., 3., 4.}>
    { r = Relu(x)
    e = Equal(r, zero)
    f = Where(e, zero, r)
    y = MatMul(f, w)
    e2 = Equal(x, zero)
    z = Where(e2, zero, x) }"""
    model = _ir_model(text)
    rewrites.apply(model, 21)
    matmul = next(n for n in model.graph if n.op_type == "MatMul")
    assert matmul.inputs[0].producer().op_type == "Relu"  # the fix before the MatMul is gone
    assert model.graph.outputs[1].producer().op_type == "Sum"  # the one at an output stays (as Sum(x, +0))


def test_zero_sign_fix_after_relu_is_one_abs():
    """ORT's Max(r, +0) returns -0 in its scalar tail (the last len % 4 elements), Abs never does."""
    text = """<ir_version: 10, opset_import: ["" : 21]>
    g (float[1,9] x) => (float[1,9] y) <float zero = {0.}>
    { r = Relu(x)
    e = Equal(r, zero)
    y = Where(e, zero, r) }"""
    model = _ir_model(text)
    rewrites.apply(model, 21)
    assert [n.op_type for n in model.graph] == ["Relu", "Abs"]
    x = np.array([[-0.0, 0.0, NAN, -1.0, 2.0, INF, -INF, 1e-30, -0.0]], np.float32)
    (got,) = OnnxRunner(ir.to_proto(model).SerializeToString()).run([x])
    _same(got, jax.jit(jax.nn.relu)(x))
