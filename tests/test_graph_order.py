"""The cleaned-up graph stays in dependency order: rules that merge nodes (onnxscript's Slices -> Split
after row_slices moved a Slice) may place a node after a reader; the clean-up sorts the graph."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxconv
from jaxconv.runtimes.onnxrt import OnnxRunner

_A = np.random.default_rng(0).standard_normal((3, 3)).astype(np.float32)
_SPD = _A @ _A.T + 3 * np.eye(3, dtype=np.float32)


@pytest.mark.parametrize("fn", [
    jnp.linalg.inv,
    lambda a: jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(a), jnp.ones((3,), jnp.float32)),
], ids=["inv", "cho_solve"])
def test_small_solves_convert_in_order_and_match_jax(fn):
    model = jaxconv.to_onnx(fn, _SPD)  # onnx.checker refused a Split placed after its reader
    (got,) = OnnxRunner(model.SerializeToString()).run([_SPD])
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(_SPD)), rtol=1e-5, atol=1e-6)


def test_the_clean_up_keeps_two_slices_of_an_odd_last_axis():
    """``x[..., 0:1]`` and ``x[..., 1:3]``: onnxscript's Slices -> Split rule wrote ``Split(num_outputs=2)``,
    which cuts 3 as [2, 1], not [1, 2]."""
    import onnx
    import onnx_ir as ir
    from onnx import TensorProto, helper

    from jaxconv.onnx.passes import clean_up

    ints = lambda name, v: helper.make_tensor(name, TensorProto.INT64, [len(v)], v)  # noqa: E731
    graph = helper.make_graph(
        [helper.make_node("Slice", ["x", "b0", "e0", "ax"], ["s0"]),
         helper.make_node("Slice", ["x", "e0", "e1", "ax"], ["s1"]),
         helper.make_node("Exp", ["s0"], ["y0"]), helper.make_node("Tanh", ["s1"], ["y1"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y0", TensorProto.FLOAT, [2, 1]),
         helper.make_tensor_value_info("y1", TensorProto.FLOAT, [2, 2])],
        [ints("b0", [0]), ints("e0", [1]), ints("e1", [3]), ints("ax", [-1])])
    model = ir.serde.deserialize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    clean_up(model)
    proto = ir.serde.serialize_model(model)
    onnx.checker.check_model(proto, full_check=True)
    x = np.array([[np.nan, -0.0, 2.0], [-1.5, 0.5, np.inf]], np.float32)
    y0, y1 = OnnxRunner(proto.SerializeToString()).run([x])
    np.testing.assert_allclose(y0, np.exp(x[:, :1]), rtol=1e-6)
    np.testing.assert_allclose(y1, np.tanh(x[:, 1:]), rtol=1e-6)
