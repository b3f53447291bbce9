"""Constants, iota, broadcasting, reshapes, transposes, slices, concatenation and shape arithmetic."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.registry import lowering
from jaxconv.stablehlo import ir as hir

# Expand/Tile have no bf16 kernel in ONNX Runtime: move bf16 data as f32 (exact both ways).
_MOVE_NATIVE = frozenset({"float16", "float32", "float64", "bool", "int8", "int16", "int32", "int64",
                          "uint8", "uint16", "uint32", "uint64"})


@lowering("stablehlo.constant", onnx_ops=("initializer",))
def lower_constant(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """An initializer holding the value."""
    return ctx.const(op.attrs["value"], op.results[0].type.dtype)


def dims_tensor(ctx: LoweringContext, result: hir.TensorType, sources: Sequence[tuple[str, int] | None]) -> str:
    """An int64 shape tensor for ``result``; dynamic dims read from (tensor, axis) in ``sources``."""
    if result.is_static:
        return ctx.i64(result.shape)
    pieces = []
    for d, src in zip(result.shape, sources):
        if d is not None:
            pieces.append(ctx.i64([d]))
        elif src is None:
            raise ValueError("dynamic result dimension with no source to read it from")
        else:
            name, axis = src
            pieces.append(ctx.op("Shape", [name], start=axis, end=axis + 1))
    return ctx.op("Concat", pieces, axis=0)


def expand(ctx: LoweringContext, x: str, shape: str, dtype: str) -> str:
    """Expand with a cast detour for dtypes without a kernel."""
    if dtype in _MOVE_NATIVE:
        return ctx.op("Expand", [x, shape])
    return ctx.cast(ctx.op("Expand", [ctx.cast(x, "float32"), shape]), dtype)


def broadcast_to(ctx: LoweringContext, x: str, operand: hir.TensorType, result: hir.TensorType,
                 dims: Sequence[int], shape: str | None = None) -> str:
    """Place operand dim i at result dim dims[i], then Expand to the result shape."""
    dims = list(dims)
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    if order != list(range(len(dims))):
        x = ctx.op("Transpose", [x], perm=order)
        dims = [dims[i] for i in order]
        operand = hir.TensorType(operand.dtype, tuple(operand.shape[i] for i in order))
    if len(dims) != result.rank:
        axes = [d for d in range(result.rank) if d not in dims]
        x = ctx.op("Unsqueeze", [x, ctx.i64(axes)])
    needs_expand = any(operand.shape[i] != result.shape[d] or result.shape[d] is None and shape is not None
                       for i, d in enumerate(dims)) or len(dims) != result.rank
    if shape is None:
        sources: list[tuple[str, int] | None] = [None] * result.rank
        for i, d in enumerate(dims):
            sources[d] = (x, d)
        if not needs_expand:
            return x
        shape = dims_tensor(ctx, result, sources)
    if not needs_expand and shape is None:
        return x
    return expand(ctx, x, shape, result.dtype)


@lowering("stablehlo.broadcast_in_dim", onnx_ops=("Unsqueeze", "Expand"))
def lower_broadcast_in_dim(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Transpose/Unsqueeze the operand into place, then Expand."""
    return broadcast_to(ctx, inputs[0], op.operands[0].type, op.results[0].type, op.attrs["broadcast_dimensions"])


@lowering("stablehlo.dynamic_broadcast_in_dim", onnx_ops=("Unsqueeze", "Expand"))
def lower_dynamic_broadcast_in_dim(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Like broadcast_in_dim with the output shape from an operand."""
    shape = ctx.cast(inputs[1], "int64") if op.operands[1].type.dtype != "int64" else inputs[1]
    return broadcast_to(ctx, inputs[0], op.operands[0].type, op.results[0].type, op.attrs["broadcast_dimensions"], shape)


@lowering("stablehlo.reshape", onnx_ops=("Reshape",))
def lower_reshape(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Reshape to the static result shape."""
    result = op.results[0].type
    if result.shape == op.operands[0].type.shape:
        return inputs[0]
    shape = [(-1 if d is None else d) for d in result.shape]
    return ctx.op("Reshape", [inputs[0], ctx.i64(shape)])


@lowering("stablehlo.dynamic_reshape", onnx_ops=("Reshape",))
def lower_dynamic_reshape(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Reshape with a computed shape tensor."""
    shape = ctx.cast_if(inputs[1], op.operands[1].type.dtype, "int64")
    return ctx.op("Reshape", [inputs[0], shape], allowzero=1)


@lowering("stablehlo.transpose", onnx_ops=("Transpose",))
def lower_transpose(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Transpose."""
    perm = list(op.attrs["permutation"])
    if perm == sorted(perm):
        return inputs[0]
    return ctx.op("Transpose", inputs, perm=perm)


@lowering("stablehlo.iota", onnx_ops=("initializer",))
def lower_iota(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """A constant 0..n-1 along iota_dimension, broadcast to the result shape."""
    result = op.results[0].type
    axis = op.attrs["iota_dimension"]
    n = result.shape[axis]
    values = np.arange(n).reshape([n if i == axis else 1 for i in range(result.rank)])
    values = np.broadcast_to(values, result.shape).astype(dt.numpy_dtype(result.dtype))
    return ctx.const(values, result.dtype)


@lowering("stablehlo.dynamic_iota", onnx_ops=("Range", "Expand"))
def lower_dynamic_iota(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Range along iota_dimension, Unsqueeze and Expand to the computed shape."""
    result = op.results[0].type
    axis = op.attrs["iota_dimension"]
    shape = ctx.cast_if(inputs[0], op.operands[0].type.dtype, "int64")
    n = ctx.op("Gather", [shape, ctx.const(np.array(axis, np.int64))], axis=0)
    work = "int64" if result.dtype in dt.INTS else "float32"
    rng = ctx.op("Range", [ctx.scalar(0, "int64"), n, ctx.scalar(1, "int64")])
    rng = ctx.cast_if(rng, "int64", result.dtype if result.dtype in ("int64", "int32", "float32", "float64") else work)
    other = [i for i in range(result.rank) if i != axis]
    if other:
        rng = ctx.op("Unsqueeze", [rng, ctx.i64(other)])
    out = ctx.op("Expand", [rng, shape])
    cur = result.dtype if result.dtype in ("int64", "int32", "float32", "float64") else work
    return ctx.cast_if(out, cur, result.dtype)


@lowering("stablehlo.concatenate", onnx_ops=("Concat",))
def lower_concatenate(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Concat."""
    return ctx.op("Concat", inputs, axis=op.attrs["dimension"])


@lowering("stablehlo.slice", onnx_ops=("Slice",))
def lower_slice(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Slice with static starts/limits/strides."""
    starts = list(op.attrs["start_indices"])
    limits = list(op.attrs["limit_indices"])
    strides = list(op.attrs["strides"])
    axes = list(range(len(starts)))
    return ctx.op("Slice", [inputs[0], ctx.i64(starts), ctx.i64(limits), ctx.i64(axes), ctx.i64(strides)])


@lowering("stablehlo.get_dimension_size", onnx_ops=("Shape",))
def lower_get_dimension_size(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Shape(x)[d] as an int32 scalar."""
    d = op.attrs["dimension"]
    size = ctx.op("Shape", inputs, start=d, end=d + 1)
    return ctx.cast(ctx.op("Squeeze", [size, ctx.i64([0])]), op.results[0].type.dtype)
