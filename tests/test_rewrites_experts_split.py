"""jaxconv.onnx.rewrites.expert_split: a batched MatMul by constant [e, m, h] weights (a mixture of experts'
``einsum('etm,emh->eth')``) as a Split, one 2-D MatMul per expert and a Concat, where the rows are few
and the products big. ONNX Runtime's outputs are bit for bit those without the rule for ``m`` up to 128
(NaN, +-inf, -0.0 and FLT_MAX in inputs and weights) and within tolerance of jax.jit's above."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxconv
from jaxconv.onnx.rewrites import expert_split
from lowering_check import assert_same_bits, without_rule
from lowering_check import convert_and_run as _convert

_plain = without_rule(expert_split)
BIG = np.finfo(np.float32).max


def _array(seed: int, *shape: int, special: bool, scale: float = 1.0) -> np.ndarray:
    x = (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)
    if special:
        x.flat[3], x.flat[9], x.flat[11], x.flat[-2], x.flat[40] = np.inf, np.nan, -0.0, -BIG, -np.inf
    return x


def _stacked_weight_products(fn, *inputs: np.ndarray) -> int:
    """How many MatMuls of ``fn``'s ONNX read a constant right operand of more than two axes."""
    model = jaxconv.to_onnx(fn, *[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in inputs], check=False)
    stacked = {i.name for i in model.graph.initializer if len(i.dims) > 2}
    return sum(n.op_type == "MatMul" and n.input[1] in stacked for n in model.graph.node)


def _assert_close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf])
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=2e-5, atol=2e-5)


def _routed(w_out: np.ndarray):
    """keras-hub's Mixtral's down product: every expert's rows by its weight, weighted and summed."""
    def fn(a, route):
        return (jnp.einsum("etm,emh->eth", a, w_out) * route[:, :, None]).sum(axis=0)
    return fn


@pytest.mark.parametrize("special", [False, True])
def test_short_sums_keep_the_bits(monkeypatch, special):
    """m = 128 (ORT sums in one block either way): the same bits as the batched MatMul."""
    e, t, m, h = 2, 16, 128, 2048
    fn = _routed(_array(1, e, m, h, special=special, scale=m ** -0.5))
    a, route = _array(2, e, t, m, special=special), np.random.default_rng(3).random((e, t)).astype(np.float32)
    ops, (got,) = _convert(fn, a, route)
    plain_ops, (plain,) = _plain(monkeypatch, fn, a, route)
    assert _stacked_weight_products(fn, a, route) == 0
    assert ops["MatMul"] == plain_ops["MatMul"] + e - 1 and ops["Split"] == plain_ops["Split"] + 1, (ops, plain_ops)
    assert_same_bits([got], [plain])
    _assert_close(got, np.asarray(jax.jit(fn)(a, route)))


@pytest.mark.parametrize("special", [False, True])
def test_long_sums_within_tolerance(monkeypatch, special):
    """m = 1024: ORT's prepacked kernel sums in other blocks; within tolerance of jax.jit's and of before."""
    e, t, m, h = 2, 8, 1024, 512
    w_out = _array(4, e, m, h, special=special, scale=m ** -0.5)

    def fn(a):
        return jnp.einsum("etm,emh->eth", a, w_out)

    a = _array(5, e, t, m, special=special)
    _, (got,) = _convert(fn, a)
    _, (plain,) = _plain(monkeypatch, fn, a)
    assert _stacked_weight_products(fn, a) == 0
    _assert_close(got, np.asarray(jax.jit(fn)(a)))
    _assert_close(got, plain)


@pytest.mark.parametrize("t, m, h", [(16, 64, 2048), (8, 128, 256)])
def test_many_rows_or_small_products_stay_batched(t, m, h):
    """8 t > m, or t * m * h under 2 ** 22: the batched MatMul stays."""
    w_out = _array(6, 2, m, h, special=False)
    a = _array(7, 2, t, m, special=False)
    assert _stacked_weight_products(lambda a: jnp.einsum("etm,emh->eth", a, w_out), a) == 1


def test_vmapped_experts_split_too():
    """``jax.vmap`` over the experts of ``a @ w`` is the same batched MatMul: split the same way."""
    w_out = _array(8, 2, 1024, 512, special=False, scale=1 / 32)
    a = _array(9, 2, 8, 1024, special=True)

    def fn(a):
        return jax.vmap(lambda x, w: x @ w)(a, w_out)

    _, (got,) = _convert(fn, a)
    assert _stacked_weight_products(fn, a) == 0
    _assert_close(got, np.asarray(jax.jit(fn)(a)))
