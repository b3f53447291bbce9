"""Complex reductions with any body (product, lexicographic max/min, ...) over static extents.

The body is lowered on whole (re, im) tensors: ``reduce`` halves each reduced axis (lower half as
accumulators, upper half as values) and folds the init value in last; a cumulative
``reduce_window`` (a window spanning the axis, padded on one side: cumprod, cummax, ...) is a
Hillis-Steele prefix scan, log2(n) steps of the body against the tensor shifted by 1, 2, 4, ...
elements (the shifted-in elements are the init value). Both associate the body differently from
XLA's sequential order: products round differently (within float tolerance), max/min are exact.
"""

from __future__ import annotations

import numpy as np

from jaxconv.onnx.context import LoweringContext
from jaxconv.stablehlo import ir as hir


def _cumulative_axis(op: hir.Op) -> tuple[int, bool] | None:
    """(axis, reverse) for a reduce_window that is a prefix (or suffix) scan along one axis, else None."""
    t = op.operands[0].type
    dims = list(op.attrs.get("window_dimensions") or ())
    pad = op.attrs.get("padding")
    pads = (
        [(0, 0)] * t.rank
        if pad is None
        else [tuple(int(v) for v in row) for row in np.asarray(pad).reshape(t.rank, 2)]
    )
    for key in ("window_strides", "base_dilations", "window_dilations"):
        if any(int(v) != 1 for v in (op.attrs.get(key) or ())):
            return None
    active = [a for a in range(t.rank) if dims[a] != 1 or pads[a] != (0, 0)]
    if len(active) != 1 or t.shape[active[0]] is None:
        return None
    a = active[0]
    n = t.shape[a]
    if dims[a] != n or pads[a] not in ((n - 1, 0), (0, n - 1)):
        return None
    return a, pads[a] == (0, n - 1)


def general_problem(op: hir.Op) -> str | None:
    """Why this complex reduce/reduce_window with a general body cannot be lowered, or None."""
    t = op.operands[0].type
    if op.name == "stablehlo.reduce":
        if any(t.shape[d] is None for d in op.attrs["dimensions"]):
            return "complex reduce with a general body over a dynamic dimension is not lowered"
        return None
    if len(op.results) != 1:
        return "complex reduce_window of several operands at once is not lowered"
    if _cumulative_axis(op) is None:
        return "complex reduce_window with a general body is lowered for cumulative windows only"
    return None


def lower_general(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """A complex reduce (any number of operands) or one-operand cumulative reduce_window with any body."""
    block = op.regions[0]
    n_ops = len(op.results)
    xs, inits = list(inputs[:n_ops]), list(inputs[n_ops:])
    t = op.operands[0].type

    def body(accs: list[str], values: list[str]) -> list[str]:
        return ctx.lower_block(block, accs + values)

    def part(v: str, start: int, stop: int, axis: int) -> str:
        return ctx.op("Slice", [v, ctx.i64([start]), ctx.i64([stop]), ctx.i64([axis])])

    if op.name == "stablehlo.reduce":
        dims = sorted(op.attrs["dimensions"])
        if not dims:
            return xs
        if any(t.shape[d] == 0 for d in dims):
            kept = [d for i, d in enumerate(t.shape) if i not in dims]
            return [
                ctx.op("Expand", [init, ctx.i64(kept + ([2] if v.type.dtype.startswith("complex") else []))])
                for init, v in zip(inits, op.operands)
            ]
        for axis in dims:
            size = t.shape[axis]
            while size > 1:
                h = size // 2
                ys = body([part(x, 0, h, axis) for x in xs], [part(x, h, 2 * h, axis) for x in xs])
                if size % 2:
                    ys = [
                        ctx.op("Concat", [y, part(x, 2 * h, size, axis)], axis=axis) for y, x in zip(ys, xs)
                    ]
                xs, size = ys, h + size % 2
        xs = [ctx.op("Squeeze", [x, ctx.i64(dims)]) for x in xs]
        return body([ctx.op("Expand", [init, ctx.op("Shape", [x])]) for init, x in zip(inits, xs)], xs)
    x, init = xs[0], inits[0]
    found = _cumulative_axis(op)
    assert found is not None
    axis, reverse = found
    n = t.shape[axis]
    assert n is not None
    shape = ctx.op("Shape", [x])
    k = 1
    while k < n:
        fill_shape = ctx.op("ScatterElements", [shape, ctx.i64([axis]), ctx.i64([k])], axis=0)
        fill = ctx.op("Expand", [init, fill_shape])
        if reverse:  # suffix: element i combines with element i + k
            shifted = ctx.op("Concat", [part(x, k, n, axis), fill], axis=axis)
            x = body([x], [shifted])[0]
        else:
            shifted = ctx.op("Concat", [fill, part(x, 0, n - k, axis)], axis=axis)
            x = body([shifted], [x])[0]
        k *= 2
    return [x]


def dynamic_cumsum(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """A complex ``dynamic_reduce_window`` sum that is a scan along a symbolic axis (jnp.cumsum): the real
    scan on each half, its window read from the complex operand's run-time shape.

    Raises:
        UnsupportedError: any other window over symbolic sizes.
    """
    from jaxconv.errors import UnsupportedError
    from jaxconv.onnx.ops._complex import component, pack, parts
    from jaxconv.onnx.ops.dynamic_reduce_window import cumulative_window
    from jaxconv.onnx.ops.reduce import init_is_noop, with_init
    from jaxconv.onnx.ops.reduce_window import cumulative

    t = op.operands[0].type
    scan = cumulative_window(ctx, inputs[0], t.rank, inputs[2:7])
    if scan is None:
        raise UnsupportedError("stablehlo.custom_call @stablehlo.dynamic_reduce_window on complex values "
                               "whose window depends on a symbolic dimension and is not a cumulative sum "
                               "(jnp.cumsum) is not lowered; export with a concrete size for that axis")
    axis, reverse = scan
    work = component(t.dtype)
    halves = []
    for x, init in zip(parts(ctx, inputs[0]), parts(ctx, inputs[1])):
        out = cumulative(ctx, "add", x, work, t.shape, axis, reverse)
        if not init_is_noop(ctx.constant_value(init), "add", work):
            out = with_init(ctx, "add", out, ctx.op("Reshape", [init, ctx.i64([])]), work)
        halves.append(out)
    return pack(ctx, halves[0], halves[1])
