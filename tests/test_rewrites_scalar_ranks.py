"""jaxconv.onnx.rewrites.scalar_ranks: a scalar operand of an elementwise op whose output ends in an axis of 1
takes the output's rank (ONNX Runtime broadcasts a scalar against such an operand one element per call).
The outputs bit for bit those without the rule, within tolerance of jax.jit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxconv
from jaxconv.onnx.rewrites import scalar_ranks
from lowering_check import assert_same_bits, assert_same_floats, convert_and_run, without_rule

_plain = without_rule(scalar_ranks)


def _scalar_operands(model, ops=scalar_ranks._OPS):
    """(op type, rank of the output, rank of each one-element operand) of the graph's elementwise ops."""
    shapes = {v.name: len(v.type.tensor_type.shape.dim) for v in [*model.graph.value_info, *model.graph.input,
                                                                   *model.graph.output]}
    shapes.update({t.name: len(t.dims) for t in model.graph.initializer})
    sizes = {t.name: int(np.prod(t.dims)) for t in model.graph.initializer}
    return [(n.op_type, shapes.get(n.output[0]), [shapes.get(i) for i in n.input if sizes.get(i) == 1])
            for n in model.graph.node if n.op_type in ops]


def _stats(x):
    """A statistic kept with ``keepdims`` (``[..., 1]``) shifted and scaled by scalars, and a mask of it."""
    mean = x.mean(-1, keepdims=True)
    shifted = (mean + 1e-5) * 2.0
    return jnp.where(~(mean > 0), shifted, -shifted)


def test_scalars_against_a_last_axis_of_one_take_the_full_rank(monkeypatch):
    x = np.random.default_rng(0).standard_normal((16, 32, 8)).astype(np.float32)
    x[0, 0, 0], x[1, 1, :] = np.nan, 0.0
    _, got = convert_and_run(_stats, x)
    _, want = _plain(monkeypatch, _stats, x)
    assert_same_bits(got, want)
    assert_same_floats(got[0], jax.jit(_stats)(x), rtol=1e-6, atol=1e-6)
    model = jaxconv.to_onnx(_stats, x, check=False)
    scaled = [(op, ranks) for op, rank, ranks in _scalar_operands(model) if rank == 3 and ranks]
    assert {op for op, _ in scaled} >= {"Add", "Mul"} and all(set(ranks) == {3} for _, ranks in scaled)


def test_a_computed_scalar_is_reshaped(monkeypatch):
    def fn(x, s):
        return x.sum(-1, keepdims=True) * s

    x = np.random.default_rng(1).standard_normal((8, 16, 4)).astype(np.float32)
    s = np.float32(-0.0)
    ops, got = convert_and_run(fn, x, s)
    plain_ops, want = _plain(monkeypatch, fn, x, s)
    assert_same_bits(got, want)
    assert ops["Reshape"] == plain_ops["Reshape"] + 1


def test_other_last_axes_are_left_alone(monkeypatch):
    def fn(x):
        return x.mean(-1, keepdims=True)[..., 0] + 1.0

    x = np.random.default_rng(2).standard_normal((8, 16, 4)).astype(np.float32)
    model = jaxconv.to_onnx(fn, x, check=False)
    assert [ranks for op, rank, ranks in _scalar_operands(model, ("Add",))] == [[0]]


def _scaled_by_scalar(shape: list[int]):
    """An ONNX model ``x * c`` with ``x`` of ``shape`` and ``c`` a rank-0 constant (keras-hub GPT-NeoX's
    grouped attention scores ``[b, h, q, 1, k]`` scaled so, after the clean-up)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph([helper.make_node("Mul", ["x", "c"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                              [numpy_helper.from_array(np.array(0.17, np.float32), "c")])
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))


def _rewritten_ranks(shape: list[int]):
    import onnx_ir as ir

    from jaxconv.runtimes.onnxrt import OnnxRunner

    plain = _scaled_by_scalar(shape)
    model = ir.serde.deserialize_model(plain)
    count = scalar_ranks.rewrite(model.graph)
    rewritten = ir.serde.serialize_model(model)
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    x.flat[0] = np.nan
    assert_same_bits(OnnxRunner(rewritten.SerializeToString()).run([x]), OnnxRunner(plain.SerializeToString()).run([x]))
    ranks = {t.name: len(t.dims) for t in rewritten.graph.initializer}
    return count, [ranks[name] for node in rewritten.graph.node for name in node.input if name in ranks]


def test_scalars_against_an_axis_of_one_next_to_the_last_take_the_full_rank():
    assert _rewritten_ranks([2, 4, 8, 1, 16]) == (1, [5])
    assert _rewritten_ranks([8, 1, 16]) == (1, [3])


def test_an_axis_of_one_further_in_is_left_alone():
    assert _rewritten_ranks([8, 1, 16, 16]) == (0, [0])
    assert _rewritten_ranks([1, 16]) == (0, [0])
