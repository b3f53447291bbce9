"""Op rows: stablehlo.sort, chlo.top_k and ApproxTopK lowered to stable TopK passes, byte for byte
(``expect="bits"``): sorting moves values, it never computes them, so -0.0 vs +0.0, NaN placement and
tie order all show."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from conformance.case import op_row

SPECIALS = np.array([1.0, -0.0, 0.0, np.nan, -np.nan, 2.0, -np.inf, np.inf, 0.0, -0.0, 1.0, np.nan], np.float32)
TIES = np.array([3, 1, 2, 3, 1, 0, 2, 3, 1, 0, 0, 1])


def row(name, fn, *args, opsets=(None,), **kw):
    op_row(f"sort.{name}", fn, *args, expect="bits", opsets=opsets, **kw)


row("descending", lambda x: (jnp.sort(x, descending=True), jnp.argsort(x, descending=True)), SPECIALS, opsets=(21, 26))
row("lax_sort_single_operand", lambda x: lax.sort(x), SPECIALS)
for dtype in ["uint8", "int8", "uint16", "int16", "uint32", "int32", "int64", "uint64", "bool", "float16", "float64"]:
    row(f"dtypes.{dtype}", lambda v: (jnp.sort(v), jnp.argsort(v), jnp.argsort(v, descending=True), lax.top_k(v, 4)),
        TIES.astype(dtype))

# Neighbours that float64 cannot tell apart must keep their order.
_WIDE = lambda v: (jnp.sort(v), jnp.argsort(v), lax.top_k(v, 3))  # noqa: E731
row("wide_integers.uint64", _WIDE,
    np.array([2**64 - 1, 2**63, 2**63 - 1, 2**64 - 2, 0, 1, 2**63 + 1, 2**63, 2**53 + 1, 2**53], np.uint64))
row("wide_integers.int64", _WIDE,
    np.array([2**63 - 1, -2**63, 2**62, 2**63 - 2, 0, -1, 2**53 + 1, 2**53, -2**53 - 1, -2**53], np.int64))
# bf16 results come back as f32 (exact); argsort/top_k indices show the order.
row("bfloat16", lambda v: (jnp.sort(v).astype(jnp.float32), jnp.argsort(v), lax.top_k(v, 5)[1]),
    SPECIALS.astype(ml_dtypes.bfloat16), opsets=(26,))

_KEYS = TIES.astype(np.int32)
row("lexsort", lambda x, y: jnp.lexsort((x, y)), SPECIALS, _KEYS)
row("multi_key.2", lambda x, y: lax.sort((y, x), num_keys=2), SPECIALS, _KEYS)
row("multi_key.2_payload", lambda x, y: lax.sort((y, x, jnp.arange(12)), num_keys=2), SPECIALS, _KEYS)
row("multi_key.3", lambda a, b, c: lax.sort((a, b, c), num_keys=3), (TIES % 2).astype(np.uint8), _KEYS, SPECIALS)
_X = np.random.default_rng(0).integers(0, 4, size=(3, 5, 4)).astype(np.float32)
for axis in [0, 1, 2]:
    row(f"axis{axis}", lambda v, axis=axis: (jnp.sort(v, axis=axis), jnp.argsort(v, axis=axis, descending=True)), _X)
op_row("sort.symbolic_length", lambda v: (jnp.sort(v), jnp.argsort(v, descending=True)), SPECIALS,
       specs=[jax.ShapeDtypeStruct((jax.export.symbolic_shape("n")[0],), jnp.float32)], runs=[[SPECIALS[:5]]])

# ---- top_k -------------------------------------------------------------------------------------
# lax.top_k orders by IEEE total order: +0.0 before -0.0, +NaN first.
_POS_NAN = np.where(np.signbit(SPECIALS) & np.isnan(SPECIALS), np.float32(np.nan), SPECIALS).astype(np.float32)
row("top_k.total_order_signed_zero", lambda v: lax.top_k(v, 12), _POS_NAN, opsets=(21, 26))
row("top_k.finite", lambda v: lax.top_k(v, 3), SPECIALS[np.isfinite(SPECIALS)], opsets=(21, 26))
# Needs BitCast (opset 26) to read the sign of a NaN.
row("top_k.negative_nan_last", lambda v: lax.top_k(v, 12), SPECIALS, opsets=(26,))
row("top_k.batched", lambda v: lax.top_k(v, 4), np.random.default_rng(1).integers(-3, 3, size=(2, 3, 7)).astype(np.float32))
_X = np.random.default_rng(2).integers(0, 6, size=(3, 8)).astype(np.float32)
row("approx_max_k", lambda v: lax.approx_max_k(v, 3), _X)
row("approx_min_k", lambda v: lax.approx_min_k(v, 2, reduction_dimension=0), _X)
