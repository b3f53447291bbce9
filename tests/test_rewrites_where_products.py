"""jaxconv.onnx.rewrites.where_products: a Where of data and a constant on a comparison of data as a
product by the condition's mask behind a finiteness If; jax.jit's bits, zero signs, NaN and infinities
included, and the rule leaves uniform conditions and small tensors to the Where."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import where_products
from lowering_check import assert_same_bits, without_rule
from lowering_check import convert_and_run as _convert

SHAPE = (128, 320)  # 40960 elements: above MIN_ELEMENTS
_plain = without_rule(where_products)


def _data(kind: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    g = rng.standard_normal(SHAPE).astype(np.float32)
    x[0, :6] = [1.0, 1.0, -1.0, -1.0, -0.0, np.nan]
    g[0, :6] = [-0.0, 0.0, -0.0, -3.0, 5.0, 7.0]  # a kept -0.0 stays -0.0; a dropped one becomes the fill
    if kind == "nan kept":
        x[1, 1], g[1, 1] = 2.0, np.nan
    elif kind == "nan dropped":
        x[1, 1], g[1, 1] = -2.0, np.nan
    elif kind == "inf dropped":
        x[2, 2], g[2, 2] = -2.0, np.inf
        x[2, 3], g[2, 3] = -2.0, -np.inf
    elif kind == "huge":
        g[3, :4] = [3e38, -3e38, 3e38, 3e38]  # a finite sum that overflows: the exact branch
    return x, g


def _relu_grad(x, g):
    return (jax.vjp(jax.nn.relu, x)[1](g)[0],)


def _kept_when_greater(x, g):
    return (jnp.where(x > 0, g, 2.5),)


def _fill_first_negative(x, g):
    return (jnp.where(x >= g, -1.5, g),)


def _fill_first_zero(x, g):
    return (jnp.where(x < 0.25, 0.0, g * 2.0),)


def _negative_zero_fill(x, g):
    """The lowering keeps a -0.0 fill as Where(not c, 1, g) * Where(c, 1, -0.0): the first is taken."""
    return (jnp.where(x > 0, g, -0.0),)


FORMS = [_relu_grad, _kept_when_greater, _fill_first_negative, _fill_first_zero, _negative_zero_fill]
KINDS = ["finite", "nan kept", "nan dropped", "inf dropped", "huge"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fn", FORMS, ids=lambda f: f.__name__)
def test_data_driven_where_as_guarded_products_keeps_jax_bits(monkeypatch, fn, kind):
    x, g = _data(kind)
    ops, got = _convert(fn, x, g)
    plain_ops, _ = _plain(monkeypatch, fn, x, g)
    assert ops["Where"] == plain_ops["Where"] - 1 and ops["If"] == plain_ops["If"] + 1, (ops, plain_ops)
    assert_same_bits(got, jax.jit(fn)(x, g))


def test_float64_too():
    x, g = (a.astype(np.float64) for a in _data("nan dropped"))
    with jax.enable_x64(True):
        ops, got = _convert(_kept_when_greater, x, g)
        want = jax.jit(_kept_when_greater)(x, g)
    assert ops["If"] == 1 and ops["Where"] == 0, ops
    assert_same_bits(got, want)


def _nan_guard(x, g):
    return (jnp.where(jnp.isnan(x), 0.0, g),)


def _constant_condition(x, g):
    return (jnp.where(jnp.arange(SHAPE[1]) > 7, g, 0.0) + x,)


@pytest.mark.parametrize("fn", [_nan_guard, _constant_condition], ids=lambda f: f.__name__)
def test_uniform_conditions_keep_the_where(monkeypatch, fn):
    x, g = _data("nan dropped")
    ops, got = _convert(fn, x, g)
    plain_ops, plain = _plain(monkeypatch, fn, x, g)
    assert ops == plain_ops, (ops, plain_ops)
    assert_same_bits(got, plain)


def test_small_tensors_keep_the_where(monkeypatch):
    x, g = (a[:8, :8].copy() for a in _data("finite"))
    ops, _ = _convert(_relu_grad, x, g)
    assert ops["If"] == 0 and ops["Where"] == 1, ops


def test_a_training_steps_relu_gradient_is_taken(monkeypatch):
    """[64, 256]: a ReLU's gradient in an optax step over a batch of 64 (16,384 elements, 63 us as a Where
    against 18 guarded): the product, jax.jit's bits."""
    x, g = (np.resize(a, (64, 256)).astype(np.float32) for a in _data("finite"))
    ops, (got,) = _convert(_relu_grad, x, g)
    assert ops["If"] == 1 and ops["Where"] == 0, ops
    (want,) = jax.jit(_relu_grad)(x, g)
    np.testing.assert_array_equal(got.view(np.uint32), np.asarray(want).view(np.uint32))


def test_a_negative_zero_fill_keeps_the_where():
    """``x * 0 + z`` cannot give -0.0 for every x: a Where that fills with -0.0 itself stays."""
    import onnx
    import onnx_ir as ir
    from onnx import TensorProto, helper

    shape = list(SHAPE)
    nodes = [helper.make_node("Greater", ["x", "zero"], ["c"]), helper.make_node("Where", ["c", "x", "nzero"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        initializer=[onnx.numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("zero", 0.0), ("nzero", -0.0))])
    model = ir.from_proto(helper.make_model(graph))
    for node in model.graph:
        node.outputs[0].shape = ir.Shape(shape)
    assert where_products.rewrite(model.graph) == 0
    model.graph.node(1).inputs[2].const_value = ir.tensor(np.array(0.0, np.float32))
    assert where_products.rewrite(model.graph) == 1


@pytest.mark.parametrize("fn", [_relu_grad, _fill_first_negative], ids=lambda f: f.__name__)
def test_a_symbolic_batch_counts_at_sixteen_rows_and_keeps_the_bits(monkeypatch, fn):
    """``f32[b, 4096]``: 16 rows of 4096 are 65536 elements, so the rule fires; shape inference names the batch
    of the operands apart (``unk__``), which the products broadcast as the Where does. Run at 1 and 128 rows."""
    import jax as _jax

    spec = _jax.ShapeDtypeStruct((_jax.export.symbolic_shape("b")[0], 4096), np.float32)
    x, g = (np.resize(a, (128, 4096)).astype(np.float32) for a in _data("nan dropped"))
    ops, got = _convert(fn, x, g, specs=[spec, spec])
    plain_ops, _ = _plain(monkeypatch, fn, x, g, specs=[spec, spec])
    assert ops["If"] == plain_ops["If"] + 1 and ops["Where"] == plain_ops["Where"] - 1, (ops, plain_ops)
    assert_same_bits(got, jax.jit(fn)(x, g))
    _, one_row = _convert(fn, x[:1], g[:1], specs=[spec, spec])
    assert_same_bits(one_row, jax.jit(fn)(x[:1], g[:1]))
