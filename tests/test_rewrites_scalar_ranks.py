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
