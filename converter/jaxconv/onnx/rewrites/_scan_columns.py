"""Columns of a Scan body's value moved and negated where its terms are made, no node added to the body.

``plan`` follows a body value back through sums and Splits of its last axis to the constants and
products ``h @ w`` it is made of, and up to the producers of scan inputs before the Scan, and
returns the edits that give the value its columns permuted and signed (``Cols``): a weight's or a
constant's columns, a projection's constants before the Scan, or one Neg over a whole scan input.
"""

from __future__ import annotations

import re
from typing import Callable

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _constants, _dim_products
from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites._scan_body import last_axis_split, n_state, only_use


class Cols:
    """A signed permutation of a last axis: ``new[..., j] = sign[j] * old[..., perm[j]]``."""

    def __init__(self, perm: np.ndarray, sign: np.ndarray):
        self.perm, self.sign = perm, sign

    @classmethod
    def negation(cls, width: int) -> Cols:
        return cls(np.arange(width), -np.ones(width, np.int8))

    @property
    def width(self) -> int:
        return len(self.perm)

    def uniform(self) -> bool:
        """Every column the same: no permutation, one sign."""
        return bool(np.array_equal(self.perm, np.arange(self.width)) and np.all(self.sign == self.sign[0]))

    def part_of(self, width: int, start: int) -> Cols:
        """This on columns ``start:start + self.width`` of an axis of ``width``, the others kept."""
        perm, sign = np.arange(width), np.ones(width, np.int8)
        perm[start:start + self.width] = start + self.perm
        sign[start:start + self.width] = self.sign
        return Cols(perm, sign)

    def apply(self, arr: np.ndarray) -> np.ndarray:
        wide = np.broadcast_to(arr, arr.shape[:-1] + (self.width,)) if arr.ndim else np.full(self.width, arr)
        out = np.take(wide, self.perm, axis=-1)
        neg = self.sign < 0
        out[..., neg] = -out[..., neg]  # a sign flip, exact (NaN stays NaN)
        return np.ascontiguousarray(out, arr.dtype)


_Edit = Callable[[], None]


def _cols_name(value: ir.Value, default: str) -> str:
    return re.sub(r"(_cols)+(_\d+)?$", "", value.name or default) + "_cols"


def _const_edit(main: ir.Graph, reader: ir.Node, value: ir.Value, arr: np.ndarray, t: Cols) -> _Edit:
    def edit() -> None:
        new = m.new_initializer(main, t.apply(arr), _cols_name(value, "c"))
        for j, v in enumerate(reader.inputs):
            if v is value:
                reader.replace_input_with(j, new)
    return edit


def _weight_edit(main: ir.Graph, mm: ir.Node, t: Cols) -> _Edit:
    def edit() -> None:
        w = mm.inputs[1]
        mm.replace_input_with(1, m.new_initializer(main, t.apply(_constants.evaluate(w)), _cols_name(w, "w")))
    return edit


def constant(value: ir.Value | None) -> np.ndarray | None:
    """``value``'s content when it is a constant or computed from constants in the body (reshaped,
    sliced: haiku's GRU cuts its bias and weights there); folding runs after the rules."""
    arr = m.folded(value)
    return arr if arr is not None else _constants.evaluate(value)


def _product(value: ir.Value, width: int) -> ir.Node | None:
    """The MatMul by a constant float matrix of ``width`` columns that produces ``value`` (a constant
    or one computed from constants: haiku's GRU slices its recurrent weight in the body)."""
    mm = m.producer(value, "MatMul")
    w = _constants.evaluate(mm.inputs[1]) if mm is not None else None
    if w is None or w.dtype.kind != "f" or w.ndim < 2 or w.shape[-1] != width:
        return None
    return mm


def plan(main: ir.Graph, scan: ir.Node, value: ir.Value | None, t: Cols, reader: ir.Node,
          shapes: dict[int, tuple[int, ...]]) -> list[_Edit] | None:
    """Edits that make the body's ``value`` (read by ``reader``) come out with its last axis
    transformed by ``t``, no node added to the body: constants and weights' columns moved and
    negated, through sums and Splits of the last axis, up to the producers of scan inputs. None when
    some term cannot take it. Each sum of terms so transformed is the transformed sum exactly: a
    permutation moves whole columns (each output column of a product is the same dot product,
    wherever it lies) and round to nearest is symmetric, so negating every term negates each product
    and each rounded sum (only the sign of a NaN, which nothing defines, can differ)."""
    if value is None:
        return None
    arr = constant(value)
    if arr is not None:
        return [_const_edit(main, reader, value, arr, t)] if arr.dtype.kind == "f" else None
    if only_use(value) is not reader or value.dtype is None or not value.dtype.is_floating_point():
        return None
    body = scan.attributes["body"].value
    ins = list(body.inputs)
    if any(value is v for v in ins):
        k = next(j for j, v in enumerate(ins) if v is value)
        if k < n_state(scan):
            return None
        return _plan_outer(main, scan, k, scan.inputs[k], t, scan)
    node = value.producer()
    if node is None or node.domain != "" or node.graph is not body:
        return None
    if node.op_type == "MatMul":
        return [_weight_edit(main, node, t)] if _product(value, t.width) is not None else None
    if node.op_type in ("Add", "Sub", "Sum") and all(v is not None for v in node.inputs):
        edits: list[_Edit] = []
        for v in node.inputs:
            dims = shapes.get(id(v))
            if constant(v) is None and (dims is None or not dims or dims[-1] != t.width):
                if dims is not None and (not dims or dims[-1] == 1) and t.uniform() and t.sign[0] > 0:
                    continue  # a column broadcast: a permutation does not see it
                return None
            got = plan(main, scan, v, t, node, shapes)
            if got is None:
                return None
            edits += got
        return edits
    if node.op_type == "Split":
        src = node.inputs[0]
        dims = shapes.get(id(src))
        sizes = last_axis_split(node, dims[-1] if dims else None, len(dims or ()))
        if sizes is None:
            return None
        j = next(i for i, o in enumerate(node.outputs) if o is value)
        return plan(main, scan, src, t.part_of(sum(sizes), sum(sizes[:j])), node, shapes)
    return None


def _plan_outer(main: ir.Graph, scan: ir.Node, k: int, value: ir.Value, t: Cols,
                reader: ir.Node) -> list[_Edit] | None:
    """``plan`` for the value a scan input reads, before the Scan: ``x @ w`` and ``p + b``
    (recursively) read only there take it in their constants; else, for a negation of every
    column, one Neg before the Scan."""
    graph = scan.graph
    node = value.producer()
    dims = _dim_products.named_dims(value)  # the columns: the last dim (a symbolic batch before it)
    if node is not None and node.graph is graph and node.domain == "" and only_use(value) is reader \
            and dims and dims[-1] == t.width:
        if node.op_type == "MatMul" and _product(value, t.width) is not None:
            return [_weight_edit(main, node, t)]
        if node.op_type == "Add" and len(node.inputs) == 2:
            consts = [m.const(v) for v in node.inputs]
            if sum(c is not None for c in consts) == 1:
                side = 0 if consts[0] is None else 1
                arr = consts[1 - side]
                inner = _plan_outer(main, scan, k, node.inputs[side], t, node)
                if arr.dtype.kind == "f" and inner is not None:
                    return [*inner, _const_edit(main, node, node.inputs[1 - side], arr, t)]
    if reader is not scan or not t.uniform() or t.sign[0] > 0:
        return None

    def negate() -> None:
        neg = ir.node("Neg", [value])
        neg.outputs[0].type, neg.outputs[0].shape = value.type, value.shape
        graph.insert_before(scan, neg)
        scan.replace_input_with(k, neg.outputs[0])
    return [negate]
