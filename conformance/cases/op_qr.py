"""Op rows: Householder QR of CPU exports (LAPACK geqrf + orgqr), jnp.linalg.qr and jax.scipy.linalg.qr."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

from conformance.case import op_row

RNG = np.random.default_rng(7)
S = jax.ShapeDtypeStruct


def _f(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _qr(mode):
    return lambda a: jnp.linalg.qr(a, mode=mode)


# ---- jnp.linalg.qr: every mode, tall, wide and square -----------------------------------------------------
for mode in ["reduced", "complete", "r"]:
    for shape in [(5, 3), (3, 5), (4, 4), (1, 3), (3, 1)]:
        op_row(f"lapack.qr.{mode}.{shape[0]}x{shape[1]}", _qr(mode), _f(shape))
op_row("lapack.qr.reduced.16x16", _qr("reduced"), _f((16, 16)))
op_row("lapack.qr.batched", _qr("reduced"), _f((2, 3, 6, 4)))
op_row("lapack.qr.complete.batched_wide", _qr("complete"), _f((3, 2, 5)))
op_row("lapack.qr.float64_batched", _qr("reduced"), _f((3, 7, 5), np.float64))
op_row("lapack.qr.float64_complete", _qr("complete"), _f((6, 4), np.float64))
op_row("lapack.qr.float64_r_wide", _qr("r"), _f((2, 4, 6), np.float64))

# ---- jax.scipy.linalg.qr
for mode in ["full", "economic", "r"]:
    op_row(f"lapack.scipy_qr.{mode}", lambda a, mode=mode: jsl.qr(a, mode=mode), _f((6, 4)))
op_row("lapack.scipy_qr.economic.float64_wide", lambda a: jsl.qr(a, mode="economic"),
       _f((2, 3, 5), np.float64))

# ---- lax.linalg.householder_product (orgqr alone): fewer reflectors than columns -------------------------
op_row("lapack.householder_product", jax.lax.linalg.householder_product, _f((2, 5, 4)),
       RNG.uniform(0.5, 2.0, (2, 3)).astype(np.float32))

# ---- a symbolic batch: the calls carry shape operands
_A = _f((3, 5, 3))
op_row("lapack.qr.dynamic_batch", _qr("reduced"), _A,
       specs=[S((jax.export.symbolic_shape("b")[0], 5, 3), np.float32)], runs=[[_A[:1]], [_f((4, 5, 3))]])

# ---- structure LAPACK treats specially
# A zero column below the diagonal: tau = 0 and the column stays (signs of zeros included); an exactly
# rank-deficient matrix (a rank deficiency that only rounding shows leaves Q's last columns to rounding
# noise, in LAPACK as in the lowering, so they cannot be compared); columns of -0 (LAPACK's sign(beta)
# follows alpha's sign bit); an already triangular matrix.
_SPECIAL = np.array([
    [[1, 2, 3], [0, 4, 5], [0, 0, 6], [0, 0, 0]],
    [[-1, 2, 3], [0, -4, 5], [0, 0, -6], [0, 0, 0]],
    [[2, 4, 1], [0, 0, 1], [0, 0, 1], [0, 0, 0]],
    [[-0.0, 1, 0], [0, 2, 0], [0, 3, 0], [0, 4, 0]],
    [[0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]],
    [[3, 1, 0], [-0.0, 1, 1], [-0.0, 0, 1], [-0.0, 0, 0]],
], np.float32)
op_row("lapack.qr.special_structure", _qr("reduced"), _SPECIAL)
op_row("lapack.qr.special_structure.complete", _qr("complete"), _SPECIAL.astype(np.float64))

# ---- non-finite and extreme values: NaN and inf spread as in LAPACK, huge columns scaled as LAPACK does ----
_NAN, _INF, _BIG = np.nan, np.inf, np.finfo(np.float32).max
_EDGE = np.array([
    [[1, 2, 3], [_NAN, 4, 5], [0, 1, 6], [2, 0, 1]],
    [[1, 2, 3], [4, _NAN, 5], [0, 1, 6], [2, 0, 1]],
    [[1, 2, 3], [4, 5, 6], [0, 1, _NAN], [2, 0, 1]],
    [[1, 2, 3], [4, _INF, 5], [0, 1, 6], [2, 0, 1]],
    [[_INF, 2, 3], [4, 5, 5], [0, 1, 6], [2, 0, 1]],
    [[_BIG, 2, 3], [1, 5, 5], [0, 1, 6], [2, 0, 1]],
    [[1, 2, 3], [_BIG, 5, 5], [0, 1, 6], [2, 0, 1]],
    [[1e-38, 2, 3], [-1e-38, 5, 5], [1e-38, 1, 6], [2e-38, 0, 1]],
    [[1e-30, 2, 3], [0, 5, 5], [-3e-31, 1, 6], [0, 0, 1]],
], np.float32)
op_row("lapack.qr.nan_inf_huge_tiny", _qr("reduced"), _EDGE)
_EDGE64 = np.where(np.abs(_EDGE) == _BIG, np.finfo(np.float64).max,  # the same, huge and tiny for float64
                   _EDGE * np.where(np.abs(_EDGE) < 1e-20, 1e-280, 1))
op_row("lapack.qr.nan_inf_huge_tiny.float64", _qr("complete"), _EDGE64)
