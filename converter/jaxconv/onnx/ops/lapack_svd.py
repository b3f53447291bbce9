"""LAPACK FFI singular value decomposition of JAX CPU exports: gesdd, by one-sided Jacobi rotations.

``jnp.linalg.svd`` (and ``pinv``, ``lstsq``, ``matrix_rank``, ``norm(ord=2)``, ``norm('nuc')``, ``cond``,
``jnp.polyfit``) become ``lapack_{s,d}gesdd_ffi`` (``mode`` A: full U and Vt, S: reduced, N: values only).
Its results are the overwritten matrix (unused), the singular values, U, Vt and info; JAX fills every
result of a matrix whose info is not 0 with NaN.

One-sided (Hestenes) Jacobi on the columns of the matrix, of its transpose when it has fewer rows than
columns: pairs of columns are rotated until every pair is orthogonal to working precision, the
rotations accumulating into V; the columns' norms are then the singular values and the normalised
columns U. The pairs follow the round-robin ordering of :mod:`jaxconv.onnx.ops.lapack_eigen` (the
columns made even by a zero column, ``n / 2`` disjoint pairs rotated at once, the same ``Loop``): a pair
is rotated while its inner product exceeds epsilon times the product of the columns' norms. The matrix
is first divided by its largest magnitude, and float32 is rotated in float64, so that squared norms
neither overflow nor lose the small columns (FLT_MAX beside O(1) entries keeps its small singular values,
as LAPACK's mode S does).

Singular values descending, equal ones in the order gesdd's three selection sorts (dbdsqr's, dlasdq's,
dbdsdc's) leave them in when they start in column order, as for a diagonal matrix (from ``SMLSIZ``
columns on only dbdsdc's last sort; a matrix with NaN never reaches the sort). Singular vectors are
unique only up to sign: each pair (column i of U, row i of Vt) is flipped together so that u_i's entry
of largest magnitude (the first on ties) is positive, as ``jaxconv.vector_signs`` expects. A column for
a zero singular value is the unit vector of its column, so U stays finite (LAPACK's choice there is
arbitrary: ``pinv`` and ``lstsq`` multiply it by 0). Mode A of a rectangular matrix is refused: its
extra columns of U (rows of Vt) are an orthonormal basis of the complement that only LAPACK's own
arithmetic would reproduce.

Non-finite input, as measured on jax.jit (float32 and float64): LAPACK's gesdd rejects a matrix holding
a NaN (info -4), so JAX's fill makes every result NaN. One holding an infinity but no NaN has NaN
singular values (LAPACK scales by max|a| = inf, that is by 0); the vectors of a 1 x n or n x 1 one are
those of LAPACK's first Householder reflector (``_vectors_through_infinity``). Not matched: larger ones
have all NaN results here, where LAPACK leaves U and Vt as junk that depends on where the infinities are
(two rows or columns) or never returns (from 3x3 on, with vectors: Reference-LAPACK issue 1409).
LAPACK's values-only path (mode N) has normwise accuracy only: beside FLT_MAX it returns 0 for singular
values Jacobi finds (the default check's float64 reference agrees with Jacobi).
"""

from __future__ import annotations

import numpy as np

from jaxconv.errors import UnsupportedError
from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops.lapack import (
    _OPTIONS,
    MAX_LAPACK_SIZE,
    _data_inputs,
    _describe,
    _option,
    _slice,
    _swap_last,
    _zeros_like_batch,
    check_operands,
)
from jaxconv.onnx.ops.lapack_eigen import (
    any_per_matrix,
    canonical_sign,
    dynamic,
    finite_magnitude,
    jacobi_loop,
    per_matrix,
    position_of,
    rotate_halves,
    rotation,
    round_robin_source,
    swap_loop,
)
from jaxconv.onnx.registry import custom_call_target
from jaxconv.stablehlo import ir as hir

_PRECISIONS = {"s": "float32", "d": "float64"}
# float32 matrices are rotated in float64: squared norms and inner products of columns whose entries
# span float32's whole range (FLT_MAX beside subnormals) neither overflow nor vanish.
COMPUTE_DTYPES = {"float32": "float64"}


def _precision_and_mode(op: hir.Op) -> tuple[str, str]:
    target = str(op.attrs.get("call_target_name", ""))
    return _PRECISIONS[target[7]], _option(op, "gesdd", "mode")


def check_svd_call(op: hir.Op) -> str | None:
    """Why this gesdd call cannot be lowered (operands, size, mode, full U of a rectangular matrix), else
    None."""
    dtype, mode = _precision_and_mode(op)
    reason = check_operands(op, "gesdd", dtype, _OPTIONS["gesdd"], "LAPACK gesdd", _describe("gesdd"))
    if reason is not None:
        return reason
    rows, cols = op.operands[0].type.shape[-2:]
    if mode == "A" and rows != cols:
        return (f"full singular vectors of {rows}x{cols} matrices "
                "(jnp.linalg.svd's default full_matrices=True) are not lowered: their extra columns are "
                "LAPACK's arbitrary basis; use jnp.linalg.svd(a, full_matrices=False)")
    return None


def _checked(op: hir.Op) -> None:
    reason = check_svd_call(op)
    if reason is not None:
        raise UnsupportedError(f"stablehlo.custom_call @{op.attrs.get('call_target_name')}: {reason}")


def _worth_rotating(ctx: LoweringContext, off: str, first: str, second: str, dtype: str, eps: float) -> str:
    """Whether two columns' inner product ``off`` exceeds ``eps`` times the product of their norms (the
    square roots of their squared norms ``first`` and ``second``)."""
    o = ctx.op
    scale = o("Mul", [o("Sqrt", [first]), o("Sqrt", [second])])
    return o("Greater", [o("Abs", [off]), o("Mul", [scale, ctx.scalar(eps, dtype)])])


def _column_round(ctx: LoweringContext, names: list[str], rank: int, size: int, dtype: str, eps: float,
                  with_vectors: bool) -> tuple[list[str], str]:
    """One round: rotate each column pair (i, size/2 + i) worth rotating so that the two become orthogonal,
    the same rotation on the columns of V, then move one place round the circle."""
    o = ctx.op
    half = size // 2
    w, vectors, labels = names[0], names[1] if with_vectors else None, names[-1]
    rows = ctx.i64([rank - 2])
    first, second = _slice(ctx, w, 0, half, rank - 1), _slice(ctx, w, half, size, rank - 1)
    alpha = o("ReduceSumSquare", [first, rows], keepdims=0)  # [..., half]
    beta = o("ReduceSumSquare", [second, rows], keepdims=0)
    gamma = o("ReduceSum", [o("Mul", [first, second]), rows], keepdims=0)
    rotate = _worth_rotating(ctx, gamma, alpha, beta, dtype, eps)
    c, s, _ = rotation(ctx, o("Sub", [beta, alpha]), o("Mul", [gamma, ctx.scalar(2, dtype)]), rotate, dtype)
    column_c, column_s = o("Unsqueeze", [c, rows]), o("Unsqueeze", [s, rows])
    source = ctx.const(round_robin_source(size))
    turned = rotate_halves(ctx, w, column_c, column_s, rank - 1, half, size)
    out = [o("Gather", [turned, source], axis=rank - 1)]
    if vectors is not None:
        turned_vectors = rotate_halves(ctx, vectors, column_c, column_s, rank - 1, half, size)
        out.append(o("Gather", [turned_vectors, source], axis=rank - 1))
    out.append(o("Gather", [labels, source], axis=0))
    any_pair = o("Greater", [o("ReduceMax", [ctx.cast(rotate, "int32"), ctx.i64([rank - 2])], keepdims=0),
                             ctx.scalar(0, "int32")])
    return out, any_pair


def _orthogonal_columns(ctx: LoweringContext, work: str, rank: int, rows: int, cols: int, dtype: str,
                        eps: float, with_vectors: bool, batch_of: str) -> tuple[str, str | None]:
    """(W, V): the columns of ``work`` ([..., rows, cols], rows >= cols, finite, |entries| <= 1) rotated
    until orthogonal (W = work V), in their original column order, and V ([..., cols, cols])."""
    o = ctx.op
    size = cols + cols % 2
    if size != cols:
        work = o("Pad", [work, ctx.i64([0] * rank + [0] * (rank - 1) + [1])])
    matrix_type = dynamic(hir.TensorType(dtype, (None,) * (rank - 2) + (rows, size)))
    carried = [(work, matrix_type)]
    if with_vectors:
        eye = ctx.const(np.eye(size, dtype=dt.numpy_dtype(dtype)))
        batch_shape = o("Concat", [o("Shape", [work], end=rank - 2), ctx.i64([size, size])], axis=0)
        carried.append((o("Expand", [eye, batch_shape]), dynamic(hir.TensorType(dtype, matrix_type.shape[:-2]
                                                                                   + (size, size)))))
    carried.append((ctx.const(np.arange(size, dtype=np.int64)), hir.TensorType("int64", (None,))))
    final = jacobi_loop(ctx, carried, _zeros_like_batch(ctx, batch_of, rank, [], "int64"), size,
                         lambda names: _column_round(ctx, names, rank, size, dtype, eps, with_vectors))
    order = _slice(ctx, position_of(ctx, final[-1], size), 0, cols, 0)  # labels 0..cols-1: the dummy goes
    w = o("Gather", [final[0], order], axis=rank - 1)
    if not with_vectors:
        return w, None
    return w, o("Gather", [_slice(ctx, final[1], 0, cols, rank - 2), order], axis=rank - 1)


# LAPACK's selection sorts, as (whether the window is 0..n-1-i rather than i..n-1, the ONNX op that picks
# in it, whether it picks the last of equal values): dbdsqr moves the last smallest value to the end,
# dlasdq then the first smallest to the front (ascending), dbdsdc last the first largest to the front.
_DBDSQR = (True, "ArgMin", 1)
_DLASDQ = (False, "ArgMin", 0)
_DBDSDC = (False, "ArgMax", 0)
# gesdd's dbdsdc solves bidiagonal matrices up to this size with dlasdq (dbdsqr), larger ones by divide
# and conquer, whose order of equal values only its last sort is known of (a diagonal matrix).
SMLSIZ = 25


def _selection_pass(ctx: LoweringContext, values: str, taken: str, rank: int, n: int, dtype: str,
                    kind: tuple[bool, str, int]) -> tuple[str, str]:
    """One of LAPACK's selection sorts (``_DBDSQR``...) of ``values`` ([..., n]), ``taken`` (int64 indices)
    following: n - 1 steps, one ``Loop`` trip each, each swapping at most one pair (``swap_loop``)."""
    from_end, pick_op, last = kind
    o = ctx.op

    def pick(step: str, keys: str) -> tuple[str, str]:
        axis = ctx.i64([rank - 1])
        if from_end:
            target = o("Sub", [ctx.const(np.array(n - 1, np.int64)), step])
            window = o("Slice", [keys, ctx.i64([0]), o("Add", [o("Unsqueeze", [target, ctx.i64([0])]),
                                                                  ctx.i64([1])]), axis])
            return target, o(pick_op, [window], axis=rank - 1, keepdims=1, select_last_index=last)  # [..., 1]
        window = o("Slice", [keys, o("Unsqueeze", [step, ctx.i64([0])]), ctx.i64([n]), axis])
        return step, o("Add", [o(pick_op, [window], axis=rank - 1, keepdims=1, select_last_index=last), step])

    return swap_loop(ctx, values, taken, rank, n, dtype, pick, "lapack_sort_step")


def _vectors_through_infinity(ctx: LoweringContext, oriented: str, u: str, vt: str, has_inf: str, rank: int,
                              rows: int, transposed: bool, dtype: str) -> tuple[str, str]:
    """(u, vt) of a vector (a 1 x n or n x 1 matrix; ``oriented`` the column) holding an infinity but no NaN,
    as LAPACK's Householder step leaves them, with canonical signs: an infinity at index 0 only gives the
    reflector tau = 0, so the long factor is the unit vector e_0 (and u -1, vt 1 before the signs);
    an infinity further on makes the long factor NaN and the short one 1."""
    o = ctx.op
    if rows > 1:
        further = any_per_matrix(ctx, o("IsInf", [_slice(ctx, oriented, 1, rows, rank - 2)]), rank)
        first_only = o("And", [has_inf, o("Not", [further])])
    else:
        first_only = has_inf
    unit = np.zeros((rows, 1), dt.numpy_dtype(dtype))
    unit[0] = 1
    inf, first = per_matrix(ctx, has_inf), per_matrix(ctx, first_only)
    if transposed:  # 1 x n: u is [[1]], vt the long factor (-e_0 after u's sign)
        long = o("Where", [first, ctx.const(-unit.T), ctx.scalar(np.nan, dtype)])
        return o("Where", [inf, ctx.scalar(1, dtype), u]), o("Where", [inf, long, vt])
    long = o("Where", [first, ctx.const(unit), ctx.scalar(np.nan, dtype)])
    short = o("Where", [first, ctx.scalar(-1, dtype), ctx.scalar(1, dtype)])
    return o("Where", [inf, long, u]), o("Where", [inf, short, vt])


def lapack_descending(ctx: LoweringContext, values: str, rank: int, n: int, dtype: str) -> tuple[str, str]:
    """``values`` ([..., n], no NaN) sorted descending as gesdd's sorts leave singular values that start
    in column order (a diagonal matrix), and the int64 indices taken: diag(2, 3, 2, 3) gives the columns
    3, 1, 0, 2, diag(4, 1, 4, 1, 4) 2, 0, 4, 3, 1."""
    taken = ctx.op("Expand", [ctx.const(np.arange(n, dtype=np.int64)), ctx.op("Shape", [values])])
    if n == 1:
        return values, taken
    for kind in ((_DBDSQR, _DLASDQ, _DBDSDC) if n <= SMLSIZ else (_DBDSDC,)):
        values, taken = _selection_pass(ctx, values, taken, rank, n, dtype, kind)
    return values, taken


def _gesdd(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """The matrix as given, singular values descending, U, Vt (canonical signs) and info (module
    docstring)."""
    _checked(op)
    at = op.operands[0].type
    dtype, rank, m, n = at.dtype, at.rank, at.shape[-2], at.shape[-1]
    _, mode = _precision_and_mode(op)
    a = _data_inputs(op, inputs)[0]
    k = min(m, n)
    u_shape, vt_shape = list(op.results[2].type.shape[-2:]), list(op.results[3].type.shape[-2:])
    if k == 0:
        zeros = [_zeros_like_batch(ctx, a, rank, tail, dtype) for tail in ([0], u_shape, vt_shape)]
        return [a, *zeros, _zeros_like_batch(ctx, a, rank, [], "int32")]
    o = ctx.op
    with_vectors = mode != "N"
    transposed = m < n
    work = _swap_last(ctx, a, rank) if transposed else a  # [..., p, k], p >= k
    rows = max(m, n)
    has_nan = any_per_matrix(ctx, o("IsNaN", [work]), rank)
    has_inf = any_per_matrix(ctx, o("IsInf", [work]), rank)
    scale = finite_magnitude(ctx, work, rank, dtype)
    not_finite = o("Or", [o("IsNaN", [work]), o("IsInf", [work])])
    oriented = work
    work = o("Where", [not_finite, ctx.scalar(0, dtype), o("Div", [work, per_matrix(ctx, scale)])])
    compute = COMPUTE_DTYPES.get(dtype, dtype)
    eps = float(np.finfo(dt.numpy_dtype(dtype)).eps)
    w, v = _orthogonal_columns(ctx, ctx.cast_if(work, dtype, compute), rank, rows, k, compute, eps,
                               with_vectors, a)

    norms = o("ReduceL2", [w, ctx.i64([rank - 2])], keepdims=0)  # [..., k]
    norms, descending = lapack_descending(ctx, norms, rank - 1, k, compute)
    values = o("Mul", [ctx.cast_if(norms, compute, dtype), o("Unsqueeze", [scale, ctx.i64([rank - 2])])])
    # LAPACK scales a matrix holding an infinity by max|a| = inf, that is by 0: NaN singular values.
    values = o("Where", [o("Unsqueeze", [has_inf, ctx.i64([rank - 2])]), ctx.scalar(np.nan, dtype), values])
    info = ctx.cast(has_nan if k == 1 else o("Or", [has_nan, has_inf]), "int32")
    if not with_vectors:
        return [a, values, _zeros_like_batch(ctx, a, rank, u_shape, dtype),
                _zeros_like_batch(ctx, a, rank, vt_shape, dtype), info]
    assert v is not None
    index = o("Unsqueeze", [descending, ctx.i64([rank - 2])])  # [..., 1, k]
    w = o("GatherElements", [w, o("Expand", [index, o("Shape", [w])])], axis=rank - 1)
    v = o("GatherElements", [v, o("Expand", [index, o("Shape", [v])])], axis=rank - 1)
    column_norms = o("Unsqueeze", [norms, ctx.i64([rank - 2])])
    positive = o("Greater", [column_norms, ctx.scalar(0, compute)])
    unit = ctx.const(np.eye(rows, k, dtype=dt.numpy_dtype(compute)))
    unit = o("GatherElements", [o("Expand", [unit, o("Shape", [w])]), o("Expand", [index, o("Shape", [w])])],
             axis=rank - 1)
    safe_norms = o("Where", [positive, column_norms, ctx.scalar(1, compute)])
    w = o("Where", [positive, o("Div", [w, safe_norms]), unit])
    w, v = ctx.cast_if(w, compute, dtype), ctx.cast_if(v, compute, dtype)
    u, vt = (v, _swap_last(ctx, w, rank)) if transposed else (w, _swap_last(ctx, v, rank))
    sign = canonical_sign(ctx, u, rank, dtype)  # [..., 1, k]
    u, vt = o("Mul", [u, sign]), o("Mul", [vt, _swap_last(ctx, sign, rank)])
    if k == 1:
        u, vt = _vectors_through_infinity(ctx, oriented, u, vt, has_inf, rank, rows, transposed, dtype)
    return [a, values, u, vt, info]


def _register() -> None:
    for precision, dtype in _PRECISIONS.items():
        custom_call_target(f"lapack_{precision}gesdd_ffi", check=check_svd_call,
                           onnx_ops=("Loop", "ReduceSumSquare", "ArgMin"),
                           conditions=(f"{dtype}; static matrix sizes up to {MAX_LAPACK_SIZE}; mode S or N, "
                                       "A for square matrices"))(_gesdd)


_register()
