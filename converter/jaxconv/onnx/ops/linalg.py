"""dot_general: MatMul where it fits, Einsum otherwise."""

from __future__ import annotations

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops._common import compute_in
from jaxconv.onnx.registry import lowering
from jaxconv.stablehlo import ir as hir

_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_MATMUL_NATIVE = frozenset({"float16", "float32", "float64", "int32", "int64", "uint32", "uint64"})


@lowering("stablehlo.dot_general", onnx_ops=("MatMul", "Einsum"))
def lower_dot_general(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """MatMul for [batch..., m, k] x [batch..., k, n] layouts, Transpose + MatMul otherwise."""
    dn = op.attrs["dot_dimension_numbers"]
    lhs_t, rhs_t = op.operands[0].type, op.operands[1].type
    out_dtype = op.results[0].type.dtype
    lb, rb = list(dn["lhs_batching_dimensions"]), list(dn["rhs_batching_dimensions"])
    lc, rc = list(dn["lhs_contracting_dimensions"]), list(dn["rhs_contracting_dimensions"])
    lf = [d for d in range(lhs_t.rank) if d not in lb and d not in lc]
    rf = [d for d in range(rhs_t.rank) if d not in rb and d not in rc]
    # Cast both operands to a dtype MatMul computes (also handles preferred_element_type).
    work = dt.compute_dtype(out_dtype, _MATMUL_NATIVE)
    lhs0 = lhs = ctx.cast_if(inputs[0], lhs_t.dtype, work)
    rhs0 = rhs = ctx.cast_if(inputs[1], rhs_t.dtype, work)
    # Einsum expresses every layout; MatMul is used when the layout is already [B, M, K] x [B, K, N].
    letters = iter(_LETTERS)
    lhs_sub = [""] * lhs_t.rank
    rhs_sub = [""] * rhs_t.rank
    for a, b in zip(lb, rb):
        lhs_sub[a] = rhs_sub[b] = next(letters)
    for a, b in zip(lc, rc):
        lhs_sub[a] = rhs_sub[b] = next(letters)
    for a in lf:
        lhs_sub[a] = next(letters)
    for b in rf:
        rhs_sub[b] = next(letters)
    out_sub = [lhs_sub[a] for a in lb] + [lhs_sub[a] for a in lf] + [rhs_sub[b] for b in rf]
    if _is_matmul_layout(lhs_t.rank, rhs_t.rank, lb, rb, lc, rc):
        out = ctx.op("MatMul", [lhs, rhs])
    else:
        lhs = _to_layout(ctx, lhs, lb + lf + lc)
        rhs = _to_layout(ctx, rhs, rb + rc + rf)
        lhs_shape = _flatten_shape(ctx, lhs, lhs_t, lb, lf, lc)
        rhs_shape = _flatten_shape(ctx, rhs, rhs_t, rb, rc, rf)
        if lhs_shape is None or rhs_shape is None:
            eq = f"{''.join(lhs_sub)},{''.join(rhs_sub)}->{''.join(out_sub)}"
            out = ctx.op("Einsum", [lhs0, rhs0], equation=eq)
            return ctx.cast_if(out, work, out_dtype)
        lhs = ctx.op("Reshape", [lhs, lhs_shape])
        rhs = ctx.op("Reshape", [rhs, rhs_shape])
        out = ctx.op("MatMul", [lhs, rhs])
        result = op.results[0].type
        if result.is_static:
            out = ctx.op("Reshape", [out, ctx.i64(result.shape)])
        else:
            out = ctx.op("Reshape", [out, _result_shape(ctx, inputs[0], inputs[1], lhs_t, rhs_t, lb, lf, rf)])
    return ctx.cast_if(out, work, out_dtype)


def _is_matmul_layout(lr: int, rr: int, lb, rb, lc, rc) -> bool:
    nb = len(lb)
    if lb != list(range(nb)) or rb != list(range(nb)) or len(lc) != 1:
        return False
    return lr == nb + 2 and rr == nb + 2 and lc == [nb + 1] and rc == [nb]


def _to_layout(ctx: LoweringContext, x: str, perm: list[int]) -> str:
    if perm == sorted(perm):
        return x
    return ctx.op("Transpose", [x], perm=perm)


def _prod(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def _flatten_shape(ctx: LoweringContext, x: str, t: hir.TensorType, batch, first, second) -> str | None:
    """Shape [batch..., prod(first), prod(second)] when first/second are static; else None."""
    dims = t.shape
    if any(dims[d] is None for d in list(first) + list(second)):
        return None
    if all(dims[d] is not None for d in batch):
        return ctx.i64([dims[d] for d in batch] + [_prod(dims[d] for d in first), _prod(dims[d] for d in second)])
    batch_shape = ctx.op("Slice", [ctx.op("Shape", [x]), ctx.i64([0]), ctx.i64([len(batch)])])
    return ctx.op("Concat", [batch_shape, ctx.i64([_prod(dims[d] for d in first), _prod(dims[d] for d in second)])], axis=0)


def _result_shape(ctx: LoweringContext, lhs: str, rhs: str, lt: hir.TensorType, rt: hir.TensorType, lb, lf, rf) -> str:
    pieces = []
    for d in list(lb) + list(lf):
        pieces.append(ctx.i64([lt.shape[d]]) if lt.shape[d] is not None else ctx.op("Shape", [lhs], start=d, end=d + 1))
    for d in rf:
        pieces.append(ctx.i64([rt.shape[d]]) if rt.shape[d] is not None else ctx.op("Shape", [rhs], start=d, end=d + 1))
    return ctx.op("Concat", pieces, axis=0)
