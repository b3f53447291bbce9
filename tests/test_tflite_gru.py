"""The ONNX GRU op (the lowering's rewrite of a lax.scan GRU cell) on the tf-ops route: against ONNX
Runtime on the same node, and against jax.jit through the route."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from onnx import TensorProto, helper
from onnx_graphs import op_types

pytestmark = pytest.mark.tf
tf = pytest.importorskip("tensorflow")
ort = pytest.importorskip("onnxruntime")

T, B, IN, H = 5, 3, 4, 6


def _gru_model(linear_before_reset, with_bias, with_h0):
    info = helper.make_tensor_value_info
    names = ["x", "w", "r", "b" if with_bias else "", "", "h0" if with_h0 else ""]
    while not names[-1]:
        names.pop()
    node = helper.make_node("GRU", names, ["y", "y_h"], hidden_size=H, linear_before_reset=linear_before_reset)
    inputs = [info("x", TensorProto.FLOAT, [T, B, IN]), info("w", TensorProto.FLOAT, [1, 3 * H, IN]),
              info("r", TensorProto.FLOAT, [1, 3 * H, H])]
    inputs += [info("b", TensorProto.FLOAT, [1, 6 * H])] if with_bias else []
    inputs += [info("h0", TensorProto.FLOAT, [1, B, H])] if with_h0 else []
    outputs = [info("y", TensorProto.FLOAT, [T, 1, B, H]), info("y_h", TensorProto.FLOAT, [1, B, H])]
    graph = helper.make_graph([node], "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])


@pytest.mark.parametrize("linear_before_reset", [0, 1])
@pytest.mark.parametrize("with_bias, with_h0", [(True, True), (False, False), (True, False)])
def test_gru_node_matches_onnx_runtime(linear_before_reset, with_bias, with_h0):
    from jaxconv.tf.onnx_to_tf import serving_function

    rng = np.random.default_rng(linear_before_reset)
    feeds = {"x": rng.normal(size=(T, B, IN)), "w": rng.normal(size=(1, 3 * H, IN)) * 0.5,
             "r": rng.normal(size=(1, 3 * H, H)) * 0.5}
    if with_bias:
        feeds["b"] = rng.normal(size=(1, 6 * H)) * 0.5
    if with_h0:
        feeds["h0"] = rng.normal(size=(1, B, H))
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    model = _gru_model(linear_before_reset, with_bias, with_h0)
    specs = [tf.TensorSpec(v.shape, tf.float32, name=k) for k, v in feeds.items()]
    got = serving_function(tf, model, specs)(*feeds.values())
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for i, w in enumerate(want):
        g = got[f"output_{i}"].numpy()
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)
    # the two forms differ on these weights: the attribute is read
    assert np.abs(want[1]).max() > 0.1


_RNG = np.random.default_rng(3)
WX, WR, WN, BX = (_RNG.normal(size=s).astype(np.float32) * 0.4 for s in ((IN, 3 * H), (H, 2 * H), (H, H), (3 * H,)))


def gru(xs, h0):
    def cell(h, x):
        gx = x @ WX + BX
        r, z = jnp.split(jax.nn.sigmoid(gx[..., : 2 * H] + h @ WR), 2, axis=-1)
        n = jnp.tanh(gx[..., 2 * H :] + (r * h) @ WN)
        h = (1 - z) * n + z * h
        return h, h

    return lax.scan(cell, h0, xs)


def test_gru_scan_through_the_route_matches_jax_jit(monkeypatch):
    from jaxconv.onnx import convert
    from jaxconv.onnx.rewrites import gru as gru_rule
    from jaxconv.program import trace
    from jaxconv.tf.onnx_to_tf import OPSET, for_program

    monkeypatch.setattr(gru_rule, "ENABLED", True)
    rng = np.random.default_rng(4)
    xs, h0 = rng.normal(size=(T, B, IN)).astype(np.float32), rng.normal(size=(B, H)).astype(np.float32)
    program = trace(gru, [jax.ShapeDtypeStruct(xs.shape, xs.dtype), jax.ShapeDtypeStruct(h0.shape, h0.dtype)])
    assert "GRU" in op_types(convert.program_to_onnx(program, OPSET).graph)
    _, function, _ = for_program(program)
    got = function(xs, h0)
    want = jax.tree_util.tree_leaves(jax.jit(gru)(xs, h0))
    for i, w in enumerate(want):
        np.testing.assert_allclose(got[f"output_{i}"].numpy(), np.asarray(w), rtol=1e-5, atol=1e-6)

    pytest.importorskip("ai_edge_litert")
    from jaxconv import api
    from jaxconv.runtimes.tflite import TFLiteRunner, read_route

    reports: list = []
    data = api.to_tflite(program, route="tf-ops", report_to=reports)
    assert read_route(data) == "tf-ops" and reports[0].ok, reports[0].table()
    for g, w in zip(TFLiteRunner(data).run([xs, h0]), want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)
