"""jaxconv.onnx.rewrites.dense_bias: a big product's bias Add kept out of ONNX Runtime's fused Gemm on models
that run on more than one thread; the outputs are those of the product and then the Add (jax.jit's order),
bit for bit those of the graph without the rule run with ORT's fusions off."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
import pytest

import jaxconv
from jaxconv.onnx.rewrites import dense_bias
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_bits, assert_same_floats

_RNG = np.random.default_rng(0)


def _weights(*shape: int) -> np.ndarray:
    return (_RNG.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)


_W1, _B1 = _weights(512, 512), _weights(512)
_W2, _B2 = _weights(512, 600), _weights(600)


def _mlp(activation):
    def fn(x):
        return activation(x @ _W1 + _B1) @ _W2 + _B2
    return fn


def _input(*shape: int) -> np.ndarray:
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    x.reshape(-1, shape[-1])[0, :3] = [np.nan, np.inf, -np.inf]
    return x


def _unfused(model: onnx.ModelProto, x: np.ndarray, tmp_path) -> tuple[list[str], list[np.ndarray]]:
    """ORT's optimized graph's op types, and the outputs of ``model`` with every ORT fusion off."""
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    options.log_severity_level = 3
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    fused = [n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node]
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), plain, providers=["CPUExecutionProvider"])
    return fused, session.run(None, {session.get_inputs()[0].name: x})


def _convert(fn, spec, monkeypatch, rule: bool = True) -> onnx.ModelProto:
    with monkeypatch.context() as patch:
        if not rule:
            patch.setattr(dense_bias, "rewrite", lambda graph: 0)
        return jaxconv.to_onnx(fn, spec, check=False)


@pytest.mark.parametrize("shape", [(64, 512), (4, 16, 512)], ids=["2-D", "3-D"])
@pytest.mark.parametrize("activation", [jax.nn.relu, jnp.tanh], ids=["relu", "tanh"])
def test_the_bias_stays_an_add(shape, activation, monkeypatch, tmp_path):
    fn = _mlp(activation)
    x = _input(*shape)
    spec = jax.ShapeDtypeStruct(shape, np.float32)
    model = _convert(fn, spec, monkeypatch)
    plain = _convert(fn, spec, monkeypatch, rule=False)
    ops = [n.op_type for n in model.graph.node]
    if len(shape) == 2:
        gemms = [n for n in model.graph.node if n.op_type == "Gemm"]
        assert len(gemms) == 2 and all(len(n.input) == 2 for n in gemms), ops  # no C: the bias is the Add's
    else:
        ranks = [len(i.dims) for i in model.graph.initializer if i.name.endswith("_rank3")]
        assert ranks == [3, 3], ops
    fused, _ = _unfused(model, x, tmp_path)
    assert fused.count("Add") == 2 and "FusedGemm" not in fused, fused
    plain_fused, want = _unfused(plain, x, tmp_path)
    assert "Add" not in plain_fused, plain_fused  # without the rule ORT fuses them
    got = OnnxRunner(model.SerializeToString()).run([x])
    assert_same_bits(got, want)
    assert_same_floats(got[0], np.asarray(jax.jit(fn)(x)), 2e-5, 2e-5)


def test_a_symbolic_batch_counts_at_the_record_size(monkeypatch, tmp_path):
    fn = _mlp(jax.nn.relu)
    model = jaxconv.to_onnx(fn, "f32[b,512]", check=False)
    assert [n.op_type for n in model.graph.node].count("Gemm") == 2
    run = OnnxRunner(model.SerializeToString())
    for batch in (1, 3):
        x = _input(batch, 512)
        assert_same_floats(run.run([x])[0], np.asarray(jax.jit(fn)(x)), 2e-5, 2e-5)


def _small_product(x):
    return jax.nn.relu(x @ _W1[:8, :16] + _B1[:16])


def _gelu_layer(x):
    return jax.nn.gelu(x @ _W1 + _B1)


@pytest.mark.parametrize("fn, shape, why", [
    (_mlp(jax.nn.relu), (16, 512), "small"),  # 16 x 512 < MIN_ELEMENTS
    (_gelu_layer, (4, 16, 512), "gelu"),  # ORT fuses the bias into its Gelu
    (_small_product, (4096, 8), "one thread"),  # [4096, 16]: big, but a product the record gives one thread
], ids=lambda v: v if isinstance(v, str) else "")
def test_other_products_keep_ort_s_fusion(fn, shape, why, monkeypatch):
    spec = jax.ShapeDtypeStruct(shape, np.float32)
    model = _convert(fn, spec, monkeypatch)
    plain = _convert(fn, spec, monkeypatch, rule=False)
    assert [n.op_type for n in model.graph.node] == [n.op_type for n in plain.graph.node]
    assert [i.name for i in model.graph.initializer] == [i.name for i in plain.graph.initializer]
    x = _input(*shape)
    assert_same_floats(OnnxRunner(model.SerializeToString()).run([x])[0], np.asarray(jax.jit(fn)(x)), 2e-5, 2e-5)
