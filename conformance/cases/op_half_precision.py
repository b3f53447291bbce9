"""Op rows: float16/bfloat16 chains round after every op, like XLA, at old opsets too.

ONNX Runtime has no float16 kernels for most ops: it runs them in float32 with Casts it inserts
itself, then removes the Cast pairs between neighbouring nodes, so an intermediate that overflows
(or rounds) in float16 would stay in float32.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from conformance.case import op_row
from conformance.values import BF16, F16

BIG = {F16: 65504.0, BF16: 3.3e38}


def _pair(dtype):
    a = np.array([BIG[dtype], 1.0, -BIG[dtype], 0.1, 3.0], np.float64).astype(dtype)
    b = np.array([BIG[dtype], 2.0 ** -11, -BIG[dtype], 0.2, -0.0], np.float64).astype(dtype)
    return a, b


def _rounding_before_exact_ops(a, b):
    """Floor, compare, select, pad, max-reduce and pooling see the rounded value."""
    s = a + b
    return (jnp.floor(s * 0.5), s > b, jnp.where(s > 0, s, b) * 0.5, jnp.pad(s, 1)[1:-1] - b,
            jnp.max(s) - b[0], lax.reduce_window(s, -jnp.inf, lax.max, (2,), (1,), "VALID") - b[1:],
            jnp.sign(s - b), jnp.maximum(s, b) - b)


for d in (F16, BF16):
    op_row(f"half.arithmetic_chain.{d.name}", lambda a, b: ((a * 0.5 + b) * 0.5, (a + b) - b, jnp.abs(a + b) - b, -(a + b) + b),
           *_pair(d), expect="exact", opsets=(18, 21))
    op_row(f"half.rounding_before_exact_ops.{d.name}", _rounding_before_exact_ops, *_pair(d), expect="exact")
    op_row(f"half.transcendental_after_overflow.{d.name}", lambda a, b: (jnp.exp(-(a + b)), jnp.tanh(a + b), jnp.sqrt(a + b)),
           *_pair(d), expect="allclose", tol=(1e-2, 1e-6))
op_row("half.float16_sums", lambda x: (jnp.sum(x, axis=1) * 0.5, jnp.cumsum(x, axis=0) * 0.25), np.full((4, 3), 30000.0, F16),
       expect="exact")

# Lowerings stay valid at the oldest opsets we emit, where ONNX Runtime has fewer dtype kernels.
EDGES = [1.5, -0.0, 0.0, np.inf, -np.inf, np.nan, -2.25, 7.0]
for d in (F16, BF16):
    op_row(f"half.old_opsets.{d.name}",
           lambda x: (jnp.isfinite(x), jnp.pad(x, (2, 1), constant_values=3), jnp.sort(x), jnp.cumsum(x[:4])),
           np.array(EDGES, d), opsets=(18, 19, 20, 21))
