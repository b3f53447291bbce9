"""The GRU rule reads each gate as a sum of terms: flax.linen.GRUCell (one Dense per gate, the
reset applied after the recurrent product: ONNX's linear_before_reset=1) becomes the GRU op too,
and keeps jax.jit's numbers, NaN and inf inputs included (the exact Loop runs for those)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest

import jaxconv
from gru_support import N_IN, B, H, T, assert_runs_like_jit, gru_inputs
from jaxconv.onnx.rewrites import gru


@pytest.fixture
def gru_on(monkeypatch):
    monkeypatch.setattr(gru, "ENABLED", True)


def _gru_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    found = []
    for node in model.graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                found += [n for n in attr.g.node if n.op_type == "GRU"]
    return found


def _flax_gru():
    nn = pytest.importorskip("flax.linen")
    cell = nn.GRUCell(features=H)
    params = cell.init(jax.random.PRNGKey(0), jnp.zeros((B, H)), jnp.zeros((B, N_IN)))
    leaves, tree = jax.tree_util.tree_flatten(params)
    rng = np.random.default_rng(3)  # non-zero biases, so every bias lands in its ONNX slot
    params = jax.tree_util.tree_unflatten(tree, [rng.standard_normal(np.shape(x)).astype(np.float32) / 3
                                                 for x in leaves])

    def fn(xs, h0):
        return jax.lax.scan(lambda h, x: cell.apply(params, h, x), h0, xs)

    return fn


def _hand_written_lbr1():
    rng = np.random.default_rng(4)
    wx = rng.standard_normal((N_IN, 3 * H)).astype(np.float32) / 3
    wh = rng.standard_normal((H, 3 * H)).astype(np.float32) / 3
    bx, bh = (rng.standard_normal(3 * H).astype(np.float32) / 5 for _ in range(2))

    def fn(xs, h0):
        def cell(h, x):
            gx, gh = x @ wx + bx, h @ wh + bh
            r = jax.nn.sigmoid(gx[:, :H] + gh[:, :H])
            z = jax.nn.sigmoid(gx[:, H:2 * H] + gh[:, H:2 * H])
            n = jnp.tanh(gx[:, 2 * H:] + r * gh[:, 2 * H:])
            h = (1 - z) * n + z * h
            return h, h

        return jax.lax.scan(cell, h0, xs)

    return fn


@pytest.mark.parametrize("make", [_flax_gru, _hand_written_lbr1], ids=["flax", "hand"])
def test_reset_after_the_recurrent_product_is_the_gru_op(make, gru_on):
    fn = make()
    model = jaxconv.to_onnx(fn, f"f32[{T},{B},{N_IN}]", f"f32[{B},{H}]", check=False)
    grus = _gru_nodes(model)
    assert len(grus) == 1
    assert {a.name: a.i for a in grus[0].attribute}["linear_before_reset"] == 1
    assert_runs_like_jit(model, fn, [gru_inputs(0), gru_inputs(1), gru_inputs(2, nonfinite=True)], rtol=2e-5, atol=2e-6)


def test_a_gate_without_the_state_still_is_the_gru_op(gru_on):
    # z = sigmoid(x @ wz) with no h term is still ONNX's GRU (zero Rz): the op runs, numbers agree
    rng = np.random.default_rng(6)
    wx = rng.standard_normal((N_IN, 3 * H)).astype(np.float32) / 3
    wh = rng.standard_normal((H, 2 * H)).astype(np.float32) / 3

    def fn(xs, h0):
        def cell(h, x):
            gx = x @ wx
            r = jax.nn.sigmoid(gx[:, :H] + h @ wh[:, :H])
            z = jax.nn.sigmoid(gx[:, H:2 * H])
            n = jnp.tanh(gx[:, 2 * H:] + r * (h @ wh[:, H:]))
            h = (1 - z) * n + z * h
            return h, h

        return jax.lax.scan(cell, h0, xs)

    model = jaxconv.to_onnx(fn, f"f32[{T},{B},{N_IN}]", f"f32[{B},{H}]", check=False)
    assert len(_gru_nodes(model)) == 1
    assert_runs_like_jit(model, fn, [gru_inputs(7)], rtol=2e-5, atol=2e-6)


def test_tanh_of_the_state_alone_is_not_a_gru(gru_on):
    # n = tanh(x @ wn + h): the state enters n without a weight, which ONNX's GRU cannot express
    rng = np.random.default_rng(8)
    wx = rng.standard_normal((N_IN, 3 * H)).astype(np.float32) / 3
    wh = rng.standard_normal((H, 2 * H)).astype(np.float32) / 3

    def fn(xs, h0):
        def cell(h, x):
            gx = x @ wx
            r, z = jnp.split(jax.nn.sigmoid(gx[:, :2 * H] + h @ wh), 2, axis=-1)
            n = jnp.tanh(gx[:, 2 * H:] + r * h)
            h = (1 - z) * n + z * h
            return h, h

        return jax.lax.scan(cell, h0, xs)

    model = jaxconv.to_onnx(fn, f"f32[{T},{B},{N_IN}]", f"f32[{B},{H}]", check=False)
    assert not _gru_nodes(model)
    assert_runs_like_jit(model, fn, [gru_inputs(9)])


def _eqx_gru():
    eqx = pytest.importorskip("equinox")
    cell = eqx.nn.GRUCell(N_IN, H, key=jax.random.PRNGKey(5))
    rng = np.random.default_rng(11)  # non-zero biases (bias and bias_n), so every bias lands in its ONNX slot
    cell = jax.tree_util.tree_map(lambda a: jnp.asarray(rng.standard_normal(a.shape).astype(np.float32) / 3)
                                  if eqx.is_array(a) else a, cell)

    def fn(xs, h0):  # the update is new + inp * (hidden - new); Equinox cells take one example: vmapped
        return jax.lax.scan(lambda h, x: (lambda h2: (h2, h2))(jax.vmap(cell)(x, h)), h0, xs)

    return fn


def _difference_update(flipped: bool):
    rng = np.random.default_rng(12)
    wx = rng.standard_normal((N_IN, 3 * H)).astype(np.float32) / 3
    wh = rng.standard_normal((H, 3 * H)).astype(np.float32) / 3

    def fn(xs, h0):
        def cell(h, x):
            gx, gh = x @ wx, h @ wh
            r = jax.nn.sigmoid(gx[:, :H] + gh[:, :H])
            z = jax.nn.sigmoid(gx[:, H:2 * H] + gh[:, H:2 * H])
            n = jnp.tanh(gx[:, 2 * H:] + r * gh[:, 2 * H:])
            h = n + z * ((n - h) if flipped else (h - n))  # flipped: no GRU
            return h, h

        return jax.lax.scan(cell, h0, xs)

    return fn


@pytest.mark.parametrize("make", [_eqx_gru, lambda: _difference_update(False)], ids=["equinox", "hand"])
def test_the_update_written_as_a_difference_is_the_gru_op(make, gru_on):
    fn = make()
    model = jaxconv.to_onnx(fn, f"f32[{T},{B},{N_IN}]", f"f32[{B},{H}]", check=False)
    assert len(_gru_nodes(model)) == 1
    assert_runs_like_jit(model, fn, [gru_inputs(13), gru_inputs(14), gru_inputs(15, nonfinite=True)], rtol=2e-5,
                         atol=2e-6)


def test_the_difference_the_other_way_round_is_not_a_gru(gru_on):
    fn = _difference_update(True)
    model = jaxconv.to_onnx(fn, f"f32[{T},{B},{N_IN}]", f"f32[{B},{H}]", check=False)
    assert not _gru_nodes(model)
    assert_runs_like_jit(model, fn, [gru_inputs(16)])
