"""Complex LAPACK FFI calls of JAX CPU exports: cgetrf/zgetrf, ctrsm/ztrsm, cpotrf/zpotrf, unrolled.

``jnp.linalg.inv``/``solve``/``det``/``slogdet`` and ``jax.scipy.linalg.lu``/``lu_factor`` of complex
matrices start with ``lapack_{c,z}getrf_ffi``, ``solve_triangular``/``cho_solve``/``lu_solve`` call
``lapack_{c,z}trsm_ffi`` and ``jnp.linalg.cholesky`` calls ``lapack_{c,z}potrf_ffi``. They are the
real lowerings of ``lapack`` on (re, im) halves: partial pivoting picks the first row of largest
``|re| + |im|`` (LAPACK's icamax), the multipliers are the column times the pivot's reciprocal,
divisions are XLA's complex division, and the Cholesky factor is Hermitian (``a = L L^H``, the
diagonal's imaginary parts ignored). Sizes are static and at most ``MAX_LAPACK_SIZE``; eigen,
singular value and QR decompositions of complex matrices stay refused by ``lapack``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from jaxconv.errors import UnsupportedError
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops._complex import pack, parts, select
from jaxconv.onnx.ops.complex_arith import divide
from jaxconv.onnx.ops.complex_linalg import solve
from jaxconv.onnx.ops.lapack import (
    LuArithmetic,
    _data_inputs,
    _first_failure,
    _option,
    _slice,
    _zeros_like_batch,
    check_operands,
    register_routines,
    unrolled_lu,
)
from jaxconv.stablehlo import ir as hir

Halves = tuple[str, str]
_PRECISIONS = {"c": "complex64", "z": "complex128"}
_WORK = {"complex64": "float32", "complex128": "float64"}
# Options each routine reads from mhlo.backend_config: name -> (default, allowed values).
_OPTIONS: dict[str, dict[str, tuple[str, str]]] = {
    "potrf": {"uplo": ("L", "L")},
    "trsm": {"side": ("L", "LR"), "uplo": ("L", "LU"), "trans_x": ("N", "NTC"), "diag": ("N", "NU")},
    "getrf": {},
}
_MODES = {"N": "NO_TRANSPOSE", "T": "TRANSPOSE", "C": "ADJOINT"}


def _routine(op: hir.Op) -> tuple[str, str]:
    """(complex dtype, routine) of a ``lapack_{c,z}<routine>_ffi`` call."""
    target = str(op.attrs.get("call_target_name", ""))
    return _PRECISIONS[target[7]], target[8:-4]


def check_complex_lapack_call(op: hir.Op) -> str | None:
    """Why this complex LAPACK call cannot be lowered (operands, size, options), else None."""
    dtype, routine = _routine(op)
    label = f"complex LAPACK {routine}"
    return check_operands(op, routine, dtype, _OPTIONS[routine], label, label)


def _checked(op: hir.Op) -> None:
    reason = check_complex_lapack_call(op)
    if reason is not None:
        raise UnsupportedError(f"stablehlo.custom_call @{op.attrs.get('call_target_name')}: {reason}")


def _each(fn, x: Halves) -> Halves:  # noqa: ANN001
    return fn(x[0]), fn(x[1])


def _mul(ctx: LoweringContext, a: Halves, b: Halves) -> Halves:
    """The plain complex product (broadcasting), as LAPACK's compiled Fortran forms it."""
    o = ctx.op
    return (o("Sub", [o("Mul", [a[0], b[0]]), o("Mul", [a[1], b[1]])]),
            o("Add", [o("Mul", [a[0], b[1]]), o("Mul", [a[1], b[0]])]))


# ---- getrf: LU with partial pivoting -----------------------------------------------------------------

class _ComplexArithmetic(LuArithmetic[Halves]):
    """:func:`unrolled_lu` on (re, im) halves: pivots by |re| + |im| (icamax), XLA's complex division."""

    def split(self, x: str) -> Halves:
        return parts(self.ctx, x)

    def merge(self, x: Halves) -> str:
        return pack(self.ctx, x[0], x[1])

    def lift(self, fn: Callable[..., str], *xs: Halves) -> Halves:
        return fn(*(x[0] for x in xs)), fn(*(x[1] for x in xs))

    def shape(self, x: Halves) -> str:
        return self.ctx.op("Shape", [x[0]])

    def magnitude(self, x: Halves) -> str:
        return self.ctx.op("Add", [self.ctx.op("Abs", [x[0]]), self.ctx.op("Abs", [x[1]])])

    def is_zero(self, x: Halves) -> str:
        zero = self.ctx.scalar(0, self.dtype)
        return self.ctx.op("And", [self.ctx.op("Equal", [x[0], zero]), self.ctx.op("Equal", [x[1], zero])])

    def reciprocal(self, x: Halves, is_zero: str) -> Halves:
        zero, one = self.ctx.scalar(0, self.dtype), self.ctx.scalar(1, self.dtype)
        safe = (select(self.ctx, is_zero, one, x[0], self.dtype), x[1])
        return divide(self.ctx, (one, zero), safe, self.dtype)

    def mul(self, a: Halves, b: Halves) -> Halves:
        return _mul(self.ctx, a, b)


def _getrf(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """Packed LU (unit L below the diagonal, U on and above), 1-based int32 pivots and info, as the real
    lowering computes them (:func:`unrolled_lu`), the pivot row chosen by the largest |re| + |im|."""
    _checked(op)
    return unrolled_lu(ctx, op, inputs, _ComplexArithmetic(ctx, _WORK[op.operands[0].type.dtype]))


# ---- trsm: triangular solve --------------------------------------------------------------------------

def _trsm(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """op(a) x = b (side L) or x op(a) = b (side R), op = a, a^T or a^H (trans_x N, T, C), by
    substitution with XLA's complex division; only a's ``uplo`` triangle is read."""
    _checked(op)
    at = op.operands[0].type
    a, b = _data_inputs(op, inputs)
    if at.shape[-1] == 0:
        return [b]
    y = solve(ctx, parts(ctx, a), parts(ctx, b), at.rank, at.shape[-1], _WORK[at.dtype],
              left_side=_option(op, "trsm", "side") == "L", lower=_option(op, "trsm", "uplo") == "L",
              mode=_MODES[_option(op, "trsm", "trans_x")], unit_diagonal=_option(op, "trsm", "diag") == "U")
    return [pack(ctx, y[0], y[1])]


# ---- potrf: Hermitian Cholesky -----------------------------------------------------------------------

def _potrf(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """L with a = L L^H in the lower triangle (the upper one as given); info = first pivot <= 0.

    Column j: v = a[:, j] - L[:, :j] conj(L[j, :j])^T; L[j, j] = sqrt(re v[j]) (real), L[i, j] =
    v[i] / L[j, j] below. JAX replaces the whole factor with NaN when info != 0.
    """
    _checked(op)
    at = op.operands[0].type
    rank, n, work = at.rank, at.shape[-1], _WORK[at.dtype]
    a = _data_inputs(op, inputs)[0]
    if n == 0:
        return [a, _zeros_like_batch(ctx, a, rank, [], "int32")]
    o = ctx.op
    halves = parts(ctx, a)
    zero = ctx.const(np.zeros((), np.dtype(work)))
    index = np.arange(n)[:, None]
    cols: list[Halves] = []
    pivots: list[str] = []
    for j in range(n):
        v = _each(lambda x, j=j: _slice(ctx, x, j, j + 1, rank - 1), halves)  # [..., n, 1]
        if cols:
            done = tuple(cols[0][h] if j == 1 else o("Concat", [c[h] for c in cols], axis=rank - 1)
                         for h in (0, 1))  # [..., n, j]
            row = _each(lambda x, j=j: o("Transpose", [_slice(ctx, x, j, j + 1, rank - 2)],
                                         perm=list(range(rank - 2)) + [rank - 1, rank - 2]),
                        done)  # [..., j, 1]
            # L[:, :j] conj(row): (Lr + i Li)(Rr - i Ri)
            sr = o("Add", [o("MatMul", [done[0], row[0]]), o("MatMul", [done[1], row[1]])])
            si = o("Sub", [o("MatMul", [done[1], row[0]]), o("MatMul", [done[0], row[1]])])
            v = (o("Sub", [v[0], sr]), o("Sub", [v[1], si]))
        pivot = _slice(ctx, v[0], j, j + 1, rank - 2)  # [..., 1, 1], the real part only
        pivots.append(pivot)
        d = o("Sqrt", [pivot])
        lower = ctx.const(index > j)
        below = select(ctx, lower, o("Div", [v[0], d]), zero, work)
        cols.append((select(ctx, ctx.const(index == j), d, below, work),
                     select(ctx, lower, o("Div", [v[1], d]), zero, work)))
    factor = tuple(cols[0][h] if n == 1 else o("Concat", [c[h] for c in cols], axis=rank - 1) for h in (0, 1))
    keep = ctx.const(np.tril(np.ones((n, n), dtype=bool)))
    factor = (select(ctx, keep, factor[0], halves[0], work), select(ctx, keep, factor[1], halves[1], work))
    pivot = pivots[0] if n == 1 else o("Concat", pivots, axis=rank - 1)  # [..., 1, n]
    failed = o("LessOrEqual", [o("Squeeze", [pivot, ctx.i64([rank - 2])]), ctx.scalar(0, work)])
    return [pack(ctx, factor[0], factor[1]), _first_failure(ctx, failed, rank - 2)]


_ROUTINES = {"potrf": _potrf, "trsm": _trsm, "getrf": _getrf}
_ONNX_OPS = {"potrf": ("Sqrt", "Div", "MatMul"), "trsm": ("MatMul", "Div", "Concat"),
             "getrf": ("ArgMax", "GatherElements", "Div")}

register_routines(_PRECISIONS, _ROUTINES, check_complex_lapack_call, _ONNX_OPS, _OPTIONS)
