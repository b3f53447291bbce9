"""The tf2onnx XlaCallModule handler (Python API, tf2onnx's CLI) and the op's calling conventions."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export, lax

from jaxconv.errors import UnsupportedError

ort = pytest.importorskip("onnxruntime")


def _session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


# ---- the op's calling conventions (no TensorFlow) ------------------------------------------------

def _lower(text_or_bytes, **attrs):
    from jaxconv.tf.xla_call_module import CallModule, lower_call_module

    data = text_or_bytes.encode() if isinstance(text_or_bytes, str) else text_or_bytes
    return lower_call_module(CallModule(data, **attrs), 18, n_inputs=1)


OLD_FORM = """
module @m {
  func.func public @main(%arg0: tensor<i64>, %arg1: tensor<?x3xf32>) -> tensor<?x3xf32> {
    %0 = stablehlo.convert %arg0 : (tensor<i64>) -> tensor<f32>
    %1 = stablehlo.reshape %arg0 : (tensor<i64>) -> tensor<1xi64>
    %2 = stablehlo.constant dense<3> : tensor<1xi64>
    %3 = stablehlo.concatenate %1, %2, dim = 0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
    %4 = stablehlo.dynamic_broadcast_in_dim %0, %3, dims = []
      : (tensor<f32>, tensor<2xi64>) -> tensor<?x3xf32>
    %5 = stablehlo.add %arg1, %4 : tensor<?x3xf32>
    return %5 : tensor<?x3xf32>
  }
}
"""

WITH_TOKEN = """
module @m {
  func.func public @main(%arg0: !stablehlo.token {jax.token = true}, %arg1: tensor<?x3xf32>)
      -> (!stablehlo.token, tensor<?x3xf32>) {
    %0 = stablehlo.multiply %arg1, %arg1 : tensor<?x3xf32>
    return %arg0, %0 : !stablehlo.token, tensor<?x3xf32>
  }
}
"""


def test_older_dim_args_spec_form_feeds_the_dimension_from_the_input():
    lowered = _lower(OLD_FORM, version=4, dim_args_spec=("0.0",))
    session = _session(lowered.model)
    assert [i.shape for i in session.get_inputs()] == [["d0_0", 3]]
    for batch in (2, 5):
        x = np.arange(batch * 3, dtype=np.float32).reshape(batch, 3)
        np.testing.assert_array_equal(session.run(None, {"input_0": x})[0], x + batch)


def test_token_arguments_and_results_carry_no_data():
    session = _session(_lower(WITH_TOKEN, version=9).model)
    assert [i.name for i in session.get_inputs()] == ["input_0"]
    assert len(session.get_outputs()) == 1
    x = np.array([[1.0, -2.0, 3.0]], np.float32)
    np.testing.assert_array_equal(session.run(None, {"input_0": x})[0], x * x)


def test_multi_platform_module_takes_the_cpu_lowering():
    def f(x):
        return lax.platform_dependent(x, cpu=lambda x: x + 1.0, cuda=lambda x: x * 2.0)

    exported = export.export(jax.jit(f), platforms=["cuda", "cpu"])(jax.ShapeDtypeStruct((3,), np.float32))
    lowered = _lower(exported.mlir_module_serialized, version=10, platforms=("CUDA", "CPU"))
    assert lowered.platform == "CPU"
    x = np.array([1.0, 2.0, 3.0], np.float32)
    np.testing.assert_array_equal(_session(lowered.model).run(None, {"input_0": x})[0], jax.jit(f)(x))


def test_dimension_variables_name_the_symbolic_dimensions():
    b, = export.symbolic_shape("batch")
    exported = export.export(jax.jit(lambda x: jnp.sum(x, axis=1)))(jax.ShapeDtypeStruct((b, 4), np.float32))
    lowered = _lower(exported.mlir_module_serialized, version=10)
    assert lowered.dim_names == {0: {0: "batch"}}
    assert _session(lowered.model).get_inputs()[0].shape == ["batch", 4]


@pytest.mark.parametrize("spec", ["2*b", "c+1", "3*d+2"])
def test_dimension_expressions_are_named_as_check_sizes_read_them(spec):
    exported = export.export(jax.jit(lambda x: x * 2.0))(
        jax.ShapeDtypeStruct(export.symbolic_shape(f"{spec}, 3"), np.float32))
    lowered = _lower(exported.mlir_module_serialized, version=10)
    assert lowered.dim_names == {0: {0: spec}}


def test_tf_callbacks_and_unknown_conventions_are_refused():
    exported = export.export(jax.jit(jnp.sin))(jax.ShapeDtypeStruct((3,), np.float32))
    with pytest.raises(UnsupportedError, match=r"calls back into TensorFlow functions \(f_1"):
        _lower(exported.mlir_module_serialized, function_list=("f_1",))
    from jaxconv.tf.xla_call_module import CallModule, lower_call_module

    with pytest.raises(UnsupportedError, match="main takes 1 array arguments, the op has 2 inputs"):
        lower_call_module(CallModule(exported.mlir_module_serialized), 18, n_inputs=2)


# ---- the tf2onnx handler ---------------------------------------------------------------------------

def _model_fn(x, v):
    return jnp.tanh(x * v) + jnp.cumsum(x, axis=1)


@pytest.fixture(scope="module")
def tf_side():
    tf = pytest.importorskip("tensorflow")
    pytest.importorskip("tf2onnx")
    from jaxconv.tf import tf2onnx_handler

    assert tf2onnx_handler.opset_range() == (18, 18)
    return tf


@pytest.fixture(scope="module")
def mixed_fn(tf_side):
    """TF ops before and after a jax2tf function, with a tf.Variable and a symbolic batch."""
    from jax.experimental import jax2tf

    tf = tf_side
    v = tf.Variable(np.linspace(0.5, 2.0, 4).astype(np.float32))
    jax_part = jax2tf.convert(_model_fn, polymorphic_shapes=["(b, 4)", "(4,)"], with_gradient=False)

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")], autograph=False)
    def fn(x):
        y = tf.nn.softplus(x) - 0.5
        return tf.reduce_max(jax_part(y, v), axis=1, keepdims=True) * 3.0

    fn.v = v
    return fn


def _reference(x, v):
    return jnp.max(_model_fn(jax.nn.softplus(x) - 0.5, v), axis=1, keepdims=True) * 3.0


def _save(tf, module, path, fn):
    tf.saved_model.save(module, str(path), signatures={"serving_default": fn.get_concrete_function()})


def test_tf2onnx_python_api_converts_a_mixed_graph(tf_side, mixed_fn):
    import tf2onnx

    tf = tf_side
    model, _ = tf2onnx.convert.from_function(mixed_fn, input_signature=mixed_fn.input_signature, opset=18)
    ops = {n.op_type for n in model.graph.node}
    assert "XlaCallModule" not in ops and "PreventGradient" not in ops
    session = _session(model)
    name = session.get_inputs()[0].name
    for batch in (1, 6):
        x = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
        got = session.run(None, {name: x})[0]
        np.testing.assert_allclose(got, mixed_fn(tf.constant(x)).numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got, jax.jit(_reference)(x, mixed_fn.v.numpy()), rtol=1e-5, atol=1e-6)


def test_tf2onnx_below_opset_18_says_which_opset(tf_side, mixed_fn, tmp_path, caplog, capsys):
    import tf2onnx

    from jaxconv.tf.tf2onnx_handler import main

    expected = "opsets 18..18 with tf2onnx; the conversion asks for opset 15: pass --opset 18"
    # tf2onnx's Python API continues on errors: it logs the handler's message and keeps the op
    model, _ = tf2onnx.convert.from_function(mixed_fn, input_signature=mixed_fn.input_signature, opset=15)
    assert "XlaCallModule" in {n.op_type for n in model.graph.node}
    assert any(expected in str(r.exc_info[1]) for r in caplog.records if r.exc_info)
    # its CLI stops, and the entry point reports the one line with jaxconv's exit code
    tf = tf_side
    module = tf.Module()
    module.v = mixed_fn.v
    _save(tf, module, tmp_path / "sm", mixed_fn)
    args = ["--saved-model", str(tmp_path / "sm"), "--output", str(tmp_path / "m.onnx"), "--opset", "15"]
    assert main(args) == 6
    assert expected in capsys.readouterr().err
    assert not (tmp_path / "m.onnx").exists()


def test_tf2onnx_cli_through_the_module_entry_point(tf_side, mixed_fn, tmp_path):
    import onnx

    from jaxconv.tf.tf2onnx_handler import main

    tf = tf_side
    module = tf.Module()
    module.v = mixed_fn.v
    _save(tf, module, tmp_path / "sm", mixed_fn)
    out = tmp_path / "m.onnx"
    assert main(["--saved-model", str(tmp_path / "sm"), "--output", str(out)]) == 0
    model = onnx.load(str(out))
    assert model.opset_import[0].version == 18
    assert [i.name for i in model.graph.input] == ["x"]
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(_session(model).run(None, {"x": x})[0],
                               jax.jit(_reference)(x, mixed_fn.v.numpy()), rtol=1e-5, atol=1e-6)


UNSUPPORTED = """
module @m {
  func.func public @main(%arg0: tensor<2xui64>) -> (tensor<2xui64>, tensor<4xui32>, tensor<4xf32>) {
    %0:2 = stablehlo.rng_bit_generator %arg0, algorithm = DEFAULT
      : (tensor<2xui64>) -> (tensor<2xui64>, tensor<4xui32>)
    %1 = stablehlo.custom_call @my_kernel(%0#1) : (tensor<4xui32>) -> tensor<4xf32>
    %2 = stablehlo.custom_call @my_kernel(%1) : (tensor<4xf32>) -> tensor<4xf32>
    return %0#0, %0#1, %2 : tensor<2xui64>, tensor<4xui32>, tensor<4xf32>
  }
}
"""


def test_every_unsupported_op_of_a_module_in_one_message():
    with pytest.raises(UnsupportedError) as e:
        _lower(UNSUPPORTED, version=10)
    text = str(e.value)
    assert "\n" not in text
    assert "stablehlo.rng_bit_generator x1" in text and "stablehlo.custom_call @my_kernel x2" in text


def test_older_form_through_tf2onnx_reads_the_op_attributes(tf_side):
    """A TF graph holding a version-4 XlaCallModule (TF 2.21 no longer runs that form; the lowering does)."""
    import tf2onnx
    from tensorflow.compiler.tf2xla.ops import gen_xla_ops

    tf = tf_side
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        y = gen_xla_ops.xla_call_module(args=[x], version=4, module=OLD_FORM.encode(),
                                        Sout=[tf.TensorShape([None, 3])], Tout=[tf.float32],
                                        dim_args_spec=["0.0"], platforms=["CPU"])
        tf.identity(y[0], name="y")
    model, _ = tf2onnx.convert.from_graph_def(graph.as_graph_def(), input_names=["x:0"], output_names=["y:0"],
                                              opset=18)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(_session(model).run(None, {"x:0": x})[0], x + 4)


def _loop_and_cond(x, n):
    y = lax.fori_loop(0, n, lambda i, a: a * 0.5 + jnp.sin(a), x)
    return lax.cond(jnp.sum(y) > 0, lambda a: a * 2.0, lambda a: a - 1.0, y)


def test_loops_and_conditionals_inside_the_module_become_onnx_subgraphs(tf_side):
    import tf2onnx
    from jax.experimental import jax2tf

    tf = tf_side
    jax_part = jax2tf.convert(_loop_and_cond, polymorphic_shapes=["(b, 3)", None], with_gradient=False)
    fn = tf.function(lambda x, n: tf.abs(jax_part(x, n)), autograph=False,
                     input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x"),
                                      tf.TensorSpec([], tf.int32, name="n")])
    model, _ = tf2onnx.convert.from_function(fn, input_signature=fn.input_signature, opset=18)
    assert {"Loop", "If"} <= {n.op_type for n in model.graph.node}
    session = _session(model)
    names = [i.name for i in session.get_inputs()]
    for n in (0, 3):
        for sign in (1.0, -1.0):
            x = sign * np.random.default_rng(n).standard_normal((4, 3)).astype(np.float32)
            got = session.run(None, dict(zip(names, [x, np.array(n, np.int32)])))[0]
            np.testing.assert_allclose(got, np.abs(jax.jit(_loop_and_cond)(x, n)), rtol=1e-5, atol=1e-6)
