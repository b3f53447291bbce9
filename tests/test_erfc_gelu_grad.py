"""The exact GELU under jax.grad, jax.jvp and Jacobians: its erfc collapses there too, exactly.

The derivative reads the forward erfc as ``t * 0.5 * erfc(-x / sqrt 2)`` next to the product rule's
``exp(-x^2 / 2)`` term (``stablehlo.primitive_groups``); that erfc becomes ``1 - Erf`` instead of
jax's ~60-op decomposition. Numbers are compared with jax.jit on grids with the tails and IEEE edge
values; an erfc whose value reaches an output any other way keeps the decomposition.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
import pytest

from tests.lowering_check import assert_same_floats, convert_and_run

EDGES = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-30, -1e-30, 3e38, -3e38, 1e4, -1e4]
GRID = np.concatenate([np.linspace(-12, 12, 4801), EDGES]).astype(np.float32)
DECOMPOSED = {"Where", "Less", "Xor", "Abs"}  # what jax's erfc formula leaves in the graph


def gelu(x):
    return jax.nn.gelu(x, approximate=False)


def _jit(fn, *args):
    return [np.asarray(a) for a in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]


def _assert_collapsed(ops):
    assert ops["Erf"] == 1 and ops["Exp"] == 1 and not DECOMPOSED & set(ops), dict(ops)


def test_grad_of_the_exact_gelu_is_one_erf_and_one_exp():
    grad = jax.grad(lambda x: gelu(x).sum())
    ops, (got,) = convert_and_run(grad, GRID)
    _assert_collapsed(ops)
    # 79 with jax's erfc formula; 14 before rotary folded a Neg into its constant factor, 13 before constant
    # chains folded as XLA folds them
    assert sum(ops.values()) == 12
    assert_same_floats(got, _jit(grad, GRID)[0], rtol=1e-4, atol=1e-5)


def test_grad_tail_is_as_close_to_float64_as_jax_jit():
    from scipy.special import erfc

    grad = jax.grad(lambda x: gelu(x).sum())
    x = np.linspace(-20, 20, 200_001).astype(np.float32)
    _, (got,) = convert_and_run(grad, x)
    want = _jit(grad, x)[0]
    x64 = x.astype(np.float64)
    exact = 0.5 * erfc(-x64 / np.sqrt(2)) + x64 * np.exp(-x64 ** 2 / 2) / np.sqrt(2 * np.pi)
    assert np.max(np.abs(got - exact)) <= 2 * max(np.max(np.abs(want - exact)), 1e-7)
    assert np.max(np.abs(got - want)) < 2.5e-7


def test_value_and_grad_of_an_mlp_loss_shares_one_erf():
    rng = np.random.default_rng(0)
    w1 = rng.normal(size=(16, 32)).astype(np.float32)
    w2 = rng.normal(size=(32, 4)).astype(np.float32) / 4
    x = (rng.normal(size=(8, 16)) * 2).astype(np.float32)
    x[0, :len(EDGES)] = EDGES

    def loss(w1, w2, x):
        return jnp.mean((gelu(x @ w1) @ w2) ** 2)

    step = jax.value_and_grad(loss, argnums=(0, 1))
    ops, got = convert_and_run(step, w1, w2, x)
    _assert_collapsed(ops)
    for g, w in zip(got, _jit(step, w1, w2, x)):
        assert_same_floats(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("jacobian", [jax.jacrev, jax.jacfwd], ids=["jacrev", "jacfwd"])
def test_jacobian_of_the_exact_gelu(jacobian):
    fn = jacobian(gelu)
    # jacrev at +-inf: jax.jit's fused code gives 0 off the diagonal where JAX op by op gives NaN
    # (0 * inf), as the ONNX does with or without the collapse
    edges = EDGES if jacobian is jax.jacfwd else [e for e in EDGES if not np.isinf(e)]
    x = np.concatenate([np.linspace(-7, 7, 29), edges]).astype(np.float32)
    ops, (got,) = convert_and_run(fn, x)
    _assert_collapsed(ops)
    assert_same_floats(got, _jit(fn, x)[0], rtol=1e-4, atol=1e-5)


def test_jvp_of_the_exact_gelu():
    def fn(x, t):
        return jax.jvp(gelu, (x,), (t,))

    t = np.random.default_rng(1).normal(size=GRID.shape).astype(np.float32) * 100
    ops, got = convert_and_run(fn, GRID, t)
    assert ops["Erf"] == 1 and not DECOMPOSED & set(ops)
    for g, w in zip(got, _jit(fn, GRID, t)):
        assert_same_floats(g, w, rtol=1e-4, atol=1e-5 * 100)


def test_an_erfc_read_by_the_gradient_of_a_weight_keeps_its_formula():
    """d/dw sum(w * erfc(x)) is erfc(x) itself: 1 - Erf would lose the tail (erfc(5) = 1.5e-12)."""
    grad = jax.grad(lambda w, x: (w * jsp.erfc(x)).sum())
    x = np.linspace(-4, 9, 521).astype(np.float32)
    w = np.ones_like(x)
    ops, (got,) = convert_and_run(grad, w, x)
    assert "Erf" not in ops and ops["Exp"] >= 1
    want = _jit(grad, w, x)[0]
    tail = x > 3
    np.testing.assert_allclose(got[tail], want[tail], rtol=1e-4, atol=0)


def test_an_erfc_next_to_a_gaussian_alone_keeps_its_formula():
    """``erfc(x) - exp(-x^2) / (x sqrt(pi))`` cancels in the tail: no product rule, no collapse."""
    def fn(x):
        return jsp.erfc(x) - jnp.exp(-(x * x)) / (x * np.sqrt(np.pi))

    x = np.linspace(1, 9, 321).astype(np.float32)
    ops, (got,) = convert_and_run(fn, x)
    assert "Erf" not in ops
    np.testing.assert_allclose(got, _jit(fn, x)[0], rtol=1e-4, atol=1e-12)
