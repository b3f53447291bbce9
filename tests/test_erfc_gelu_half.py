"""The exact GELU on float16 and bfloat16: one float32 Gelu (or ORT's fused Erf form) between two Casts.

ONNX Runtime 1.32 has no float16 or bfloat16 kernel of Gelu or Erf on the CPU (it casts a float16
Gelu's function body to float32 itself, 8 nodes; bfloat16 fails to load), so the lowering computes
the GELU's ops in float32 and rounds after each one as jax does; the activations rewrite replaces
the whole chain by Gelu in float32, rounded once. Numbers are compared with jax.jit (within one
ulp) and with the correctly rounded GELU, on grids with the tails and IEEE edge values.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax
from scipy.special import erfc

from tests.lowering_check import assert_same_floats, convert_and_run

HALF = [np.float16, ml_dtypes.bfloat16]
EDGES = [0.0, -0.0, np.nan, np.inf, -np.inf, 6e4, -6e4, 1e-7, -1e-7]


def gelu(x):
    return jax.nn.gelu(x, approximate=False)


def _grid(dtype, n=20001, edges=True):
    return np.concatenate([np.linspace(-12, 12, n), EDGES if edges else []]).astype(dtype)


def _jit(fn, *args):
    return [np.asarray(a) for a in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]


@pytest.mark.parametrize("dtype", HALF, ids=["f16", "bf16"])
@pytest.mark.parametrize("opset, form", [(21, {"Cast": 2, "Gelu": 1}),
                                         (18, {"Cast": 2, "Div": 1, "Erf": 1, "Add": 1, "Mul": 2})])
def test_half_float_gelu_is_one_float32_gelu(dtype, opset, form):
    from jaxconv.compare import tolerance

    x = _grid(dtype)
    ops, (got,) = convert_and_run(gelu, x, opset=opset)
    assert dict(ops) == form  # 16 nodes before
    want = _jit(gelu, x)[0]
    assert got.dtype == want.dtype
    assert_same_floats(got.astype(np.float32), want.astype(np.float32), *tolerance(np.dtype(dtype).name))


@pytest.mark.parametrize("dtype, ours, jits", [(np.float16, 987, 3925), (ml_dtypes.bfloat16, 6159, 6867)],
                         ids=["f16", "bf16"])
def test_half_float_gelu_is_correctly_rounded_more_often_than_jax_jit(dtype, ours, jits):
    """jax rounds erfc's argument to the half float, which moves erfc by up to 16 float16 ulps in the
    tail; Gelu in float32 rounds once."""
    x = _grid(dtype, edges=False)
    _, (got,) = convert_and_run(gelu, x)
    x64 = x.astype(np.float64)
    exact = (0.5 * x64 * erfc(-x64 / np.sqrt(2))).astype(dtype)
    assert (np.sum(got != exact), np.sum(_jit(gelu, x)[0] != exact)) == (ours, jits)


def test_half_float_gelu_by_hand_with_erf():
    def fn(x):
        return x * 0.5 * (1 + lax.erf(x / jnp.sqrt(2.0).astype(x.dtype)))

    x = _grid(np.float16)
    ops, (got,) = convert_and_run(fn, x)
    assert ops["Gelu"] == 1 and "Erf" not in ops
    assert_same_floats(got.astype(np.float32), _jit(fn, x)[0].astype(np.float32), rtol=1e-2, atol=1e-3)


def test_a_float32_gelu_keeps_a_rounding_written_in_it():
    """Only the lowering's own round trips of a half-float GELU go: a float32 GELU whose erf argument
    the program rounds to float16 keeps that rounding (and its Erf)."""
    def fn(x):
        z = (x / jnp.sqrt(2.0)).astype(jnp.float16).astype(jnp.float32)
        return x * 0.5 * (1 + lax.erf(z))

    x = _grid(np.float32, 4001)
    ops, (got,) = convert_and_run(fn, x)
    assert "Gelu" not in ops and ops["Erf"] == 1
    # without the rounding: 1.3e-4 off, 284 points outside the tolerance
    assert_same_floats(got, _jit(fn, x)[0], rtol=1e-4, atol=1e-5)


def test_half_float_gelu_whose_product_is_read_elsewhere_keeps_its_form():
    def fn(x):
        half_x = 0.5 * x
        return half_x * lax.erfc(-x * np.sqrt(0.5).astype(x.dtype)), half_x

    x = _grid(np.float16)
    ops, got = convert_and_run(fn, x)
    for g, w in zip(got, _jit(fn, x)):
        assert_same_floats(g.astype(np.float32), w.astype(np.float32), rtol=1e-2, atol=1e-3)
    assert ops["Gelu"] == 1  # 0.5 * x is read twice; the Gelu reads x itself
