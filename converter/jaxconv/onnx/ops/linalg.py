"""dot_general as Transpose + Reshape + MatMul, for every layout, dtype and dynamic dim."""

from __future__ import annotations

from typing import Sequence

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.registry import lowering
from jaxconv.stablehlo import ir as hir

# ONNX Runtime CPU MatMul kernels.
MATMUL_NATIVE = frozenset({"float16", "float32", "float64", "int32", "int64", "uint32", "uint64"})


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


@lowering("stablehlo.dot_general", check=_check_dot, onnx_ops=("MatMul", "Transpose", "Reshape"))
def lower_dot_general(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Transpose to [batch, free, contract] x [batch, contract, free], flatten, MatMul, reshape back."""
    dn = op.attrs["dot_dimension_numbers"]
    lhs_t, rhs_t = op.operands[0].type, op.operands[1].type
    result = op.results[0].type
    lb, rb = list(dn["lhs_batching_dimensions"]), list(dn["rhs_batching_dimensions"])
    lc, rc = list(dn["lhs_contracting_dimensions"]), list(dn["rhs_contracting_dimensions"])
    lf = [d for d in range(lhs_t.rank) if d not in lb and d not in lc]
    rf = [d for d in range(rhs_t.rank) if d not in rb and d not in rc]
    work = matmul_dtype(result.dtype)
    lhs = ctx.cast_if(inputs[0], lhs_t.dtype, work)
    rhs = ctx.cast_if(inputs[1], rhs_t.dtype, work)
    lhs = transpose(ctx, lhs, lb + lf + lc)
    rhs = transpose(ctx, rhs, rb + rc + rf)
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
    if result.dtype == "bool":
        return ctx.op("Greater", [out, ctx.scalar(0, work)])
    return ctx.cast_if(out, work, result.dtype)


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
