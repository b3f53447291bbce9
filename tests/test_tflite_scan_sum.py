"""ONNX Scan and Sum (written by the lowering's rewrites) on the tf-ops route, in TF and in LiteRT."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxconv import api

pytestmark = pytest.mark.tf
tf = pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert")

S = jax.ShapeDtypeStruct


def running(c0, xs):
    def cell(c, x):
        c = jnp.tanh(c * 0.5 + x)
        return c, c * 2.0 + x

    return lax.scan(cell, c0, xs)


def _builtin_tflite(concrete):
    from jaxconv.runtimes.tflite import TFLiteRunner
    from jaxconv.tf.saved_model import quiet_stderr

    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], tf.Module())
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    with quiet_stderr():
        return TFLiteRunner(converter.convert())


def test_scan_stacks_rows_like_jax_in_tflite():
    from jaxconv.onnx import convert
    from jaxconv.program import trace
    from jaxconv.tf.onnx_to_tf import OPSET, for_program

    specs = [S((3,), np.float32), S((7, 3), np.float32)]
    program = trace(running, specs)
    ops = {n.op_type for n in convert.program_to_onnx(trace(running, specs), OPSET).graph.node}
    assert "Scan" in ops  # what this test is about: the lowering's rewrite wrote a Scan
    rng = np.random.default_rng(0)
    c0, xs = rng.normal(size=(3,)).astype(np.float32), rng.normal(size=(7, 3)).astype(np.float32)
    c, ys = jax.jit(running)(c0, xs)
    _, function, concrete = for_program(program)
    got = function(c0, xs)
    np.testing.assert_allclose(got["output_0"].numpy(), c, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["output_1"].numpy(), ys, rtol=1e-6, atol=1e-6)
    runner = _builtin_tflite(concrete)
    feeds = dict(zip([t.name for t in program.signature.inputs], (c0, xs)))
    out = runner.run([feeds[n] for n in runner.input_names])
    np.testing.assert_allclose(np.asarray(out[0]).reshape(3), c, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(out[1]).reshape(7, 3), ys, rtol=1e-6, atol=1e-6)


def test_scan_in_bfloat16_converts_by_auto_and_checks():
    reports: list = []
    api.to_tflite(running, S((3,), jnp.bfloat16), S((5, 3), jnp.bfloat16), report_to=reports)
    assert reports and reports[0].ok


def test_sum_with_positive_zero_turns_negative_zero_positive_in_tflite():
    import onnx
    from onnx import helper, numpy_helper

    from jaxconv.tf.onnx_to_tf import serving_function

    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    graph = helper.make_graph(
        [helper.make_node("Sum", ["x", "zero"], ["y"]), helper.make_node("Sum", ["x", "x", "x"], ["z"])],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [4]) for n in ("y", "z")],
        [zero],
    )
    function = serving_function(tf, helper.make_model(graph), [tf.TensorSpec([4], tf.float32, name="x")])
    x = np.array([-0.0, 0.0, np.nan, -2.5], np.float32)
    out = _builtin_tflite(function.get_concrete_function()).run([x])
    y, z = (np.asarray(o) for o in out)
    np.testing.assert_array_equal(y, x + np.float32(0.0))  # IEEE: -0 + +0 = +0, NaN stays NaN
    assert not np.signbit(y[0]) and np.isnan(y[2])
    np.testing.assert_array_equal(z, x * 3)
