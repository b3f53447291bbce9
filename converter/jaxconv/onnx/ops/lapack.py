"""LAPACK FFI custom calls of JAX CPU exports: the routine tables and checks, and potrf, trsm, getrf.

On CPU, ``jnp.linalg.cholesky`` becomes ``lapack_{s,d}potrf_ffi``, ``solve_triangular`` becomes
``lapack_{s,d}trsm_ffi``, and ``inv``/``det``/``slogdet``/``solve``/``lu``/``lu_factor`` start with
``lapack_{s,d}getrf_ffi``. Each call takes its options in ``mhlo.backend_config`` (LAPACK's
one-character flags as ASCII codes) and, for factorizations, returns LAPACK's ``info`` status,
which JAX turns into NaNs (potrf) or ignores (getrf, where a zero pivot only marks singularity).
Leading batch dimensions are the operands' extra leading axes (``num_batch_dims``).

These factorizations are unrolled over the matrix size, so sizes must be static and bounded.
Householder QR (``jnp.linalg.qr``: geqrf, then orgqr) is lowered in :mod:`jaxconv.onnx.ops.lapack_qr`,
the symmetric eigendecomposition (``jnp.linalg.eigh``/``eigvalsh``: syevd) in
:mod:`jaxconv.onnx.ops.lapack_eigen` and the singular value decomposition (``jnp.linalg.svd``, ``pinv``,
``lstsq``, ...: gesdd) in :mod:`jaxconv.onnx.ops.lapack_svd` (Jacobi rotations in a Loop), all with these
tables and checks. The other LAPACK routines JAX calls (general eigendecomposition, Schur, Hessenberg,
tridiagonal) have no lowering, and :func:`unsupported_reason` names the JAX function behind each.
"""

from __future__ import annotations

import re
from typing import Callable, Generic, TypeVar

import numpy as np
from onnx import helper

from jaxconv.errors import UnsupportedError
from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops._common import where
from jaxconv.onnx.ops.linalg import MAX_SOLVE_SIZE, cholesky_lower, triangular_solve
from jaxconv.onnx.registry import custom_call_target, explains_unsupported
from jaxconv.stablehlo import ir as hir

# Largest matrix dimension the unrolled factorizations and solves accept (as for stablehlo.cholesky).
MAX_LAPACK_SIZE = MAX_SOLVE_SIZE

_PRECISIONS = {"s": "float32", "d": "float64"}
# potrf, trsm, getrf here; geqrf, orgqr in lapack_qr; syevd in lapack_eigen; gesdd in lapack_svd
_SUPPORTED = ("potrf", "trsm", "getrf", "geqrf", "orgqr", "syevd", "gesdd")
_ARITY = {"potrf": 1, "trsm": 2, "getrf": 1, "geqrf": 1, "orgqr": 2, "syevd": 1, "gesdd": 1}
# Routines taking m x n matrices; the others take square ones.
_RECTANGULAR = ("getrf", "geqrf", "orgqr", "gesdd")
# What each routine computes and the JAX functions that call it, for messages.
_ROUTINE_SOURCES: dict[str, tuple[str, str]] = {
    "potrf": ("Cholesky", "jnp.linalg.cholesky / jax.scipy.linalg.cho_factor"),
    "trsm": ("triangular solve", "jax.scipy.linalg.solve_triangular / cho_solve / lu_solve"),
    "getrf": ("LU", "jnp.linalg.inv / det / slogdet / solve, jax.scipy.linalg.lu / lu_factor"),
    "geqrf": ("Householder QR", "jnp.linalg.qr / jax.scipy.linalg.qr"),
    "geqp3": ("pivoted QR", "jax.scipy.linalg.qr(pivoting=True)"),
    "orgqr": ("forming Q of a QR", "jnp.linalg.qr / jax.scipy.linalg.qr"),
    "ungqr": ("forming Q of a QR", "jnp.linalg.qr / jax.scipy.linalg.qr"),
    "syevd": ("symmetric eigendecomposition", "jnp.linalg.eigh / eigvalsh / jax.scipy.linalg.eigh"),
    "heevd": ("Hermitian eigendecomposition", "jnp.linalg.eigh / eigvalsh / jax.scipy.linalg.eigh"),
    "gesdd": ("singular value decomposition", "jnp.linalg.svd / pinv / lstsq / matrix_rank / norm(ord=2) / cond"),
    "gesvd": ("singular value decomposition", "jnp.linalg.svd"),
    "geev": ("general eigendecomposition", "jnp.linalg.eig / eigvals"),
    "gees": ("Schur decomposition", "jax.scipy.linalg.schur"),
    "gehrd": ("Hessenberg reduction", "jax.scipy.linalg.hessenberg"),
    "sytrd": ("tridiagonal reduction", "jax.lax.linalg.tridiagonal"),
    "hetrd": ("tridiagonal reduction", "jax.lax.linalg.tridiagonal"),
    "gtsv": ("tridiagonal solve", "jax.lax.linalg.tridiagonal_solve"),
}
_TARGET = re.compile(r"^lapack_([sdcz])([a-z][a-z0-9]*)_ffi$")  # geqp3 has a digit

# Options each routine reads from mhlo.backend_config: name -> (default, allowed values).
_OPTIONS: dict[str, dict[str, tuple[str, str]]] = {
    "potrf": {"uplo": ("L", "LU")},
    "trsm": {"side": ("L", "LR"), "uplo": ("L", "LU"), "trans_x": ("N", "NTC"), "diag": ("N", "NU")},
    "getrf": {},
    "geqrf": {},
    "orgqr": {},
    "syevd": {"mode": ("V", "VN"), "uplo": ("L", "LU")},
    "gesdd": {"mode": ("A", "ASN")},
}


def _parse(target: str) -> tuple[str, str] | None:
    """(precision letter, routine) of a ``lapack_<p><routine>_ffi`` target, else None."""
    found = _TARGET.match(target or "")
    return (found.group(1), found.group(2)) if found else None


def _option(op: hir.Op, routine: str, name: str) -> str:
    """One LAPACK flag from ``mhlo.backend_config`` as its character (the routine's default if absent)."""
    config = op.attrs.get("mhlo.backend_config")
    value = config.get(name) if isinstance(config, dict) else None
    if value is None:
        return _OPTIONS[routine][name][0]
    return chr(int(value)) if not isinstance(value, str) else value


def _data_indices(op: hir.Op) -> list[int]:
    """Positions of the matrix operands; with symbolic shapes, other operands carry result shapes only."""
    shape_operands = op.attrs.get("indices_of_shape_operands")
    skip = {int(i) for i in np.ravel(shape_operands)} if shape_operands is not None else set()
    return [i for i in range(len(op.operands)) if i not in skip]


def _data_operands(op: hir.Op) -> list[hir.TensorType]:
    return [op.operands[i].type for i in _data_indices(op)]


def _data_inputs(op: hir.Op, inputs: list[str]) -> list[str]:
    return [inputs[i] for i in _data_indices(op)]


def _describe(routine: str) -> str:
    """E.g. "LU (LAPACK getrf, from jnp.linalg.inv / ...)"."""
    if routine not in _ROUTINE_SOURCES:
        return f"LAPACK {routine}"
    what, functions = _ROUTINE_SOURCES[routine]
    return f"{what} (LAPACK {routine}, from {functions})"


@explains_unsupported
def unsupported_reason(target: str) -> str | None:
    """Why a LAPACK target JAX emits has no lowering, naming the JAX function behind it; None otherwise."""
    parsed = _parse(target)
    if parsed is None:
        return None
    precision, routine = parsed
    if precision in "cz":
        return (f"complex {_describe(routine)}: complex LAPACK routines are not lowered "
                "beyond getrf, potrf, trsm")
    if routine in _SUPPORTED:
        return None
    return f"{_describe(routine)} has no ONNX lowering"


def check_lapack_call(op: hir.Op) -> str | None:
    """Reason a LAPACK custom call cannot be lowered (unsupported routine, size or option), else None."""
    target = str(op.attrs.get("call_target_name", ""))
    reason = unsupported_reason(target)
    if reason is not None:
        return reason
    parsed = _parse(target)
    if parsed is None:
        return f"custom call target {target!r} is not a LAPACK call"
    precision, routine = parsed
    return check_operands(op, routine, _PRECISIONS[precision], _OPTIONS[routine], f"LAPACK {routine}",
                          _describe(routine))


def check_operands(op: hir.Op, routine: str, dtype: str, options: dict[str, tuple[str, str]], label: str,
                   described: str) -> str | None:
    """Why the operands or flags of a LAPACK call of ``routine`` on ``dtype`` matrices cannot be lowered,
    else None: their count and dtype, static sizes up to ``MAX_LAPACK_SIZE`` (square but for
    ``_RECTANGULAR``), the ``options`` flags allowed. ``label`` (``LAPACK potrf``) and ``described``
    name the routine in messages."""
    target = str(op.attrs.get("call_target_name", ""))
    data = _data_operands(op)
    if len(data) != _ARITY[routine]:
        return f"{target} takes {_ARITY[routine]} matrix operand(s), got {len(data)}"
    if any(t.dtype != dtype for t in data):
        return f"{target} on {', '.join(t.dtype for t in data)} (expects {dtype})"
    a = data[0]
    if a.rank < 2:
        return f"{target} on a rank-{a.rank} operand (expects matrices)"
    rows, cols = a.shape[-2], a.shape[-1]
    if rows is None or cols is None:
        return f"{described} with a dynamic matrix size is not lowered (it is unrolled over the rows)"
    if routine not in _RECTANGULAR and rows != cols:
        return f"LAPACK {routine} of {rows}x{cols} matrices (expects square ones)"
    if max(rows, cols) > MAX_LAPACK_SIZE:
        return (f"{described} of {rows}x{cols} matrices is not lowered "
                f"(it is unrolled, up to {MAX_LAPACK_SIZE}x{MAX_LAPACK_SIZE})")
    for name, (_, allowed) in options.items():
        value = _option(op, routine, name)
        if value not in allowed:
            return f"{label} with {name}={value!r} (expects one of {', '.join(allowed)})"
    return None


def _checked(op: hir.Op) -> None:
    reason = check_lapack_call(op)
    if reason is not None:
        raise UnsupportedError(f"stablehlo.custom_call @{op.attrs.get('call_target_name')}: {reason}")


# ---- helpers -----------------------------------------------------------------------------------------

def _slice(ctx: LoweringContext, x: str, start: int, stop: int, axis: int) -> str:
    return ctx.op("Slice", [x, ctx.i64([start]), ctx.i64([stop]), ctx.i64([axis])])


def _concat(ctx: LoweringContext, xs: list[str], axis: int) -> str:
    return xs[0] if len(xs) == 1 else ctx.op("Concat", xs, axis=axis)


def _swap_last(ctx: LoweringContext, x: str, rank: int) -> str:
    return ctx.op("Transpose", [x], perm=list(range(rank - 2)) + [rank - 1, rank - 2])


def _diagonal(ctx: LoweringContext, x: str, rank: int, rows: int, cols: int) -> str:
    """The leading diagonal of ``x`` ([..., rows, cols]) as [..., min(rows, cols)], read exactly."""
    flat = ctx.op("Reshape", [x, ctx.i64([0] * (rank - 2) + [rows * cols])])
    k = min(rows, cols)
    return ctx.op("Gather", [flat, ctx.i64([i * cols + i for i in range(k)])], axis=rank - 2)


def _zeros_like_batch(ctx: LoweringContext, x: str, rank: int, tail: list[int], dtype: str) -> str:
    """Zeros of shape [batch dims of ``x`` ([..., rows, cols])] + ``tail``."""
    shape = ctx.op("Shape", [x], start=0, end=rank - 2)
    if tail:
        shape = ctx.op("Concat", [shape, ctx.i64(tail)], axis=0)
    return ctx.op("ConstantOfShape", [shape], value=helper.make_tensor("zero", dt.onnx_type(dtype), [1], [0]))


def _first_failure(ctx: LoweringContext, failed: str, axis: int) -> str:
    """LAPACK's info: 1 + the first index along ``axis`` where ``failed`` (bool) holds, else 0, as int32."""
    flags = ctx.cast(failed, "int32")
    axes = ctx.i64([axis])
    anything = ctx.op("ReduceMax", [flags, axes], keepdims=0)
    first = ctx.cast(ctx.op("ArgMax", [flags], axis=axis, keepdims=0), "int32")
    return ctx.op("Mul", [anything, ctx.op("Add", [first, ctx.scalar(1, "int32")])])


# ---- potrf: Cholesky ---------------------------------------------------------------------------------

def _potrf(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """Cholesky factor in the ``uplo`` triangle, the other triangle as given; info = first non-positive pivot.

    JAX replaces the whole factor with NaN when info != 0, as LAPACK's partial factor is not usable.
    """
    _checked(op)
    at = op.operands[0].type
    rank, n = at.rank, at.shape[-1]
    a = _data_inputs(op, inputs)[0]
    if n == 0:
        return [a, _zeros_like_batch(ctx, a, rank, [], "int32")]
    upper = _option(op, "potrf", "uplo") == "U"
    if upper:
        a = _swap_last(ctx, a, rank)  # the upper triangle of a is the lower one of a^T; U = L^T
    pivots: list[str] = []
    factor = cholesky_lower(ctx, a, rank, n, at.dtype, pivots, lapack_scaling=True)
    factor = where(ctx, ctx.const(np.tril(np.ones((n, n), dtype=bool))), factor, a, at.dtype)
    if upper:
        factor = _swap_last(ctx, factor, rank)
    # LAPACK (as JAX calls it) stops at the first pivot <= 0; a NaN pivot passes and propagates.
    pivot = _concat(ctx, pivots, rank - 1)  # [..., 1, n]
    pivot = ctx.op("Squeeze", [pivot, ctx.i64([rank - 2])])
    failed = ctx.op("LessOrEqual", [pivot, ctx.scalar(0, at.dtype)])
    return [factor, _first_failure(ctx, failed, rank - 2)]


# ---- trsm: triangular solve --------------------------------------------------------------------------

def _trsm(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """op(a) x = b (side L) or x op(a) = b (side R) by substitution; only a's ``uplo`` triangle is read."""
    _checked(op)
    at = op.operands[0].type
    a, b = _data_inputs(op, inputs)
    if at.shape[-1] == 0:
        return [b]
    out = triangular_solve(ctx, a, b, at.rank, at.shape[-1],
                           left_side=_option(op, "trsm", "side") == "L",
                           lower=_option(op, "trsm", "uplo") == "L",
                           unit_diagonal=_option(op, "trsm", "diag") == "U",
                           transpose_a=_option(op, "trsm", "trans_x") != "N")
    return [out]


# ---- getrf: LU with partial pivoting -----------------------------------------------------------------

V = TypeVar("V")  # what a matrix is made of: one tensor (real) or its (re, im) halves (complex)


class LuArithmetic(Generic[V]):
    """The element arithmetic :func:`unrolled_lu` runs on; this base class is the real one (V: a tensor)."""

    def __init__(self, ctx: LoweringContext, dtype: str) -> None:
        self.ctx, self.dtype = ctx, dtype

    def split(self, x: str) -> V:
        """The operand tensor as V."""
        return x

    def merge(self, x: V) -> str:
        """V as a result tensor."""
        return x

    def lift(self, fn: Callable[..., str], *xs: V) -> V:
        """``fn`` (a shape operation: slice, gather, concat, or a linear one: sub) applied to ``xs``."""
        return fn(*xs)

    def shape(self, x: V) -> str:
        return self.ctx.op("Shape", [x])

    def magnitude(self, x: V) -> str:
        """The size LAPACK's i?amax compares to pick the pivot."""
        return self.ctx.op("Abs", [x])

    def is_zero(self, x: V) -> str:
        return self.ctx.op("Equal", [x, self.ctx.scalar(0, self.dtype)])

    def reciprocal(self, x: V, is_zero: str) -> V:
        """1 / x, and 1 where ``is_zero`` (a zero pivot leaves its column unscaled); a subnormal reciprocal
        (of a pivot beyond 1 / FLT_MIN) is 0, as LAPACK computes it under XLA's flush to zero (jax.jit's
        inv of [[FLT_MAX, inf], [1, 1]] is all NaN: 0 x inf in the update)."""
        ctx = self.ctx
        r = ctx.op("Reciprocal", [ctx.op("Where", [is_zero, ctx.scalar(1, self.dtype), x])])
        smallest = float(np.finfo(dt.numpy_dtype(self.dtype)).tiny)
        normal = ctx.op("GreaterOrEqual", [ctx.op("Abs", [r]), ctx.scalar(smallest, self.dtype)])
        return ctx.op("Mul", [r, ctx.cast(normal, self.dtype)])  # r x 0 keeps r's sign: Where would not

    def mul(self, a: V, b: V) -> V:
        return self.ctx.op("Mul", [a, b])


def unrolled_lu(ctx: LoweringContext, op: hir.Op, inputs: list[str], arith: LuArithmetic[V]) -> list[str]:
    """getrf's packed LU (unit L below the diagonal, U on and above), 1-based int32 pivots and info of the
    call's matrix operand ([..., m, n]), in ``arith``.

    Step j picks the first row of largest magnitude in column j among the rows not yet final (LAPACK's
    i?amax), swaps it into place, scales the column below by the pivot's reciprocal and updates
    the trailing block; rows above j never move again. A zero pivot (a singular matrix) leaves its
    column unscaled and sets info to its 1-based index when it is the first.
    """
    at = op.operands[0].type
    packed = _data_inputs(op, inputs)[0]
    rank, m, n = at.rank, at.shape[-2], at.shape[-1]
    k = min(m, n)
    if k == 0:
        return [packed, _zeros_like_batch(ctx, packed, rank, [0], "int32"),
                _zeros_like_batch(ctx, packed, rank, [], "int32")]
    row_axis, col_axis = rank - 2, rank - 1

    def cut(x: V, start: int, stop: int, axis: int) -> V:
        return arith.lift(lambda t: _slice(ctx, t, start, stop, axis), x)

    def join(xs: list[V], axis: int) -> V:
        return xs[0] if len(xs) == 1 else arith.lift(lambda *ts: ctx.op("Concat", list(ts), axis=axis), *xs)

    active: V | None = arith.split(packed)  # rows j..m-1, all n columns
    final_rows: list[V] = []
    pivot_index: list[str] = []
    pivot_zero: list[str] = []
    for j in range(k):
        assert active is not None
        r = m - j
        column = cut(active, j, j + 1, col_axis)  # [..., r, 1]
        p = ctx.op("ArgMax", [arith.magnitude(column)], axis=row_axis, keepdims=1)  # [..., 1, 1], first max
        pivot_index.append(p)
        if r > 1:
            rows = ctx.const(np.arange(r, dtype=np.int64).reshape(r, 1))
            perm = ctx.op("Where", [ctx.op("Equal", [rows, ctx.i64([0])]), p,
                                    ctx.op("Where", [ctx.op("Equal", [rows, p]), ctx.i64([0]), rows])])
            perm = ctx.op("Expand", [perm, arith.shape(active)])
            active = arith.lift(lambda t: ctx.op("GatherElements", [t, perm], axis=row_axis), active)
        top = cut(active, 0, 1, row_axis)  # [..., 1, n], final row j
        final_rows.append(top)
        pivot = cut(top, j, j + 1, col_axis)  # [..., 1, 1]
        is_zero = arith.is_zero(pivot)
        pivot_zero.append(is_zero)
        if r == 1:
            active = None
            break
        rest = cut(active, 1, r, row_axis)  # [..., r-1, n]
        multipliers = arith.mul(cut(rest, j, j + 1, col_axis), arith.reciprocal(pivot, is_zero))
        pieces = [cut(rest, 0, j, col_axis)] if j > 0 else []
        pieces.append(multipliers)
        if j + 1 < n:
            update = arith.mul(multipliers, cut(top, j + 1, n, col_axis))
            trailing = cut(rest, j + 1, n, col_axis)
            pieces.append(arith.lift(lambda t, u: ctx.op("Sub", [t, u]), trailing, update))
        active = join(pieces, col_axis)
    if active is not None:  # m > n: the rows below the last pivot hold L only
        final_rows.append(active)
    lu = join(final_rows, row_axis)

    squeeze_rows = ctx.i64([row_axis])
    relative = ctx.op("Squeeze", [_concat(ctx, pivot_index, col_axis), squeeze_rows])  # [..., k]
    pivots = ctx.cast(ctx.op("Add", [relative, ctx.const(np.arange(1, k + 1, dtype=np.int64))]), "int32")
    zeros = ctx.op("Squeeze", [_concat(ctx, pivot_zero, col_axis), squeeze_rows])
    info = _first_failure(ctx, zeros, rank - 2)
    return [arith.merge(lu), pivots, info]


def _getrf(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """Packed LU (unit L below the diagonal, U on and above), 1-based int32 pivots and info
    (:func:`unrolled_lu`, the pivot row chosen by the largest |a[i, j]|)."""
    _checked(op)
    return unrolled_lu(ctx, op, inputs, LuArithmetic(ctx, op.operands[0].type.dtype))


_ROUTINES = {"potrf": _potrf, "trsm": _trsm, "getrf": _getrf}

_ROUTINE_ONNX_OPS = {"potrf": ("Sqrt", "Div", "Concat"), "trsm": ("MatMul", "Div", "Concat"),
                     "getrf": ("ArgMax", "Where", "Concat")}


def register_routines(precisions: dict[str, str], routines: dict[str, Callable[..., list[str]]],
                      check: Callable[[hir.Op], str | None], onnx_ops: dict[str, tuple[str, ...]],
                      options: dict[str, dict[str, tuple[str, str]]]) -> None:
    """Register ``lapack_<p><routine>_ffi`` for each precision letter p (-> dtype) and routine, with the
    conditions ``jaxconv list-ops`` shows: dtype, size limit, square matrices, the flags allowed."""
    for precision, dtype in precisions.items():
        for routine, handler in routines.items():
            conditions = (f"{dtype}; static matrix sizes up to {MAX_LAPACK_SIZE} (unrolled)"
                          + ("; square matrices" if routine != "getrf" else "")
                          + "".join(f"; {name} {' or '.join(allowed)}"
                                    for name, (_, allowed) in options[routine].items()))
            custom_call_target(f"lapack_{precision}{routine}_ffi", check=check, onnx_ops=onnx_ops[routine],
                               conditions=conditions)(handler)


register_routines(_PRECISIONS, _ROUTINES, check_lapack_call, _ROUTINE_ONNX_OPS, _OPTIONS)
