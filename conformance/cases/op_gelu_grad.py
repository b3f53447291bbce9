"""Op rows: the exact GELU under jax.grad: its erfc, read by the derivative, collapses to chlo.erfc too.

stablehlo.primitive_groups puts chlo.erfc back where the derivative reads it next to the product
rule's exp(-x^2/2) term (tests/test_erfc_gelu_grad.py for node counts, Jacobians and the refusals).
"""

from __future__ import annotations

import numpy as np

from conformance.case import np_dtype, op_row


def _gelu_grad(x):
    import jax

    return jax.grad(lambda v: jax.nn.gelu(v, approximate=False).sum())(x)


GRID = np.concatenate([np.linspace(-12, 12, 481), [0.0, -0.0, np.inf, -np.inf, np.nan, 3e38, -3e38, 1e-30, -1e-30]])
for _dtype in ("float32", "float16", "bfloat16"):
    with np.errstate(over="ignore"):
        op_row(f"composite.chlo.erfc.gelu_grad.{_dtype}", _gelu_grad, GRID.astype(np_dtype(_dtype)), opsets=(None, 18))
