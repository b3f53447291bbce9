"""stablehlo.dynamic_reduce_window whose window follows a symbolic dimension: cumulative scans.

``jnp.cumsum`` (and ``lax.cumsum``/``cumprod``) along an axis whose length is symbolic becomes a
``dynamic_reduce_window`` whose window size along that axis is the axis length ``n`` and whose
padding is ``(n - 1, 0)`` (``(0, n - 1)`` reversed): an inclusive scan. The window operands are
computed at run time from the input's shape, so they are read symbolically: each is followed
back through the ONNX shape arithmetic the lowering emitted (Shape, Gather, Cast, Reshape,
Concat, Add, Sub, Mul, Slice) to affine expressions in the operand's dimensions, and the scan
is recognised when the window, strides, dilations and padding are exactly those of one.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from jaxconv.errors import UnsupportedError
from jaxconv.onnx.context import LoweringContext
from jaxconv.stablehlo import ir as hir

# An affine expression: constant term and sorted ((atom, coefficient), ...); an atom is
# ("dim", tensor name, axis) for a run-time dimension.
Affine = tuple[int, tuple[tuple[Any, int], ...]]
_SAME_VALUES = frozenset({"Cast", "Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten"})
# Elementwise ops: with one operand that is not a one-element constant, the result has its shape.
_ELEMENTWISE = frozenset({"Cast", "Identity", "Neg", "Abs", "Not", "Sign", "Floor", "Ceil", "Round", "IsNaN",
                          "IsInf", "Add", "Sub", "Mul", "Div", "Max", "Min", "Equal", "Less", "Greater",
                          "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Where", "Mod"})
_DEPTH = 48


def _const(c: int) -> Affine:
    return (int(c), ())


def _combine(a: Affine, b: Affine, sign: int) -> Affine:
    terms = dict(a[1])
    for atom, k in b[1]:
        terms[atom] = terms.get(atom, 0) + sign * k
    return (a[0] + sign * b[0], tuple(sorted((t, k) for t, k in terms.items() if k)))


def _scale(a: Affine, k: int) -> Affine:
    return (a[0] * k, tuple((t, c * k) for t, c in a[1] if c * k))


def _canonical(ctx: LoweringContext, name: str) -> str:
    """The earliest tensor known to have ``name``'s shape: back through elementwise ops whose other
    operands are one-element constants."""
    for _ in range(_DEPTH):
        node = ctx.producer(name)
        if node is not None and node.op_type == "Slice" and _whole_reversal(ctx, node):
            name = node.inputs[0].name
            continue
        if node is None or node.op_type not in _ELEMENTWISE:
            return name
        inputs = [i.name for i in node.inputs if i is not None and not _one_element(ctx, i.name)]
        full = [i for i in inputs if not _is_expand(ctx, i)]
        if len(full) != 1 or not all(_expands_to(ctx, i, full[0]) for i in inputs if i != full[0]):
            return name
        name = full[0]
    return name


def _whole_reversal(ctx: LoweringContext, node: Any) -> bool:
    """A Slice that reverses whole axes (start -1, end INT64_MIN, step -1): same shape."""
    ins = [i.name if i is not None else None for i in node.inputs]
    if len(ins) < 5:
        return False
    starts, ends, steps = _ints(ctx, ins[1]), _ints(ctx, ins[2]), _ints(ctx, ins[4])
    lowest = int(np.iinfo(np.int64).min)
    return (starts is not None and ends is not None and steps is not None and all(v == -1 for v in starts)
            and all(v == lowest for v in ends) and all(v == -1 for v in steps))


def _is_expand(ctx: LoweringContext, name: str) -> bool:
    node = ctx.producer(name)
    return node is not None and node.op_type == "Expand"


def _expands_to(ctx: LoweringContext, name: str, like: str) -> bool:
    """Whether ``name`` is an Expand to exactly ``like``'s shape (so broadcasting keeps that shape)."""
    node = ctx.producer(name)
    shape = ctx.value(like).shape
    if node is None or shape is None or len(node.inputs) < 2 or node.inputs[1] is None:
        return False
    return values(ctx, node.inputs[1].name) == [dimension(ctx, like, a) for a in range(len(shape))]


def _one_element(ctx: LoweringContext, name: str) -> bool:
    arr = ctx.constant_value(name)
    return arr is not None and np.asarray(arr).size == 1


def dimension(ctx: LoweringContext, name: str, axis: int, depth: int = 0) -> Affine:
    """Dimension ``axis`` of tensor ``name``: its static size; the size an Expand or ConstantOfShape
    that makes it was given (``jnp.ones_like(ids)`` is as long as ``ids``); else an atom."""
    shape = ctx.value(name).shape
    if shape is not None and axis < len(shape) and isinstance(shape[axis], int):
        return _const(shape[axis])
    canonical = _canonical(ctx, name)
    node = ctx.producer(canonical)
    if node is not None and depth < _DEPTH and node.op_type in ("Expand", "ConstantOfShape"):
        arg = node.inputs[1 if node.op_type == "Expand" else 0]
        sizes = values(ctx, arg.name, depth + 1) if arg is not None else None
        rank = len(shape) if shape is not None else len(sizes) if sizes is not None else -1
        if sizes is not None and len(sizes) == rank > axis and (node.op_type == "ConstantOfShape"
                                                                  or _fills(ctx, node, rank)):
            return sizes[axis]
    if node is not None and depth < _DEPTH:
        found = _through_padding(ctx, node, axis, depth + 1)
        if found is not None:
            return found
    return (0, ((("dim", canonical, axis), 1),))


def _equal_dimensions(ctx: LoweringContext, name: str, axis: int, rank: int, depth: int = 0) -> set[Affine]:
    """Expressions of dimension ``axis`` of tensor ``name`` (of ``rank`` axes): ``dimension``'s, and those of
    the operands of the elementwise op that makes it (of the same rank, not one-element constants: in
    StableHLO an elementwise op's operands have its shape), so that a window given as one input's length
    meets a scan of a value computed from another (BLOOM's positions: ``cumsum(where(mask >= 0, 1, mask))``
    over a mask of ones as long as the ids)."""
    found = {dimension(ctx, name, axis)}
    node = ctx.producer(_canonical(ctx, name))
    if node is None or node.op_type not in _ELEMENTWISE or depth >= 8:
        return found
    for v in node.inputs:
        if v is not None and not _one_element(ctx, v.name) and _rank(ctx, v.name) == rank:
            found |= _equal_dimensions(ctx, v.name, axis, rank, depth + 1)
    return found


def _rank(ctx: LoweringContext, name: str, depth: int = 0) -> int | None:
    """How many axes tensor ``name`` has: its StableHLO type's, or for a value a lowering made in between
    (untyped), the most of its elementwise producer's operands (ONNX broadcasting), else None."""
    ttype = ctx.value_types.get(name)
    if ttype is not None:
        return len(ttype.shape)
    if _one_element(ctx, name):
        return None
    node = ctx.producer(name)
    if node is None or node.op_type not in _ELEMENTWISE or depth >= 8:
        return None
    ranks = [_rank(ctx, v.name, depth + 1) for v in node.inputs if v is not None and not _one_element(ctx, v.name)]
    return max(ranks) if ranks and None not in ranks else None


def _through_padding(ctx: LoweringContext, node: Any, axis: int, depth: int) -> Affine | None:
    """Dimension ``axis`` of a ScatterND (its data's), a Pad (its input's plus the amounts), or a
    Slice from 0 with step 1 (its end, when the data is at least that long: a scatter into rows
    padded past the end and sliced back to the operand's length), else None."""
    ins = [i.name if i is not None else None for i in node.inputs]
    if node.op_type == "ScatterND" and ins[0]:
        return dimension(ctx, ins[0], axis, depth)
    if node.op_type == "Pad" and ins[0] and len(ins) > 1 and (len(ins) < 4 or not ins[3]):
        pads = values(ctx, ins[1], depth) if ins[1] else None
        rank = len(pads) // 2 if pads is not None else 0
        if pads is None or axis >= rank:
            return None
        return _combine(dimension(ctx, ins[0], axis, depth), _combine(pads[axis], pads[axis + rank], 1), 1)
    if node.op_type != "Slice" or len(ins) < 4 or not ins[0] or not ins[3]:
        return None
    axes, starts = _ints(ctx, ins[3]), _ints(ctx, ins[1])
    steps = _ints(ctx, ins[4]) if len(ins) > 4 and ins[4] else [1] * len(axes or [])
    if axes is None or starts is None or steps is None or len(axes) != 1:
        return None
    whole = dimension(ctx, ins[0], axis, depth)
    if axes[0] != axis:
        return whole
    ends = values(ctx, ins[2], depth) if ins[2] else None
    if starts != [0] or steps != [1] or ends is None or len(ends) != 1:
        return None
    spare = _combine(whole, ends[0], -1)  # >= 0 when a sum of dimensions (never negative) and a constant >= 0
    return ends[0] if spare[0] >= 0 and all(k > 0 for _, k in spare[1]) else None


def _fills(ctx: LoweringContext, expand: Any, rank: int) -> bool:
    """Whether an Expand's data has at most ``rank`` axes, all of size 1 (its shape, else its value when it
    is computed from constants): then the shape given is the result's."""
    data = expand.inputs[0]
    if data is None:
        return False
    dims = data.shape
    if dims is None:
        known = ctx.fold(data.name)
        dims = np.shape(known) if known is not None else None
    return dims is not None and len(dims) <= rank and all(d == 1 for d in dims)


def _ints(ctx: LoweringContext, name: str | None) -> list[int] | None:
    if not name:
        return None
    arr = ctx.constant_value(name)
    if arr is None:
        arr = ctx.fold(name)
    if arr is None or np.asarray(arr).dtype.kind not in "iu":
        return None
    return [int(v) for v in np.asarray(arr).reshape(-1)]


def values(ctx: LoweringContext, name: str, depth: int = 0) -> list[Affine] | None:
    """The elements of integer tensor ``name`` as affine expressions, or None when unknown."""
    known = _ints(ctx, name)
    if known is not None:
        return [_const(v) for v in known]
    node = ctx.producer(name)
    if node is None or depth > _DEPTH:
        return None
    op = node.op_type
    ins = [i.name if i is not None else None for i in node.inputs]

    def attr(key: str, default: int) -> int:
        a = node.attributes.get(key)
        return a.as_int() if a is not None else default

    if op in _SAME_VALUES:
        return values(ctx, ins[0], depth + 1)  # type: ignore[arg-type]
    if op == "Shape":
        shape = node.inputs[0].shape if node.inputs[0] is not None else None
        start = attr("start", 0)
        if shape is None and start >= 0 and node.attributes.get("end") is not None and attr("end", 0) >= start:
            return [dimension(ctx, ins[0], a) for a in range(start, attr("end", 0))]  # type: ignore[arg-type]
        if shape is None:
            return None
        rank = len(shape)
        end = attr("end", rank)
        start, end = start + rank if start < 0 else start, end + rank if end < 0 else min(end, rank)
        return [dimension(ctx, ins[0], a) for a in range(start, end)]  # type: ignore[arg-type]
    if op == "Concat":
        parts = [values(ctx, i, depth + 1) for i in ins if i]
        if any(p is None for p in parts):
            return None
        return [e for p in parts for e in p]  # type: ignore[union-attr]
    if op == "Gather" and attr("axis", 0) == 0:
        data, idx = values(ctx, ins[0], depth + 1), _ints(ctx, ins[1])  # type: ignore[arg-type]
        if data is None or idx is None:
            return None
        return [data[i] for i in idx]
    if op == "Slice":
        data = values(ctx, ins[0], depth + 1)  # type: ignore[arg-type]
        bounds = [_ints(ctx, i) for i in ins[1:3]]
        axes = _ints(ctx, ins[3]) if len(ins) > 3 and ins[3] else [0]
        steps = _ints(ctx, ins[4]) if len(ins) > 4 and ins[4] else [1]
        if data is None or any(b is None for b in bounds) or axes != [0] or steps is None:
            return None
        return data[slice(bounds[0][0], bounds[1][0], steps[0])]  # type: ignore[index]
    if op in ("Add", "Sub", "Mul"):
        a, b = (values(ctx, i, depth + 1) for i in ins[:2])  # type: ignore[arg-type]
        if a is None or b is None or (len(a) != len(b) and 1 not in (len(a), len(b))):
            return None
        n = max(len(a), len(b))
        a, b = a * n if len(a) == 1 else a, b * n if len(b) == 1 else b
        if op != "Mul":
            return [_combine(x, y, 1 if op == "Add" else -1) for x, y in zip(a, b)]
        out = []
        for x, y in zip(a, b):
            if not x[1]:
                out.append(_scale(y, x[0]))
            elif not y[1]:
                out.append(_scale(x, y[0]))
            else:
                return None
        return out
    return None


def cumulative_window(ctx: LoweringContext, x: str, rank: int,
                      attr_names: Sequence[str]) -> tuple[int, bool] | None:
    """(axis, reverse) when the window operands describe an inclusive scan along one axis, else None."""
    window, strides, base, dilations, padding = (values(ctx, n) for n in attr_names)
    if any(v is None for v in (window, strides, base, dilations, padding)):
        return None
    if any(len(v) != rank for v in (window, strides, base, dilations)):  # type: ignore[arg-type]
        return None
    if len(padding) != 2 * rank:  # type: ignore[arg-type]
        return None
    one, zero = _const(1), _const(0)
    if any(v != one for v in strides + base + dilations):  # type: ignore[operator]
        return None
    active = [a for a in range(rank) if (window[a], padding[2 * a], padding[2 * a + 1]) != (one, zero, zero)]
    if len(active) != 1:
        return None
    a = active[0]
    n = window[a]
    n_minus_one = _combine(n, one, -1)
    if not n[1] or n not in _equal_dimensions(ctx, x, a, rank):  # a static length is the static lowering's case
        return None
    pads = (padding[2 * a], padding[2 * a + 1])
    if pads == (n_minus_one, zero):
        return a, False
    if pads == (zero, n_minus_one):
        return a, True
    return None


def lower_symbolic_window(ctx: LoweringContext, kind: str, x: str, xt: hir.TensorType, init: str,
                          attr_names: Sequence[str]) -> str:
    """A dynamic_reduce_window whose window follows a symbolic dimension, when it is a cumulative scan.

    Raises:
        UnsupportedError: any other window, or a scan this lowering cannot do over a run-time length.
    """
    from jaxconv.onnx.ops.reduce import init_is_noop, with_init
    from jaxconv.onnx.ops.reduce_window import cumulative

    scan = cumulative_window(ctx, x, xt.rank, attr_names)
    if scan is None:
        raise UnsupportedError("stablehlo.dynamic_reduce_window whose window depends on a symbolic "
                               "dimension and is not a cumulative scan (jnp.cumsum) is not lowered; export "
                               "with a concrete size for that axis")
    axis, reverse = scan
    if xt.dtype in ("float16", "bfloat16") or xt.dtype == "bool" or not (
            kind == "add" or (kind == "mul" and ctx.opset >= 26)):
        raise UnsupportedError(f"stablehlo.dynamic_reduce_window: a cumulative {kind} of {xt.dtype} along a "
                               "symbolic axis is not lowered (sums of float32, float64 and integers are; "
                               "products too from opset 26); export with a concrete size for that axis")
    out = cumulative(ctx, kind, x, xt.dtype, xt.shape, axis, reverse)
    if init_is_noop(ctx.constant_value(init), kind, xt.dtype):
        return out
    return with_init(ctx, kind, out, ctx.op("Reshape", [init, ctx.i64([])]), xt.dtype)
