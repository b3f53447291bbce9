"""The layout rule on a Flax ResNet-style network: batch-norm affine (its scale computed from constants),
residual adds, relu, max and mean pooling stay NCHW, with one Transpose at the input, also in ONNX
Runtime's optimized graph, where the batch-norm affine folds into the Conv; jax.jit's numbers kept."""

from __future__ import annotations

import collections
import os

import jax
import numpy as np
import onnx
import onnxruntime as ort
import pytest

import jaxconv
from conformance.nets import resnet
from jaxconv.runtimes.onnxrt import OnnxRunner

pytest.importorskip("flax.linen")


def _model():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 16, 16, 3)).astype(np.float32)
    module = resnet(8, 3, ((8, 1), (16, 2)), 5)
    variables = jax.jit(module.init)(jax.random.key(0), x)
    def stat(path, leaf):  # running statistics of a trained model: small means, variances near 1
        r = rng.standard_normal(leaf.shape).astype(np.float32)
        return 0.1 * r if path[-1].key == "mean" else np.abs(r) + 0.5

    stats = jax.tree_util.tree_map_with_path(stat, variables["batch_stats"])
    variables = {"params": variables["params"], "batch_stats": stats}
    return (lambda x: module.apply(variables, x)), x


def test_resnet_block_stays_nchw_with_one_input_transpose(tmp_path):
    fn, x = _model()
    model = jaxconv.to_onnx(fn, jax.ShapeDtypeStruct(x.shape, x.dtype), check=False)
    ops = collections.Counter(n.op_type for n in model.graph.node)
    assert ops["Transpose"] == 1 and model.graph.node[0].op_type == "Transpose", ops
    assert ops["Conv"] == 6, ops
    (got,) = OnnxRunner(model.SerializeToString()).run([x])
    want = np.asarray(jax.jit(fn)(x))
    assert np.abs(want).max() > 0.1  # the activations reach the output
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

    options = ort.SessionOptions()
    options.optimized_model_filepath = os.fspath(tmp_path / "optimized.onnx")
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    optimized = onnx.load(options.optimized_model_filepath)
    optimized_ops = collections.Counter(n.op_type for n in optimized.graph.node)
    assert optimized_ops["Transpose"] == 1, optimized_ops
    assert optimized_ops["Mul"] == 0, optimized_ops  # batch norm's Sub as Add: the affine folds into the Conv
