"""float16/bfloat16 chains round after every op, like XLA.

ONNX Runtime has no float16 kernels for most ops: it runs them in float32 with Casts it inserts
itself, then removes the Cast pairs between neighbouring nodes, so an intermediate that overflows
(or rounds) in float16 would stay in float32.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from elementwise_support import BF16, F16, check

BIG = {F16: 65504.0, BF16: 3.3e38}


def _pair(dtype):
    a = np.array([BIG[dtype], 1.0, -BIG[dtype], 0.1, 3.0], np.float64).astype(dtype)
    b = np.array([BIG[dtype], 2.0 ** -11, -BIG[dtype], 0.2, -0.0], np.float64).astype(dtype)
    return a, b


@pytest.mark.parametrize("opset", [18, 21])
@pytest.mark.parametrize("dtype", [F16, BF16], ids=str)
def test_arithmetic_chain_rounds_every_step(opset, dtype):
    a, b = _pair(dtype)
    check(lambda a, b: ((a * 0.5 + b) * 0.5, (a + b) - b, jnp.abs(a + b) - b, -(a + b) + b), a, b, opset=opset)


@pytest.mark.parametrize("dtype", [F16, BF16], ids=str)
def test_rounding_before_exact_ops(dtype):
    """Floor, compare, select, pad, max-reduce and pooling see the rounded value."""
    a, b = _pair(dtype)

    def f(a, b):
        s = a + b
        return (jnp.floor(s * 0.5), s > b, jnp.where(s > 0, s, b) * 0.5, jnp.pad(s, 1)[1:-1] - b,
                jnp.max(s) - b[0], lax.reduce_window(s, -jnp.inf, lax.max, (2,), (1,), "VALID") - b[1:],
                jnp.sign(s - b), jnp.maximum(s, b) - b)

    check(f, a, b)


@pytest.mark.parametrize("dtype", [F16, BF16], ids=str)
def test_transcendental_after_overflow(dtype):
    a, b = _pair(dtype)
    check(lambda a, b: (jnp.exp(-(a + b)), jnp.tanh(a + b), jnp.sqrt(a + b)), a, b, tol=(1e-2, 1e-6))


def test_float16_sums_round_like_xla():
    x = np.full((4, 3), 30000.0, F16)
    check(lambda x: (jnp.sum(x, axis=1) * 0.5, jnp.cumsum(x, axis=0) * 0.25), x)
