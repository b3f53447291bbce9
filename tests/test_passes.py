"""Graph clean-up: cancelling chains, shared subexpressions, dead nodes, folded constants."""

import jax.numpy as jnp
import numpy as np
import onnx
from onnx import helper

from jaxconv.onnx.passes import eliminate_common_subexpressions, optimize, remove_dead_nodes
from lowering_check import assert_onnx_matches_jax, onnx_op_types


def test_transposes_that_cancel_are_removed():
    model = assert_onnx_matches_jax(lambda x: jnp.transpose(jnp.transpose(x, (1, 0, 2)), (1, 0, 2)) * 2,
                                    np.ones((2, 3, 4), np.float32))
    assert onnx_op_types(model) == ["Mul"]


def test_lossless_cast_round_trip_and_reshape_chain():
    def f(x):
        return x.astype(jnp.int32).astype(jnp.int8) + 1, x.reshape(6, 4).reshape(3, 8)

    model = assert_onnx_matches_jax(f, np.arange(24, dtype=np.int8).reshape(2, 3, 4))
    assert sorted(onnx_op_types(model)) == ["Add", "Reshape"]


def test_lossy_cast_round_trip_is_kept():
    model = assert_onnx_matches_jax(lambda x: x.astype(jnp.bfloat16).astype(jnp.float32),
                                    np.array([1.0001, 3.14159, -2.5e-3], np.float32))
    assert onnx_op_types(model).count("Cast") == 2


def test_constants_are_folded():
    model = assert_onnx_matches_jax(lambda x: x + jnp.sin(jnp.arange(4.0)) * 3, np.ones(4, np.float32))
    assert onnx_op_types(model) == ["Add"]


def _graph(nodes, outputs):
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3])
    outs = [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, [3]) for o in outputs]
    return helper.make_graph(nodes, "g", [x], outs)


def test_common_subexpressions_are_merged():
    g = _graph([helper.make_node("Exp", ["x"], ["a"]), helper.make_node("Exp", ["x"], ["b"]),
                helper.make_node("Add", ["a", "b"], ["y"])], ["y"])
    eliminate_common_subexpressions(g)
    assert [n.op_type for n in g.node] == ["Exp", "Add"]
    assert list(g.node[1].input) == ["a", "a"]


def test_dead_nodes_are_removed():
    g = _graph([helper.make_node("Exp", ["x"], ["a"]), helper.make_node("Log", ["x"], ["dead"]),
                helper.make_node("Neg", ["a"], ["y"])], ["y"])
    remove_dead_nodes(g)
    assert [n.op_type for n in g.node] == ["Exp", "Neg"]


def test_optimize_keeps_graph_outputs():
    g = _graph([helper.make_node("Exp", ["x"], ["y"]), helper.make_node("Exp", ["x"], ["z"])], ["y", "z"])
    model = optimize(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]))
    assert sorted(o for n in model.graph.node for o in n.output) == ["y", "z"]


def test_broadcast_constants_are_not_materialised():
    import jax

    model = assert_onnx_matches_jax(lambda x: jax.nn.relu(x) * 3.0 + 1.0, np.ones((64, 64), np.float32))
    sizes = [int(np.prod(t.dims)) for t in model.graph.initializer]
    assert max(sizes) <= 16, sizes


def test_large_models_are_saved_with_external_data(tmp_path, monkeypatch):
    import jaxconv
    from jaxconv.onnx import convert
    from jaxconv.runtimes.onnxrt import OnnxRunner

    weights = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    monkeypatch.setattr(convert, "EXTERNAL_DATA_BYTES", 100_000)  # stand-in for the 2 GB limit
    path = tmp_path / "big.onnx"
    model = jaxconv.to_onnx(lambda x: x @ weights, "f32[2,256]", path=str(path))
    assert (tmp_path / "big.onnx.data").stat().st_size >= weights.nbytes
    assert path.stat().st_size < 100_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.onnx", "big.onnx.data"]
    assert any(len(t.raw_data) == weights.nbytes for t in model.graph.initializer)  # returned model keeps its weights
    x = np.ones((2, 256), np.float32)
    np.testing.assert_allclose(OnnxRunner(str(path)).run([x])[0], x @ weights, rtol=1e-5)
