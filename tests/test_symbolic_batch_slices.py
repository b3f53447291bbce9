"""Slices of a symbolic shape as those of a static one: jax writes ``x[..., ::2]`` on a symbolic shape as a
gather of constant indices whose slice sizes name the symbolic axes, and ``x[..., :16]`` as a
``real_dynamic_slice`` whose bounds name them too. The gather is a strided Slice (rewrites need no
GatherND index grid), and the symbolic rule drops the entries of a Slice that keep a whole axis and
follows Split outputs' shapes, so a rotary embedding's Expands go (GPT-J with a symbolic batch); its
pairs then become one Split, as on a static shape (rewrites.strided_slices)."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import onnx_ir as ir
import pytest
from onnx_graphs import op_types

import jaxconv
from jaxconv.onnx.rewrites import symbolic
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_bits

_COS = np.cos(np.arange(6 * 16, dtype=np.float32).reshape(6, 1, 16) / 7)
_SIN = np.sin(np.arange(6 * 16, dtype=np.float32).reshape(6, 1, 16) / 7)


def _pairs(x):
    return x[..., ::2] * 2.0 + x[..., 1::2]


def _rotary(x):
    """GPT-J's rotary embedding of the first 16 features: ``rotate_every_two`` by a stack and a reshape."""
    r, rest = x[..., :16], x[..., 16:]
    x1, x2 = r[..., ::2], r[..., 1::2]
    turned = jnp.stack((-x2, x1), axis=-1).reshape(r.shape)
    return jnp.concatenate([r * _COS + turned * _SIN, rest], axis=-1)


def _edge(shape, seed):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[:5] = [np.nan, np.inf, -np.inf, -0.0, 3.4e38]
    return x


def _ops(model) -> collections.Counter:
    return collections.Counter(op_types(model.graph))


def test_strided_slices_of_a_symbolic_shape_are_slices():
    model = jaxconv.to_onnx(_pairs, "f32[b,4,8]", check=False)
    assert _ops(model) == _ops(jaxconv.to_onnx(_pairs, "f32[2,4,8]", check=False))  # one Split of pairs
    assert _ops(model)["Split"] == 1 and _ops(model)["Slice"] == _ops(model)["Shape"] == 0
    runner = OnnxRunner(model.SerializeToString())
    for b in (1, 3):
        x = _edge((b, 4, 8), b)
        assert_same_bits(runner.run([x]), [np.asarray(jax.jit(_pairs)(x))])


@pytest.mark.parametrize("start", [0, 1, 2])
def test_a_strided_slice_keeps_its_start_and_its_end(start):
    def fn(x):
        return x[:, start::3]

    model = jaxconv.to_onnx(fn, "f32[b,10]", check=False)
    assert "GatherND" not in op_types(model.graph)
    x = _edge((2, 10), start)
    assert_same_bits(OnnxRunner(model.SerializeToString()).run([x]), [np.asarray(jax.jit(fn)(x))])


def test_a_rotary_embedding_on_a_symbolic_batch_computes_no_shapes(monkeypatch):
    model = jaxconv.to_onnx(_rotary, "f32[b,6,4,32]", check=False)
    with monkeypatch.context() as patch:  # without the whole-axis cut: the Slice's bounds are computed
        patch.setattr(symbolic, "_whole_axes_cut", lambda *args: None)
        plain = jaxconv.to_onnx(_rotary, "f32[b,6,4,32]", check=False)
    assert _ops(plain)["Shape"] == 1
    ops = _ops(model)
    assert ops["Shape"] == ops["Expand"] == ops["GatherND"] == 0 and ops["Split"] == 2  # the pairs: one Split
    assert ops == _ops(jaxconv.to_onnx(_rotary, "f32[2,6,4,32]", check=False))
    runner, plain_runner = OnnxRunner(model.SerializeToString()), OnnxRunner(plain.SerializeToString())
    for b in (1, 2):
        x = _edge((b, 6, 4, 32), 10 + b)
        got = runner.run([x])
        assert_same_bits(got, plain_runner.run([x]))
        np.testing.assert_allclose(got[0], np.asarray(jax.jit(_rotary)(x)), rtol=1e-6, atol=1e-6)


def test_split_outputs_have_the_input_shape_cut_to_their_sizes():
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(["b", 6, 16]))
    sizes = ir.Value(name="sizes", const_value=ir.tensor(np.array([4, 12], np.int64)))
    split = ir.node("Split", [x, sizes], {"axis": 2}, num_outputs=2)
    even = ir.node("Split", [x], {"axis": 1}, num_outputs=3)
    graph = ir.Graph([x], [*split.outputs, *even.outputs], nodes=[split, even], initializers=[sizes])
    shapes = symbolic._Shapes()
    for node in graph:
        shapes.infer(node)
    assert [shapes.shape(v) for v in split.outputs] == [("b", 6, 4), ("b", 6, 12)]
    assert [shapes.shape(v) for v in even.outputs] == [("b", 2, 16)] * 3


def test_a_slice_of_a_whole_symbolic_axis_and_a_part_of_a_static_one_cuts_the_static_one_only():
    def fn(x):
        return x[:, 1:3] * 2.0

    model = jaxconv.to_onnx(fn, "f32[b,5]", check=False)
    slices = [n for n in model.graph.node if n.op_type == "Slice"]
    assert len(slices) == 1
    consts = {i.name for i in model.graph.initializer}
    assert all(name in consts for name in slices[0].input[1:])  # constant bounds: no shape arithmetic
    x = _edge((3, 5), 4)
    assert_same_bits(OnnxRunner(model.SerializeToString()).run([x]), [np.asarray(jax.jit(fn)(x))])
