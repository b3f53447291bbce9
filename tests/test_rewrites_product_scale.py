"""rewrites.product_scale: a Mul by a one-element constant after a Reshape of a MatMul's product (q's scale
once split into heads) moves before the Reshape, where ONNX Runtime folds it into the MatMul's alpha. The
outputs keep their bits (huge, subnormal, NaN and infinite inputs included); a Div, a float16 product and a
product read twice stay as they are."""

from __future__ import annotations

import collections

import jax
import numpy as np
import onnx
import onnxruntime as ort
import pytest

import jaxconv
from jaxconv.onnx.rewrites import product_scale
from lowering_check import assert_same_bits, convert_and_run, without_rule

_plain = without_rule(product_scale)
_W = np.random.default_rng(3).standard_normal((16, 16)).astype(np.float32)


def _heads_scaled(x):
    return ((x @ _W).reshape(2, 8, 4, 4) * 0.125).transpose(0, 2, 1, 3)


def _inputs(dtype=np.float32) -> np.ndarray:
    x = np.random.default_rng(4).standard_normal((2, 8, 16)).astype(dtype)
    x[0, 0, :3] = [np.nan, np.inf, -np.inf]
    x[0, 1, 0] = np.finfo(dtype).max  # products past the largest float before and after the scale
    x[1, 2, :] = np.finfo(dtype).tiny  # subnormal once scaled
    return x


def test_the_scale_moves_next_to_the_product_and_keeps_the_bits(monkeypatch, tmp_path):
    x = _inputs()
    ops, got = convert_and_run(_heads_scaled, x)
    plain_ops, plain = _plain(monkeypatch, _heads_scaled, x)
    assert_same_bits(got, plain)
    want = np.asarray(jax.jit(_heads_scaled)(x))
    np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(want))
    ok = np.isfinite(want)
    np.testing.assert_allclose(got[0][ok], want[ok], rtol=1e-4, atol=1e-6)  # dots summed in other orders
    model = jaxconv.to_onnx(_heads_scaled, x, check=False)
    producers = {o: n for n in model.graph.node for o in n.output}
    (mul,) = [n for n in model.graph.node if n.op_type == "Mul"]
    assert producers[mul.input[0]].op_type == "MatMul"  # next to the product
    # ONNX Runtime then takes it into the product: no Mul left in its optimized graph
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    optimized = collections.Counter(n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node)
    assert optimized["Mul"] == 0 and optimized["FusedMatMul"] == 1, optimized
    assert ops == plain_ops  # the same nodes, in another order


@pytest.mark.parametrize("form", ["div", "float16", "read_twice"])
def test_other_forms_stay(form):
    x = _inputs(np.float16 if form == "float16" else np.float32)
    w = _W.astype(x.dtype)

    def fn(v):
        p = v @ w
        heads = p.reshape(2, 8, 4, 4)
        scaled = heads / 8.0 if form == "div" else heads * np.asarray(0.125, x.dtype)
        return (scaled, p) if form == "read_twice" else scaled

    model = jaxconv.to_onnx(fn, x, check=False)
    producers = {o: n for n in model.graph.node for o in n.output}
    scales = [n for n in model.graph.node if n.op_type in ("Mul", "Div") and n.input[0] in producers]
    assert scales and all(producers[n.input[0]].op_type != "MatMul" for n in scales), \
        [(n.op_type, producers[n.input[0]].op_type) for n in scales]
    got = jaxconv.runtimes.onnxrt.OnnxRunner(model.SerializeToString()).run([x])
    for g, w_ in zip(got, jax.tree_util.tree_leaves(jax.jit(fn)(x))):
        w_ = np.asarray(w_)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w_))
