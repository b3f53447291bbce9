"""Elementwise bounds of values computed from constants and inputs: which places of a mask are filled
whatever the inputs.

A causal mask combined with a padding mask that the model takes as an input (``causal & padding``,
``min(causal, padding)``) is not a constant, yet its causal half is filled for every input: a rule that
asks how much of a mask is filled (``masked_softmax``) reads it here. ``evaluate(value)`` gives two arrays
``(lo, hi)``, broadcastable to the value's shape, with every element of the value at run time within
them; an input, or an op not known here, is anything (a float between -inf and inf, a bool 0 or 1).

A heuristic's answer, not an exact one: NaN is not tracked (a NaN constant bounds nothing: its interval is
empty, ``lo = inf``, ``hi = -inf``; a NaN input compares false, but a Min or Max of one is NaN in ORT), so a
rule may read it only to choose whether to fire, never for what it computes.

A mask built at run time over a symbolic length (``Shape``, ``Range``: a causal mask of ``f32[b,t,d]``)
is bounded at a chosen size: ``evaluate(value, size)`` reads every symbolic dimension as ``size`` (static
ones at their value), so its bounds hold for inputs of that size only, a representative reading; without
a size a symbolic dimension is any count.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _constants as constants
from jaxconv.onnx.rewrites import _match as m

Interval = tuple[np.ndarray, np.ndarray]

MAX_ELEMENTS = 1 << 20
_SHAPE_OPS = m.SHAPE_OPS | {"Transpose"}
_COMPARE = frozenset({"Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Equal"})
_LOGIC = frozenset({"And", "Or", "Xor", "Not"})
_ANYTHING = (np.array(-np.inf), np.array(np.inf))
_ANY_BOOL = (np.array(0.0), np.array(1.0))


def evaluate(value: ir.Value | None, size: int | None = None) -> Interval:
    """``(lo, hi)``: every element of ``value`` lies in ``[lo, hi]`` (bools as 0 and 1), whatever the inputs;
    with ``size``, whatever the inputs whose symbolic dimensions are all ``size``."""
    return _evaluate(value, 0, {}, size)


def _anything(value: ir.Value | None) -> Interval:
    return _ANY_BOOL if value is not None and value.dtype == ir.DataType.BOOL else _ANYTHING


def _evaluate(value: ir.Value | None, depth: int, seen: dict[int, Interval], size: int | None) -> Interval:
    if value is None:
        return _ANYTHING
    if id(value) not in seen:
        seen[id(value)] = _computed(value, depth, seen, size)
    return seen[id(value)]


def _dims(shape: ir.Shape | None, size: int | None) -> tuple[int, ...] | None:
    """``shape``'s dimensions, a symbolic one read as ``size``; None where not known."""
    if shape is None:
        return None
    dims = [d if isinstance(d, int) else size for d in shape]
    return None if any(d is None for d in dims) else tuple(dims)


def _shape_of(node: ir.Node, size: int | None) -> Interval | None:
    """A Shape node's output: static dimensions at their value, symbolic ones at ``size`` (any count where
    no size is given)."""
    shape = node.inputs[0].shape
    if shape is None:
        return None
    dims = list(shape)[m.attr(node, "start", 0):m.attr(node, "end", None)]  # ONNX clamps as Python slices
    lo = [d if isinstance(d, int) else (size if size is not None else 0) for d in dims]
    hi = [d if isinstance(d, int) else (size if size is not None else np.inf) for d in dims]
    return np.array(lo, np.float64), np.array(hi, np.float64)


def _range(args: list[Interval]) -> Interval | None:
    """A Range of known scalars: its values; None otherwise."""
    if len(args) != 3 or any(a.size != 1 or not np.array_equal(a, b) for a, b in args):
        return None
    start, limit, delta = (float(a.reshape(-1)[0]) for a, _ in args)
    if delta == 0 or not all(np.isfinite((start, limit, delta))):
        return None
    count = max(int(np.ceil((limit - start) / delta)), 0)
    if count > MAX_ELEMENTS:
        return None
    x = start + delta * np.arange(count, dtype=np.float64)
    return x, x


def _computed(value: ir.Value, depth: int, seen: dict[int, Interval], size: int | None) -> Interval:
    arr = m.const(value)
    if arr is not None:
        return _exact(arr)
    node = m.producer(value)
    if node is None or depth > constants.MAX_DEPTH or node.domain not in ("", "ai.onnx") \
            or not node.inputs or node.inputs[0] is None or len(node.outputs) != 1:
        return _anything(value)
    op = node.op_type
    if op == "Shape":  # the input's shape, not its values
        shaped = _shape_of(node, size)
        return _anything(value) if shaped is None else shaped
    known = op in _SHAPE_OPS or op in _COMPARE or op in _LOGIC or op in (
        "Cast", "Neg", "Add", "Sub", "Mul", "Min", "Max", "Where", "Concat", "Slice", "Pad", "Gather", "Range")
    out = None
    if known:
        args = [_evaluate(v, depth + 1, seen, size) for v in node.inputs]
        try:
            with np.errstate(all="ignore"):
                out = _apply(node, args, size)
        except (ValueError, TypeError, IndexError):
            out = None
    if out is None or out[0].size > MAX_ELEMENTS:  # built from constants by ops not bounded here (Swin's
        arr = constants.evaluate(value)  # ScatterNDs, a lookup at constant ids): exact, or anything
        return _anything(value) if arr is None else _exact(arr)
    return out


def _exact(arr: np.ndarray) -> Interval:
    if arr.dtype.kind not in "biuf" or arr.size > MAX_ELEMENTS:
        return _ANYTHING
    x = arr.astype(np.float64)
    nan = np.isnan(x)
    if nan.any():  # no number: an empty interval (a lookup table's NaN row for ids out of range)
        return np.where(nan, np.inf, x), np.where(nan, -np.inf, x)
    return x, x


def _apply(node: ir.Node, args: list[Interval], size: int | None) -> Interval | None:
    op = node.op_type
    if op == "Range":
        return _range(args)
    (lo, hi) = args[0]
    if op in _SHAPE_OPS:
        if lo.ndim == 0 and hi.ndim == 0:  # the same bounds everywhere: any shape
            return lo, hi
        shape_arg = None if len(args) < 2 else args[1]
        if shape_arg is not None and not np.array_equal(shape_arg[0], shape_arg[1]):
            return None
        if op == "Identity":
            return lo, hi
        lo, hi = (np.array(a) for a in np.broadcast_arrays(lo, hi))
        if op == "Transpose":
            return _transpose(node, lo), _transpose(node, hi)
        arg = None if shape_arg is None else shape_arg[0].astype(np.int64)
        if op == "Expand" and arg is not None:  # left unexpanded, broadcastable to the result (a mask
            rank = len(np.broadcast_shapes(lo.shape, tuple(int(d) for d in np.atleast_1d(arg))))  # spread
            lead = (1,) * (rank - lo.ndim)  # over a symbolic batch and heads would not fit MAX_ELEMENTS)
            return lo.reshape(lead + lo.shape), hi.reshape(lead + hi.shape)
        if op == "Reshape":  # bounds left broadcastable (an Expand's, a Where's) spread to the input's shape:
            full = _dims(node.inputs[0].shape, size)  # a reshape of fewer places would misplace them
            if full is not None and lo.shape != full:
                if int(np.prod(full)) > MAX_ELEMENTS:
                    return None
                lo, hi = np.broadcast_to(lo, full), np.broadcast_to(hi, full)
        lo, hi = constants.shape_op(node, lo, arg), constants.shape_op(node, hi, arg)
        return None if lo is None or hi is None else (lo, hi)
    if op in ("Slice", "Pad", "Gather"):
        return _cut(node, args, size)
    if op == "Concat":
        axis = int(m.attr(node, "axis"))
        parts = []
        for v, (a, b) in zip(node.inputs, args):
            shape = None if v is None else _dims(v.shape, size)
            if shape is None:
                return None
            parts.append((np.broadcast_to(a, shape), np.broadcast_to(b, shape)))
        return np.concatenate([p[0] for p in parts], axis), np.concatenate([p[1] for p in parts], axis)
    if op == "Cast":
        to = ir.DataType(m.attr(node, "to"))
        if to == ir.DataType.BOOL:  # true where the value cannot be 0, false where it can only be 0
            return ((lo > 0) | (hi < 0)).astype(np.float64), np.where((lo == 0) & (hi == 0), 0.0, 1.0)
        if to.is_integer():
            return np.trunc(lo), np.trunc(hi)
        return lo, hi
    if op == "Neg":
        return -hi, -lo
    if op in _LOGIC:
        return _logic(op, args)
    if op in _COMPARE:
        return _compare(op, args[0], args[1])
    if op == "Where" and len(args) == 3:
        (c_lo, c_hi), (a_lo, a_hi), (b_lo, b_hi) = args
        true, false = c_lo >= 1, c_hi <= 0
        return (np.where(true, a_lo, np.where(false, b_lo, np.minimum(a_lo, b_lo))),
                np.where(true, a_hi, np.where(false, b_hi, np.maximum(a_hi, b_hi))))
    if len(args) != 2:
        return None
    (b_lo, b_hi) = args[1]
    if op == "Add":
        return _outward(lo + b_lo, hi + b_hi)
    if op == "Sub":
        return _outward(lo - b_hi, hi - b_lo)
    if op == "Mul":
        corners = [_no_nan(a * b, np.nan) for a in (lo, hi) for b in (b_lo, b_hi)]
        return _outward(np.minimum.reduce(corners), np.maximum.reduce(corners))
    if op == "Min":
        return np.minimum(lo, b_lo), np.minimum(hi, b_hi)
    if op == "Max":
        return np.maximum(lo, b_lo), np.maximum(hi, b_hi)
    return None


def _cut(node: ir.Node, args: list[Interval], size: int | None) -> Interval | None:
    """A Slice or a constant Pad by constants; a Gather at indices not known (any of the table's values)."""
    (lo, hi), rest = args[0], args[1:]
    if node.op_type == "Gather":
        indices = rest[0] if rest else None
        if indices is not None and np.array_equal(indices[0], indices[1]) and lo.ndim:
            return None  # known indices: ``constants.evaluate`` reads the lookup where the table is constant
        return np.array(np.min(lo)), np.array(np.max(hi))
    if any(not np.array_equal(a, b) for a, b in rest):
        return None
    arrays = [a for a, _ in rest]
    if lo.ndim == 0 and hi.ndim == 0 and node.op_type == "Slice":
        return lo, hi
    shape = _dims(node.inputs[0].shape, size) if node.inputs[0] is not None else None
    if shape is None:
        return None
    lo, hi = (np.broadcast_to(a, shape) for a in (lo, hi))
    if node.op_type == "Slice":
        return constants.slice_array(lo, arrays), constants.slice_array(hi, arrays)
    if m.attr(node, "mode", "constant") not in ("constant", b"constant") or not arrays:
        return None
    pads = arrays[0].astype(np.int64).reshape(-1)
    value = float(arrays[1].reshape(-1)[0]) if len(arrays) > 1 and arrays[1].size else 0.0
    axes = arrays[2].astype(np.int64).reshape(-1) % lo.ndim if len(arrays) > 2 else np.arange(lo.ndim)
    if np.any(pads < 0) or len(pads) != 2 * len(axes):
        return None
    widths = [(0, 0)] * lo.ndim
    for k, a in enumerate(axes):
        widths[a] = (int(pads[k]), int(pads[k + len(axes)]))
    return (np.pad(lo, widths, constant_values=value), np.pad(hi, widths, constant_values=value))


def _no_nan(x: np.ndarray, fill: float) -> np.ndarray:
    """inf - inf and inf * 0 bound nothing."""
    return np.where(np.isnan(x), fill, x)


def _outward(lo: np.ndarray, hi: np.ndarray) -> Interval:
    """Exact bounds widened to the float32 values around them: a float32 op rounds its exact result (or
    overflows to an infinity) within them."""
    lo, hi = _no_nan(lo, -np.inf), _no_nan(hi, np.inf)
    lo32, hi32 = lo.astype(np.float32), hi.astype(np.float32)
    lo32 = np.where(lo32 > lo, np.nextafter(lo32, np.float32(-np.inf)), lo32)
    hi32 = np.where(hi32 < hi, np.nextafter(hi32, np.float32(np.inf)), hi32)
    return lo32.astype(np.float64), hi32.astype(np.float64)


def _transpose(node: ir.Node, a: np.ndarray) -> np.ndarray:
    perm = m.attr(node, "perm")
    return np.transpose(a, None if perm is None else [int(p) for p in perm])


def _logic(op: str, args: list[Interval]) -> Interval:
    (a_lo, a_hi) = args[0]
    if op == "Not":
        return 1.0 - a_hi, 1.0 - a_lo
    (b_lo, b_hi) = args[1]
    if op == "And":
        return np.minimum(a_lo, b_lo), np.minimum(a_hi, b_hi)
    if op == "Or":
        return np.maximum(a_lo, b_lo), np.maximum(a_hi, b_hi)
    known = (a_lo == a_hi) & (b_lo == b_hi)  # Xor: known only where both are
    exact = np.not_equal(a_lo, b_lo).astype(np.float64)
    return np.where(known, exact, 0.0), np.where(known, exact, 1.0)


def _compare(op: str, a: Interval, b: Interval) -> Interval:
    (a_lo, a_hi), (b_lo, b_hi) = a, b
    if op == "Less":
        return _compare("Greater", b, a)
    if op == "LessOrEqual":
        return _compare("GreaterOrEqual", b, a)
    if op == "Greater":
        true, false = a_lo > b_hi, a_hi <= b_lo
    elif op == "GreaterOrEqual":
        true, false = a_lo >= b_hi, a_hi < b_lo
    else:  # Equal
        true = (a_lo == a_hi) & (b_lo == b_hi) & (a_lo == b_lo)
        false = (a_hi < b_lo) | (b_hi < a_lo)
    return true.astype(np.float64), np.where(false, 0.0, 1.0)
