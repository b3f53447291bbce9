"""Constants, iota, broadcasting, reshapes, transposes, slices, concatenation and shape arithmetic."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops._common import expand
from jaxconv.onnx.registry import lowering
from jaxconv.stablehlo import ir as hir


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


def empty_result(ctx: LoweringContext, t: hir.TensorType) -> str | None:
    """A constant for a statically empty result, else None.

    ONNX Runtime's graph optimizer drops an Expand that broadcasts a size-1 dim to 0, so
    statically empty results never go through Expand.
    """
    if t.is_static and 0 in t.shape:
        return ctx.const(np.zeros(t.shape, dt.numpy_dtype(t.dtype)), t.dtype)
    return None


@lowering("stablehlo.broadcast_in_dim", onnx_ops=("Unsqueeze", "Expand"))
def lower_broadcast_in_dim(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Transpose/Unsqueeze the operand into place, then Expand."""
    empty = empty_result(ctx, op.results[0].type)
    if empty is not None:
        return empty
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
    # ONNX reads a 0 in the shape as "copy this input dimension" unless allowzero is set.
    allowzero = 1 if 0 in shape and -1 not in shape else None
    return ctx.op("Reshape", [inputs[0], ctx.i64(shape)], allowzero=allowzero)


@lowering("stablehlo.dynamic_reshape", onnx_ops=("Reshape", "Squeeze", "Unsqueeze"))
def lower_dynamic_reshape(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Reshape with a computed shape tensor; one that only drops or adds unit axes as Squeeze / Unsqueeze."""
    units = _unit_axes_change(op.operands[0].type, op.results[0].type)
    if units is not None:
        dropped, added = units
        x = ctx.op("Squeeze", [inputs[0], ctx.i64(dropped)]) if dropped else inputs[0]
        return ctx.op("Unsqueeze", [x, ctx.i64(added)]) if added else x
    shape = ctx.cast_if(inputs[1], op.operands[1].type.dtype, "int64")
    return ctx.op("Reshape", [inputs[0], shape], allowzero=1)


def _unit_axes_change(src: hir.TensorType, dst: hir.TensorType) -> tuple[list[int], list[int]] | None:
    """(unit axes of ``src`` dropped, unit axes of ``dst`` added) when a reshape of ``src`` to ``dst`` does only
    that: the other dims agree in order, static ones equal and at most one dynamic on each side, which then
    holds the same size (the element count is kept). None otherwise."""
    rest_src = [d for d in src.shape if d != 1]
    rest_dst = [d for d in dst.shape if d != 1]
    if rest_src != rest_dst or rest_src.count(None) > 1 or 0 in rest_src:
        return None
    return [a for a, d in enumerate(src.shape) if d == 1], [a for a, d in enumerate(dst.shape) if d == 1]


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


# ---- helpers shared with indexing.py ------------------------------------------------------------
# A dimension is either a static int or the name of a 1-D int64 tensor of length 1.
# Pad has no int16/uint16 kernel.


def pad(ctx: LoweringContext, x: str, pads: str, value: str, dtype: str) -> str:
    """Constant-mode Pad (negative pads crop) for any dtype."""
    work = dt.pad_work_dtype(dtype, ctx.opset)
    if work is None:
        return ctx.op("Pad", [x, pads, value])
    out = ctx.op("Pad", [ctx.cast(x, work), pads, ctx.cast(value, work)])
    return ctx.cast(out, dtype)


def dim(ctx: LoweringContext, x: str, t: hir.TensorType, axis: int) -> int | str:
    """Size of ``axis`` of ``x``: an int when static, else a 1-D int64 tensor of length 1."""
    d = t.shape[axis]
    return d if d is not None else ctx.op("Shape", [x], start=axis, end=axis + 1)


def dim_tensor(ctx: LoweringContext, d: int | str) -> str:
    """A dimension as a 1-D int64 tensor of length 1."""
    return ctx.i64([d]) if isinstance(d, int) else d


def dim_scalar(ctx: LoweringContext, d: int | str) -> str:
    """A dimension as an int64 scalar tensor."""
    if isinstance(d, int):
        return ctx.scalar(d, "int64")
    return ctx.op("Squeeze", [d, ctx.i64([0])])


def dim_arith(ctx: LoweringContext, op_type: str, a: int | str, b: int | str) -> int | str:
    """``a (op) b`` for dimensions (Add, Sub, Mul); static when both are."""
    if isinstance(a, int) and isinstance(b, int):
        return {"Add": a + b, "Sub": a - b, "Mul": a * b}[op_type]
    return ctx.op(op_type, [dim_tensor(ctx, a), dim_tensor(ctx, b)])


def shape_tensor(ctx: LoweringContext, dims: Sequence[int | str]) -> str:
    """A 1-D int64 shape tensor from dimensions."""
    if all(isinstance(d, int) for d in dims):
        return ctx.i64(list(dims))  # type: ignore[arg-type]
    return ctx.op("Concat", [dim_tensor(ctx, d) for d in dims], axis=0)


def dims_of(ctx: LoweringContext, x: str, t: hir.TensorType) -> list[int | str]:
    """Every dimension of ``x``."""
    return [dim(ctx, x, t, a) for a in range(t.rank)]


def index_scalar(ctx: LoweringContext, name: str, dtype: str) -> str:
    """An index value of any integer dtype as int64 (same shape)."""
    return ctx.cast_if(name, dtype, "int64")


def clamp(ctx: LoweringContext, idx: str, hi: int | str) -> str:
    """Clamp an int64 index tensor to [0, hi] (``hi`` may be negative: then 0 wins, as in XLA)."""
    bounded = ctx.op("Min", [idx, dim_scalar(ctx, hi)])
    return ctx.op("Max", [bounded, ctx.scalar(0, "int64")])


def iota_along(ctx: LoweringContext, n: int | str, axis: int, rank: int) -> str:
    """An int64 tensor 0..n-1 along ``axis`` with size-1 dimensions elsewhere (``rank`` dims)."""
    shape = [1] * rank
    if isinstance(n, int):
        shape[axis] = n
        return ctx.const(np.arange(n, dtype=np.int64).reshape(shape))
    rng = ctx.op("Range", [ctx.scalar(0, "int64"), dim_scalar(ctx, n), ctx.scalar(1, "int64")])
    others = [a for a in range(rank) if a != axis]
    return ctx.op("Unsqueeze", [rng, ctx.i64(others)]) if others else rng


# ---- pad, reverse, dynamic slices ----------------------------------------------------------------
@lowering("stablehlo.pad", onnx_ops=("Pad", "Reshape", "Slice"))
def lower_pad(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Interior padding by zero-insertion (Unsqueeze, Pad, Reshape, Slice), then one edge Pad."""
    x, value = inputs
    empty = empty_result(ctx, op.results[0].type)
    if empty is not None:
        return empty
    t = op.operands[0].type
    low = list(op.attrs["edge_padding_low"])
    high = list(op.attrs["edge_padding_high"])
    interior = list(op.attrs["interior_padding"])
    dims = dims_of(ctx, x, t)
    for axis, k in enumerate(interior):
        if k > 0:
            x, dims[axis] = _interior_pad(ctx, x, dims, axis, k, value, t.dtype)
    if any(low) or any(high):
        x = pad(ctx, x, ctx.i64(low + high), value, t.dtype)
    return x


def _interior_pad(ctx: LoweringContext, x: str, dims: list[int | str], axis: int, k: int, value: str,
                  dtype: str) -> tuple[str, int | str]:
    """Insert ``k`` copies of ``value`` between neighbours along ``axis``; returns (tensor, new size)."""
    rank = len(dims)
    y = ctx.op("Unsqueeze", [x, ctx.i64([axis + 1])])
    pads = [0] * (2 * (rank + 1))
    pads[rank + 1 + axis + 1] = k
    y = pad(ctx, y, ctx.i64(pads), value, dtype)
    spread = dim_arith(ctx, "Mul", dims[axis], k + 1)
    y = ctx.op("Reshape", [y, shape_tensor(ctx, dims[:axis] + [spread] + dims[axis + 1:])], allowzero=1)
    if isinstance(spread, int):
        size: int | str = max(spread - k, 0)
        end = ctx.i64([size])
    else:
        size = ctx.op("Max", [dim_arith(ctx, "Sub", spread, k), ctx.i64([0])])  # type: ignore[list-item]
        end = size  # type: ignore[assignment]
    return ctx.op("Slice", [y, ctx.i64([0]), end, ctx.i64([axis])]), size


@lowering("stablehlo.reverse", onnx_ops=("Slice",))
def lower_reverse(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Slice with step -1 on each reversed dimension."""
    axes = list(op.attrs["dimensions"])
    if not axes:
        return inputs[0]
    n = len(axes)
    lowest = np.iinfo(np.int64).min
    return ctx.op("Slice", [inputs[0], ctx.i64([-1] * n), ctx.i64([lowest] * n), ctx.i64(axes), ctx.i64([-1] * n)])


def clamped_starts(ctx: LoweringContext, x: str, t: hir.TensorType, starts: Sequence[str],
                   start_types: Sequence[hir.TensorType], sizes: Sequence[int | str],
                   axes: Sequence[int] | None = None) -> list[str]:
    """Start indices (scalars of any int dtype) on ``axes`` (default: every axis) as int64 scalars clamped
    to [0, dim - size], like StableHLO."""
    out = []
    for axis, s, st, size in zip(range(t.rank) if axes is None else axes, starts, start_types, sizes):
        d = dim(ctx, x, t, axis)
        if isinstance(d, int) and isinstance(size, int) and d == size:
            out.append(ctx.scalar(0, "int64"))
            continue
        out.append(clamp(ctx, index_scalar(ctx, s, st.dtype), dim_arith(ctx, "Sub", d, size)))
    return out


def _stack_scalars(ctx: LoweringContext, scalars: Sequence[str]) -> str:
    values = [ctx.constant_value(s) for s in scalars]
    if all(v is not None for v in values):
        return ctx.i64([int(v) for v in values])  # type: ignore[arg-type]
    return ctx.op("Concat", [ctx.op("Unsqueeze", [s, ctx.i64([0])]) for s in scalars], axis=0)


@lowering("stablehlo.dynamic_slice", onnx_ops=("Slice",))
def lower_dynamic_slice(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Slice at start indices clamped so the whole slice is in range."""
    x, starts = inputs[0], inputs[1:]
    t = op.operands[0].type
    sizes = list(op.attrs["slice_sizes"])
    return slice_at(ctx, x, t, clamped_starts(ctx, x, t, starts, [v.type for v in op.operands[1:]], sizes), sizes)


def slice_at(ctx: LoweringContext, x: str, t: hir.TensorType, starts: Sequence[str], sizes: Sequence[int | str],
             whole: Sequence[int] = ()) -> str:
    """Slice ``sizes`` elements from int64 scalar ``starts`` (already in range) on every axis but ``whole``."""
    axes = [a for a in range(t.rank) if a not in whole and not (t.shape[a] is not None and sizes[a] == t.shape[a])]
    if not axes:
        return x
    begin = _stack_scalars(ctx, [starts[a] for a in axes])
    part = _constant_part(ctx, x, begin, axes, sizes)
    if part is not None:
        return part
    length = shape_tensor(ctx, [sizes[a] for a in axes])
    end = ctx.op("Add", [begin, length])
    return ctx.op("Slice", [x, begin, end, ctx.i64(axes)])


def _constant_part(ctx: LoweringContext, x: str, begin: str, axes: Sequence[int], sizes: Sequence[int | str]) -> str | None:
    """The slice as a constant when ``x`` is one and the starts are computed from constants (a layer's
    weights in a loop over layers lowered once per layer), else None."""
    arr = ctx.constant_value(x)
    if arr is None or not all(isinstance(sizes[a], int) for a in axes):
        return None
    starts = ctx.fold(begin)
    if starts is None:
        return None
    index = [slice(None)] * arr.ndim
    for a, s in zip(axes, starts.reshape(-1)):
        index[a] = slice(int(s), int(s) + int(sizes[a]))
    return ctx.const(arr[tuple(index)])


@lowering("stablehlo.dynamic_update_slice", onnx_ops=("ScatterND",))
def lower_dynamic_update_slice(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """ScatterND of the update at clamped starts (index grid over the leading partial axes only)."""
    x, update, starts = inputs[0], inputs[1], inputs[2:]
    t, ut = op.operands[0].type, op.operands[1].type
    if ut.is_static and 0 in ut.shape:
        return x
    usizes = dims_of(ctx, update, ut)
    begin = clamped_starts(ctx, x, t, starts, [v.type for v in op.operands[2:]], usizes)
    # Trailing axes the update covers fully need no index coordinates.
    k = t.rank
    while k > 0 and t.shape[k - 1] is not None and ut.shape[k - 1] == t.shape[k - 1]:
        k -= 1
    if k == 0:
        return update
    grid = index_grid(ctx, begin[:k], usizes[:k])
    return ctx.op("ScatterND", [x, grid, update])


def index_grid(ctx: LoweringContext, starts: Sequence[str], sizes: Sequence[int | str]) -> str:
    """int64 indices of shape [*sizes, n]: element (i_0..i_{n-1}) holds (starts[a] + i_a)."""
    n = len(starts)
    full = shape_tensor(ctx, list(sizes) + [1])
    coords = []
    for a in range(n):
        iota = iota_along(ctx, sizes[a], a, n + 1)
        coord = ctx.op("Add", [iota, starts[a]])
        coords.append(ctx.op("Expand", [coord, full]))
    return coords[0] if n == 1 else ctx.op("Concat", coords, axis=-1)


@lowering("stablehlo.real_dynamic_slice", onnx_ops=("Slice",))
def lower_real_dynamic_slice(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Slice with start/limit/stride tensors; jax's dynamic_slice on a symbolic shape as that slice."""
    x, start, limit, stride = inputs
    found = symbolic_dynamic_slice(ctx, op)
    if found is not None:
        starts, sizes = found
        t = op.operands[0].type
        whole = [a for a, s in enumerate(sizes) if s is None]
        cut = [a for a in range(t.rank) if a not in whole]
        sized: list[int | str] = [0 if s is None else s for s in sizes]
        begin = clamped_starts(ctx, x, t, [ctx.name_of(starts[a]) for a in cut], [starts[a].type for a in cut],
                               [sized[a] for a in cut], axes=cut)
        full = [ctx.scalar(0, "int64")] * t.rank
        for a, b in zip(cut, begin):
            full[a] = b
        return slice_at(ctx, x, t, full, sized, whole)
    cast = [ctx.cast_if(n, v.type.dtype, "int64") for n, v in zip((start, limit, stride), op.operands[1:])]
    axes = ctx.i64(list(range(op.operands[0].type.rank)))
    return ctx.op("Slice", [x, cast[0], cast[1], axes, cast[2]])


@lowering("stablehlo.tuple", onnx_ops=())
def lower_tuple(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """No ONNX value: the tuple stands for its elements until get_tuple_element picks one."""
    name = ctx.fresh("tuple")
    ctx.tuples[name] = list(inputs)
    return name


@lowering("stablehlo.get_tuple_element", onnx_ops=())
def lower_get_tuple_element(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """The element of a tuple built by stablehlo.tuple."""
    return ctx.tuples[inputs[0]][op.attrs["index"]]


def symbolic_dynamic_slice(ctx: LoweringContext, op: hir.Op) -> tuple[list[hir.Value], list[int | None]] | None:
    """A ``real_dynamic_slice`` that is jax's ``dynamic_slice`` on a symbolic shape, as (start scalars, sizes).

    jax writes it ``real_dynamic_slice(x, b, b + S, 1)`` with ``b = clamp(0, concat(s_i), D - S)``, where ``S``
    and ``D`` (the slice's and the operand's sizes) are concats of one-element pieces. A size is an int, or
    None where its piece is the operand's own dimension (the whole axis); a start is the scalar before its
    one-element reshape (or its constant). None where the slice is of another form.
    """
    start, limit, stride = op.operands[1:]
    ones = folded(ctx, stride)
    if ones is None or not np.all(ones == 1):
        return None
    clamp_op, add_op = ctx.defining_op(start), ctx.defining_op(limit)
    if clamp_op is None or add_op is None or clamp_op.name != "stablehlo.clamp" or add_op.name != "stablehlo.add":
        return None
    low, starts_vec, high = clamp_op.operands
    zeros = folded(ctx, low)
    if zeros is None or np.any(zeros != 0) or start not in add_op.operands:
        return None
    size_vec = add_op.operands[1] if add_op.operands[0] is start else add_op.operands[0]
    sub_op = ctx.defining_op(high)
    if sub_op is None or sub_op.name != "stablehlo.subtract" or sub_op.operands[1] is not size_vec:
        return None
    rank = op.operands[0].type.rank
    start_pieces, size_pieces, dim_pieces = (concat_pieces(ctx, v, rank) for v in (starts_vec, size_vec, sub_op.operands[0]))
    if start_pieces is None or size_pieces is None or dim_pieces is None:
        return None
    starts: list[hir.Value] = []
    sizes: list[int | None] = []
    for a in range(rank):
        if _same_piece(ctx, size_pieces[a], dim_pieces[a]):
            sizes.append(None)
        elif (size := folded(ctx, size_pieces[a])) is not None:
            sizes.append(int(size.reshape(())))
        else:
            return None
        scalar = _scalar_before_reshape(ctx, start_pieces[a])
        if scalar is None:
            return None
        starts.append(scalar)
    return starts, sizes


def folded(ctx: LoweringContext, value: hir.Value) -> np.ndarray | None:
    """The value of a StableHLO value lowered in this scope when constants alone give it, else None."""
    name = ctx.scope.lookup(value)
    return None if name is None else ctx.fold(name)


def concat_pieces(ctx: LoweringContext, vec: hir.Value, rank: int) -> list[hir.Value] | None:
    """The one-element operands a rank-long index vector is concatenated from."""
    cat = ctx.defining_op(vec)
    if cat is None or cat.name != "stablehlo.concatenate" or len(cat.operands) != rank:
        return None
    if any(p.type.shape != (1,) for p in cat.operands):
        return None
    return list(cat.operands)


def _same_piece(ctx: LoweringContext, p: hir.Value, q: hir.Value) -> bool:
    """The same value, or one-element reshapes of the same scalar (jax reshapes a symbolic size at each use)."""
    if p is q:
        return True
    sp = _scalar_before_reshape(ctx, p)
    return sp is not None and sp is _scalar_before_reshape(ctx, q)


def _scalar_before_reshape(ctx: LoweringContext, piece: hir.Value) -> hir.Value | None:
    r = ctx.defining_op(piece)
    if r is not None and r.name == "stablehlo.reshape" and r.operands[0].type.shape == ():
        return r.operands[0]
    return None
