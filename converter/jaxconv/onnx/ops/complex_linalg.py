"""Complex triangular solves: the real lowering's unrolled substitution on (re, im) halves."""

from __future__ import annotations

from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops._complex import component, is_complex, pack, parts
from jaxconv.onnx.ops.complex_arith import divide
from jaxconv.onnx.ops.linalg import MAX_SOLVE_SIZE
from jaxconv.onnx.registry import complex_lowering
from jaxconv.stablehlo import ir as hir

Halves = tuple[str, str]


def _check(op: hir.Op) -> str | None:
    a, b = op.operands[0].type, op.operands[1].type
    if not (is_complex(a) and is_complex(b)):
        return "triangular_solve of a complex and a real operand is not lowered"
    m = a.shape[-1]
    if m is None or m > MAX_SOLVE_SIZE:
        return f"complex triangular_solve needs a static matrix size up to {MAX_SOLVE_SIZE}"
    return None


def _each(fn, x: Halves) -> Halves:  # noqa: ANN001
    return fn(x[0]), fn(x[1])


@complex_lowering("stablehlo.triangular_solve", check=_check, onnx_ops=("MatMul", "Div", "Concat"))
def lower_triangular_solve(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Row-by-row substitution (unrolled) with complex products and XLA's complex division; ADJOINT
    conjugates the transposed matrix; only a's triangle is read."""
    at = op.operands[0].type
    assert at.shape[-1] is not None
    y = solve(ctx, parts(ctx, inputs[0]), parts(ctx, inputs[1]), at.rank, at.shape[-1], component(at.dtype),
              left_side=bool(op.attrs.get("left_side")), lower=bool(op.attrs.get("lower")),
              mode=str(op.attrs.get("transpose_a", "NO_TRANSPOSE")),
              unit_diagonal=bool(op.attrs.get("unit_diagonal")))
    return pack(ctx, y[0], y[1])


def solve(ctx: LoweringContext, t: Halves, c: Halves, rank: int, m: int, work: str, *, left_side: bool,
          lower: bool, mode: str, unit_diagonal: bool) -> Halves:
    """op(a) x = c (``left_side``) or x op(a) = c, for the halves ``t`` of a ([..., m, m]) and ``c``;
    op is NO_TRANSPOSE, TRANSPOSE or ADJOINT; only a's ``lower`` (else upper) triangle is read."""
    o = ctx.op

    def swap(x: str) -> str:
        return o("Transpose", [x], perm=list(range(rank - 2)) + [rank - 1, rank - 2])

    def rows(x: str, start: int, stop: int, axis: int) -> str:
        return o("Slice", [x, ctx.i64([start]), ctx.i64([stop]), ctx.i64([axis])])

    low = lower
    if mode != "NO_TRANSPOSE":
        t, low = _each(swap, t), not low
        if mode == "ADJOINT":
            t = (t[0], o("Neg", [t[1]]))
    if not left_side:
        t, low, c = _each(swap, t), not low, _each(swap, c)
    solved: dict[int, Halves] = {}
    for i in (range(m) if low else range(m - 1, -1, -1)):
        row = _each(lambda x, i=i: rows(x, i, i + 1, rank - 2), c)
        done = sorted(solved)
        if done:
            ys = tuple(o("Concat", [solved[j][k] for j in done], axis=rank - 2) if len(done) > 1
                       else solved[done[0]][k] for k in (0, 1))
            lo, hi = (0, i) if low else (i + 1, m)
            cr, ci = _each(lambda x, i=i: rows(rows(x, i, i + 1, rank - 2), lo, hi, rank - 1), t)
            pr = o("Sub", [o("MatMul", [cr, ys[0]]), o("MatMul", [ci, ys[1]])])
            pi = o("Add", [o("MatMul", [cr, ys[1]]), o("MatMul", [ci, ys[0]])])
            row = (o("Sub", [row[0], pr]), o("Sub", [row[1], pi]))
        if not unit_diagonal:
            diag = _each(lambda x, i=i: rows(rows(x, i, i + 1, rank - 2), i, i + 1, rank - 1), t)
            row = divide(ctx, row, diag, work)
        solved[i] = row
    y = tuple(o("Concat", [solved[j][k] for j in range(m)], axis=rank - 2) if m > 1 else solved[0][k]
              for k in (0, 1))
    return _each(swap, y) if not left_side else (y[0], y[1])


from jaxconv.onnx.ops import complex_lapack  # noqa: E402,F401  (registers the complex LAPACK calls)
