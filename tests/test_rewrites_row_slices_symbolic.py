"""row_slices on a symbolic sequence: a classifier's first token of ``f32[2, s, 8]`` (``x[:, 0]``, a
dynamic_slice whose start settles to 0) cut before the last layer's row-wise ops, as in a static model.
The numbers are those of the graph without the rule, bit for bit (NaN, ±inf, -0.0, ±FLT_MAX, subnormals),
and jax.jit's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxconv
from jaxconv.onnx.rewrites import row_slices
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_bits, assert_same_floats

F32 = np.finfo(np.float32)
W = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)


def _inputs(s: int) -> np.ndarray:
    x = np.random.default_rng(s).standard_normal((2, s, 8)).astype(np.float32)
    x[0, 0, :6] = [np.nan, np.inf, -np.inf, -0.0, F32.max, F32.smallest_subnormal]
    x[1, -1, :] = -0.0
    return x


def _classifier(x):
    h = jax.nn.gelu(x @ jnp.asarray(W)) + x
    mu = jnp.mean(h, axis=-1, keepdims=True)
    h = (h - mu) / jnp.sqrt(jnp.mean(jnp.square(h - mu), axis=-1, keepdims=True) + 1e-5)
    return jnp.tanh(h[:, 0] @ jnp.asarray(W))


def test_first_token_of_a_symbolic_sequence_is_cut_early(monkeypatch):
    model = jaxconv.to_onnx(_classifier, "f32[2,s,8]", check=False)
    with monkeypatch.context() as patch:
        patch.setattr(row_slices, "rewrite", lambda *args: 0)
        plain = jaxconv.to_onnx(_classifier, "f32[2,s,8]", check=False)
    (cut,) = [n for n in model.graph.node if n.op_type == "Slice"]
    (plain_cut,) = [n for n in plain.graph.node if n.op_type == "Slice"]
    x = model.graph.input[0].name
    assert cut.input[0] == x != plain_cut.input[0]  # every op row-wise: the cut reaches the input
    runner, plain_runner = OnnxRunner(model.SerializeToString()), OnnxRunner(plain.SerializeToString())
    for s in (1, 2, 9):
        x = _inputs(s)
        got = runner.run([x])
        assert_same_bits(got, plain_runner.run([x]))
        assert_same_floats(got[0], jax.jit(_classifier)(x), 1e-5, 1e-5)


def test_a_long_cut_of_a_symbolic_axis_stays():
    def fn(x):
        return jnp.tanh(x)[:, :row_slices.FEW_ROWS + 1]

    model = jaxconv.to_onnx(fn, "f32[2,s,8]", constraints=[f"s >= {row_slices.FEW_ROWS + 1}"], check=False)
    (cut,) = [n for n in model.graph.node if n.op_type == "Slice"]
    assert cut.input[0] in [o for n in model.graph.node if n.op_type == "Tanh" for o in n.output]
