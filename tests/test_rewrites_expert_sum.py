"""jaxconv.onnx.rewrites.expert_sum: a mixture of experts' routing-weighted sum of every expert's
``act(x @ gate[e]) * (x @ up[e]) @ down[e]`` as 2-D MatMuls by the experts' weights side by side. The sum
is reassociated: ONNX Runtime's outputs are within tolerance of jax.jit's and of the graph without the
rule, with NaN and infinities where jax.jit has them (NaN, +-inf and -0.0 in tokens and weights)."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxconv
from jaxconv.onnx.rewrites import expert_sum
from lowering_check import convert_and_run as _convert
from lowering_check import without_rule

_plain = without_rule(expert_sum)
E, T, H, M = 4, 24, 32, 48


def _weights(seed: int, *shape: int, special: bool = False) -> np.ndarray:
    w = (np.random.default_rng(seed).standard_normal(shape) / np.sqrt(shape[-2])).astype(np.float32)
    if special:
        w.flat[5], w.flat[77], w.flat[-1] = np.nan, -np.inf, -0.0
    return w


def _tokens(special: bool = False) -> np.ndarray:
    x = np.random.default_rng(6).standard_normal((T, H)).astype(np.float32)
    if special:
        x[3, 1], x[9, 0], x[11, 4] = np.inf, np.nan, -0.0
    return x


GATE, UP, DOWN, ROUTER = _weights(1, E, H, M), _weights(2, E, H, M), _weights(3, E, M, H), _weights(4, H, E)


def _mixtral(gate=GATE, up=UP, down=DOWN, top_k=2):
    """keras-hub's Mixtral block: softmax routing, the top ``top_k`` experts' weights renormalised and
    spread back over all experts, every expert run on every token, weighted and summed."""
    def fn(x):
        probs = jax.nn.softmax(x @ ROUTER, axis=-1)
        top, index = jax.lax.top_k(probs, top_k)
        top = top / top.sum(-1, keepdims=True)
        route = (jax.nn.one_hot(index, E) * top[..., None]).sum(1)  # [t, e]
        hidden = jax.nn.silu(jnp.einsum("th,ehm->etm", x, gate)) * jnp.einsum("th,ehm->etm", x, up)
        out = jnp.einsum("etm,emh->eth", hidden, down)
        return (out * route.T[:, :, None]).sum(axis=0)
    return fn


def _unweighted(x):
    """Every expert's output summed as it is (no routing weights): a GELU between the products."""
    return jnp.einsum("etm,emh->eth", jax.nn.gelu(jnp.einsum("th,ehm->etm", x, GATE)), DOWN).sum(axis=0)


def _stacked_products(fn, x: np.ndarray) -> int:
    """MatMuls of ``fn``'s ONNX that read a constant right operand of three axes (batched over experts)."""
    model = jaxconv.to_onnx(fn, jax.ShapeDtypeStruct(x.shape, x.dtype), check=False)
    stacked = {i.name for i in model.graph.initializer if len(i.dims) == 3}
    return sum(n.op_type == "MatMul" and n.input[1] in stacked for n in model.graph.node)


def _assert_close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf])
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("fn", [_mixtral(), _unweighted], ids=["routed", "unweighted"])
def test_experts_summed_through_side_by_side_weights(monkeypatch, fn):
    x = _tokens()
    ops, (got,) = _convert(fn, x)
    plain_ops, (plain,) = _plain(monkeypatch, fn, x)
    assert _stacked_products(fn, x) == 0, ops
    assert ops["ReduceSum"] < plain_ops["ReduceSum"], (ops, plain_ops)
    _assert_close(got, np.asarray(jax.jit(fn)(x)))
    _assert_close(got, plain)


@pytest.mark.parametrize("where", ["tokens", "gate", "down"])
def test_nan_and_infinities_where_jit_has_them(where):
    x = _tokens(special=where == "tokens")
    gate, down = _weights(1, E, H, M, special=where == "gate"), _weights(3, E, M, H, special=where == "down")
    fn = _mixtral(gate=gate, down=down)
    _, (got,) = _convert(fn, x)
    want = np.asarray(jax.jit(fn)(x))
    assert np.isnan(want).any()
    _assert_close(got, want)
    assert _stacked_products(fn, x) == 0


def test_top_one_routing_and_a_single_token_row():
    """One expert a token (Switch-style top-1) and one token: the same rewrite, the same numbers."""
    fn = _mixtral(top_k=1)
    for x in (_tokens(), _tokens()[:1]):
        _, (got,) = _convert(fn, x)
        _assert_close(got, np.asarray(jax.jit(fn)(x)))
        assert _stacked_products(fn, x) == 0


def test_hidden_units_read_elsewhere_stay_batched():
    """The hidden units are an output too: computed [t, e * m] they would need a Transpose; left."""
    def fn(x):
        hidden = jax.nn.silu(jnp.einsum("th,ehm->etm", x, GATE))
        return jnp.einsum("etm,emh->eth", hidden, DOWN).sum(axis=0), hidden

    x = _tokens()
    assert _stacked_products(fn, x) == 2
    _, got = _convert(fn, x)
    for g, w in zip(got, jax.jit(fn)(x)):
        _assert_close(g, np.asarray(w))


@pytest.mark.parametrize("shape", [(M,), (E, 1, M), (E, T, M)], ids=["per-unit", "per-expert", "per-token"])
def test_constant_operands_laid_out_with_the_hidden_units(monkeypatch, shape):
    """A bias between the products (per unit, per expert and unit, per token too): laid out as [t, e * m]."""
    bias = np.random.default_rng(8).uniform(-1, 1, shape).astype(np.float32)

    def fn(x):
        hidden = jax.nn.relu(jnp.einsum("th,ehm->etm", x, GATE) + bias)
        return jnp.einsum("etm,emh->eth", hidden, DOWN).sum(axis=0)

    x = _tokens()
    assert _stacked_products(fn, x) == 0
    _, (got,) = _convert(fn, x)
    _, (plain,) = _plain(monkeypatch, fn, x)
    _assert_close(got, np.asarray(jax.jit(fn)(x)))
    _assert_close(got, plain)


def test_combined_by_an_einsum_over_the_experts(monkeypatch):
    """``einsum('eth,te->th', outputs, gates)``: the weighted sum as a contraction over the experts."""
    def fn(x):
        gates = jax.nn.softmax(x @ ROUTER, axis=-1)
        out = jnp.einsum("etm,emh->eth", jax.nn.silu(jnp.einsum("th,ehm->etm", x, GATE)), DOWN)
        return jnp.einsum("eth,te->th", out, gates)

    for special in (False, True):
        x = _tokens(special=special)
        assert _stacked_products(fn, x) == 0
        _, (got,) = _convert(fn, x)
        _, (plain,) = _plain(monkeypatch, fn, x)
        _assert_close(got, np.asarray(jax.jit(fn)(x)))
        _assert_close(got, plain)


def test_hidden_units_of_another_input_stay_batched():
    """An operand that is neither a constant nor made from the tokens' products: left alone."""
    def fn(x, scale):
        hidden = jnp.einsum("th,ehm->etm", x, GATE) * scale
        return jnp.einsum("etm,emh->eth", hidden, DOWN).sum(axis=0)

    x, scale = _tokens(), np.random.default_rng(9).uniform(0, 1, (E, T, M)).astype(np.float32)
    model = jaxconv.to_onnx(fn, *[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (x, scale)], check=False)
    stacked = {i.name for i in model.graph.initializer if len(i.dims) == 3}
    assert sum(n.op_type == "MatMul" and n.input[1] in stacked for n in model.graph.node) == 2
    _, (got,) = _convert(fn, x, scale)
    _assert_close(got, np.asarray(jax.jit(fn)(x, scale)))


def test_a_sum_over_another_axis_is_no_sum_over_experts():
    def fn(x):
        return jnp.einsum("etm,emh->eth", jnp.einsum("th,ehm->etm", x, GATE), DOWN).sum(axis=1)

    x = _tokens()
    ops, (got,) = _convert(fn, x)
    assert _stacked_products(fn, x) >= 1 and collections.Counter(ops)["ReduceSum"] == 1, ops
    _assert_close(got, np.asarray(jax.jit(fn)(x)))


def test_a_symbolic_number_of_tokens():
    """Exported for any number of tokens (``f32[t, h]``, a batch folded into the rows: ``64*b``): the same
    rewrite, and the model runs at other sizes with jax.jit's numbers."""
    from jaxconv.runtimes.onnxrt import OnnxRunner

    fn = _mixtral()
    model = jaxconv.to_onnx(fn, f"f32[t, {H}]", check=False)
    stacked = {i.name for i in model.graph.initializer if len(i.dims) == 3}
    assert not any(n.op_type == "MatMul" and n.input[1] in stacked for n in model.graph.node)
    runner = OnnxRunner(model.SerializeToString())
    for t in (1, 5, T):
        x = np.random.default_rng(t).standard_normal((t, H)).astype(np.float32)
        _assert_close(runner.run([x])[0], np.asarray(jax.jit(fn)(x)))
