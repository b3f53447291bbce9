"""The size-1-axis Transpose rule (rewrites.transposes) and the Where-constant rule (rewrites.where_consts):
each fires on the form it targets and keeps jax.jit's numbers bit for bit (NaN, infinities, -0)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx

import jaxconv
from jaxconv.onnx.rewrites import transposes, where_consts
from lowering_check import assert_same_floats
from lowering_check import convert_and_run as _convert


def _special(shape: tuple[int, ...]) -> np.ndarray:
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32).ravel()
    x[:4] = [np.nan, -0.0, np.inf, -np.inf]
    return x.reshape(shape)


def _spy(monkeypatch, module) -> list[int]:
    fired: list[int] = []
    real = module.rewrite
    monkeypatch.setattr(module, "rewrite", lambda graph: fired.append(real(graph)) or fired[-1])
    return fired


def test_one_axis_moves_are_recognised():
    assert transposes.is_one_axis_move([0, 1, 3, 2]) and transposes.is_one_axis_move([0, 3, 1, 2])
    assert transposes.is_one_axis_move([2, 0, 1]) and transposes.is_one_axis_move([0, 1, 2])
    assert not transposes.is_one_axis_move([0, 1, 4, 3, 2]) and not transposes.is_one_axis_move([2, 0, 3, 1])


def test_transpose_over_a_unit_axis_becomes_a_one_axis_move(monkeypatch):
    def fn(x):
        return jnp.transpose(x, (0, 1, 4, 3, 2)) * 2.0  # attention probabilities with a grouped-heads axis

    x = _special((2, 3, 5, 1, 4))
    fired = _spy(monkeypatch, transposes)
    model = jaxconv.to_onnx(fn, jax.ShapeDtypeStruct(x.shape, x.dtype), check=False)
    assert fired == [1]
    perms = [
        list(onnx.helper.get_attribute_value(a))
        for n in model.graph.node
        if n.op_type == "Transpose"
        for a in n.attribute
        if a.name == "perm"
    ]
    assert perms == [[0, 1, 3, 2]]
    _, (got,) = _convert(fn, x)
    assert_same_floats(got, jax.jit(fn)(x), 0, 0)


def test_transpose_moving_only_unit_axes_becomes_a_reshape(monkeypatch):
    def fn(x):
        return jnp.transpose(x, (1, 0, 3, 2)) + 1.0

    x = _special((3, 1, 4, 1))
    fired = _spy(monkeypatch, transposes)
    ops, (got,) = _convert(fn, x)
    assert fired == [1] and ops["Transpose"] == 0
    assert_same_floats(got, jax.jit(fn)(x), 0, 0)


def test_one_axis_move_of_a_unit_axis_becomes_a_reshape(monkeypatch):
    """ORT's fast path still copies every element; only a size-1 axis moving is no copy at all
    (jax.nn.dot_product_attention's grouped scores [b, k, t, 1, s] to [1, b, k, t, s])."""
    def fn(x):
        return jnp.transpose(x, (3, 0, 1, 2, 4)) * 2.0

    x = _special((2, 3, 5, 1, 4))
    fired = _spy(monkeypatch, transposes)
    ops, (got,) = _convert(fn, x)
    assert fired == [1] and ops["Transpose"] == 0 and ops["Reshape"] == 1, ops
    assert_same_floats(got, jax.jit(fn)(x), 0, 0)


def test_general_transposes_are_left_alone(monkeypatch):
    def fn(x):
        return jnp.transpose(x, (2, 0, 3, 1)) * 2.0  # general even without size-1 axes

    x = _special((4, 3, 2, 5))
    fired = _spy(monkeypatch, transposes)
    ops, (got,) = _convert(fn, x)
    assert fired == [0] and ops["Transpose"] == 1
    assert_same_floats(got, jax.jit(fn)(x), 0, 0)


def test_where_constants_are_cut_to_the_shape_that_carries_them(monkeypatch):
    fill = np.full((2, 4, 8, 8), np.finfo(np.float32).min, np.float32)  # a mask's fill, broadcast and folded
    fill[1, 2] = -0.0  # one slice that differs: those axes must stay

    def fn(s):
        return jnp.where(s > 0.5, s, fill)

    s = _special((2, 4, 8, 8))
    s[0, 0, 7] = -0.0
    fired = _spy(monkeypatch, where_consts)
    model = jaxconv.to_onnx(fn, jax.ShapeDtypeStruct(s.shape, s.dtype), check=False)
    assert fired == [1]
    assert max(int(np.prod(i.dims)) for i in model.graph.initializer) == 8  # the fill as [2, 4, 1, 1]
    _, (got,) = _convert(fn, s)
    assert_same_floats(got, jax.jit(fn)(s), 0, 0)


def test_where_constant_keeps_the_output_rank(monkeypatch):
    fill = np.full((1, 2, 4, 8), -1e9, np.float32)  # the only operand with the leading 1

    def fn(s):
        return jnp.where(s > 0.0, s, fill)

    s = _special((2, 4, 8))
    fired = _spy(monkeypatch, where_consts)
    model = jaxconv.to_onnx(fn, jax.ShapeDtypeStruct(s.shape, s.dtype), check=False)
    assert fired == [1]
    assert [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim] == [1, 2, 4, 8]
    _, (got,) = _convert(fn, s)
    want = jax.jit(fn)(s)
    assert got.shape == want.shape == (1, 2, 4, 8)
    assert_same_floats(got, want, 0, 0)
