"""LAPACK FFI symmetric eigendecomposition of JAX CPU exports: syevd, by Jacobi rotations.

``jnp.linalg.eigh``/``eigvalsh`` and ``jax.scipy.linalg.eigh`` become ``lapack_{s,d}syevd_ffi``
(``mode`` V: vectors too, N: values only; ``uplo``: the triangle read).

Two-sided Jacobi on the symmetric matrix built from the ``uplo`` triangle, in an ONNX ``Loop``: the
round-robin (circle) ordering pairs every index with every other once in ``n - 1`` rounds (``n`` made
even by a dummy index), each round rotating ``n / 2`` disjoint pairs at once as slices of the matrix.
Between rounds the rows and columns move one place around the circle (one constant ``Gather``), so
the pairs are always the first half against the second; a carried label vector undoes the moves at
the end. A pair is rotated while its coupling exceeds epsilon times the geometric mean of its diagonal
entries (relative accuracy, also for graded matrices); the loop ends after a sweep without a rotation
or ``MAX_SWEEPS`` sweeps (6 to 8 sweeps for random 8x8 to 64x64 matrices).

Eigenvalues ascending by LAPACK's selection sort (equal values of a diagonal matrix keep LAPACK's
order; a NaN stays where it is). Eigenvectors are unique only up to sign: each column is flipped so
that its entry of largest magnitude (the first on ties) is positive.

Non-finite input, as measured on jax.jit (float32 and float64): where LAPACK fails (info != 0) JAX
fills the matrix's outputs with NaN; here info is 1 for any NaN or infinity in a matrix whose
off-diagonal part is not zero. A diagonal matrix is its own decomposition (NaN eigenvalues when it
holds an infinity but no NaN: LAPACK scales by max|a| = inf, that is by 0); a 1x1 matrix is its own
eigenvalue with vector 1. From 26x26 on (``BLOCKED_FROM``, ``uplo`` L) LAPACK's blocked reduction keeps
a[0, 0] as the first eigenvalue and e_0 as the first row of the vectors through a NaN. Not matched:
the finite parts LAPACK leaves with ``uplo`` U from 26x26 on, or with an infinity but no NaN.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from onnx import helper

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
    _zeros_like_batch,
    check_operands,
)
from jaxconv.onnx.registry import custom_call_target
from jaxconv.stablehlo import ir as hir

_PRECISIONS = {"s": "float32", "d": "float64"}
# From this size on, LAPACK reduces a matrix to tridiagonal form in blocks (``uplo`` L), and a NaN in
# it leaves a[0, 0] as the first eigenvalue, e_0 as the first row of the vectors, NaN elsewhere.
BLOCKED_FROM = 26
# Rounds unrolled in one Loop trip.
ROUNDS_PER_TRIP = 8
# Sweeps (n - 1 rounds each) before a Jacobi loop stops unconverged; it needs about 6 to 12.
MAX_SWEEPS = 40


def _routine(op: hir.Op) -> tuple[str, str]:
    """(dtype, routine) of a ``lapack_{s,d}<routine>_ffi`` call."""
    target = str(op.attrs.get("call_target_name", ""))
    return _PRECISIONS[target[7]], target[8:-4]


def check_eigen_call(op: hir.Op) -> str | None:
    """Why this syevd call cannot be lowered (operands, size, options), else None."""
    dtype, routine = _routine(op)
    return check_operands(op, routine, dtype, _OPTIONS[routine], f"LAPACK {routine}", _describe(routine))


def _checked(op: hir.Op) -> None:
    reason = check_eigen_call(op)
    if reason is not None:
        raise UnsupportedError(f"stablehlo.custom_call @{op.attrs.get('call_target_name')}: {reason}")


# ---- shared pieces -------------------------------------------------------------------------------------

def round_robin_source(size: int) -> np.ndarray:
    """The gather indices moving every position but the first one place around the circle
    ``0, 1, ..., size/2 - 1, size - 1, ..., size/2`` (``size`` even): after ``size - 1`` moves, the pairs
    (i, size/2 + i) have met every pair of indices once."""
    half = size // 2
    circle = list(range(half)) + list(range(size - 1, half - 1, -1))
    source = np.arange(size, dtype=np.int64)
    for j in range(1, size):
        source[circle[j]] = circle[j - 1] if j > 1 else circle[-1]
    return source


def rotation(ctx: LoweringContext, diff: str, twice_off: str, rotate: str, dtype: str) -> tuple[str, str, str]:
    """(c, s, t) of the Jacobi rotation ``t = sign(theta) / (|theta| + sqrt(theta^2 + 1))``, ``theta = diff /
    twice_off``, ``c = 1 / sqrt(t^2 + 1)``, ``s = t c``; the identity (c 1, s 0) where ``rotate`` is false."""
    o = ctx.op
    one = ctx.scalar(1, dtype)
    safe = o("Where", [rotate, twice_off, one])
    theta = o("Div", [diff, safe])
    magnitude = o("Add", [o("Abs", [theta]), o("Sqrt", [o("Add", [o("Mul", [theta, theta]), one])])])
    sign = o("Where", [o("Less", [theta, ctx.scalar(0, dtype)]), ctx.scalar(-1, dtype), one])
    t = o("Where", [rotate, o("Div", [sign, magnitude]), ctx.scalar(0, dtype)])
    c = o("Reciprocal", [o("Sqrt", [o("Add", [o("Mul", [t, t]), one])])])
    return c, o("Mul", [t, c]), t


def rotate_halves(ctx: LoweringContext, x: str, c: str, s: str, axis: int, half: int, size: int) -> str:
    """``x`` with its first and second halves along ``axis`` (pairs i, half + i) rotated:
    ``first' = c first - s second``, ``second' = s first + c second`` (c, s broadcast along ``axis``)."""
    o = ctx.op
    first, second = _slice(ctx, x, 0, half, axis), _slice(ctx, x, half, size, axis)
    new_first = o("Sub", [o("Mul", [first, c]), o("Mul", [second, s])])
    new_second = o("Add", [o("Mul", [first, s]), o("Mul", [second, c])])
    return o("Concat", [new_first, new_second], axis=axis)


def _any(ctx: LoweringContext, flags: str) -> str:
    """A bool scalar: whether any of ``flags`` (bool, any shape) holds."""
    count = ctx.op("ReduceMax", [ctx.cast(ctx.op("Reshape", [flags, ctx.i64([-1])]), "int32")], keepdims=0)
    return ctx.op("Greater", [count, ctx.scalar(0, "int32")])


def jacobi_loop(ctx: LoweringContext, carried: list[tuple[str, hir.TensorType]], quiet: str, size: int,
                 body: Callable[[list[str]], tuple[list[str], str]]) -> list[str]:
    """A ``Loop`` of rounds: ``body`` maps the carried values to (new values, whether each matrix had a
    pair to rotate, [...] bool); it runs until every matrix went a whole sweep (``size - 1`` rounds)
    without one, or for ``MAX_SWEEPS`` sweeps. ``quiet`` ([...] int64, zeros) counts those rounds.
    A trip runs ``ROUNDS_PER_TRIP`` rounds (fewer for small matrices): ONNX Runtime spends about 0.1 ms a trip."""
    bool_scalar = hir.TensorType("bool", ())
    per_trip = min(max(size - 1, 1), ROUNDS_PER_TRIP)
    sweep = ctx.const(np.array(max(size - 1, 1), np.int64))
    with ctx.subgraph() as scope:
        iteration, cond_in = ctx.fresh("round"), ctx.fresh("cond_in")
        names = [ctx.fresh("carry") for _ in carried]
        quiet_in = ctx.fresh("quiet")
        new_values, new_quiet = names, quiet_in
        for _ in range(per_trip):
            new_values, rotated = body(new_values)
            new_quiet = ctx.op("Where", [rotated, ctx.const(np.array(0, np.int64)),
                                         ctx.op("Add", [new_quiet, ctx.const(np.array(1, np.int64))])])
        trips = -(-MAX_SWEEPS * max(size - 1, 1) // per_trip)
        more = ctx.op("Less", [ctx.op("Add", [iteration, ctx.const(np.array(1, np.int64))]),
                               ctx.const(np.array(trips, np.int64))])
        cond_out = ctx.op("And", [_any(ctx, ctx.op("Less", [new_quiet, sweep])), more])
        outs = [ctx.op("Identity", [v]) if v in names else v for v in [cond_out, *new_values, new_quiet]]
        quiet_type = hir.TensorType("int64", (None,) * len(carried[0][1].shape[:-2]))
        types = [t for _, t in carried] + [quiet_type]
        graph_inputs = [ctx.value_info(iteration, hir.TensorType("int64", ())), ctx.value_info(cond_in, bool_scalar)]
        graph_inputs += [ctx.value_info(n, t) for n, t in zip(names + [quiet_in], types)]
        graph_outputs = [ctx.value_info(outs[0], bool_scalar)]
        graph_outputs += [ctx.value_info(n, t) for n, t in zip(outs[1:], types)]
        graph = ctx.make_graph(scope, ctx.fresh("jacobi_round"), graph_inputs, graph_outputs)
    results = ctx.op("Loop", [None, ctx.const(np.array(True)), *[name for name, _ in carried], quiet],
                     outputs=len(carried) + 1, body=graph)
    return list(results[:-1])


def _worth_rotating(ctx: LoweringContext, off: str, first: str, second: str, dtype: str) -> str:
    """Whether a pair's coupling ``off`` exceeds epsilon times the geometric mean of ``first`` and
    ``second`` (the diagonal entries, or the columns' squared norms): the test of relative accuracy."""
    o = ctx.op
    eps = float(np.finfo(dt.numpy_dtype(dtype)).eps)
    scale = o("Mul", [o("Sqrt", [o("Abs", [first])]), o("Sqrt", [o("Abs", [second])])])
    return o("Greater", [o("Abs", [off]), o("Mul", [scale, ctx.scalar(eps, dtype)])])


def dynamic(t: hir.TensorType) -> hir.TensorType:
    return hir.TensorType(t.dtype, tuple(None for _ in t.shape))


def position_of(ctx: LoweringContext, labels: str, size: int) -> str:
    """Where each label sits: the inverse of the permutation ``labels`` ([size] int64)."""
    positions = ctx.const(np.arange(size, dtype=np.int64))
    return ctx.op("ScatterElements", [positions, labels, positions], axis=0)


def canonical_sign(ctx: LoweringContext, vectors: str, rank: int, dtype: str) -> str:
    """-1 or 1 for each column of ``vectors`` ([..., r, c] -> [..., 1, c]): -1 where the column's entry
    of largest magnitude (the first on ties) is negative."""
    at = ctx.op("ArgMax", [ctx.op("Abs", [vectors])], axis=rank - 2, keepdims=1)
    lead = ctx.op("GatherElements", [vectors, at], axis=rank - 2)
    return ctx.op("Where", [ctx.op("Less", [lead, ctx.scalar(0, dtype)]), ctx.scalar(-1, dtype),
                            ctx.scalar(1, dtype)])


def _batch_reduce(ctx: LoweringContext, op_type: str, x: str, rank: int) -> str:
    """``op_type`` over the last two axes of ``x`` ([..., r, c] -> [...])."""
    return ctx.op(op_type, [x, ctx.i64([rank - 2, rank - 1])], keepdims=0)


def finite_magnitude(ctx: LoweringContext, x: str, rank: int, dtype: str) -> str:
    """The largest |x| of each matrix ([...]), 1 where it is 0 or not finite (a safe scale)."""
    largest = _batch_reduce(ctx, "ReduceMax", ctx.op("Abs", [x]), rank)
    usable = ctx.op("And", [ctx.op("Greater", [largest, ctx.scalar(0, dtype)]),
                            ctx.op("Less", [largest, ctx.scalar(np.inf, dtype)])])
    return ctx.op("Where", [usable, largest, ctx.scalar(1, dtype)])


def per_matrix(ctx: LoweringContext, x: str) -> str:
    """[...] -> [..., 1, 1]."""
    return ctx.op("Unsqueeze", [x, ctx.i64([-2, -1])])


# ---- syevd: symmetric eigendecomposition ---------------------------------------------------------------

def _symmetric(ctx: LoweringContext, a: str, rank: int, n: int, upper: bool) -> str:
    """The symmetric matrix LAPACK sees: the ``uplo`` triangle and its mirror."""
    mask = np.triu(np.ones((n, n), bool)) if upper else np.tril(np.ones((n, n), bool))
    mirrored = ctx.op("Transpose", [a], perm=list(range(rank - 2)) + [rank - 1, rank - 2])
    return ctx.op("Where", [ctx.const(mask), a, mirrored])


def _eigen_round(ctx: LoweringContext, names: list[str], rank: int, size: int, dtype: str,
                 with_vectors: bool) -> tuple[list[str], str]:
    """One round: rotate the pairs (i, size/2 + i) worth rotating, then move one place round the circle.
    A matrix with no such pair is left exactly as it is (no 0 * inf from an identity rotation)."""
    o = ctx.op
    half = size // 2
    a, vectors, labels = names[0], names[1] if with_vectors else None, names[-1]
    flat = o("Reshape", [a, ctx.i64([0] * (rank - 2) + [size * size])])
    app = o("Gather", [flat, ctx.i64([i * size + i for i in range(half)])], axis=rank - 2)
    aqq = o("Gather", [flat, ctx.i64([(half + i) * (size + 1) for i in range(half)])], axis=rank - 2)
    apq = o("Gather", [flat, ctx.i64([i * size + half + i for i in range(half)])], axis=rank - 2)
    rotate = _worth_rotating(ctx, apq, app, aqq, dtype)
    twice = o("Mul", [apq, ctx.scalar(2, dtype)])
    c, s, t = rotation(ctx, o("Sub", [aqq, app]), twice, rotate, dtype)
    column_c, column_s = o("Unsqueeze", [c, ctx.i64([rank - 2])]), o("Unsqueeze", [s, ctx.i64([rank - 2])])
    row_c, row_s = o("Unsqueeze", [c, ctx.i64([rank - 1])]), o("Unsqueeze", [s, ctx.i64([rank - 1])])
    rotated = rotate_halves(ctx, a, row_c, row_s, rank - 2, half, size)
    rotated = rotate_halves(ctx, rotated, column_c, column_s, rank - 1, half, size)
    # The rotated pairs' couplings are 0 by construction, and their diagonal entries are app - t apq and
    # aqq + t apq: set them so (ten times more accurate eigenvalues than the rotated products at 64x64).
    keep = 1 - np.eye(size, dtype=dt.numpy_dtype(dtype))
    keep[np.arange(half), half + np.arange(half)] = 0
    keep[half + np.arange(half), np.arange(half)] = 0
    shift = o("Mul", [t, apq])
    diagonal = o("Concat", [o("Sub", [app, shift]), o("Add", [aqq, shift])], axis=rank - 2)
    diagonal = o("Mul", [o("Unsqueeze", [diagonal, ctx.i64([rank - 1])]),
                         ctx.const(np.eye(size, dtype=dt.numpy_dtype(dtype)))])
    rotated = o("Add", [o("Mul", [rotated, ctx.const(keep)]), diagonal])
    any_pair = o("Greater", [o("ReduceMax", [ctx.cast(rotate, "int32"), ctx.i64([rank - 2])], keepdims=0),
                             ctx.scalar(0, "int32")])
    still = o("Unsqueeze", [any_pair, ctx.i64([rank - 2, rank - 1])])
    source = ctx.const(round_robin_source(size))
    a = o("Where", [still, rotated, a])
    out = [o("Gather", [o("Gather", [a, source], axis=rank - 2), source], axis=rank - 1)]
    if vectors is not None:
        turned = rotate_halves(ctx, vectors, column_c, column_s, rank - 1, half, size)
        out.append(o("Gather", [o("Where", [still, turned, vectors]), source], axis=rank - 1))
    out.append(o("Gather", [labels, source], axis=0))
    return out, any_pair


def _syevd(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """Eigenvectors (columns, as LAPACK overwrites a), ascending eigenvalues and info, by cyclic
    two-sided Jacobi in round-robin order (module docstring)."""
    _checked(op)
    at = op.operands[0].type
    dtype, rank, n = at.dtype, at.rank, at.shape[-1]
    a = _data_inputs(op, inputs)[0]
    if n == 0:
        return [a, _zeros_like_batch(ctx, a, rank, [0], dtype), _zeros_like_batch(ctx, a, rank, [], "int32")]
    with_vectors = _option(op, "syevd", "mode") == "V"
    o = ctx.op
    upper = _option(op, "syevd", "uplo") == "U"
    sym = _symmetric(ctx, a, rank, n, upper)
    size = n + n % 2
    work = sym if size == n else o("Pad", [sym, ctx.i64([0] * (rank - 2) + [0, 0] + [0] * (rank - 2) + [1, 1])])
    matrix_type = dynamic(hir.TensorType(dtype, at.shape[:-2] + (size, size)))
    carried = [(work, matrix_type)]
    if with_vectors:
        eye = ctx.const(np.eye(size, dtype=dt.numpy_dtype(dtype)))
        carried.append((o("Expand", [eye, o("Shape", [work])]), matrix_type))
    carried.append((ctx.const(np.arange(size, dtype=np.int64)), hir.TensorType("int64", (None,))))
    final = jacobi_loop(ctx, carried, _zeros_like_batch(ctx, a, rank, [], "int64"), size,
                         lambda names: _eigen_round(ctx, names, rank, size, dtype, with_vectors))
    order = _slice(ctx, position_of(ctx, final[-1], size), 0, n, 0)  # labels 0..n-1: the dummy goes
    flat = o("Reshape", [final[0], ctx.i64([0] * (rank - 2) + [size * size])])
    diagonal = o("Gather", [flat, ctx.i64([i * (size + 1) for i in range(size)])], axis=rank - 2)
    values = o("Gather", [diagonal, order], axis=rank - 2)

    has_nan = any_per_matrix(ctx, o("IsNaN", [sym]), rank)
    has_inf = any_per_matrix(ctx, o("IsInf", [sym]), rank)
    off_triangle = o("And", [o("Not", [o("Equal", [sym, ctx.scalar(0, dtype)])]),
                             ctx.const(~np.eye(n, dtype=bool))])
    diagonal_only = o("Not", [any_per_matrix(ctx, off_triangle, rank)])
    if n > 1:  # LAPACK scales by max|a| = inf, that is by 0: the eigenvalues become NaN
        scaled_by_zero = o("And", [has_inf, o("Not", [has_nan])])
        nan = ctx.scalar(np.nan, dtype)
        values = o("Where", [o("Unsqueeze", [scaled_by_zero, ctx.i64([rank - 2])]), nan, values])
    values, ascending = selection_sort(ctx, values, rank - 1, n, dtype)
    failed = o("And", [o("Or", [has_nan, has_inf]), o("Not", [diagonal_only])])
    partial = None
    if n >= BLOCKED_FROM and not upper:  # LAPACK's blocked reduction keeps a[0, 0] and e_0 through NaN
        partial = o("And", [has_nan, o("Not", [diagonal_only])])
        failed = o("And", [failed, o("Not", [partial])])
        first = o("Reshape", [_slice(ctx, _slice(ctx, sym, 0, 1, rank - 2), 0, 1, rank - 1),
                              ctx.i64([0] * (rank - 2) + [1])])
        kept = o("Concat", [first, _nan_like(ctx, values, rank - 2, n - 1, dtype)], axis=rank - 2)
        values = o("Where", [o("Unsqueeze", [partial, ctx.i64([rank - 2])]), kept, values])
    info = ctx.cast(failed, "int32")
    if not with_vectors:
        return [a, values, info]
    vectors = o("Gather", [_slice(ctx, final[1], 0, n, rank - 2), order], axis=rank - 1)
    index = o("Expand", [o("Unsqueeze", [ascending, ctx.i64([rank - 2])]), o("Shape", [vectors])])
    vectors = o("GatherElements", [vectors, index], axis=rank - 1)
    vectors = o("Mul", [vectors, canonical_sign(ctx, vectors, rank, dtype)])
    if partial is not None:
        kept_vectors = np.full((n, n), np.nan, dtype=dt.numpy_dtype(dtype))
        kept_vectors[0] = np.eye(n)[0]
        vectors = o("Where", [per_matrix(ctx, partial), ctx.const(kept_vectors), vectors])
    return [vectors, values, info]


def _nan_like(ctx: LoweringContext, x: str, axis: int, count: int, dtype: str) -> str:
    """NaNs shaped like ``x`` with ``count`` entries along ``axis`` (the last)."""
    shape = ctx.op("Concat", [ctx.op("Shape", [x], end=axis), ctx.i64([count])], axis=0)
    return ctx.op("ConstantOfShape", [shape], value=helper.make_tensor("nan", dt.onnx_type(dtype), [1], [np.nan]))


# (step, keys) -> (the position trip ``step`` fills, the position it takes from), inside the Loop body.
Pick = Callable[[str, str], tuple[str, str]]


def swap_loop(ctx: LoweringContext, values: str, taken: str, rank: int, n: int, dtype: str, pick: Pick,
              name: str) -> tuple[str, str]:
    """``values`` ([..., n]) and ``taken`` (int64 indices following them) after n - 1 ``Loop`` trips, trip
    ``step`` swapping the two positions ``pick`` names (the same position: no swap): LAPACK's selection
    sorts, each of its steps one trip."""
    o = ctx.op
    positions = ctx.const(np.arange(n, dtype=np.int64))
    with ctx.subgraph() as scope:
        step, cond_in, keys, labels = (ctx.fresh(h) for h in ("step", "cond_in", "keys", "labels"))
        target, chosen = pick(step, keys)
        swap = o("Where", [o("Equal", [positions, target]), chosen,
                           o("Where", [o("Equal", [positions, chosen]), target, positions])])
        outs = [o("Identity", [cond_in]), o("GatherElements", [keys, swap], axis=rank - 1),
                o("GatherElements", [labels, swap], axis=rank - 1)]
        key_type = hir.TensorType(dtype, (None,) * rank)
        index_type = hir.TensorType("int64", (None,) * rank)
        bool_scalar = hir.TensorType("bool", ())
        graph = ctx.make_graph(
            scope, ctx.fresh(name),
            [ctx.value_info(step, hir.TensorType("int64", ())), ctx.value_info(cond_in, bool_scalar),
             ctx.value_info(keys, key_type), ctx.value_info(labels, index_type)],
            [ctx.value_info(outs[0], bool_scalar), ctx.value_info(outs[1], key_type),
             ctx.value_info(outs[2], index_type)])
    trips = ctx.const(np.array(n - 1, np.int64))
    result = o("Loop", [trips, ctx.const(np.array(True)), values, taken], outputs=2, body=graph)
    return result[0], result[1]


def selection_sort(ctx: LoweringContext, values: str, rank: int, n: int, dtype: str) -> tuple[str, str]:
    """``values`` ([..., n]) sorted ascending as LAPACK's selection sort does, and the int64 indices it took.

    Step i swaps position i with the first smallest value after it when that is smaller (``<``): so a
    NaN at position i stays, a NaN after it is never chosen, and equal values may change order (one
    ``Loop`` trip a step)."""
    o = ctx.op
    batch_index = o("Expand", [ctx.const(np.arange(n, dtype=np.int64)), o("Shape", [values])])
    if n == 1:
        return values, batch_index

    def first_smallest_after(step: str, keys: str) -> tuple[str, str]:
        tail = o("Slice", [keys, o("Unsqueeze", [step, ctx.i64([0])]), ctx.i64([n]), ctx.i64([rank - 1])])
        candidates = o("Where", [o("IsNaN", [tail]), ctx.scalar(np.inf, dtype), tail])
        smallest = o("Add", [o("ArgMin", [candidates], axis=rank - 1, keepdims=1), step])
        pivot = o("GatherElements", [keys, o("Expand", [step, o("Shape", [smallest])])], axis=rank - 1)
        return step, o("Where", [o("IsNaN", [pivot]), step, smallest])

    return swap_loop(ctx, values, batch_index, rank, n, dtype, first_smallest_after, "selection_step")


def any_per_matrix(ctx: LoweringContext, flags: str, rank: int) -> str:
    """[..., r, c] bool -> [...] bool: whether any flag of each matrix holds."""
    return ctx.op("Greater", [_batch_reduce(ctx, "ReduceMax", ctx.cast(flags, "int32"), rank),
                              ctx.scalar(0, "int32")])


# ---- registration --------------------------------------------------------------------------------------

_ROUTINES = {"syevd": _syevd}
_CONDITIONS = {
    "syevd": f"static matrix sizes up to {MAX_LAPACK_SIZE}; mode V or N; uplo L or U",
}


def _register() -> None:
    for precision, dtype in _PRECISIONS.items():
        for routine, handler in _ROUTINES.items():
            custom_call_target(f"lapack_{precision}{routine}_ffi", check=check_eigen_call,
                               onnx_ops=("Loop", "Gather", "TopK"),
                               conditions=f"{dtype}; {_CONDITIONS[routine]}")(handler)


_register()
