"""Dimensions as products of named run-time sizes, followed through Reshapes and their shape arithmetic.

A function converted with symbolic dimensions computes its Reshape targets at run time (``Concat`` of
constants and ``Shape`` slices, ``ReduceProd`` of a slice where axes merge); ONNX shape inference then
names the merged dimensions ``unk__N``, unrelated to the sizes they are products of. Rules that plan a
layout (``einsum_order``) need the products: ``[2, 4, s*3, t]`` is the merge of ``[2, 4, s, 3, t]``.

A ``Size`` is an integer times a product of named sizes (the graph's dim_params, as ONNX shape inference
propagates them); ``dims`` reads a value's dimensions as Sizes, from its declared shape where every
dimension is known, else from the Reshape or Transpose that produced it; ``entries`` reads the content of
a 1-D integer shape tensor. Both answer None where they cannot say. Named sizes are at least 1 (as
jax.export assumes), so ``-1`` in a Reshape target is the quotient of the products.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Union

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m

GUESS = 64  # a named size's stand-in where sizes are only compared (the cost of a layout)
_DEPTH = 12
_INT_TYPES = frozenset({ir.DataType.INT64, ir.DataType.INT32})
_WHOLE = 1 << 31  # a Slice end at or past this reads an axis of any size whole

Dim = Union[int, str]  # a declared dimension: a number, or a named (symbolic) size


@dataclass(frozen=True)
class Size:
    """``coef`` times the product of the named sizes ``names`` (sorted, repeated for powers)."""

    coef: int
    names: tuple[str, ...] = ()

    def __mul__(self, other: Size) -> Size:
        return Size(self.coef * other.coef, tuple(sorted(self.names + other.names)))

    def over(self, other: Size) -> Size | None:
        """The Size ``q`` with ``q * other == self``, when the names and the integers divide."""
        rest = list(self.names)
        for n in other.names:
            if n not in rest:
                return None
            rest.remove(n)
        if other.coef == 0 or self.coef % other.coef:
            return None
        return Size(self.coef // other.coef, tuple(rest))

    @property
    def static(self) -> int | None:
        return None if self.names else self.coef

    @property
    def unit(self) -> bool:
        return self.coef == 1 and not self.names

    def estimate(self) -> int:
        return self.coef * GUESS ** len(self.names)


ONE = Size(1)


def product(sizes: Sequence[Size]) -> Size:
    out = ONE
    for s in sizes:
        out = out * s
    return out


def estimate(sizes: Sequence[Size]) -> int:
    return math.prod(s.estimate() for s in sizes)


def dims(value: ir.Value | None, depth: int = 0) -> list[Size] | None:
    """``value``'s dimensions: its declared shape where all are known, else through its producer."""
    if value is None or depth > _DEPTH:
        return None
    declared = _declared(value)
    if declared is not None:
        return declared
    node = m.producer(value)
    if node is None or len(node.outputs) != 1:
        return None
    if node.op_type == "Reshape" and len(node.inputs) == 2:
        return reshaped(node, dims(node.inputs[0], depth + 1), depth + 1)
    if node.op_type == "Transpose":
        src, perm = dims(node.inputs[0], depth + 1), m.attr(node, "perm")
        if src is None:
            return None
        perm = list(perm) if perm is not None else list(range(len(src)))[::-1]
        return [src[int(p)] for p in perm] if sorted(int(p) for p in perm) == list(range(len(src))) else None
    if node.op_type == "MatMul" and len(node.inputs) == 2:
        a, b = dims(node.inputs[0], depth + 1), dims(node.inputs[1], depth + 1)
        if a is None or b is None or len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
            return None
        batch = _broadcast(a[:-2], b[:-2])
        return None if batch is None else batch + [a[-2], b[-1]]
    if node.op_type in ("Unsqueeze", "Squeeze") and len(node.inputs) == 2:
        src, axes = dims(node.inputs[0], depth + 1), m.const(node.inputs[1])
        if src is None or axes is None:
            return None
        rank = len(src) + (axes.size if node.op_type == "Unsqueeze" else 0)
        picked = {int(x) % rank for x in np.atleast_1d(axes)}
        if node.op_type == "Squeeze":
            if any(not src[k].unit for k in picked):
                return None
            return [d for k, d in enumerate(src) if k not in picked]
        rest = iter(src)
        return [ONE if k in picked else next(rest) for k in range(rank)]
    return None


def _broadcast(a: list[Size], b: list[Size]) -> list[Size] | None:
    """Numpy broadcasting of two batch shapes; None where two dimensions may differ."""
    rank = max(len(a), len(b))
    a, b = [ONE] * (rank - len(a)) + a, [ONE] * (rank - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x != y and not x.unit and not y.unit:
            return None
        out.append(y if x.unit else x)
    return out


def reshaped(node: ir.Node, before: list[Size] | None, depth: int = 0) -> list[Size] | None:
    """The dimensions a Reshape ``node`` gives a tensor of dimensions ``before``."""
    target = entries(node.inputs[1], depth)
    if before is None or target is None:
        return None
    allowzero = m.attr(node, "allowzero", 0)
    out: list[Size | None] = []
    for k, d in enumerate(target):
        if d.static == 0 and not allowzero:
            if k >= len(before):
                return None
            out.append(before[k])
        else:
            out.append(None if d.static == -1 else d)
    if out.count(None) > 1 or any(d.static is not None and d.static < 0 for d in out if d is not None):
        return None
    if None in out:
        rest = product(before).over(product([d for d in out if d is not None]))
        if rest is None:
            return None
        out[out.index(None)] = rest
    result = [d for d in out if d is not None]
    return result if product(result) == product(before) else None


def entries(value: ir.Value | None, depth: int = 0) -> list[Size] | None:
    """The content of a 1-D (or scalar) integer shape tensor as Sizes, where it can be followed."""
    if value is None or depth > _DEPTH:
        return None
    arr = m.const(value)
    if arr is not None:
        if arr.dtype.kind not in "iu" or arr.ndim > 1 or arr.size > 16:
            return None
        return [Size(int(a)) for a in np.atleast_1d(arr)]
    node = m.producer(value)
    if node is None or (value.dtype is not None and value.dtype not in _INT_TYPES):
        return None
    op, ins = node.op_type, node.inputs
    if op == "Shape":
        shape = dims(ins[0], depth + 1)
        if shape is None:
            return None
        return shape[m.attr(node, "start", 0):m.attr(node, "end", None)]
    if op in ("Cast", "Identity", "Squeeze", "Unsqueeze", "Reshape"):
        if op == "Cast" and (ins[0] is None or ins[0].dtype not in _INT_TYPES):
            return None
        return entries(ins[0], depth + 1)
    if op == "Concat":
        parts = [entries(i, depth + 1) for i in ins]
        return None if any(p is None for p in parts) else [d for p in parts for d in p]
    if op == "ReduceProd":
        axes = m.reduce_axes(node)
        src = entries(ins[0], depth + 1)
        return None if src is None or axes not in (None, (), (0,), (-1,)) else [product(src)]
    if op == "Mul" and len(ins) == 2:
        a, b = entries(ins[0], depth + 1), entries(ins[1], depth + 1)
        if a is None or b is None or len(a) != len(b):
            return None
        return [x * y for x, y in zip(a, b)]
    if op == "Gather" and m.attr(node, "axis", 0) == 0:
        src, idx = entries(ins[0], depth + 1), m.const(ins[1])
        if src is None or idx is None or idx.ndim > 1:
            return None
        try:
            return [src[int(i)] for i in np.atleast_1d(idx)]
        except IndexError:
            return None
    return None


def axis_cut(size: Dim, start: int, end: int) -> tuple[int, int] | str | None:
    """What ``Slice(start, end)`` (step 1) reads of an axis of ``size`` (a number, or a named size):
    ``"whole"``, the (first, end) of a part, or None (a named size read in part: known only at run time)."""
    if not isinstance(size, int):
        return "whole" if start == 0 and end >= _WHOLE else None
    first, stop, _ = slice(start, end).indices(size)
    return "whole" if (first, stop) == (0, size) else (first, stop)


def named_dims(value: ir.Value, start: int = 0) -> list[int | str] | None:
    """``value``'s declared dims from axis ``start`` on: ints, and symbolic ones by name; None where one is
    unknown or named only by ONNX shape inference (``unk__``, related to no other)."""
    if value.shape is None:
        return None
    out: list[int | str] = []
    for d in list(value.shape)[start:]:
        if isinstance(d, int):
            out.append(int(d))
        elif d.value is not None and not d.value.startswith("unk__"):
            out.append(d.value)
        else:
            return None
    return out


def _declared(value: ir.Value) -> list[Size] | None:
    dims = named_dims(value)
    return None if dims is None else [Size(d) if isinstance(d, int) else Size(1, (d,)) for d in dims]


def reshape_entries(x: list[int | str], target: list[int | str]) -> list[int] | None:
    """A constant Reshape target giving ``target`` from an input of dims ``x`` (ints, symbolic sizes by name): a
    symbolic size on its own axis as 0 (copied), one other as -1; None where that cannot say it."""
    if any(isinstance(d, int) and d <= 0 for d in target):
        return None  # a size 0 (copy or not, by allowzero) or an inferred axis: the computed form keeps it
    entries: list[int | None] = [0 if k < len(x) and d == x[k] and not isinstance(d, int) else
                                 (d if isinstance(d, int) else None) for k, d in enumerate(target)]
    unknown = [k for k, e in enumerate(entries) if e is None]
    if not unknown:
        return entries
    if len(unknown) > 1 or any(e == 0 for e in entries):  # -1 beside a copy: a 0-sized copy leaves 0 / 0
        return None
    entries[unknown[0]] = -1
    return entries
