"""Values computed from constants only, worked out here: the rules run before the constant folding,
and a mask or a weight is often still an expression of constants then (keras-hub's padding mask of
ones, a transposed and reshaped weight, jnp.var's ``ddof`` guard)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m

MAX_ELEMENTS = 1 << 22
MAX_DEPTH = 64  # ops between a value and its constants (Swin's window mask: a chain of a dozen ScatterNDs)

_BINARY = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Min": np.minimum, "Max": np.maximum,
    "Greater": np.greater, "Less": np.less, "Equal": np.equal, "GreaterOrEqual": np.greater_equal,
    "LessOrEqual": np.less_equal, "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor,
}


_UNARY = {"Not": np.logical_not, "IsNaN": np.isnan, "Neg": np.negative, "Abs": np.abs, "Sqrt": np.sqrt,
          "Reciprocal": np.reciprocal, "Floor": np.floor,
          "Ceil": np.ceil}  # each correctly rounded or exact, as ORT's kernels (Floor: jax.image.resize's indices)


def evaluate(value: ir.Value | None) -> np.ndarray | None:
    """``value``'s content when it is computed from constants only by elementwise arithmetic (correctly
    rounded: Sqrt and Reciprocal, not Exp), comparisons, logic, Where, Casts, Gather, plain ScatterND,
    Concat and shape ops (Unsqueeze, Reshape, Expand, Squeeze, Transpose, Slice); else None."""
    return _evaluate(value, 0, {})


def evaluate_with(value: ir.Value | None, known: dict[ir.Value, np.ndarray]) -> np.ndarray | None:
    """``evaluate`` with the values of ``known`` given (a loop's counter at one step)."""
    return _evaluate(value, 0, {id(v): arr for v, arr in known.items()})


def _evaluate(value: ir.Value | None, depth: int, seen: dict[int, np.ndarray | None]) -> np.ndarray | None:
    """``evaluate``, each value worked out once (``seen``, by id): a mask's expression reads one value twice."""
    if value is not None and id(value) in seen:
        return seen[id(value)]
    arr = _computed(value, depth, seen)
    if value is not None:
        seen[id(value)] = arr
    return arr


def _computed(value: ir.Value | None, depth: int, seen: dict[int, np.ndarray | None]) -> np.ndarray | None:
    arr = m.const(value)
    if arr is not None or value is None or depth > MAX_DEPTH:
        return arr
    node = m.producer(value)
    if node is None or not node.inputs or node.inputs[0] is None:
        return None
    op = node.op_type
    args: list[np.ndarray | None] = []
    for v in node.inputs:  # stop at the first input that is not constant: the result is not either
        args.append(_evaluate(v, depth + 1, seen) if v is not None else None)
        if v is not None and args[-1] is None:
            return None
    x = args[0]
    if x is None:
        return None
    try:
        with np.errstate(all="ignore"):
            if op == "Identity":
                out = x
            elif op == "Cast":
                out = x.astype(ir.DataType(m.attr(node, "to")).numpy())
            elif op in _UNARY:
                out = np.asarray(_UNARY[op](x))
            elif op == "Transpose":
                perm = m.attr(node, "perm")
                out = np.transpose(x, None if perm is None else [int(p) for p in perm])
            elif op == "Slice" and 3 <= len(args) and all(a is not None for a in args[1:]):
                out = slice_array(x, args[1:])
            elif op == "Gather" and len(args) == 2 and args[1] is not None and args[1].dtype.kind in "iu":
                axis = int(m.attr(node, "axis", 0)) % x.ndim
                index = args[1].astype(np.int64)
                if np.any(index < -x.shape[axis]) or np.any(index >= x.shape[axis]):
                    return None  # ONNX leaves an index out of range undefined
                out = np.take(x, np.where(index < 0, index + x.shape[axis], index), axis=axis)
            elif op in ("Unsqueeze", "Squeeze", "Reshape", "Expand"):
                out = shape_op(node, x, args[1] if len(args) > 1 else None)
            elif op == "Concat":
                out = np.concatenate(args, axis=int(m.attr(node, "axis")))
            elif op == "ScatterND" and len(args) == 3:
                out = _scatter(node, x, args[1], args[2])
            elif op == "Where" and len(args) == 3 and args[1] is not None and args[2] is not None:
                out = np.where(x, args[1], args[2])
            elif op == "Div" and x.dtype.kind != "f":
                return None  # ONNX's integer Div truncates
            elif op in ("Min", "Max") and any(a.dtype.kind == "f" and np.isnan(a).any() for a in args if a is not None):
                return None  # ORT's and numpy's NaN rules for Min/Max need not agree
            elif op in _BINARY and len(args) == 2 and args[1] is not None and args[1].dtype == x.dtype:
                out = np.asarray(_BINARY[op](x, args[1]))
            else:
                return None
    except (ValueError, TypeError):
        return None
    if out is None or out.size > MAX_ELEMENTS:
        return None
    return out


def shape_op(node: ir.Node, x: np.ndarray, arg: np.ndarray | None) -> np.ndarray | None:
    """``x`` as the Unsqueeze, Squeeze, Reshape or Expand ``node`` shapes it, ``arg`` its second operand."""
    op = node.op_type
    if arg is None:
        if op == "Squeeze" and m.attr(node, "axes") is None:
            return np.squeeze(x)
        axes = m.attr(node, "axes")
        if axes is None:
            return None
        arg = np.asarray(axes)
    arg = np.atleast_1d(arg).astype(np.int64)
    if op == "Unsqueeze":
        rank = x.ndim + arg.size
        return x.reshape(_unsqueezed(x.shape, sorted(int(a) % rank for a in arg)))
    if op == "Squeeze":
        return np.squeeze(x, tuple(int(a) % x.ndim for a in arg))
    if op == "Reshape":
        if m.attr(node, "allowzero", 0) != 1:
            arg = np.array([x.shape[i] if d == 0 else d for i, d in enumerate(arg)], np.int64)
        return x.reshape([int(d) for d in arg])
    shape = np.broadcast_shapes(x.shape, tuple(int(d) for d in arg))
    if int(np.prod(shape)) > MAX_ELEMENTS:
        return None
    return np.broadcast_to(x, shape)


def _scatter(node: ir.Node, x: np.ndarray, indices: np.ndarray | None, updates: np.ndarray | None
             ) -> np.ndarray | None:
    """A plain ScatterND (no reduction) at indices that do not repeat: ONNX leaves repeats undefined."""
    if indices is None or updates is None or m.attr(node, "reduction", "none") not in ("none", b"none"):
        return None
    rows = indices.reshape(-1, indices.shape[-1]).astype(np.int64)
    if indices.ndim == 0 or rows.shape[1] > x.ndim:
        return None
    dims = np.array(x.shape[:rows.shape[1]], np.int64)
    if np.any(rows < -dims) or np.any(rows >= dims):
        return None
    rows = np.where(rows < 0, rows + dims, rows)
    if len(np.unique(rows, axis=0)) != len(rows):
        return None
    out = np.array(x, copy=True)
    out[tuple(rows.T)] = updates.reshape(len(rows), *x.shape[rows.shape[1]:])
    return out


def slice_array(x: np.ndarray, args: list[np.ndarray]) -> np.ndarray:
    """``x`` as a Slice with constant ``starts, ends[, axes[, steps]]`` (``args``) cuts it."""
    starts, ends = (np.atleast_1d(a).astype(np.int64) for a in args[:2])
    axes = np.atleast_1d(args[2]).astype(np.int64) if len(args) > 2 else np.arange(starts.size)
    steps = np.atleast_1d(args[3]).astype(np.int64) if len(args) > 3 else np.ones(starts.size, np.int64)
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts.tolist(), ends.tolist(), axes.tolist(), steps.tolist()):
        index[a % x.ndim] = slice(*slice(s, e, st).indices(x.shape[a % x.ndim]))
    return x[tuple(index)]


def _unsqueezed(shape: tuple[int, ...], axes: list[int]) -> list[int]:
    dims = list(shape)
    for a in axes:
        dims.insert(a, 1)
    return dims
