"""dot_general as Transpose + Reshape + MatMul, for every layout, dtype and dynamic dim."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops._common import where
from jaxconv.onnx.ops.elementwise import select_by_converted_bool
from jaxconv.onnx.registry import lowering
from jaxconv.stablehlo import ir as hir

# ONNX Runtime CPU MatMul kernels (float16 cast to float32 by ONNX Runtime itself).
MATMUL_NATIVE = dt.ort_accepts("MatMul")


def matmul_dtype(result: str) -> str:
    """The dtype a contraction producing ``result`` is computed in.

    Floats narrower than f32 accumulate in f32 and round once (what XLA CPU does); narrow
    integers compute in i32 and wrap on the way back (integer products wrap identically).
    """
    if result in ("float16", "bfloat16"):
        return "float32"
    if result == "bool":
        return "int32"
    if result in ("int8", "int16", "uint8", "uint16"):
        return "int32"
    return result if result in MATMUL_NATIVE else dt.compute_dtype(result, MATMUL_NATIVE)


def _check_dot(op: hir.Op) -> str | None:
    work = matmul_dtype(op.results[0].type.dtype)
    if work not in MATMUL_NATIVE:
        return f"dot_general producing {op.results[0].type.dtype} has no ONNX Runtime MatMul kernel"
    return None


@lowering("stablehlo.dot_general", check=_check_dot, onnx_ops=("MatMul", "Mul", "Transpose", "Reshape"))
def lower_dot_general(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Transpose to [batch, free, contract] x [batch, contract, free], flatten, MatMul, reshape back; a dot
    with nothing to sum over (contracted sizes 1) as a broadcast Mul."""
    dn = hir.DotDimensionNumbers.of(op.attrs["dot_dimension_numbers"])
    lhs_t, rhs_t = op.operands[0].type, op.operands[1].type
    result = op.results[0].type
    lb, rb = list(dn.lhs_batching_dimensions), list(dn.rhs_batching_dimensions)
    lc, rc = list(dn.lhs_contracting_dimensions), list(dn.rhs_contracting_dimensions)
    lf = [d for d in range(lhs_t.rank) if d not in lb and d not in lc]
    rf = [d for d in range(rhs_t.rank) if d not in rb and d not in rc]
    work = matmul_dtype(result.dtype)
    if work in ("float16", "float32") and "float64" in (lhs_t.dtype, rhs_t.dtype):
        work = "float64"  # XLA multiplies float64 operands in float64 whatever the result type
    contraction = [lhs_t.shape[d] for d in lc]
    if result.is_static and (0 in result.shape or 0 in contraction):
        return ctx.const(np.zeros(result.shape, dt.numpy_dtype(result.dtype)))  # nothing to multiply
    if not lf and not rf and lhs_t.dtype == rhs_t.dtype == result.dtype:
        selected = _masked_sum(ctx, inputs, lb + lc, rb + rc, len(lb), result.dtype)
        if selected is not None:
            return selected
    lhs = ctx.cast_if(inputs[0], lhs_t.dtype, work)
    rhs = ctx.cast_if(inputs[1], rhs_t.dtype, work)
    lhs = transpose(ctx, lhs, lb + lf + lc)
    rhs = transpose(ctx, rhs, rb + rc + rf)
    if all(d == 1 for d in contraction):
        # one product per element (exact, and -0 stays -0, which MatMul adds to +0), broadcast straight into
        # the result's [batch, lhs free, rhs free] layout: no Reshape, whatever the sizes' symbols
        nb = len(lb)
        lhs_dims = [lhs_t.shape[d] for d in lb + lf] + [1] * len(rf)
        rhs_dims = [rhs_t.shape[d] for d in rb] + [1] * len(lf) + [rhs_t.shape[d] for d in rf]
        lhs = _unit_axes(ctx, lhs, lhs_dims, nb + len(lf), len(lc), len(rf))
        rhs = _unit_axes(ctx, rhs, rhs_dims, nb, len(rc), len(lf))
        return _dot_result(ctx, ctx.op("Mul", [lhs, rhs]), work, result.dtype)
    lhs_dims = [lhs_t.shape[d] for d in lb + lf + lc]
    rhs_dims = [rhs_t.shape[d] for d in rb + rc + rf]
    nb = len(lb)
    lhs = _group(ctx, lhs, lhs_dims, nb, len(lf), len(lc))
    rhs = _group(ctx, rhs, rhs_dims, nb, len(rc), len(rf))
    out = ctx.op("MatMul", [lhs, rhs])
    if not (len(lf) == 1 and len(rf) == 1):
        if result.is_static:
            shape = ctx.i64(result.shape)
        else:
            sources = [(inputs[0], lhs_t, d) for d in lb + lf] + [(inputs[1], rhs_t, d) for d in rf]
            shape = ctx.op("Concat", [ctx.i64([t.shape[d]]) if t.shape[d] is not None else _dim(ctx, x, d)
                                      for x, t, d in sources], axis=0)
        out = ctx.op("Reshape", [out, shape])
    return _dot_result(ctx, out, work, result.dtype)


def _dot_result(ctx: LoweringContext, out: str, work: str, dtype: str) -> str:
    """The product ``out``, computed in ``work``, as the dot's result type."""
    if dtype == "bool":
        return ctx.op("Greater", [out, ctx.scalar(0, work)])
    return ctx.cast_if(out, work, dtype)


def _unit_axes(ctx: LoweringContext, x: str, dims: list[int | None], at: int, have: int, want: int) -> str:
    """``x`` with its ``have`` size-1 axes from ``at`` on replaced by ``want`` of them, so that it has
    ``dims``: a Reshape to them where all are known, else a Squeeze or an Unsqueeze of those axes."""
    if have == want:
        return x
    if all(d is not None for d in dims):
        return ctx.op("Reshape", [x, ctx.i64(dims)])
    if have > want:
        return ctx.op("Squeeze", [x, ctx.i64(list(range(at + want, at + have)))])
    return ctx.op("Unsqueeze", [x, ctx.i64(list(range(at + have, at + want)))])


def _masked_sum(ctx: LoweringContext, inputs: list[str], lhs_perm: list[int], rhs_perm: list[int], batch: int,
                dtype: str) -> str | None:
    """A float32/float64 dot of two operands without free dimensions, one a bool converted to float, as XLA
    computes it: its strength reduction makes it a sum of products, and a product by a converted bool is a
    select, so ``jnp.dot(mask, v)`` drops a NaN or an infinity of ``v`` where ``mask`` is False (optax's
    onecycle schedules at a NaN step: 0 in jax.jit). None for any other dot."""
    if lhs_perm != sorted(lhs_perm) or rhs_perm != sorted(rhs_perm):
        return None
    selected = select_by_converted_bool(ctx, dtype, inputs[0], inputs[1])
    if selected is None:
        return None
    axes = list(range(batch, len(lhs_perm)))
    return ctx.op("ReduceSum", [selected, ctx.i64(axes)], keepdims=0) if axes else selected


def transpose(ctx: LoweringContext, x: str, perm: Sequence[int]) -> str:
    """Transpose unless ``perm`` is the identity."""
    perm = list(perm)
    if perm == list(range(len(perm))):
        return x
    return ctx.op("Transpose", [x], perm=perm)


def _prod(values: Sequence[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def _dim(ctx: LoweringContext, x: str, axis: int) -> str:
    return ctx.op("Shape", [x], start=axis, end=axis + 1)


def _group(ctx: LoweringContext, x: str, dims: list[int | None], nb: int, n1: int, n2: int) -> str:
    """Reshape ``x`` (dims = batch + group1 + group2) to [batch..., prod(group1), prod(group2)]."""
    if n1 == 1 and n2 == 1:
        return x
    g1, g2 = dims[nb:nb + n1], dims[nb + n1:]
    if all(d is not None for d in dims):
        return ctx.op("Reshape", [x, ctx.i64(dims[:nb] + [_prod(g1), _prod(g2)])])
    pieces = []
    if nb:
        pieces.append(ctx.op("Shape", [x], start=0, end=nb))
    for start, group in ((nb, g1), (nb + n1, g2)):
        if all(d is not None for d in group):
            pieces.append(ctx.i64([_prod(group)]))
        else:
            part = ctx.op("Shape", [x], start=start, end=start + len(group))
            pieces.append(ctx.op("ReduceProd", [part, ctx.i64([0])], keepdims=1))
    return ctx.op("Reshape", [x, ctx.op("Concat", pieces, axis=0)])


# ---- triangular_solve and cholesky ------------------------------------------------------------------

MAX_SOLVE_SIZE = 256
_SOLVE_WORK = {"float16": "float32", "bfloat16": "float32", "float32": "float32", "float64": "float64"}


def _check_square(op: hir.Op, what: str) -> str | None:
    a = op.operands[0].type
    if a.dtype not in _SOLVE_WORK:
        if a.dtype.startswith("complex"):
            return f"{what} on {a.dtype}: ONNX Runtime has no complex tensors"
        return f"{what} on {a.dtype} is not valid StableHLO (floats only)"
    m = a.shape[-1]
    if m is None or a.shape[-2] is None:
        return f"{what} with a dynamic matrix size is not lowered yet (it is unrolled over the rows)"
    if m > MAX_SOLVE_SIZE:
        return f"{what} of {m}x{m} matrices is not lowered (unrolled up to {MAX_SOLVE_SIZE} rows)"
    return None


def _check_triangular_solve(op: hir.Op) -> str | None:
    return _check_square(op, "triangular_solve")


@lowering("stablehlo.triangular_solve", check=_check_triangular_solve, onnx_ops=("MatMul", "Div", "Concat"),
          conditions=f"float types; static matrix sizes up to {MAX_SOLVE_SIZE} (unrolled)")
def lower_triangular_solve(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Row-by-row substitution (unrolled), in float32 (float64 for float64); only a's triangle is read."""
    at, bt = op.operands[0].type, op.operands[1].type
    work = _SOLVE_WORK[at.dtype]
    a = ctx.cast_if(inputs[0], at.dtype, work)
    b = ctx.cast_if(inputs[1], bt.dtype, work)
    out = triangular_solve(ctx, a, b, at.rank, at.shape[-1], left_side=bool(op.attrs.get("left_side")),
                           lower=bool(op.attrs.get("lower")), unit_diagonal=bool(op.attrs.get("unit_diagonal")),
                           transpose_a=str(op.attrs.get("transpose_a", "NO_TRANSPOSE")) != "NO_TRANSPOSE")
    return ctx.cast_if(out, work, op.results[0].type.dtype)


def _swap_last(ctx: LoweringContext, x: str, rank: int) -> str:
    return ctx.op("Transpose", [x], perm=list(range(rank - 2)) + [rank - 1, rank - 2])


def _rows(ctx: LoweringContext, x: str, start: int, stop: int, axis: int) -> str:
    return ctx.op("Slice", [x, ctx.i64([start]), ctx.i64([stop]), ctx.i64([axis])])


def triangular_solve(ctx: LoweringContext, a: str, b: str, rank: int, m: int, *, left_side: bool, lower: bool,
                     unit_diagonal: bool, transpose_a: bool) -> str:
    """Solve op(a) x = b (``left_side``) or x op(a) = b for x; ``a`` is [..., m, m], float.

    Every case becomes t y = c with t lower or upper triangular: op(a) = a^T flips the triangle,
    and x op(a) = b is op(a)^T x^T = b^T. Row i of y is (c_i - t[i, done] @ y[done]) / t[i, i].
    """
    t, low = a, lower
    if transpose_a:
        t, low = _swap_last(ctx, t, rank), not low
    c = b
    if not left_side:
        t, low = _swap_last(ctx, t, rank), not low
        c = _swap_last(ctx, c, rank)
    order = range(m) if low else range(m - 1, -1, -1)
    ys: str | None = None  # the rows solved so far, in order: each step appends one (a Concat of two)
    for i in order:
        row = _rows(ctx, c, i, i + 1, rank - 2)
        if ys is not None:
            lo, hi = (0, i) if low else (i + 1, m)
            coeffs = _rows(ctx, _rows(ctx, t, i, i + 1, rank - 2), lo, hi, rank - 1)
            row = ctx.op("Sub", [row, ctx.op("MatMul", [coeffs, ys])])
        if not unit_diagonal:
            diag = _rows(ctx, _rows(ctx, t, i, i + 1, rank - 2), i, i + 1, rank - 1)
            row = ctx.op("Div", [row, diag])
        ys = row if ys is None else ctx.op("Concat", [ys, row] if low else [row, ys], axis=rank - 2)
    assert ys is not None  # m >= 1
    return ys if left_side else _swap_last(ctx, ys, rank)


def _check_cholesky(op: hir.Op) -> str | None:
    return _check_square(op, "cholesky")


@lowering("stablehlo.cholesky", check=_check_cholesky, onnx_ops=("MatMul", "Sqrt", "Div", "Concat"),
          conditions=f"float types; static matrix sizes up to {MAX_SOLVE_SIZE} (unrolled)")
def lower_cholesky(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Column-by-column Cholesky (unrolled), zeros in the other triangle; NaN where a is not positive definite."""
    at = op.operands[0].type
    work = _SOLVE_WORK[at.dtype]
    a = ctx.cast_if(inputs[0], at.dtype, work)
    rank, m = at.rank, at.shape[-1]
    lower = bool(op.attrs.get("lower", False))
    if not lower:
        a = _swap_last(ctx, a, rank)  # the upper triangle of a is the lower one of a^T; U = L^T
    out = cholesky_lower(ctx, a, rank, m, work)
    if not lower:
        out = _swap_last(ctx, out, rank)
    return ctx.cast_if(out, work, op.results[0].type.dtype)


def cholesky_lower(ctx: LoweringContext, a: str, rank: int, m: int, dtype: str, pivots: list[str] | None = None,
                   lapack_scaling: bool = False) -> str:
    """L with a = L L^T from the lower triangle of ``a`` ([..., m, m]); zeros above the diagonal.

    Column j: v = a[:, j] - L[:, :j] @ L[j, :j]^T, L[j, j] = sqrt(v[j]), L[i, j] = v[i] / L[j, j] below.
    Each v[j] ([..., 1, 1]) is appended to ``pivots`` when given. ``lapack_scaling`` scales the column
    as LAPACK's potf2 does (OpenBLAS, as jax calls it): by 1 / L[j, j], writing zeros when that is 0,
    so an infinite pivot leaves zeros below it (also for ±inf entries) instead of inf / inf = NaN.
    """

    done: str | None = None  # the columns so far ([..., m, j]): each step appends one (a Concat of two)
    for j in range(m):
        v = _rows(ctx, a, j, j + 1, rank - 1)  # [..., m, 1]
        if done is not None:
            row_j = _rows(ctx, done, j, j + 1, rank - 2)  # [..., 1, j]
            v = ctx.op("Sub", [v, ctx.op("MatMul", [done, _swap_last(ctx, row_j, rank)])])
        pivot = _rows(ctx, v, j, j + 1, rank - 2)  # [..., 1, 1]
        if pivots is not None:
            pivots.append(pivot)
        d = ctx.op("Sqrt", [pivot])
        if lapack_scaling:
            zero = ctx.const(np.zeros((), dtype=np.dtype(dtype)))
            inv = ctx.op("Reciprocal", [d])
            col = where(ctx, ctx.op("Equal", [inv, zero]), zero, ctx.op("Mul", [v, inv]), dtype)
        else:
            col = ctx.op("Div", [v, d])
        below = np.arange(m) > j
        at_j = np.arange(m) == j
        shape = [m, 1]
        col = where(ctx, ctx.const(at_j.reshape(shape)), d,
                    where(ctx, ctx.const(below.reshape(shape)), col, ctx.const(np.zeros((), dtype=np.dtype(dtype))), dtype),
                    dtype)
        done = col if done is None else ctx.op("Concat", [done, col], axis=rank - 1)
    assert done is not None  # m >= 1
    return done
