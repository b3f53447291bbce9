"""Gather, scatter (set/add/mul/min/max), dynamic_gather, and argmax/argmin reductions.

StableHLO clamps gather start indices so every slice is in range and drops scatter windows
that would leave the operand; ONNX Runtime rejects out-of-range indices, so the lowerings
clamp and mask explicitly.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops import shape as sh
from jaxconv.onnx.ops._common import expand, order_preserving, where
from jaxconv.onnx.registry import lowering
from jaxconv.stablehlo import ir as hir


# ---- shared index plumbing -----------------------------------------------------------------------
def _indices_last(ctx: LoweringContext, idx: str, it: hir.TensorType, index_vector_dim: int) -> tuple[str, list[int]]:
    """int64 indices with the index vector as the last axis; also the indices' batch axes (in order)."""
    batch = [a for a in range(it.rank) if a != index_vector_dim]
    if index_vector_dim == it.rank:
        idx = ctx.op("Unsqueeze", [idx, ctx.i64([it.rank])])
    elif index_vector_dim != it.rank - 1:
        idx = ctx.op("Transpose", [idx], perm=batch + [index_vector_dim])
    return sh.index_scalar(ctx, idx, it.dtype), batch


def _component(ctx: LoweringContext, idx: str, k: int) -> str:
    """Component ``k`` of the (last-axis) index vector, keeping the batch shape."""
    return ctx.op("Gather", [idx, ctx.const(np.array(k, np.int64))], axis=-1)


def _batch_iota(ctx: LoweringContext, idx_last: str, axis: int, nbatch: int) -> str:
    """0..n-1 along batch axis ``axis`` of the normalized indices (size-1 elsewhere)."""
    n = ctx.op("Shape", [idx_last], start=axis, end=axis + 1)
    return sh.iota_along(ctx, n, axis, nbatch)


def _permute(ctx: LoweringContext, x: str, perm: Sequence[int]) -> str:
    perm = list(perm)
    return x if perm == sorted(perm) else ctx.op("Transpose", [x], perm=perm)


def _inverse(perm: Sequence[int]) -> list[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


def _unsqueeze_tail(ctx: LoweringContext, x: str, rank: int, extra: int) -> str:
    """Append ``extra`` size-1 axes to a rank-``rank`` tensor."""
    if extra == 0:
        return x
    return ctx.op("Unsqueeze", [x, ctx.i64(list(range(rank, rank + extra)))])


# ---- gather --------------------------------------------------------------------------------------
@dataclass
class _Gather:
    """The parts of a gather that the lowering paths share."""

    x: str
    xt: hir.TensorType
    idx: str
    it: hir.TensorType
    dn: hir.GatherDimensionNumbers
    sizes: list  # int or 1-D int64 tensor per operand dim
    result: hir.TensorType


def _check_gather(op: hir.Op) -> str | None:
    try:
        hir.GatherDimensionNumbers.of(op.attrs["dimension_numbers"])
    except (KeyError, TypeError):
        return "gather without readable dimension numbers"
    return None


@lowering("stablehlo.gather", check=_check_gather, onnx_ops=("Gather", "GatherElements", "GatherND"))
def lower_gather(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Gather / GatherElements / Slice / GatherND with start indices clamped like StableHLO."""
    g = _Gather(inputs[0], op.operands[0].type, inputs[1], op.operands[1].type,
                hir.GatherDimensionNumbers.of(op.attrs["dimension_numbers"]),
                list(op.attrs["slice_sizes"]), op.results[0].type)
    return _gather(ctx, g)


@lowering("stablehlo.dynamic_gather", check=_check_gather, onnx_ops=("Slice", "GatherND"))
def lower_dynamic_gather(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Gather with slice sizes from a tensor."""
    sizes_name = ctx.cast_if(inputs[2], op.operands[2].type.dtype, "int64")
    known = ctx.constant_value(sizes_name)
    rank = op.operands[0].type.rank
    if known is not None:
        sizes: list = [int(v) for v in known.reshape(-1)]
    elif (pieces := sh.concat_pieces(ctx, op.operands[2], rank)) is not None:
        # a symbolic shape's sizes: jax concatenates them one by one, constants where they are static
        sizes = []
        for piece in pieces:
            value = sh.folded(ctx, piece)
            sizes.append(ctx.cast_if(ctx.name_of(piece), piece.type.dtype, "int64") if value is None
                         else int(value.reshape(-1)[0]))
    else:
        sizes = [ctx.op("Slice", [sizes_name, ctx.i64([d]), ctx.i64([d + 1])]) for d in range(rank)]
    g = _Gather(inputs[0], op.operands[0].type, inputs[1], op.operands[1].type,
                hir.GatherDimensionNumbers.of(op.attrs["dimension_numbers"]),
                sizes, op.results[0].type)
    return _gather(ctx, g)


def _gather(ctx: LoweringContext, g: _Gather) -> str:
    empty = sh.empty_result(ctx, g.result)
    if empty is not None:
        return empty
    dn = g.dn
    nbatch = g.it.rank - (1 if dn.index_vector_dim < g.it.rank else 0)
    if nbatch == 0:
        return _gather_one_slice(ctx, g)
    path = _gather_take_path(g) if not dn.operand_batching_dims else None
    if path is not None:
        return _gather_take(ctx, g, path)
    if _gather_elements_ok(g):
        return _gather_elements(ctx, g)
    return _gather_nd(ctx, g)


def _full(g: _Gather, d: int) -> bool:
    """Does the slice cover all of operand dim ``d``?"""
    return g.xt.shape[d] is not None and g.sizes[d] == g.xt.shape[d]


def _gather_one_slice(ctx: LoweringContext, g: _Gather) -> str:
    """Indices with no batch dims: one clamped Slice, then drop the collapsed dims."""
    dn = g.dn
    idx = sh.index_scalar(ctx, g.idx, g.it.dtype)
    if g.it.rank == 0:
        idx = ctx.op("Unsqueeze", [idx, ctx.i64([0])])
    starts = [ctx.scalar(0, "int64")] * g.xt.rank
    for k, d in enumerate(dn.start_index_map):
        if _full(g, d):
            continue
        s = ctx.op("Squeeze", [ctx.op("Slice", [idx, ctx.i64([k]), ctx.i64([k + 1])]), ctx.i64([0])])
        starts[d] = sh.clamp(ctx, s, sh.dim_arith(ctx, "Sub", sh.dim(ctx, g.x, g.xt, d), g.sizes[d]))
    out = sh.slice_at(ctx, g.x, g.xt, starts, g.sizes)
    collapsed = list(dn.collapsed_slice_dims)
    return ctx.op("Squeeze", [out, ctx.i64(collapsed)]) if collapsed else out


def _result_perm(g: _Gather, natural: Sequence[str | int]) -> list[int]:
    """Transpose taking a layout of labels (('b', i) batch axis i, ('o', d) operand dim d) to the result's."""
    offset_dims = list(g.dn.offset_dims)
    window = [d for d in range(g.xt.rank) if d not in g.dn.collapsed_slice_dims
              and d not in g.dn.operand_batching_dims]
    target = []
    b = 0
    for r in range(g.result.rank):
        if r in offset_dims:
            target.append(("o", window[offset_dims.index(r)]))
        else:
            target.append(("b", b))
            b += 1
    return [list(natural).index(lab) for lab in target]


def _gather_take_path(g: _Gather) -> int | None:
    """The operand axis when the gather is a Gather along one axis (x[i], x[:, i], take)."""
    dn = g.dn
    if len(dn.start_index_map) != 1:
        return None
    a = dn.start_index_map[0]
    if g.sizes[a] != 1 or any(not (_full(g, d) or _run_time_size(g, d)) for d in range(g.xt.rank) if d != a):
        return None
    return a


def _run_time_size(g: _Gather, d: int) -> bool:
    """A slice size known only at run time (a symbolic shape's), on an axis the gather does not index."""
    return isinstance(g.sizes[d], str) and d not in g.dn.start_index_map


def _gather_take(ctx: LoweringContext, g: _Gather, a: int) -> str:
    """A Gather along ``a`` (a strided Slice for an arithmetic run of constant indices), then the other axes
    cut to their slice sizes where those are known only at run time (all of a symbolic axis, in jax)."""
    cut = [d for d in range(g.xt.rank) if d != a and _run_time_size(g, d)]
    x = g.x
    if cut:
        x = ctx.op("Slice", [x, ctx.i64([0] * len(cut)), ctx.op("Concat", [g.sizes[d] for d in cut], axis=0),
                             ctx.i64(cut)])
    strided = _strided_take(ctx, g, a, x)
    if strided is not None:
        return strided
    i, nb = _int32_take_indices(ctx, g, a)
    if i is None:
        idx, batch = _indices_last(ctx, g.idx, g.it, g.dn.index_vector_dim)
        nb = len(batch)
        i = ctx.op("Squeeze", [idx, ctx.i64([nb])])
        i = sh.clamp(ctx, i, sh.dim_arith(ctx, "Sub", sh.dim(ctx, g.x, g.xt, a), 1))
    out = ctx.op("Gather", [x, i], axis=a)
    natural: list = [("o", d) for d in range(a)] + [("b", k) for k in range(nb)]
    if a not in g.dn.collapsed_slice_dims:
        out = ctx.op("Unsqueeze", [out, ctx.i64([a + nb])])
        natural.append(("o", a))
    natural += [("o", d) for d in range(a + 1, g.xt.rank)]
    return _permute(ctx, out, _result_perm(g, natural))


def _strided_take(ctx: LoweringContext, g: _Gather, a: int, x: str) -> str | None:
    """``x[..., start::step]`` as jax writes it on a symbolic shape (a gather of constant indices
    ``start + step * k``, in range) as a strided Slice of ``x``, where the indices are one run along the
    result's axis ``a``; else None."""
    idx = ctx.fold(g.idx)
    size = g.xt.shape[a]
    dn = g.dn
    if idx is None or size is None or idx.ndim != 2 or dn.index_vector_dim != 1 or idx.shape[1] != 1:
        return None
    run = idx.reshape(-1).astype(np.int64)
    if run.size < 2 or list(dn.collapsed_slice_dims) != [a] or list(dn.offset_dims) != \
            [r for r in range(g.result.rank) if r != a]:
        return None
    step = int(run[1] - run[0])
    if step < 1 or not np.array_equal(run, run[0] + step * np.arange(run.size)) or run[0] < 0 or run[-1] >= size:
        return None
    end = min(int(run[-1]) + step, size)  # the next index past the run: the axis' end for x[..., k::step]
    return ctx.op("Slice", [x, ctx.i64([int(run[0])]), ctx.i64([end]), ctx.i64([a]), ctx.i64([step])])


def _int32_take_indices(ctx: LoweringContext, g: _Gather, a: int) -> tuple[str | None, int]:
    """int32 indices of a static axis clamped as int32 (Gather and Max/Min take them; no int64 Cast),
    the index vector dim dropped; (None, 0) for other indices."""
    ivd, rank = g.dn.index_vector_dim, g.it.rank
    size = g.xt.shape[a]
    if g.it.dtype != "int32" or not isinstance(size, int) or size < 1 or ivd < rank - 1:
        return None, 0
    i = g.idx if ivd == rank else ctx.op("Squeeze", [g.idx, ctx.i64([ivd])])
    bounded = ctx.op("Min", [i, ctx.scalar(size - 1, "int32")])
    return ctx.op("Max", [bounded, ctx.scalar(0, "int32")]), rank - (1 if ivd < rank else 0)


def _gather_elements_ok(g: _Gather) -> bool:
    """take_along_axis: one indexed axis, every other operand axis a batching axis, slices of size 1."""
    dn = g.dn
    if len(dn.start_index_map) != 1 or dn.offset_dims:
        return False
    a = dn.start_index_map[0]
    others = sorted(dn.operand_batching_dims)
    if others != [d for d in range(g.xt.rank) if d != a] or list(dn.collapsed_slice_dims) != [a]:
        return False
    nbatch = g.it.rank - (1 if dn.index_vector_dim < g.it.rank else 0)
    return nbatch == g.xt.rank and all(s == 1 for s in g.sizes if isinstance(s, int)) and \
        all(isinstance(s, int) for s in g.sizes)


def _gather_elements(ctx: LoweringContext, g: _Gather) -> str:
    dn = g.dn
    a = dn.start_index_map[0]
    idx, batch = _indices_last(ctx, g.idx, g.it, dn.index_vector_dim)
    nb = len(batch)
    i = ctx.op("Squeeze", [idx, ctx.i64([nb])])
    i = sh.clamp(ctx, i, sh.dim_arith(ctx, "Sub", sh.dim(ctx, g.x, g.xt, a), 1))
    # Batch axis (position in `batch`) that feeds each operand axis.
    feeds = {}
    for od, idim in zip(dn.operand_batching_dims, dn.start_indices_batching_dims):
        feeds[od] = batch.index(idim)
    free = [p for p in range(nb) if p not in feeds.values()]
    feeds[a] = free[0]
    perm = [feeds[d] for d in range(g.xt.rank)]
    out = ctx.op("GatherElements", [g.x, _permute(ctx, i, perm)], axis=a)
    # out axis d holds batch axis perm[d]; the result wants batch axes in order.
    return _permute(ctx, out, _inverse(perm))


def _gather_nd(ctx: LoweringContext, g: _Gather) -> str:
    """General gather: full element coordinates, one GatherND, then Transpose into place."""
    dn = g.dn
    idx, batch = _indices_last(ctx, g.idx, g.it, dn.index_vector_dim)
    nb = len(batch)
    rank = g.xt.rank
    collapsed = set(dn.collapsed_slice_dims) | set(dn.operand_batching_dims)
    window = [d for d in range(rank) if d not in collapsed]
    # Trailing operand dims that are taken whole need no coordinates.
    k = rank
    while k > 1 and (k - 1) in window and _full(g, k - 1):
        k -= 1
    grid_window = [d for d in window if d < k]
    starts: dict[int, str] = {}
    for c, d in enumerate(dn.start_index_map):
        if d >= k:
            continue
        s = _component(ctx, idx, c)
        starts[d] = sh.clamp(ctx, s, sh.dim_arith(ctx, "Sub", sh.dim(ctx, g.x, g.xt, d), g.sizes[d]))
    for od, idim in zip(dn.operand_batching_dims, dn.start_indices_batching_dims):
        if od < k:
            starts[od] = _batch_iota(ctx, idx, batch.index(idim), nb)
    full = _coordinate_grid(ctx, idx, nb, starts, grid_window, g.sizes, k)
    out = ctx.op("GatherND", [g.x, full])
    natural = [("b", p) for p in range(nb)] + [("o", d) for d in grid_window] + [("o", d) for d in range(k, rank)]
    return _permute(ctx, out, _result_perm(g, natural))


def _coordinate_grid(ctx: LoweringContext, idx: str, nb: int, starts: dict[int, str], grid_window: list[int],
                     sizes: Sequence | dict, k: int) -> str:
    """int64 element coordinates [batch..., window dims < k..., k] for GatherND and ScatterND.

    Coordinate ``d`` is the window's start along operand dim ``d`` (``starts``, of the batch shape)
    plus, for dims in ``grid_window``, the offset within a window of ``sizes[d]`` elements.
    """
    total = nb + len(grid_window)
    full_shape = _grid_shape(ctx, idx, nb, [sizes[d] for d in grid_window])
    coords = []
    for d in range(k):
        coord = _unsqueeze_tail(ctx, starts[d], nb, len(grid_window)) if d in starts and nb else starts.get(d)
        if d in grid_window:
            iota = sh.iota_along(ctx, sizes[d], nb + grid_window.index(d), total)
            coord = iota if coord is None else ctx.op("Add", [coord, iota])
        if coord is None:
            coord = ctx.scalar(0, "int64")
        coords.append(ctx.op("Unsqueeze", [ctx.op("Expand", [coord, full_shape]), ctx.i64([total])]))
    return coords[0] if len(coords) == 1 else ctx.op("Concat", coords, axis=-1)


def _grid_shape(ctx: LoweringContext, idx_last: str, nb: int, window_sizes: Sequence) -> str:
    """Shape [batch dims of the indices..., window sizes...] as an int64 tensor."""
    batch_shape = ctx.op("Shape", [idx_last], start=0, end=nb) if nb else None
    pieces = ([batch_shape] if batch_shape else []) + [sh.dim_tensor(ctx, s) for s in window_sizes]
    if not pieces:
        return ctx.i64([])
    return pieces[0] if len(pieces) == 1 else ctx.op("Concat", pieces, axis=0)


# ---- scatter -------------------------------------------------------------------------------------
_COMBINER = {"stablehlo.add": "add", "stablehlo.multiply": "mul", "stablehlo.maximum": "max",
             "stablehlo.minimum": "min"}
# On booleans StableHLO add is OR and multiply is AND; they become max/min on uint8.
_BOOL_COMBINER = {"stablehlo.add": "max", "stablehlo.or": "max", "stablehlo.maximum": "max",
                  "stablehlo.multiply": "min", "stablehlo.and": "min", "stablehlo.minimum": "min"}
# ScatterND with a reduction has no float16/bfloat16/bool kernel in ONNX Runtime.
_REDUCTION_DETOUR = {"float16": "float32", "bfloat16": "float32", "bool": "uint8"}


def scatter_kind(op: hir.Op) -> str | None:
    """'none' (the body returns the update), 'add', 'mul', 'max' or 'min'; None for other bodies."""
    if len(op.operands) != 3 or len(op.results) != 1:
        return None
    block = op.regions[0]
    if len(block.returns) != 1 or len(block.args) != 2:
        return None
    if block.returns[0] is block.args[1]:
        return "none"
    if len(block.ops) != 1:
        return None
    body = block.ops[0]
    if body.results[0] is not block.returns[0] or {v.id for v in body.operands} != {a.id for a in block.args}:
        return None
    table = _BOOL_COMBINER if op.operands[0].type.dtype == "bool" else _COMBINER
    return table.get(body.name)


def _check_scatter(op: hir.Op) -> str | None:
    if len(op.operands) != 3:
        return f"scatter of {len(op.operands) // 2} operands at once is not lowered"
    if scatter_kind(op) is None:
        ops = ", ".join(o.name for o in op.regions[0].ops) or "no ops"
        return f"scatter combiner ({ops}) is not one of set/add/mul/max/min"
    return None


def _identity(kind: str, dtype: str) -> np.ndarray:
    """The value a masked-out update takes so the reduction leaves the operand unchanged."""
    np_t = dt.numpy_dtype(dtype)
    if kind == "add":  # x + -0 is x for every float, -0 included
        return np.array(-0.0 if np_t.kind == "f" or np_t.name == "bfloat16" else 0, np_t)
    if kind == "mul":
        return np.ones((), np_t)
    if np.issubdtype(np_t, np.integer):
        info = np.iinfo(np_t)
        return np.array(info.min if kind == "max" else info.max, np_t)
    return np.array(-np.inf if kind == "max" else np.inf, np_t)


def _constant_starts_valid(ctx: LoweringContext, idx_name: str, op: hir.Op, wsize: dict) -> bool:
    """True when the indices are constants (or computed from constants: jnp's wrapped negative indices)
    whose every window is in range (no masks needed)."""
    values = ctx.fold(idx_name)
    xt = op.operands[0].type
    dn = hir.ScatterDimensionNumbers.of(op.attrs["scatter_dimension_numbers"])
    if values is None or not xt.is_static or not all(isinstance(v, int) for v in wsize.values()):
        return False
    v = values.astype(np.int64)
    v = v[..., None] if dn.index_vector_dim == v.ndim else np.moveaxis(v, dn.index_vector_dim, -1)
    for c, d in enumerate(dn.scattered_dims_to_operand_dims):
        comp = v[..., c]
        if comp.size and (comp.min() < 0 or comp.max() > xt.shape[d] - wsize[d]):
            return False
    return True


@lowering("stablehlo.scatter", check=_check_scatter, onnx_ops=("ScatterND",),
          conditions="one operand; a set, add, multiply, maximum or minimum combiner")
def lower_scatter(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """ScatterND (reduction none/add/mul/max/min); out-of-range windows are dropped like StableHLO."""
    x, idx_in, upd = inputs
    xt, it, ut = (v.type for v in op.operands)
    dn = hir.ScatterDimensionNumbers.of(op.attrs["scatter_dimension_numbers"])
    kind = scatter_kind(op)
    assert kind is not None
    if xt.rank == 0:
        return _scatter_into_scalar(ctx, op, inputs)
    if (ut.is_static and 0 in ut.shape) or (xt.is_static and 0 in xt.shape):
        return x  # nothing to update, or nothing to update into
    dtype = xt.dtype
    work = dtype if kind == "none" or dtype in dt.kernels("ScatterND") else _REDUCTION_DETOUR[dtype]
    x = ctx.cast_if(x, dtype, work)
    wsize, grid_window, k = _scatter_windows(ctx, dn, xt, ut, upd)
    window_dims = list(dn.update_window_dims)
    u = _permute(ctx, ctx.cast_if(upd, dtype, work), [d for d in range(ut.rank) if d not in window_dims] + window_dims)
    idx, batch = _indices_last(ctx, idx_in, it, dn.index_vector_dim)
    nb = len(batch)
    checked = not _constant_starts_valid(ctx, idx_in, op, wsize)
    starts, valid = _scatter_starts(ctx, dn, x, xt, idx, batch, wsize, checked)
    dim0 = sh.dim(ctx, x, xt, 0)
    scratch = valid is not None and (kind == "none" or _scratch_rows_cheaper(xt, ut))
    if scratch:
        # Invalid windows write into rows appended past the end of axis 0, sliced off afterwards.
        x = _pad_axis0(ctx, x, xt.rank, wsize[0], work)
        starts[0] = ctx.op("Where", [valid, starts.get(0, ctx.scalar(0, "int64")), sh.dim_scalar(ctx, dim0)])
    elif valid is not None:
        u = where(ctx, _unsqueeze_tail(ctx, valid, nb, ut.rank - nb), u, ctx.const(_identity(kind, work)), work)
    grid = _coordinate_grid(ctx, idx, nb, starts, grid_window, wsize, k)
    out = ctx.op("ScatterND", [x, grid, u], reduction=None if kind == "none" else kind)
    if kind in ("max", "min") and work in dt.FLOATS:
        out = _nan_and_zero_ties(ctx, kind, work, x, u, grid, out)
    if scratch:
        out = ctx.op("Slice", [out, ctx.i64([0]), sh.dim_tensor(ctx, dim0), ctx.i64([0])])
    return ctx.cast_if(out, work, dtype)


def _scratch_rows_cheaper(xt: hir.TensorType, ut: hir.TensorType) -> bool:
    """Whether a combining scatter drops its out-of-range windows more cheaply into scratch rows (the
    operand padded and sliced back: two copies of it) than by setting their updates to the combiner's
    identity (a select over the updates, two or three passes). Segment sums (``jax.ops.segment_sum``, a
    graph network's messages) scatter more update elements than they have rows of results; an ``x.at[i]``
    of a few values into a large array scatters fewer. Sizes unknown: the select."""
    if not (xt.is_static and ut.is_static):
        return False
    return 2 * int(np.prod(ut.shape)) >= int(np.prod(xt.shape))


def _scatter_windows(ctx: LoweringContext, dn: hir.ScatterDimensionNumbers, xt: hir.TensorType,
                     ut: hir.TensorType, upd: str) -> tuple[dict[int, int | str], list[int], int]:
    """(window size per operand dim, the window dims that need coordinates, the number of coordinates k).

    Trailing operand dims that each window covers whole, and that no index addresses, need no coordinates.
    """
    rank = xt.rank
    inserted = set(dn.inserted_window_dims) | set(dn.input_batching_dims)
    window = [d for d in range(rank) if d not in inserted]
    wsize: dict[int, int | str] = {d: 1 for d in inserted}
    for j, d in enumerate(window):
        wsize[d] = sh.dim(ctx, upd, ut, dn.update_window_dims[j])
    scattered = list(dn.scattered_dims_to_operand_dims)
    k = rank
    while k > 1 and (k - 1) in window and (k - 1) not in scattered and xt.shape[k - 1] is not None \
            and wsize[k - 1] == xt.shape[k - 1]:
        k -= 1
    return wsize, [d for d in window if d < k], k


def _scatter_starts(ctx: LoweringContext, dn: hir.ScatterDimensionNumbers, x: str, xt: hir.TensorType, idx: str,
                    batch: list[int], wsize: dict[int, int | str], checked: bool) -> tuple[dict[int, str], str | None]:
    """Each window's start per operand dim, clamped, and (when ``checked``) whether it was in range.

    Returns:
        (starts by operand dim, a bool tensor of the batch shape or None when every window is in range).
    """
    starts: dict[int, str] = {}
    valid = None
    for c, d in enumerate(dn.scattered_dims_to_operand_dims):
        s = _component(ctx, idx, c)
        hi = sh.dim_arith(ctx, "Sub", sh.dim(ctx, x, xt, d), wsize[d])
        if checked:
            ok = ctx.op("And", [ctx.op("GreaterOrEqual", [s, ctx.scalar(0, "int64")]),
                                ctx.op("LessOrEqual", [s, sh.dim_scalar(ctx, hi)])])
            valid = ok if valid is None else ctx.op("And", [valid, ok])
            s = sh.clamp(ctx, s, hi)
        starts[d] = s
    for od, idim in zip(dn.input_batching_dims, dn.scatter_indices_batching_dims):
        starts[od] = _batch_iota(ctx, idx, batch.index(idim), len(batch))
    return starts, valid


def _pad_axis0(ctx: LoweringContext, x: str, rank: int, rows: int | str, work: str) -> str:
    """``x`` with ``rows`` zero rows appended to axis 0."""
    if isinstance(rows, str):
        pads = ctx.op("Concat", [ctx.i64([0] * rank), sh.dim_tensor(ctx, rows), ctx.i64([0] * (rank - 1))], axis=0)
    else:
        pads = ctx.i64([0] * rank + [rows] + [0] * (rank - 1))
    return sh.pad(ctx, x, pads, ctx.const(np.zeros((), dt.numpy_dtype(work))), work)


def _nan_and_zero_ties(ctx: LoweringContext, kind: str, work: str, x: str, u: str, grid: str, out: str) -> str:
    """A float ScatterND max/min made to agree with XLA: NaN propagates, and -0 orders below +0.

    ONNX Runtime's does neither; per location, a second ScatterND finds 2 where a NaN reached it, else 1
    where the zero that wins the tie did.
    """
    hit = ctx.cast(ctx.op("ScatterND", [_nan_or_zero_code(ctx, x, kind, work), grid,
                                        _nan_or_zero_code(ctx, u, kind, work)], reduction="max"), work)
    zero = ctx.scalar(-0.0 if kind == "min" else 0.0, work)
    tie = ctx.op("And", [ctx.op("Greater", [hit, ctx.scalar(0.5, work)]), ctx.op("Equal", [out, ctx.scalar(0.0, work)])])
    out = where(ctx, tie, zero, out, work)
    return ctx.op("Where", [ctx.op("Greater", [hit, ctx.scalar(1.5, work)]), ctx.scalar(float("nan"), work), out])


def _scatter_into_scalar(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """A rank-0 operand (``x.at[()].add(y)``): the same scatter into a one-element vector, reshaped
    back (the general lowering indexes axis 0)."""
    x, _, upd = inputs
    xt, it = op.operands[0].type, op.operands[1].type
    dn = hir.ScatterDimensionNumbers.of(op.attrs["scatter_dimension_numbers"])
    batch = tuple(d for i, d in enumerate(it.shape) if i != dn.index_vector_dim)
    if any(d is None for d in batch):
        from jaxconv.errors import UnsupportedError

        raise UnsupportedError("stablehlo.scatter into a scalar with a dynamic number of updates")
    vector = hir.TensorType(xt.dtype, (1,))
    numbers = dataclasses.replace(dn, update_window_dims=(), inserted_window_dims=(0,), input_batching_dims=(),
                                  scatter_indices_batching_dims=(), scattered_dims_to_operand_dims=(0,),
                                  index_vector_dim=len(batch))
    indices = hir.Value(hir.TensorType("int64", batch + (1,)))
    as_vector = hir.Op(op.name, [hir.Value(vector), indices, op.operands[2]], [hir.Value(vector)],
                       {**op.attrs, "scatter_dimension_numbers": numbers}, op.regions, op.location)
    out = lower_scatter(ctx, as_vector, [ctx.op("Reshape", [x, ctx.i64([1])]),
                                         ctx.const(np.zeros(batch + (1,), np.int64)), upd])
    return ctx.op("Reshape", [out, ctx.i64([])])


def _nan_or_zero_code(ctx: LoweringContext, v: str, kind: str, work: str) -> str:
    """uint8 per element of float ``v``: 2 for NaN, 1 for the zero that wins a max/min tie (+0/-0), else 0."""
    zero = ctx.scalar(0.0, work)
    sign = ctx.op("Less" if kind == "min" else "Greater", [ctx.op("Reciprocal", [v]), zero])  # 1/(-0) = -inf
    winner = ctx.op("And", [ctx.op("Equal", [v, zero]), sign])
    return ctx.op("Where", [ctx.op("IsNaN", [v]), ctx.const(np.array(2, np.uint8)), ctx.cast(winner, "uint8")])




# ---- argmax / argmin (two-operand reduce) --------------------------------------------------------
def _eval_body(block: hir.Block, args: Sequence) -> list | None:
    """Evaluate a scalar reducer body on numpy scalars (compare/and/or/not/select/constant only)."""
    env = {a.id: v for a, v in zip(block.args, args)}
    for op in block.ops:
        vals = [env.get(v.id) for v in op.operands]
        if any(v is None for v in vals) and op.name != "stablehlo.constant":
            return None
        name = op.name
        with np.errstate(invalid="ignore"):
            if name == "stablehlo.compare":
                a, b = vals
                res = {"EQ": a == b, "NE": a != b, "LT": a < b, "LE": a <= b, "GT": a > b,
                       "GE": a >= b}[op.attrs["comparison_direction"]]
            elif name == "stablehlo.and":
                res = np.logical_and(*vals)
            elif name == "stablehlo.or":
                res = np.logical_or(*vals)
            elif name == "stablehlo.not" and op.results[0].type.dtype == "bool":
                res = np.logical_not(vals[0])
            elif name == "stablehlo.select":
                res = vals[1] if bool(vals[0]) else vals[2]
            elif name == "stablehlo.constant":
                res = np.asarray(op.attrs["value"]).reshape(-1)[0]
            else:
                return None
        env[op.results[0].id] = res
    out = [env.get(v.id) for v in block.returns]
    return None if any(v is None for v in out) else out


def _samples(dtype: str) -> list:
    if dtype == "bool":
        return [False, True]
    np_t = dt.numpy_dtype(dtype)
    if dtype in dt.FLOATS:
        return [np_t.type(v) for v in (-np.inf, -1.5, 0.0, 2.0, np.inf, np.nan)]
    info = np.iinfo(np_t)
    return [np_t.type(v) for v in (info.min, 0, 1, info.max)]


def match_argminmax(op: hir.Op) -> str | None:
    """'max' or 'min' when a two-operand reduce is JAX's argmax/argmin (first index wins, NaN wins)."""
    if op.name != "stablehlo.reduce" or len(op.operands) != 4 or len(op.results) != 2:
        return None
    vt, it = op.operands[0].type, op.operands[1].type
    if it.dtype not in dt.INTS or vt.dtype not in dt.ONNX_TYPE or len(op.regions) != 1:
        return None
    block = op.regions[0]
    if len(block.args) != 4 or len(block.returns) != 2:
        return None
    values = _samples(vt.dtype)
    for kind in ("max", "min"):
        if _body_agrees(block, values, kind):
            return kind
    return None


def _body_agrees(block: hir.Block, values: list, kind: str) -> bool:
    for a in values:
        for b in values:
            for i, j in ((0, 1), (1, 0)):
                out = _eval_body(block, [a, np.int64(i), b, np.int64(j)])
                if out is None:
                    return False
                va, ia = out
                a_nan, b_nan = _isnan(a), _isnan(b)
                if a_nan and b_nan:
                    if not _isnan(va):
                        return False
                    continue
                if a_nan or b_nan:
                    want_a = a_nan
                elif a == b:
                    want_a = i < j
                else:
                    want_a = bool(a > b) if kind == "max" else bool(a < b)
                want_v, want_i = (a, i) if want_a else (b, j)
                if int(ia) != want_i or not (va == want_v or (_isnan(va) and _isnan(want_v))):
                    return False
    return True


def _isnan(v) -> bool:
    """NaN test for any numpy scalar (bfloat16 scalars are not np.floating)."""
    try:
        return bool(np.isnan(float(v)))
    except (TypeError, ValueError, OverflowError):
        return False


# ReduceMax/ReduceMin kernels in ONNX Runtime (others are moved to an order-preserving dtype).
# float16 goes through float32 (exact): ONNX Runtime 1.32's float16 Equal against a reduced,
# broadcast maximum was measured to miss equal values after a Log/Neg chain.
_ORDER_NATIVE = dt.kernels("ReduceMax") - {"bool"}


def lower_argminmax(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """[best value, its index] for JAX's argmax/argmin reduce: first index on ties, first NaN wins."""
    kind = match_argminmax(op)
    assert kind is not None
    x, ids, init_v, init_i = inputs
    vt, it = op.operands[0].type, op.operands[1].type
    axes = list(op.attrs["dimensions"])
    if any(vt.shape[a] == 0 for a in axes):
        return [_expand_to(ctx, init_v, x, vt, op.results[0].type, axes),
                _expand_to(ctx, init_i, x, vt, op.results[1].type, axes)]
    xw, work = order_preserving(ctx, x, vt.dtype, _ORDER_NATIVE)
    iv, _ = order_preserving(ctx, init_v, vt.dtype, _ORDER_NATIVE)
    reducer = "ReduceMax" if kind == "max" else "ReduceMin"
    pick = "Max" if kind == "max" else "Min"
    axes_t = ctx.i64(axes)
    best = ctx.op(reducer, [xw, axes_t], keepdims=1)
    if work in dt.FLOATS:
        nan_x = ctx.op("IsNaN", [xw])
        any_nan = ctx.cast(ctx.op("ReduceMax", [ctx.cast(nan_x, "uint8"), axes_t], keepdims=1), "bool")
        best = ctx.op("Where", [any_nan, ctx.scalar(float("nan"), work), best])
        best = ctx.op(pick, [best, iv])
        is_best = ctx.op("Or", [ctx.op("And", [any_nan, nan_x]),
                                ctx.op("And", [ctx.op("Not", [any_nan]), ctx.op("Equal", [xw, best])])])
    else:
        best = ctx.op(pick, [best, iv])
        is_best = ctx.op("Equal", [xw, best])
    idt = it.dtype
    iw, iwork = order_preserving(ctx, ids, idt, _ORDER_NATIVE)
    big = ctx.const(np.array(np.iinfo(dt.numpy_dtype(iwork)).max, dt.numpy_dtype(iwork)))
    first = ctx.op("ReduceMin", [ctx.op("Where", [is_best, iw, big]), axes_t], keepdims=1)
    # The init value competes as one more element (JAX's -inf/+inf init never wins over an element).
    init_best = ctx.op("Equal", [iv, best])
    if work in dt.FLOATS:
        init_best = ctx.op("Or", [init_best, ctx.op("And", [ctx.op("IsNaN", [iv]), ctx.op("IsNaN", [best])])])
    iiw, _ = order_preserving(ctx, init_i, idt, _ORDER_NATIVE)
    first = ctx.op("Where", [init_best, ctx.op("Min", [first, iiw]), first])
    squeeze = ctx.i64(axes)
    value = ctx.op("Squeeze", [best, squeeze])
    index = ctx.op("Squeeze", [first, squeeze])
    return [_from_ordered(ctx, value, work, vt.dtype), _from_ordered(ctx, index, iwork, idt)]


def _from_ordered(ctx: LoweringContext, x: str, work: str, dtype: str) -> str:
    if dtype == "uint64":
        return ctx.cast(ctx.op("Sub", [x, ctx.scalar(np.iinfo(np.int64).min, "int64")]), "uint64")
    if dtype == "bool":
        return ctx.op("Not", [ctx.op("Equal", [x, ctx.scalar(0, work)])])
    return ctx.cast_if(x, work, dtype)


def _expand_to(ctx: LoweringContext, init: str, x: str, xt: hir.TensorType, result: hir.TensorType,
               axes: list[int]) -> str:
    kept = [d for d in range(xt.rank) if d not in axes]
    shape = sh.shape_tensor(ctx, [sh.dim(ctx, x, xt, d) for d in kept])
    return expand(ctx, init, shape, result.dtype)
