"""The select_gathers rule: a select between two computed values on a comparison of data becomes a
GatherElements from the two stacked, bit for bit the graph without the rule (NaN payloads, both zeros,
infinities, integers) and jax.jit's numbers; uniform conditions, small or broadcast operands keep the Where."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import select_gathers
from lowering_check import assert_same_bits, assert_same_floats, convert_and_run, with_without_and_jax, without_rule

_plain = without_rule(select_gathers)
SHAPE = (16, 1024)


def _x(dtype=np.float32, shape=SHAPE) -> np.ndarray:
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(shape) * 2).astype(dtype)
    if dtype in (np.float32, np.float64):
        x[0, :10] = [0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1.0, -1.0, 0.5, -0.5]
    return x


SELECTS = {
    "piecewise": lambda x: jnp.where(x > 0, jnp.sqrt(jnp.abs(x)), x * x),
    "huber": lambda x: jnp.where(jnp.abs(x) < 1, 0.5 * x * x, jnp.abs(x) - 0.5),
    "negated_zeros": lambda x: jnp.where(x >= 0, -x, x * 0.0),  # -0.0 and +0.0 on both sides
    "nan_sides": lambda x: jnp.where(x < 0.5, jnp.log(x), jnp.sqrt(-x)),
}


@pytest.mark.parametrize("name", sorted(SELECTS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gather_same_bits(monkeypatch, name, dtype):
    ops, got, plain, want = with_without_and_jax(_plain, monkeypatch, SELECTS[name], _x(dtype))
    assert ops["GatherElements"] == 1 and "Where" not in ops and "If" not in ops, ops
    assert_same_bits(got, plain)
    # ORT's log and sqrt are not XLA's to the last bit; the select's picks are
    assert_same_floats(got[0], want[0], rtol=4 * np.finfo(dtype).eps, atol=0)


def test_integer_select(monkeypatch):
    rng = np.random.default_rng(1)
    x, y = (rng.integers(-50, 50, SHAPE).astype(np.int32) for _ in range(2))
    fn = lambda x, y: jnp.where(x > y, x * 2, y - 3)  # noqa: E731
    ops, got = convert_and_run(fn, x, y)
    _, plain = _plain(monkeypatch, fn, x, y)
    assert ops["GatherElements"] == 1 and "Where" not in ops, ops
    assert_same_bits(got, plain)
    assert_same_bits(got, [np.asarray(jax.jit(fn)(x, y))])


def test_symbolic_batch():
    fn = SELECTS["piecewise"]
    spec = jax.ShapeDtypeStruct((jax.export.symbolic_shape("b")[0], 1024), np.float32)
    x = _x(shape=(3, 1024))
    ops, got = convert_and_run(fn, x, specs=[spec])
    assert ops["GatherElements"] == 1, ops
    assert_same_bits(got, [np.asarray(jax.jit(fn)(x))], nan_signs=False)


KEPT = {
    "small": (lambda x: jnp.where(x > 0, x * x, -x), (8, 64)),  # below MIN_ELEMENTS: the Where is cheaper
    "uniform_condition": (lambda x: jnp.where(jnp.isnan(x), jnp.exp(x), x * x), SHAPE),  # no data comparison
    "broadcast_side": (lambda x: jnp.where(x > 0, x * x, jnp.sum(x, 0, keepdims=True)), SHAPE),
}


@pytest.mark.parametrize("name", sorted(KEPT))
def test_kept(monkeypatch, name):
    fn, shape = KEPT[name]
    x = _x(shape=shape)
    ops, got = convert_and_run(fn, x, bodies=True)
    _, plain = _plain(monkeypatch, fn, x)
    assert "GatherElements" not in ops, ops
    assert_same_bits(got, plain)


def test_through_the_tf_ops_route():
    """The ONNX -> TF route (TFLite's tf-ops route) reads the gather: jax.jit's numbers, NaN, zeros' signs."""
    pytest.importorskip("tensorflow")
    from jaxconv.onnx import convert
    from jaxconv.program import trace
    from jaxconv.tf.onnx_to_tf import OPSET, for_program

    fn, x = SELECTS["piecewise"], _x()
    program = trace(fn, [jax.ShapeDtypeStruct(x.shape, x.dtype)])
    assert "GatherElements" in [n.op_type for n in convert.program_to_onnx(program, OPSET).graph.node]
    got = for_program(program)[1](x)["output_0"].numpy()
    assert_same_floats(got, np.asarray(jax.jit(fn)(x)), rtol=4 * np.finfo(np.float32).eps, atol=0)
