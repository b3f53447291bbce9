"""jaxconv.onnx.rewrites.broadcast_matmul_order: a MatMul with a broadcast operand (a mixture of experts'
``einsum('th,ehm->etm')``) computed with its operands swapped where Transposes go; ONNX Runtime's outputs
bit for bit those without the rule but a NaN's sign (the products' operands change sides; NaN, +-inf,
-0.0 and FLT_MAX in inputs and weights) and within tolerance of jax.jit's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import broadcast_matmul_order, expert_sum
from lowering_check import assert_same_bits, without_rule
from lowering_check import convert_and_run as _convert

_plain = without_rule(broadcast_matmul_order)
BIG = np.finfo(np.float32).max


def _weights(*shape: int, special: bool) -> np.ndarray:
    w = (np.random.default_rng(3).standard_normal(shape) / 8).astype(np.float32)
    if special:
        w.flat[5], w.flat[17], w.flat[-1], w.flat[40] = np.nan, -np.inf, -0.0, BIG
    return w


def _tokens(*shape: int, special: bool) -> np.ndarray:
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    if special:
        x.flat[3], x.flat[9], x.flat[11], x.flat[-2] = np.inf, np.nan, -0.0, -BIG
    return x


EXPERTS = 4


def _forms(w: np.ndarray, w_out: np.ndarray) -> dict:
    """The expert products as keras-hub's Mixtral writes them, with and without its top-2 routing."""
    def einsum(x):  # every expert on every token, then a weighted sum: keras-hub's MixtralMoeExperts
        gate = jax.nn.silu(jnp.einsum("th,ehm->etm", x, w))
        return jnp.einsum("etm,emh->eth", gate, w_out).sum(axis=0)

    def routed(x):  # top-2 routing weights applied to every expert's output
        scores = jax.nn.softmax(x @ w[:, :, 0].T, axis=-1)
        top, idx = jax.lax.top_k(scores, 2)
        route = (jax.nn.one_hot(idx, EXPERTS) * (top / top.sum(-1, keepdims=True))[..., None]).sum(1).T
        out = jnp.einsum("etm,emh->eth", jnp.einsum("th,ehm->etm", x, w), w_out)
        return (out * route[:, :, None]).sum(axis=0)

    return {"einsum": einsum, "routed": routed}


@pytest.mark.parametrize("form", ["einsum", "routed"])
@pytest.mark.parametrize("special", [False, True])
def test_expert_products_lose_their_transposes(monkeypatch, form, special):
    """The swap alone: ``expert_sum``, which reads its products and changes the sum's bits, off."""
    monkeypatch.setattr(expert_sum, "rewrite", lambda *args, **kw: 0)
    w, w_out = _weights(EXPERTS, 16, 32, special=special), _weights(EXPERTS, 32, 16, special=False)
    fn = _forms(w, w_out)[form]
    x = _tokens(24, 16, special=special)
    ops, (got,) = _convert(fn, x)
    plain_ops, (plain,) = _plain(monkeypatch, fn, x)
    assert ops["Transpose"] < plain_ops["Transpose"], (ops, plain_ops)
    assert ops["MatMul"] == plain_ops["MatMul"]
    assert_same_bits([got], [plain], nan_signs=False)
    want = np.asarray(jax.jit(fn)(x))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    np.testing.assert_allclose(got[finite], want[finite], rtol=2e-5, atol=2e-5)


def test_weights_given_as_inputs(monkeypatch):
    """Weights the model takes as an input (not constants): the Transposes before the MatMul go too."""
    def fn(x, w):
        return jnp.einsum("th,ehm->etm", x, w)

    x, w = _tokens(8, 16, special=True), _weights(3, 16, 24, special=True)
    ops, (got,) = _convert(fn, x, w)
    plain_ops, (plain,) = _plain(monkeypatch, fn, x, w)
    assert ops["Transpose"] == 0 < plain_ops["Transpose"], (ops, plain_ops)
    assert_same_bits([got], [plain], nan_signs=False)
    want = np.asarray(jax.jit(fn)(x, w))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def test_equal_ranks_are_left_to_matmul_order():
    """A batched MatMul of operands of the result's rank is matmul_order's, never this rule's."""
    import onnx_ir as ir

    a = ir.Value(name="a", shape=ir.Shape([2, 3, 4]), type=ir.TensorType(ir.DataType.FLOAT))
    b = ir.Value(name="b", shape=ir.Shape([2, 4, 5]), type=ir.TensorType(ir.DataType.FLOAT))
    mm = ir.node("MatMul", [a, b])
    mm.outputs[0].shape = ir.Shape([2, 3, 5])
    graph = ir.Graph([a, b], [mm.outputs[0]], nodes=[mm])
    assert broadcast_matmul_order.rewrite(graph) == 0
