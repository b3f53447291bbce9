"""Householder QR of JAX CPU exports: ``lapack_{s,d}geqrf_ffi`` and ``lapack_{s,d}orgqr_ffi``, unrolled.

``jnp.linalg.qr`` and ``jax.scipy.linalg.qr`` call geqrf (R above the diagonal, the Householder
vectors below it, and their scalars tau), then orgqr (the product of the reflectors, Q);
``jax.lax.linalg.householder_product`` is orgqr alone. Both follow LAPACK's unblocked code step by
step, as OpenBLAS runs it for the sizes lowered here (up to 128 reflectors; beyond, LAPACK works in
blocks and rounds differently, within the tolerance):

- dlarfg: beta = -sign(alpha) * hypot(alpha, |x|) (dlapy2's w * sqrt(1 + (z / w)^2), a -0 alpha
  counting as negative), tau = (beta - alpha) / beta, v = x * (1 / (alpha - beta)), and tau = 0
  with the column left as it is when x is zero. A column whose |beta| is below safmin = tiny / eps
  is scaled by 1 / safmin first (once suffices for a column of normal numbers).
- dlarf: H = I - tau v v^T applied from the left only to the rows up to v's last nonzero and the
  columns up to the last one holding a nonzero there, and not at all when tau is 0; so NaN and
  infinities reach the same elements as in LAPACK. The rank-one update is one rounding
  (OpenBLAS's fused multiply-add): computed in float64 for float32 matrices, and for float64 the
  sign of a zero that the product underflows into is the product's.
- dorg2r: the columns past the reflectors start as the unit matrix's; Q is built from the last
  reflector back, column i being -tau_i v below the diagonal and 1 - tau_i on it.

XLA runs custom calls with subnormals flushed to zero (inputs read as zero, results written as
zero), so the lowering flushes the operands and each stored intermediate the same way: the
reciprocal of a huge alpha - beta is zero, as in ``jax.jit``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from jaxconv.errors import UnsupportedError
from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops._common import where
from jaxconv.onnx.ops.lapack import (
    _PRECISIONS,
    MAX_LAPACK_SIZE,
    _checked,
    _concat,
    _data_inputs,
    _data_operands,
    _slice,
    _swap_last,
    _zeros_like_batch,
    check_lapack_call,
)
from jaxconv.onnx.registry import custom_call_target
from jaxconv.stablehlo import ir as hir

_WORK = "float64"


class _Arithmetic:
    """Element operations in the matrix's dtype, rounded and flushed where LAPACK stores a result."""

    def __init__(self, ctx: LoweringContext, dtype: str) -> None:
        self.ctx, self.dtype = ctx, dtype
        info = np.finfo(dt.numpy_dtype(dtype))
        self.tiny = float(info.tiny)
        self.safmin = float(info.tiny) / (float(info.eps) / 2)  # LAPACK's dlamch('S') / dlamch('E')

    def c(self, value: float, dtype: str | None = None) -> str:
        return self.ctx.scalar(value, dtype or self.dtype)

    def op(self, op_type: str, *inputs: str, **attrs: object) -> str:
        return self.ctx.op(op_type, list(inputs), **attrs)

    def select(self, cond: str, a: str, b: str, dtype: str | None = None) -> str:
        return where(self.ctx, cond, a, b, dtype or self.dtype)

    def flush(self, x: str, dtype: str | None = None) -> str:
        """Subnormals of ``x`` as zeros of their sign (``x * (|x| >= tiny)``), as XLA's CPU mode gives."""
        dtype = dtype or self.dtype
        normal = self.op("GreaterOrEqual", self.op("Abs", x), self.c(self.tiny, dtype))
        return self.op("Mul", x, self.ctx.cast(normal, dtype))

    def widen(self, x: str) -> str:
        return self.ctx.cast_if(x, self.dtype, _WORK)

    def store(self, x_work: str) -> str:
        """A float64 result rounded once to the matrix's dtype and flushed."""
        return self.flush(self.ctx.cast_if(x_work, _WORK, self.dtype))

    def is_zero(self, x: str) -> str:
        return self.op("Equal", x, self.c(0.0))

    def any_from(self, nonzero: str, axis: int) -> str:
        """Where some element at this index or a later one along ``axis`` is true (bool in, bool out)."""
        count = self.op("CumSum", self.ctx.cast(nonzero, "int32"), self.ctx.i64([axis]), reverse=1)
        return self.op("Greater", count, self.ctx.scalar(0, "int32"))

    def norm(self, x: str, axis: int) -> str:
        """The 2-norm of ``x`` along ``axis`` (kept), as nrm2 gives it: inf with an inf, NaN with a NaN."""
        axes = self.ctx.i64([axis])
        if self.dtype == "float32":  # squares of float32 values neither overflow nor underflow in float64
            wide = self.widen(x)
            squares = self.op("ReduceSum", self.op("Mul", wide, wide), axes, keepdims=1)
            return self.store(self.op("Sqrt", squares))
        size = self.op("ReduceMax", self.op("Abs", x), axes, keepdims=1)
        safe = self.select(self.op("Or", self.is_zero(size), self.op("IsInf", size)), self.c(1.0), size)
        scaled = self.op("Div", x, safe)
        norm = self.op("Mul", safe, self.op("Sqrt", self.op("ReduceSum", self.op("Mul", scaled, scaled), axes,
                                                              keepdims=1)))
        norm = self.select(self.op("Or", self.is_zero(size), self.op("IsInf", size)), size, norm)
        has_nan = self.op("Cast", self.op("ReduceMax", self.ctx.cast(self.op("IsNaN", x), "int32"), axes,
                                          keepdims=1), to=dt.onnx_type("bool"))
        return self.select(has_nan, self.c(float("nan")), norm)

    def hypot(self, a: str, b: str) -> str:
        """dlapy2(a, b) for b >= 0: w * sqrt(1 + (z / w)^2), w when z is 0 or w is inf, NaN with a NaN."""
        a = self.op("Abs", a)
        w, z = self.op("Max", a, b), self.op("Min", a, b)
        ratio = self.op("Div", z, w)
        out = self.op("Mul", w, self.op("Sqrt", self.op("Add", self.c(1.0), self.op("Mul", ratio, ratio))))
        plain = self.op("Or", self.is_zero(z), self.op("IsInf", w))
        out = self.select(plain, w, out)
        either = self.op("Add", a, b)
        return self.select(self.op("IsNaN", either), either, out)

    def negative(self, x: str) -> str:
        """Where Fortran's sign(1, x) is -1: x < 0 or x = -0 (whose reciprocal is -inf)."""
        below = self.op("Less", x, self.c(0.0))
        return self.op("Or", below, self.op("Less", self.op("Reciprocal", x), self.c(0.0)))

    def fused_update(self, c: str, v: str, s: str) -> str:
        """c + v * s rounded once (OpenBLAS's ger with fused multiply-adds), flushed."""
        if self.dtype == "float32":
            return self.store(self.op("Add", self.widen(c), self.op("Mul", self.widen(v), self.widen(s))))
        product = self.op("Mul", v, s)
        summed = self.op("Add", c, product)
        underflow = self.op("And", self.is_zero(c), self.op("And", self.op("Not", self.is_zero(v)),
                                                             self.op("Not", self.is_zero(s))))
        return self.flush(self.select(underflow, product, summed))


def _apply_reflector(ar: _Arithmetic, v: str, tau: str, c: str, rank: int) -> str:
    """dlarf('Left'): (I - tau v v^T) c on the rows up to v's last nonzero and the columns up to the last
    one with a nonzero in those rows; c unchanged where tau is 0. v: [..., r, 1], c: [..., r, cols]."""
    ctx = ar.ctx
    row_axis, col_axis = rank - 2, rank - 1
    rows = ar.any_from(ar.op("Not", ar.is_zero(v)), row_axis)  # [..., r, 1]
    read = ar.select(rows, c, ar.c(0.0))
    nonzero = ctx.cast(ar.op("Not", ar.is_zero(read)), "int32")
    column_nonzero = ar.op("ReduceMax", nonzero, ctx.i64([row_axis]), keepdims=1)
    cols = ar.any_from(ar.op("Greater", column_nonzero, ctx.scalar(0, "int32")), col_axis)  # [..., 1, cols]
    w = ar.flush(ar.op("MatMul", _swap_last(ctx, read, rank), v))  # [..., cols, 1], summed in the dtype
    s = ar.flush(ar.op("Mul", ar.op("Neg", tau), _swap_last(ctx, w, rank)))  # [..., 1, cols]
    updated = ar.fused_update(c, v, s)
    apply = ar.op("And", ar.op("And", rows, cols), ar.op("Not", ar.is_zero(tau)))
    return ar.select(apply, updated, c)


def _reflector(ar: _Arithmetic, alpha: str, x: str, rank: int) -> tuple[str, str, str]:
    """dlarfg of alpha ([..., 1, 1]) and x ([..., r, 1]): (beta, v, tau); alpha, x and tau 0 when x is 0."""
    xnorm = ar.norm(x, rank - 2)
    beta = ar.hypot(alpha, xnorm)
    beta = ar.select(ar.negative(alpha), beta, ar.op("Neg", beta))
    small = ar.op("Less", ar.op("Abs", beta), ar.c(ar.safmin))
    factor = ar.select(small, ar.c(1.0 / ar.safmin), ar.c(1.0))  # a power of two: the scaling is exact
    alpha_s, beta_s, x_s = (ar.op("Mul", t, factor) for t in (alpha, beta, x))
    tau = ar.flush(ar.op("Div", ar.op("Sub", beta_s, alpha_s), beta_s))
    scale = ar.flush(ar.op("Reciprocal", ar.op("Sub", alpha_s, beta_s)))
    v = ar.flush(ar.op("Mul", x_s, scale))
    untouched = ar.is_zero(xnorm)
    return (ar.select(untouched, alpha, beta), ar.select(untouched, x, v),
            ar.select(untouched, ar.c(0.0), tau))


def _geqrf(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """Packed QR ([..., m, n]: R on and above the diagonal, reflectors below) and tau ([..., min(m, n)])."""
    _checked(op)
    at = op.operands[0].type
    rank, m, n = at.rank, at.shape[-2], at.shape[-1]
    k = min(m, n)
    ar = _Arithmetic(ctx, at.dtype)
    a = _data_inputs(op, inputs)[0]
    if k == 0:
        return [a, _zeros_like_batch(ctx, a, rank, [0], at.dtype)]
    row_axis, col_axis = rank - 2, rank - 1
    active = ar.flush(a)  # rows j..m-1, all n columns
    one = ctx.op("Add", [_zeros_like_batch(ctx, a, rank, [1, 1], at.dtype), ar.c(1.0)])  # v's leading 1
    final_rows: list[str] = []
    taus: list[str] = []
    for j in range(k):
        r = m - j
        column = _slice(ctx, active, j, j + 1, col_axis)  # [..., r, 1]
        if r == 1:  # dlarfg of one element: tau = 0, nothing moves
            taus.append(_zeros_like_batch(ctx, a, rank, [1, 1], at.dtype))
            final_rows.append(active)
            break
        alpha, x = _slice(ctx, column, 0, 1, row_axis), _slice(ctx, column, 1, r, row_axis)
        beta, v, tau = _reflector(ar, alpha, x, rank)
        taus.append(tau)
        pieces = [_slice(ctx, active, 0, j, col_axis)] if j > 0 else []
        pieces.append(_concat(ctx, [beta, v], row_axis))
        if j + 1 < n:
            reflector = _concat(ctx, [one, v], row_axis)
            pieces.append(_apply_reflector(ar, reflector, tau, _slice(ctx, active, j + 1, n, col_axis), rank))
        updated = _concat(ctx, pieces, col_axis)
        final_rows.append(_slice(ctx, updated, 0, 1, row_axis))
        active = _slice(ctx, updated, 1, r, row_axis)
        if j == k - 1:
            final_rows.append(active)  # m > n: the rows below the last step hold reflectors only
    packed = _concat(ctx, final_rows, row_axis)
    return [packed, ctx.op("Squeeze", [_concat(ctx, taus, col_axis), ctx.i64([row_axis])])]


def _orgqr(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """Q ([..., m, n], m >= n) from the reflectors below the diagonal of the first k columns, tau [..., k]."""
    _checked(op)
    reason = check_qr_call(op)
    if reason is not None:
        raise UnsupportedError(f"stablehlo.custom_call @{op.attrs.get('call_target_name')}: {reason}")
    at, tt = op.operands[0].type, _data_operands(op)[1]
    rank, m, n, k = at.rank, at.shape[-2], at.shape[-1], tt.shape[-1]
    ar = _Arithmetic(ctx, at.dtype)
    a, taus = _data_inputs(op, inputs)
    row_axis, col_axis = rank - 2, rank - 1
    a = ar.flush(a)
    taus = ar.flush(ctx.op("Unsqueeze", [taus, ctx.i64([row_axis])]))  # [..., 1, k]
    if n == 0:
        return [a]
    zero_batch = _zeros_like_batch(ctx, a, rank, [m, n - k], at.dtype) if n > k else None
    q: str | None = None  # columns i+1..n-1, all m rows
    one = ctx.op("Add", [_zeros_like_batch(ctx, a, rank, [1, 1], at.dtype), ar.c(1.0)])  # v's leading 1
    if zero_batch is not None:
        q = ctx.op("Add", [zero_batch, ctx.const(np.eye(m, n, dtype=dt.numpy_dtype(at.dtype))[:, k:])])
    for i in range(k - 1, -1, -1):
        tau = _slice(ctx, taus, i, i + 1, col_axis)  # [..., 1, 1]
        below = _slice(ctx, _slice(ctx, a, i + 1, m, row_axis), i, i + 1, col_axis)  # [..., m-i-1, 1]
        if q is not None:
            reflector = _concat(ctx, [one, below], row_axis) if i + 1 < m else one
            touched = _apply_reflector(ar, reflector, tau, _slice(ctx, q, i, m, row_axis), rank)
            q = _concat(ctx, [_slice(ctx, q, 0, i, row_axis), touched], row_axis) if i > 0 else touched
        pieces = []
        if i > 0:
            pieces.append(_zeros_like_batch(ctx, a, rank, [i, 1], at.dtype))
        pieces.append(ar.op("Sub", one, tau))
        if i + 1 < m:
            pieces.append(ar.flush(ar.op("Mul", below, ar.op("Neg", tau))))
        column = _concat(ctx, pieces, row_axis)
        q = column if q is None else _concat(ctx, [column, q], col_axis)
    assert q is not None
    return [q]


_ROUTINES: dict[str, Callable[[LoweringContext, hir.Op, list[str]], list[str]]] = {"geqrf": _geqrf,
                                                                                  "orgqr": _orgqr}
_ONNX_OPS = ("MatMul", "CumSum", "Sqrt", "Concat")
_CONDITIONS = {"geqrf": "any m x n", "orgqr": "m x n with m >= n, up to n reflectors"}



def check_qr_call(op: hir.Op) -> str | None:
    """check_lapack_call, and for orgqr: no more rows than columns, no more reflectors than columns."""
    reason = check_lapack_call(op)
    if reason is not None or not str(op.attrs.get("call_target_name", "")).endswith("orgqr_ffi"):
        return reason
    a, tau = _data_operands(op)
    m, n, k = a.shape[-2], a.shape[-1], tau.shape[-1]
    if m is None or n is None or k is None or m < n or k > n:
        return f"LAPACK orgqr of {m}x{n} matrices with {k} reflectors (expects m >= n >= reflectors)"
    return None


for _precision, _dtype in _PRECISIONS.items():
    for _routine, _handler in _ROUTINES.items():
        custom_call_target(f"lapack_{_precision}{_routine}_ffi", check=check_qr_call, onnx_ops=_ONNX_OPS,
                           conditions=f"{_dtype}; {_CONDITIONS[_routine]}; static matrix sizes up to "
                                      f"{MAX_LAPACK_SIZE} (unrolled)")(_handler)
