"""LAPACK FFI custom calls of JAX CPU exports: potrf, trsm and getrf, unrolled for static sizes.

On CPU, ``jnp.linalg.cholesky`` becomes ``lapack_{s,d}potrf_ffi``, ``solve_triangular`` becomes
``lapack_{s,d}trsm_ffi``, and ``inv``/``det``/``slogdet``/``solve``/``lu``/``lu_factor`` start with
``lapack_{s,d}getrf_ffi``. Each call takes its options in ``mhlo.backend_config`` (LAPACK's
one-character flags as ASCII codes) and, for factorizations, returns LAPACK's ``info`` status,
which JAX turns into NaNs (potrf) or ignores (getrf, where a zero pivot only marks singularity).
Leading batch dimensions are the operands' extra leading axes (``num_batch_dims``).

The factorizations are unrolled over the matrix size, so sizes must be static and bounded; the
other LAPACK routines JAX calls (QR, eigen and singular value decompositions, Schur, Hessenberg,
tridiagonal) have no lowering, and :func:`unsupported_reason` names the JAX function behind each.
"""

from __future__ import annotations

import re

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
_SUPPORTED = ("potrf", "trsm", "getrf")
_ARITY = {"potrf": 1, "trsm": 2, "getrf": 1}
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
_TARGET = re.compile(r"^lapack_([sdcz])([a-z]+)_ffi$")

# Options each routine reads from mhlo.backend_config: name -> (default, allowed values).
_OPTIONS: dict[str, dict[str, tuple[str, str]]] = {
    "potrf": {"uplo": ("L", "LU")},
    "trsm": {"side": ("L", "LR"), "uplo": ("L", "LU"), "trans_x": ("N", "NTC"), "diag": ("N", "NU")},
    "getrf": {},
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
    data = _data_operands(op)
    if len(data) != _ARITY[routine]:
        return f"{target} takes {_ARITY[routine]} matrix operand(s), got {len(data)}"
    a = data[0]
    dtype = _PRECISIONS[precision]
    if any(t.dtype != dtype for t in data):
        return f"{target} on {', '.join(t.dtype for t in data)} (expects {dtype})"
    if a.rank < 2:
        return f"{target} on a rank-{a.rank} operand (expects matrices)"
    rows, cols = a.shape[-2], a.shape[-1]
    if rows is None or cols is None:
        return f"{_describe(routine)} with a dynamic matrix size is not lowered (it is unrolled over the rows)"
    if routine != "getrf" and rows != cols:
        return f"LAPACK {routine} of {rows}x{cols} matrices (expects square ones)"
    if max(rows, cols) > MAX_LAPACK_SIZE:
        return (f"{_describe(routine)} of {rows}x{cols} matrices is not lowered "
                f"(it is unrolled, up to {MAX_LAPACK_SIZE}x{MAX_LAPACK_SIZE})")
    for name, (_, allowed) in _OPTIONS[routine].items():
        value = _option(op, routine, name)
        if value not in allowed:
            return f"LAPACK {routine} with {name}={value!r} (expects one of {', '.join(allowed)})"
    return None


def _checked(op: hir.Op) -> None:
    reason = check_lapack_call(op)
    if reason is not None:
        raise UnsupportedError(f"stablehlo.custom_call @{op.attrs.get('call_target_name')}: {reason}")


# ---- helpers -----------------------------------------------------------------------------------------

def _slice(ctx: LoweringContext, x: str, start: int, stop: int, axis: int) -> str:
    return ctx.op("Slice", [x, ctx.i64([start]), ctx.i64([stop]), ctx.i64([axis])])


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
    pivot = pivots[0] if n == 1 else ctx.op("Concat", pivots, axis=rank - 1)  # [..., 1, n]
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

def _getrf(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """Packed LU (unit L below the diagonal, U on and above), 1-based int32 pivots and info.

    Step j picks the first row of largest |a[i, j]| among the rows not yet final (LAPACK's
    i?amax), swaps it into place, scales the column below by the pivot's reciprocal and updates
    the trailing block; rows above j never move again. A zero pivot (a singular matrix) leaves its
    column unscaled and sets info to its 1-based index when it is the first.
    """
    _checked(op)
    at = op.operands[0].type
    dtype, rank = at.dtype, at.rank
    m, n = at.shape[-2], at.shape[-1]
    k = min(m, n)
    row_axis, col_axis = rank - 2, rank - 1
    zero, one = ctx.scalar(0, dtype), ctx.scalar(1, dtype)
    active = _data_inputs(op, inputs)[0]  # rows j..m-1, all n columns
    if k == 0:
        return [active, _zeros_like_batch(ctx, active, rank, [0], "int32"),
                _zeros_like_batch(ctx, active, rank, [], "int32")]
    final_rows: list[str] = []
    pivot_index: list[str] = []
    pivot_value: list[str] = []
    for j in range(k):
        r = m - j
        column = _slice(ctx, active, j, j + 1, col_axis)  # [..., r, 1]
        p = ctx.op("ArgMax", [ctx.op("Abs", [column])], axis=row_axis, keepdims=1)  # [..., 1, 1], first max
        pivot_index.append(p)
        if r > 1:
            rows = ctx.const(np.arange(r, dtype=np.int64).reshape(r, 1))
            perm = ctx.op("Where", [ctx.op("Equal", [rows, ctx.i64([0])]), p,
                                    ctx.op("Where", [ctx.op("Equal", [rows, p]), ctx.i64([0]), rows])])
            perm = ctx.op("Expand", [perm, ctx.op("Shape", [active])])
            active = ctx.op("GatherElements", [active, perm], axis=row_axis)
        top = _slice(ctx, active, 0, 1, row_axis)  # [..., 1, n], final row j
        final_rows.append(top)
        pivot = _slice(ctx, top, j, j + 1, col_axis)  # [..., 1, 1]
        pivot_value.append(pivot)
        if r == 1:
            active = None
            break
        rest = _slice(ctx, active, 1, r, row_axis)  # [..., r-1, n]
        safe = ctx.op("Where", [ctx.op("Equal", [pivot, zero]), one, pivot])
        multipliers = ctx.op("Mul", [_slice(ctx, rest, j, j + 1, col_axis), ctx.op("Reciprocal", [safe])])
        parts = [_slice(ctx, rest, 0, j, col_axis)] if j > 0 else []
        parts.append(multipliers)
        if j + 1 < n:
            trailing = _slice(ctx, rest, j + 1, n, col_axis)
            parts.append(ctx.op("Sub", [trailing, ctx.op("Mul", [multipliers, _slice(ctx, top, j + 1, n, col_axis)])]))
        active = parts[0] if len(parts) == 1 else ctx.op("Concat", parts, axis=col_axis)
    if active is not None:  # m > n: the rows below the last pivot hold L only
        final_rows.append(active)
    lu = final_rows[0] if len(final_rows) == 1 else ctx.op("Concat", final_rows, axis=row_axis)

    squeeze_rows = ctx.i64([row_axis])
    relative = pivot_index[0] if k == 1 else ctx.op("Concat", pivot_index, axis=col_axis)  # [..., 1, k]
    relative = ctx.op("Squeeze", [relative, squeeze_rows])
    pivots = ctx.op("Add", [relative, ctx.const(np.arange(1, k + 1, dtype=np.int64))])
    pivots = ctx.cast(pivots, "int32")

    values = pivot_value[0] if k == 1 else ctx.op("Concat", pivot_value, axis=col_axis)
    values = ctx.op("Squeeze", [values, squeeze_rows])  # [..., k]
    info = _first_failure(ctx, ctx.op("Equal", [values, zero]), rank - 2)
    return [lu, pivots, info]


_ROUTINES = {"potrf": _potrf, "trsm": _trsm, "getrf": _getrf}

_ROUTINE_ONNX_OPS = {"potrf": ("Sqrt", "Div", "Concat"), "trsm": ("MatMul", "Div", "Concat"),
                     "getrf": ("ArgMax", "Where", "Concat")}

for _precision, _dtype in _PRECISIONS.items():
    for _routine, _handler in _ROUTINES.items():
        _conditions = (f"{_dtype}; static matrix sizes up to {MAX_LAPACK_SIZE} (unrolled)"
                       + ("; square matrices" if _routine != "getrf" else "")
                       + "".join(f"; {name} {' or '.join(allowed)}" for name, (_, allowed) in _OPTIONS[_routine].items()))
        custom_call_target(f"lapack_{_precision}{_routine}_ffi", check=check_lapack_call,
                           onnx_ops=_ROUTINE_ONNX_OPS[_routine], conditions=_conditions)(_handler)
