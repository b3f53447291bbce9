"""Op rows: dot_general in every layout, dynamic dims, mixed and narrow dtypes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from conformance.case import op_row

RNG = np.random.default_rng(0)
Spec = jax.ShapeDtypeStruct
BF16 = ml_dtypes.bfloat16


def _f(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _i(shape, dtype, lo=-8, hi=8):
    return RNG.integers(lo, hi, size=shape).astype(dtype)


def matmul(a, b):
    return a @ b


for eq, shapes in [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij,kj->ik", [(3, 4), (5, 4)]),
    ("ji,jk->ik", [(4, 3), (4, 5)]),
    ("i,i->", [(6,), (6,)]),
    ("i,ij->j", [(4,), (4, 3)]),
    ("ij,j->i", [(3, 4), (4,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("abcd,cdbe->bae", [(2, 3, 4, 5), (4, 5, 3, 6)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 8), (2, 3, 5, 8)]),
    ("bqhd,bkhd->bhqk", [(2, 4, 3, 8), (2, 5, 3, 8)]),
    ("xbij,bjk->bxik", [(3, 2, 4, 5), (2, 5, 6)]),
    ("ijk,ijk->k", [(2, 3, 4), (2, 3, 4)]),
]:
    op_row(f"dot.einsum.{eq}", lambda a, b, eq=eq: jnp.einsum(eq, a, b), *[_f(s) for s in shapes])

op_row("dot.explicit_dimension_numbers", lambda a, b: lax.dot_general(a, b, (((2, 0), (1, 3)), ((1,), (0,)))),
       _f((4, 2, 5, 3)), _f((2, 5, 6, 4)))
_B, _K = jax.export.symbolic_shape("b, k")
op_row("dot.dynamic_batch_and_contracting", lambda x, y: jnp.einsum("bmk,bkn->bmn", x, y), _f((2, 3, 4)), _f((2, 4, 5)),
       specs=[Spec((_B, 3, _K), np.float32), Spec((_B, _K, 5), np.float32)], runs=[[_f((3, 3, 7)), _f((3, 7, 5))]])
op_row("dot.dynamic_free_dims", lambda x, y: jnp.einsum("abk,kcd->abcd", x, y), _f((2, 4, 3)), _f((3, 2, 5)),
       specs=[Spec((_B, 4, 3), np.float32), Spec((3, 2, 5), np.float32)], runs=[[_f((5, 4, 3)), _f((3, 2, 5))]])
op_row("dot.float64", matmul, _f((3, 7), np.float64), _f((7, 2), np.float64))
op_row("dot.float16", matmul, _f((4, 16), np.float16), _f((16, 3), np.float16))
# XLA fuses the widening into the dot, so compare at bf16 precision.
op_row("dot.bfloat16_rounds_once", lambda a, b: (a @ b).astype(jnp.float32), _f((4, 32), BF16), _f((32, 3), BF16),
       tol=(2e-2, 1e-2))
op_row("dot.bfloat16_preferred_float32", lambda a, b: jnp.einsum("bij,bjk->bik", a, b, preferred_element_type=jnp.float32),
       _f((2, 3, 16), BF16), _f((2, 16, 5), BF16))
op_row("dot.int8_preferred_int32", lambda a, b: lax.dot(a, b, preferred_element_type=jnp.int32),
       _i((3, 50), np.int8, -128, 127), _i((50, 4), np.int8, -128, 127))
for dtype in [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32]:
    info = np.iinfo(dtype)
    lo, hi = max(info.min, -1000), min(info.max, 1000)
    op_row(f"dot.integer_wraps.{np.dtype(dtype).name}", matmul, _i((3, 9), dtype, lo, hi), _i((9, 4), dtype, lo, hi))
for dtype in [np.int64, np.uint64]:
    op_row(f"dot.{np.dtype(dtype).name}", matmul, _i((3, 5), dtype, 0, 1000), _i((5, 2), dtype, 0, 1000))
op_row("dot.bool", lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ()))), RNG.random((3, 4)) < 0.3,
       RNG.random((4, 5)) < 0.3)
op_row("dot.zero_size_contraction", matmul, _f((3, 0)), _f((0, 2)))
