"""A float16 or bfloat16 attention whose heads are transposed to the front before a product: ONNX
Runtime 1.32 crashes (SIGSEGV) while building the session when a Transpose that moves the first axis
reaches a MatMul through a Cast; jaxconv writes the Cast first (``cast_rules.CastBeforeTranspose``).

Found by the fuzzer (model seed 31415094281, a worker lost): the minimiser's candidate ``softmax(s) @ v``
with ``s`` of shape [1, 1, 32, 32] and ``v`` [2, 8, 32, 1], the heads moved back and a dense layer.
"""

from __future__ import annotations

import subprocess
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import jaxconv
from jaxconv.runtimes.onnxrt import OnnxRunner

W = (np.random.default_rng(3).standard_normal((8, 8)) * 0.35)


def attend(v, s):
    p = jax.nn.softmax(s, axis=-1)
    heads = (p @ v).transpose(0, 2, 1, 3).reshape(2, 32, 8)
    return heads @ jnp.asarray(W, v.dtype)


def _crashes(model: onnx.ModelProto) -> bool:
    """Whether building an ONNX Runtime session for ``model`` kills the process (run in a child)."""
    code = ("import sys, onnxruntime as ort; ort.InferenceSession(sys.stdin.buffer.read(), "
            "providers=['CPUExecutionProvider'])")
    done = subprocess.run([sys.executable, "-c", code], input=model.SerializeToString(), capture_output=True, timeout=120)
    return done.returncode < 0


def test_the_premise_onnx_runtime_crashes_on_transpose_cast_matmul():
    """If this starts failing, ONNX Runtime loads the pattern now and the rule may go."""
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
             helper.make_node("Cast", ["t"], ["c"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["c", "w"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [32, 2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.ones((8, 4), np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    assert _crashes(model)
    cast_first = [helper.make_node("Cast", ["x"], ["c"], to=TensorProto.FLOAT),
                  helper.make_node("Transpose", ["c"], ["t"], perm=[1, 0, 2]),
                  helper.make_node("MatMul", ["t", "w"], ["y"])]
    del model.graph.node[:]
    model.graph.node.extend(cast_first)
    assert not _crashes(model)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
def test_a_half_precision_attention_with_heads_first_loads_and_matches(dtype):
    rng = np.random.default_rng(0)
    v = rng.standard_normal((2, 8, 32, 1)).astype(dtype)
    s = rng.standard_normal((1, 1, 32, 32)).astype(dtype)
    model = jaxconv.to_onnx(attend, v, s)  # the default check runs the model in ONNX Runtime
    assert not _crashes(model)
    casts_after_transposes = [n for n in model.graph.node if n.op_type == "Cast" and any(
        p.op_type == "Transpose" and p.output[0] == n.input[0] for p in model.graph.node)]
    assert not casts_after_transposes
    got = OnnxRunner(model.SerializeToString()).run([v, s])[0]
    want = np.asarray(jax.jit(attend)(v, s))
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-2, atol=2e-2)


def attend_half_product(v, s):
    """The heads moved to the front in float32, then a float16 product: Transpose -> Cast(f16) -> MatMul."""
    p = jax.nn.softmax(s.astype(jnp.float32), axis=-1)
    heads = (p @ v.astype(jnp.float32)).transpose(1, 0, 2).astype(jnp.float16)
    return heads @ jnp.asarray(W[:1], jnp.float16)


def test_a_narrowing_cast_after_a_transpose_loads_too():
    rng = np.random.default_rng(1)
    v = rng.standard_normal((32, 8, 1)).astype(np.float16)
    s = rng.standard_normal((32, 8, 8)).astype(np.float16)
    model = jaxconv.to_onnx(attend_half_product, v, s)
    assert not _crashes(model)
    got = OnnxRunner(model.SerializeToString()).run([v, s])[0]
    np.testing.assert_allclose(got.astype(np.float32), np.asarray(jax.jit(attend_half_product)(v, s)).astype(np.float32),
                               rtol=2e-2, atol=2e-2)
