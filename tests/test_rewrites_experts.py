"""jaxconv.onnx.rewrites.expert_columns: a MatMul of [t, h] rows by constant [e, h, m] weights (a mixture of
experts' ``einsum('th,ehm->etm')``) as one MatMul by the weights side by side, a Reshape and a Transpose,
where ``2 t <= h``. ONNX Runtime's outputs are bit for bit those without the rule for ``h`` up to 128 (NaN,
+-inf, -0.0 and FLT_MAX in tokens and weights) and within tolerance of jax.jit's above."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxconv
from jaxconv.onnx.rewrites import expert_columns, expert_sum
from lowering_check import assert_same_bits, without_rule
from lowering_check import convert_and_run as _convert

_plain = without_rule(expert_columns)
BIG = np.finfo(np.float32).max
EXPERTS = 4


def _weights(*shape: int, special: bool) -> np.ndarray:
    w = (np.random.default_rng(5).standard_normal(shape) / 8).astype(np.float32)
    if special:
        w.flat[5], w.flat[17], w.flat[-1], w.flat[40] = np.nan, -np.inf, -0.0, BIG
    return w


def _tokens(*shape: int, special: bool) -> np.ndarray:
    x = np.random.default_rng(6).standard_normal(shape).astype(np.float32)
    if special:
        x.flat[3], x.flat[9], x.flat[11], x.flat[-2] = np.inf, np.nan, -0.0, -BIG
        x[-1] = -0.0
    return x


def _stacked_weight_products(fn, *inputs: np.ndarray) -> int:
    """How many MatMuls of ``fn``'s ONNX read a constant right operand of more than two axes."""
    model = jaxconv.to_onnx(fn, *[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in inputs], check=False)
    stacked = {i.name for i in model.graph.initializer if len(i.dims) > 2}
    return sum(n.op_type == "MatMul" and n.input[1] in stacked for n in model.graph.node)


def _forms(w: np.ndarray, w_gate: np.ndarray, w_out: np.ndarray) -> dict:
    """The expert products as MoE code writes them."""
    def keras(x):  # keras-hub's MixtralMoeExperts: every expert on every token, summed
        hidden = jax.nn.silu(jnp.einsum("th,ehm->etm", x, w_gate)) * jnp.einsum("th,ehm->etm", x, w)
        return jnp.einsum("etm,emh->eth", hidden, w_out).sum(axis=0)

    def ellipsis(x):  # the tokens' axes left to the einsum (Flax or Haiku code written for any batch)
        return jnp.einsum("...h,ehm->e...m", x, w)

    def grouped(x):  # experts in groups: a 4-D stack of weights
        return jnp.einsum("th,gehm->getm", x, w.reshape(2, EXPERTS // 2, *w.shape[1:]))

    return {"keras": keras, "ellipsis": ellipsis, "grouped": grouped}


def _assert_close_to_jit(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf])
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("form", ["keras", "ellipsis", "grouped"])
@pytest.mark.parametrize("special", [False, True])
@pytest.mark.parametrize("h", [32, 128])
def test_stacked_weights_side_by_side_keep_the_bits(monkeypatch, form, special, h):
    """h up to 128 (ORT sums in one block either way): the same bits as the 3-D MatMul, NaN signs included.
    The keras form's weighted sum is ``expert_sum``'s (tests/test_rewrites_expert_sum.py): off here."""
    monkeypatch.setattr(expert_sum, "rewrite", lambda *args, **kw: 0)
    m = 24
    w, w_gate = _weights(EXPERTS, h, m, special=special), _weights(EXPERTS, h, m, special=False)[::-1].copy()
    fn = _forms(w, w_gate, _weights(EXPERTS, m, h, special=False))[form]
    x = _tokens(12, h, special=special)
    ops, (got,) = _convert(fn, x)
    plain_ops, (plain,) = _plain(monkeypatch, fn, x)
    assert _stacked_weight_products(fn, x) == (1 if form == "keras" else 0)  # keras: the batched down product
    assert ops["Reshape"] > plain_ops["Reshape"] and ops["MatMul"] == plain_ops["MatMul"], (ops, plain_ops)
    assert_same_bits([got], [plain])
    _assert_close_to_jit(got, np.asarray(jax.jit(fn)(x)))


@pytest.mark.parametrize("special", [False, True])
def test_long_rows_within_tolerance(monkeypatch, special):
    """h = 512: ORT's prepacked kernel sums in other blocks; within tolerance of jax.jit's and of before."""
    h, m = 512, 64
    fn = _forms(_weights(EXPERTS, h, m, special=special), _weights(EXPERTS, h, m, special=False),
                _weights(EXPERTS, m, h, special=False))["ellipsis"]
    x = _tokens(16, h, special=special)
    _, (got,) = _convert(fn, x)
    _, (plain,) = _plain(monkeypatch, fn, x)
    assert _stacked_weight_products(fn, x) == 0
    _assert_close_to_jit(got, np.asarray(jax.jit(fn)(x)))
    _assert_close_to_jit(got, plain)


def test_many_rows_stay_batched():
    """2 t > h: moving the [t, e, m] product costs about as much as packing the weight, or more; the 3-D
    MatMul stays."""
    w = _weights(EXPERTS, 16, 24, special=False)
    for t in (9, 16, 40):
        assert _stacked_weight_products(lambda x: jnp.einsum("th,ehm->etm", x, w), _tokens(t, 16, special=False)) == 1


def test_weight_read_twice_is_stored_once():
    """A weight another node reads too would be stored twice: left as it is."""
    w = _weights(EXPERTS, 32, 24, special=False)

    def fn(x):
        return jnp.einsum("th,ehm->etm", x, w), w.sum()  # the constant sum folds; the weight stays read once

    def twice(x, y):
        return jnp.einsum("th,ehm->etm", x, w) + jnp.einsum("th,ehm->etm", y, w)

    x = _tokens(8, 32, special=False)
    assert _stacked_weight_products(fn, x) == 0
    assert _stacked_weight_products(twice, x, x + 1) == 2


def test_the_lowering_already_writes_vmap_that_way():
    """``jax.vmap`` over the experts lowers to the side-by-side form itself; the einsum now gets the same."""
    w = _weights(EXPERTS, 32, 24, special=False)
    x = _tokens(8, 32, special=True)

    def by_vmap(x):
        return jax.vmap(lambda e: x @ e)(w)

    def by_einsum(x):
        return jnp.einsum("th,ehm->etm", x, w)

    ops_v, (got_v,) = _convert(by_vmap, x)
    ops_e, (got_e,) = _convert(by_einsum, x)
    assert ops_v == ops_e, (ops_v, ops_e)
    assert_same_bits([got_e], [got_v])
