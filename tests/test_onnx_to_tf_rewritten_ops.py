"""The tf-ops route on the ops jaxconv's rewrites write (Trilu, LayerNormalization), against ONNX
Runtime on the same model and against jax.jit on the functions the rewrites take them from."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_graphs import op_types

from jaxconv.program import trace

pytestmark = pytest.mark.tf
tf = pytest.importorskip("tensorflow")
ort = pytest.importorskip("onnxruntime")

NP_OF = {TensorProto.FLOAT: np.float32, TensorProto.INT32: np.int32, TensorProto.BOOL: np.bool_,
         TensorProto.INT64: np.int64}


def _model(node, inputs, outputs, opset=26):
    graph = helper.make_graph([node], "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run_both(model, feeds):
    """(ONNX Runtime's outputs, the tf-ops translation's outputs) of ``model`` on ``feeds``."""
    from jaxconv.tf.onnx_to_tf import serving_function

    specs = [tf.TensorSpec(v.shape, tf.as_dtype(v.dtype), name=k) for k, v in feeds.items()]
    got = serving_function(tf, model, specs)(*feeds.values())
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    return want, [got[f"output_{i}"].numpy() for i in range(len(got))]


def _bits(a):
    a = np.asarray(a)
    return a.view(np.uint32) if a.dtype == np.float32 else a


def _special(shape, seed=0):
    """float32 values with NaN, +-inf and -0.0 among them."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[::5], flat[1::7], flat[2::7], flat[3::6] = np.nan, np.inf, -np.inf, -0.0
    return x


@pytest.mark.parametrize("upper", [1, 0])
@pytest.mark.parametrize("k", [None, 0, 1, -1, 2, -3, 5, -7, 2**40, -(2**40)])
def test_trilu_matches_onnx_runtime_bit_for_bit(upper, k):
    x = _special((2, 3, 4, 5))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))]
    feeds = {"x": x}
    if k is not None:
        inputs.append(helper.make_tensor_value_info("k", TensorProto.INT64, []))
        feeds["k"] = np.array(k, np.int64)  # a run-time input: not folded while tracing
    node = helper.make_node("Trilu", list(feeds), ["y"], upper=upper)
    model = _model(node, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(x.shape))])
    (want,), (got,) = _run_both(model, feeds)
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("elem", [TensorProto.INT32, TensorProto.BOOL])
def test_trilu_of_integers_and_booleans(elem):
    rng = np.random.default_rng(1)
    x = rng.integers(-9, 9, (6, 4)).astype(NP_OF[elem])
    node = helper.make_node("Trilu", ["x"], ["y"], upper=0)
    model = _model(node, [helper.make_tensor_value_info("x", elem, [6, 4])],
                   [helper.make_tensor_value_info("y", elem, [6, 4])])
    (want,), (got,) = _run_both(model, {"x": x})
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert got.any() and not got.all()  # both triangles are present in the input


def test_layer_normalization_matches_onnx_runtime():
    rng = np.random.default_rng(2)
    x = (rng.normal(size=(3, 4, 8)) * 2 + 5).astype(np.float32)
    x[0, 1, 3] = np.nan
    x[2, 0, 0] = np.inf
    scale, bias = rng.normal(size=8).astype(np.float32), rng.normal(size=8).astype(np.float32)
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "m", "r"], axis=-1, epsilon=1e-3)
    info = helper.make_tensor_value_info
    model = _model(node, [info("x", TensorProto.FLOAT, [3, 4, 8]), info("s", TensorProto.FLOAT, [8]),
                          info("b", TensorProto.FLOAT, [8])],
                   [info("y", TensorProto.FLOAT, [3, 4, 8]), info("m", TensorProto.FLOAT, [3, 4, 1]),
                    info("r", TensorProto.FLOAT, [3, 4, 1])])
    want, got = _run_both(model, {"x": x, "s": scale, "b": bias})
    for w, g in zip(want, got):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=2e-6)  # NaN where ORT has NaN
    assert np.isnan(got[0][0, 1]).all() and np.isnan(got[0][2, 0]).all() and np.isfinite(got[0][1]).all()


def test_layer_normalization_over_two_axes_without_bias():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 3, 4)).astype(np.float32)
    scale = rng.normal(size=(3, 4)).astype(np.float32)
    node = helper.make_node("LayerNormalization", ["x", "s"], ["y"], axis=1)
    info = helper.make_tensor_value_info
    model = _model(node, [info("x", TensorProto.FLOAT, [2, 3, 4]), info("s", TensorProto.FLOAT, [3, 4])],
                   [info("y", TensorProto.FLOAT, [2, 3, 4])])
    (want,), (got,) = _run_both(model, {"x": x, "s": scale})
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


def _through_tf_ops(fn, *args):
    from jaxconv.onnx import convert
    from jaxconv.tf.onnx_to_tf import OPSET, for_program

    program = trace(fn, [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args])
    ops = set(op_types(convert.program_to_onnx(program, OPSET).graph))  # If branches' nodes too
    model, function, _ = for_program(program)
    got = function(*args)
    return ops, [got[f"output_{i}"].numpy() for i in range(len(got))]


def causal_scores(s):
    mask = jnp.tril(jnp.ones((s.shape[-2], s.shape[-1]), bool))
    return jnp.where(mask, s, 0.0), jnp.where(mask.T, s, 0.0)


def test_causal_mask_through_the_route_matches_jax_jit():
    s = _special((2, 3, 6, 6), seed=4)
    ops, got = _through_tf_ops(causal_scores, s)
    assert "Trilu" in ops  # the rewrite fired: this exercises the Trilu translation
    for w, g in zip(jax.jit(causal_scores)(s), got):
        np.testing.assert_array_equal(_bits(g), _bits(np.asarray(w)))


def layer_norm(x, g, b):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + 1e-5) * g + b


def test_layer_norm_through_the_route_matches_jax_jit():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(4, 16)).astype(np.float32)
    g, b = rng.normal(size=16).astype(np.float32), rng.normal(size=16).astype(np.float32)
    ops, (got,) = _through_tf_ops(layer_norm, x, g, b)
    assert "LayerNormalization" in ops
    np.testing.assert_allclose(got, np.asarray(jax.jit(layer_norm)(x, g, b)), rtol=1e-5, atol=1e-5)


def masked_scores_late(s):
    return masked_scores(s)


@pytest.mark.parametrize("fn, specs", [(causal_scores, ("f32[2,3,6,6]",)),
                                       (layer_norm, ("f32[4,16]", "f32[16]", "f32[16]")),
                                       (masked_scores_late, ("f32[2,3,6,6]",))])
def test_rewritten_ops_convert_to_tflite_builtins(fn, specs, tmp_path):
    pytest.importorskip("ai_edge_litert")
    from jaxconv import api
    from jaxconv.runtimes.tflite import TFLiteRunner, read_route

    reports: list = []
    path = api.to_tflite(fn, *specs, path=str(tmp_path / "m.tflite"), route="tf-ops", report_to=reports)
    assert read_route(path) == "tf-ops" and reports[0].ok, reports[0].table()
    if fn is masked_scores_late:  # NaN rows in LiteRT too: rows with NaN or +inf, and rows of only -inf
        x = _special((2, 3, 6, 6), seed=7)
        x[0, 0, 5] = -np.inf  # a row whose unmasked entries are all -inf
        (got,) = TFLiteRunner(path).run([x])
        want = np.asarray(jax.jit(fn)(x))
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


_W = np.random.default_rng(6).normal(size=(8, 24)).astype(np.float32)
_CAUSAL = np.tril(np.ones((6, 6), bool))


def qkv(x):
    q, k, v = jnp.split(x @ _W, 3, axis=-1)
    return q * 2, k - 1, v


def even_odd(x):
    return x[..., ::2] * 3, x[..., 1::2] - 2


def masked_scores(s):
    return jax.nn.softmax(jnp.where(_CAUSAL, s, -jnp.inf), axis=-1)


@pytest.mark.parametrize("fn, shape, op", [(qkv, (2, 5, 8), "MatMul*3"), (even_odd, (3, 8), "Split"),
                                           (masked_scores, (2, 3, 6, 6), "Min")])
@pytest.mark.parametrize("special", [False, True])
def test_split_and_mask_min_forms_through_the_route_match_jax_jit(fn, shape, op, special):
    from jaxconv.onnx import convert
    from jaxconv.tf.onnx_to_tf import OPSET, for_program

    x = _special(shape, seed=7) if special else np.random.default_rng(7).normal(size=shape).astype(np.float32)
    program = trace(fn, [jax.ShapeDtypeStruct(x.shape, x.dtype)])
    graph = convert.program_to_onnx(program, OPSET).graph
    if op == "MatMul*3":  # split_matmul: three MatMuls, no Split
        assert [n.op_type for n in graph.node].count("MatMul") == 3
    else:
        assert op in op_types(graph)  # the rewrite fired
    got = for_program(program)[1](x)
    for i, w in enumerate(jax.tree_util.tree_leaves(jax.jit(fn)(x))):
        g, w = got[f"output_{i}"].numpy(), np.asarray(w)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_array_equal(np.signbit(g[g == 0]), np.signbit(w[g == 0]))
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_ops_give_the_nan_rows_onnx_runtime_gives(op):
    """A row holding NaN or +inf, or all -inf, is NaN everywhere (jax's exp(x - max(x)) and ORT); TF's
    kernels gave NaN at the NaN only and 0 or 1 elsewhere."""
    x = np.array([[np.nan, -np.inf, -np.inf], [np.inf, 1, 2], [-np.inf] * 3, [1, -np.inf, 2], [-0.0, 0.0, 3],
                  [np.inf, -np.inf, np.nan]], np.float32)
    node = helper.make_node(op, ["x"], ["y"], axis=-1)
    info = helper.make_tensor_value_info
    model = _model(node, [info("x", TensorProto.FLOAT, [6, 3])], [info("y", TensorProto.FLOAT, [6, 3])])
    (want,), (got,) = _run_both(model, {"x": x})
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[:3]).all() and np.isnan(got[5]).all() and not np.isnan(got[3:5]).any()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


_DENSE_W = np.random.default_rng(8).normal(size=(512, 512)).astype(np.float32) / 23
_DENSE_B = np.random.default_rng(9).normal(size=512).astype(np.float32)


def dense_relu(x):
    return jax.nn.relu(x @ _DENSE_W + _DENSE_B)


def test_dense_bias_gemm_through_the_route_matches_jax_jit():
    """``dense_bias`` writes a big 2-D product as a Gemm without C: the route multiplies, with no Mul by alpha.
    Finite inputs: NaN through ``relu(x @ w)`` is a known TF/LiteRT difference (README)."""
    from jaxconv.tf.onnx_to_tf import for_program

    x = np.random.default_rng(10).normal(size=(64, 512)).astype(np.float32)
    x[0, :2] = [-0.0, 1e-40]
    model, function, concrete = for_program(trace(dense_relu, [jax.ShapeDtypeStruct(x.shape, x.dtype)]))
    ops = [n.op_type for n in model.graph.node]
    assert "Gemm" in ops and "MatMul" not in ops, ops  # the rewrite fired: this exercises the Gemm translation
    got = function(x)["output_0"].numpy()
    np.testing.assert_allclose(got, np.asarray(jax.jit(dense_relu)(x)), rtol=1e-5, atol=1e-5)
    assert "Mul" not in {op.type for op in concrete.graph.get_operations()}
