"""Work a Scan's body does on each row of a scan input, and on the gates it cuts from them, in fewer nodes.

Runs after ``loops.to_scan``, on a ``lax.scan`` whose input projection ``loops`` hoisted (``xs @ w``
for every step before the loop: one MatMul over every gate's columns, the Scan's one scan input).
Per Scan, each change exact:

- A scan input row read only by a Sub, Mul or Div with a constant that does not broadcast the row
  (or an Add not followed by a Split of the gates) is replaced by that op over the whole input,
  before the Scan (the same op on each element). A bias added before the gates' Split stays in the
  body: hoisted, it would be a node before the Scan (or one MatMul and one Add per gate block, as
  this rule wrote it before), for no time saved (below).
- Slices of one body value that cut it into consecutive pieces along one axis (the others whole)
  are one Split: one kernel instead of one per piece (the sigmoid's r and z halves). The Loop's
  body did not know its shapes when ``symbolic`` merges Slices; the Scan's body has them from its
  inputs (followed here through elementwise ops, Split and MatMul).
- ``Exp(-a)``, ``a`` a sum of the step's row, constants and products ``h @ w`` by a constant ``w``, or
  a gate cut from such a sum by a Split, is computed as ``Exp(a')`` with ``a'`` the same sum of the
  negated terms (of the gate's columns only): ``w``'s columns negated in the body, the row's
  producer before the Scan negated in its constants (``x @ -w``, ``-b``), or, for a whole row of
  another producer, one Neg over the whole input. Negating every term negates each product and each
  rounded sum exactly (round to nearest is symmetric); only the sign of a zero, which Exp does not
  read, and the sign of a NaN, which nothing defines, can differ.
- The gates of a Split that go through the same pointwise nodes (an LSTM's three sigmoids) run
  them once: the columns of every term of the Split's input are permuted the same way (weights,
  biases, the projection before the Scan), so those gates lie side by side, then one Split cuts
  the result. Each element meets the same ops; the ops taken are those whose result does not
  depend on where an element lies in its tensor (ONNX Runtime's Log does, by an ulp at the end of
  its vector loop: it is not taken).
- ``(a + b) + c`` is one ``Sum(a, b, c)`` (ONNX Runtime adds a Sum's inputs in order), except where
  an Add reads a product ``h @ w``, which ONNX Runtime runs inside the MatMul as a Gemm.

A body value emitted twice (the new carry and the step's output) keeps its Identity: ONNX Runtime
1.32 returns wrong values for a Scan whose body lists one value as two outputs.

Figures (ORT 1.32; jaxconv's options; old and new graphs alternating in one process, medians of the
ratio of one thread's CPU time per call). Benchmark GRU (t64 b16 h256): main graph 6 nodes -> 3,
with the body 21 -> 20, CPU time 1.01-1.02x (load 5-8; the bias's Add and the gate Split in every
step cost what the two hoisted projections and Adds did). Adding the bias by a Sum with each
gate's row instead (19 nodes) cost 1.05x: ORT fuses ``row + h @ w`` into a Gemm, a Sum it does not.
Benchmark LSTM (the exact Scan behind the LSTM op's finiteness guard): 32 nodes -> 24, body 23 -> 15.
The outputs are those of the old graph bit for bit with ORT's graph optimizations off; with them on,
ORT fuses different pairs of the two graphs (``x * (1 / y)`` as ``x / y``), both within the
converter's tolerance of jax.jit.
"""

from __future__ import annotations

import re
from typing import Callable

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m

_ELEMENTWISE = ("Add", "Sub", "Mul", "Div")


def rewrite(main: ir.Graph) -> int:
    """Rewrite the per-row work of every Scan in ``main`` (nested ones too); returns how many changes."""
    count = 0
    scans = [n for n in ir.traversal.RecursiveGraphIterator(main) if n.op_type == "Scan" and n.domain == ""]
    for scan in scans:
        if not _plain(scan):
            continue
        count += _hoist_rows(main, scan)
        count += _merge_slices(main, scan)
        count += _fold_negations(main, scan)
        count += _group_chains(main, scan)
        count += _sums(scan)
    return count


def _plain(scan: ir.Node) -> bool:
    """A forward Scan over axis 0 of every input, stacking along axis 0 (the form ``to_scan`` writes)."""
    for name in ("scan_input_axes", "scan_input_directions", "scan_output_axes", "scan_output_directions"):
        attr = scan.attributes.get(name)
        if attr is not None and any(int(v) != 0 for v in attr.value):
            return False
    body = scan.attributes["body"].value
    return len(body.inputs) == len(scan.inputs) and all(v is not None for v in scan.inputs)


def _n_state(scan: ir.Node) -> int:
    return len(scan.inputs) - int(scan.attributes["num_scan_inputs"].value)


def _only_use(value: ir.Value) -> ir.Node | None:
    uses = list(value.uses())
    if len(uses) != 1 or value.is_graph_output():
        return None
    return uses[0].node


def _hoist_rows(main: ir.Graph, scan: ir.Node) -> int:
    count = 0
    changed = True
    while changed:
        changed = False
        for k in range(_n_state(scan), len(scan.inputs)):
            if _hoist_elementwise(main, scan, k):
                count += 1
                changed = True
                break
    return count


def _hoist_elementwise(main: ir.Graph, scan: ir.Node, k: int) -> bool:
    """A row read only by ``row op c`` (a constant that does not broadcast the row) read as that op
    over the whole input, before the Scan; not a bias before a Split of the gates (below)."""
    body = scan.attributes["body"].value
    row, xs = body.inputs[k], scan.inputs[k]
    node = _only_use(row)
    if node is None or node.op_type not in _ELEMENTWISE or node.domain != "" or len(node.inputs) != 2:
        return False
    side = 0 if node.inputs[0] is row else 1
    other = node.inputs[1 - side]
    arr = m.const(other)
    shape, full = m.static_dims(row), m.static_dims(xs)
    out = node.outputs[0]
    if arr is None or shape is None or full is None or other is row or row.dtype is None:
        return False
    if arr.dtype != row.dtype.numpy() or arr.ndim > len(shape) or out.is_graph_output():
        return False
    if node.op_type == "Add" and _split_reader(out) is not None:
        return False
    try:
        if list(np.broadcast_shapes(tuple(shape), arr.shape)) != shape:
            return False
    except ValueError:
        return False
    const = m.new_initializer(main, arr, f"{other.name or 'c'}_rows")
    whole = ir.node(node.op_type, [xs, const] if side == 0 else [const, xs])
    whole.outputs[0].type, whole.outputs[0].shape = xs.type, ir.Shape(full)
    scan.graph.insert_before(scan, whole)
    scan.replace_input_with(k, whole.outputs[0])
    out.replace_all_uses_with(row)
    body.remove(node, safe=True)
    return True


def _split_sizes(split: ir.Node, width: int) -> list[int] | None:
    if "split" in split.attributes:  # opset < 13: the sizes as an attribute
        return [int(v) for v in split.attributes["split"].value]
    if len(split.inputs) > 1 and split.inputs[1] is not None:
        arr = m.const(split.inputs[1])
        return None if arr is None else [int(v) for v in np.atleast_1d(arr)]
    n = len(split.outputs)
    return [width // n] * n if n and width % n == 0 else None


def _last_axis_split(split: ir.Node | None, width: int | None, rank: int) -> list[int] | None:
    """The part widths of ``split`` when it cuts the last of ``rank`` axes (of ``width``) whole."""
    if split is None or split.op_type != "Split" or split.domain != "" or width is None or rank < 1:
        return None
    if int(m.attr(split, "axis", 0)) % rank != rank - 1:
        return None
    sizes = _split_sizes(split, width)
    if sizes is None or len(sizes) != len(split.outputs) or sum(sizes) != width or min(sizes, default=0) <= 0:
        return None
    return sizes


def _split_reader(value: ir.Value) -> ir.Node | None:
    """The Split that alone reads ``value``, along its last axis."""
    split = _only_use(value)
    dims = m.static_dims(value)
    if split is None or not dims or _last_axis_split(split, dims[-1], len(dims)) is None:
        return None
    return split


class _Cols:
    """A signed permutation of a last axis: ``new[..., j] = sign[j] * old[..., perm[j]]``."""

    def __init__(self, perm: np.ndarray, sign: np.ndarray):
        self.perm, self.sign = perm, sign

    @classmethod
    def negation(cls, width: int) -> _Cols:
        return cls(np.arange(width), -np.ones(width, np.int8))

    @property
    def width(self) -> int:
        return len(self.perm)

    def uniform(self) -> bool:
        """Every column the same: no permutation, one sign."""
        return bool(np.array_equal(self.perm, np.arange(self.width)) and np.all(self.sign == self.sign[0]))

    def part_of(self, width: int, start: int) -> _Cols:
        """This on columns ``start:start + self.width`` of an axis of ``width``, the others kept."""
        perm, sign = np.arange(width), np.ones(width, np.int8)
        perm[start:start + self.width] = start + self.perm
        sign[start:start + self.width] = self.sign
        return _Cols(perm, sign)

    def apply(self, arr: np.ndarray) -> np.ndarray:
        wide = np.broadcast_to(arr, arr.shape[:-1] + (self.width,)) if arr.ndim else np.full(self.width, arr)
        out = np.take(wide, self.perm, axis=-1)
        neg = self.sign < 0
        out[..., neg] = -out[..., neg]  # a sign flip, exact (NaN stays NaN)
        return np.ascontiguousarray(out, arr.dtype)


_Edit = Callable[[], None]


def _cols_name(value: ir.Value, default: str) -> str:
    return re.sub(r"(_cols)+(_\d+)?$", "", value.name or default) + "_cols"


def _const_edit(main: ir.Graph, reader: ir.Node, value: ir.Value, arr: np.ndarray, t: _Cols) -> _Edit:
    def edit() -> None:
        new = m.new_initializer(main, t.apply(arr), _cols_name(value, "c"))
        for j, v in enumerate(reader.inputs):
            if v is value:
                reader.replace_input_with(j, new)
    return edit


def _weight_edit(main: ir.Graph, mm: ir.Node, t: _Cols) -> _Edit:
    def edit() -> None:
        w = mm.inputs[1]
        mm.replace_input_with(1, m.new_initializer(main, t.apply(m.const(w)), _cols_name(w, "w")))
    return edit


def _product(value: ir.Value, width: int) -> ir.Node | None:
    """The MatMul by a constant float matrix of ``width`` columns that produces ``value``."""
    mm = m.producer(value, "MatMul")
    w = m.const(mm.inputs[1]) if mm is not None else None
    if w is None or w.dtype.kind != "f" or w.ndim < 2 or w.shape[-1] != width:
        return None
    return mm


def _plan(main: ir.Graph, scan: ir.Node, value: ir.Value | None, t: _Cols, reader: ir.Node,
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
    arr = m.folded(value)  # a constant, or one reshaped in the body (folding runs after the rules)
    if arr is not None:
        return [_const_edit(main, reader, value, arr, t)] if arr.dtype.kind == "f" else None
    if _only_use(value) is not reader or value.dtype is None or not value.dtype.is_floating_point():
        return None
    body = scan.attributes["body"].value
    ins = list(body.inputs)
    if any(value is v for v in ins):
        k = next(j for j, v in enumerate(ins) if v is value)
        if k < _n_state(scan):
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
            if m.folded(v) is None and (dims is None or not dims or dims[-1] != t.width):
                if dims is not None and (not dims or dims[-1] == 1) and t.uniform() and t.sign[0] > 0:
                    continue  # a column broadcast: a permutation does not see it
                return None
            got = _plan(main, scan, v, t, node, shapes)
            if got is None:
                return None
            edits += got
        return edits
    if node.op_type == "Split":
        src = node.inputs[0]
        dims = shapes.get(id(src))
        sizes = _last_axis_split(node, dims[-1] if dims else None, len(dims or ()))
        if sizes is None:
            return None
        j = next(i for i, o in enumerate(node.outputs) if o is value)
        return _plan(main, scan, src, t.part_of(sum(sizes), sum(sizes[:j])), node, shapes)
    return None


def _plan_outer(main: ir.Graph, scan: ir.Node, k: int, value: ir.Value, t: _Cols,
                reader: ir.Node) -> list[_Edit] | None:
    """``_plan`` for the value a scan input reads, before the Scan: ``x @ w`` and ``p + b``
    (recursively) read only there take it in their constants; else, for a negation of every
    column, one Neg before the Scan."""
    graph = scan.graph
    node = value.producer()
    dims = m.static_dims(value)
    if node is not None and node.graph is graph and node.domain == "" and _only_use(value) is reader \
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


def _fold_negations(main: ir.Graph, scan: ir.Node) -> int:
    """``Exp(-a)`` as ``Exp(a')``, ``a'`` the same sum with every term negated (``_plan``). Exp does
    not read the sign of a zero."""
    body = scan.attributes["body"].value
    count = 0
    for neg in [n for n in body if n.op_type == "Neg" and n.domain == ""]:
        out, a = neg.outputs[0], neg.inputs[0]
        uses = list(out.uses())
        if not uses or out.is_graph_output() or any(u.node.op_type != "Exp" or u.node.domain != "" for u in uses):
            continue
        dims = _body_shapes(scan).get(id(a))
        if not dims:
            continue
        edits = _plan(main, scan, a, _Cols.negation(dims[-1]), neg, _body_shapes(scan))
        if edits is None:
            continue
        for edit in edits:
            edit()
        out.replace_all_uses_with(a)
        body.remove(neg, safe=True)
        count += 1
    return count


# elementwise ops whose result for an element does not depend on where it lies in the tensor (ONNX
# Runtime 1.32, one thread and two: Log's does, by an ulp at the vector loop's tail)
_POINTWISE_UNARY = frozenset({"Exp", "Tanh", "Sigmoid", "Reciprocal", "Sqrt", "Abs", "Neg", "Relu", "Erf"})
_POINTWISE_BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min"})


def _chain(value: ir.Value, rank: int) -> list[tuple[ir.Node, tuple]]:
    """The pointwise nodes that read ``value`` one after the other (each alone reading the one before,
    a binary one with a constant that repeats one element), each with what it computes."""
    chain: list[tuple[ir.Node, tuple]] = []
    while True:
        node = _only_use(value)
        if node is None or node.domain != "" or len(node.outputs) != 1 or node.attributes:
            return chain
        if node.op_type in _POINTWISE_UNARY and len(node.inputs) == 1:
            key: tuple = (node.op_type,)
        elif node.op_type in _POINTWISE_BINARY and len(node.inputs) == 2:
            side = 0 if node.inputs[0] is value else 1
            other = node.inputs[1 - side]
            arr = m.repeated_const(other)
            dims = m.static_dims(other)
            if other is value or arr is None or arr.size != 1 or dims is None or len(dims) > rank or any(
                    d != 1 for d in dims):
                return chain
            key = (node.op_type, side, arr.dtype.str, arr.reshape(-1)[:1].tobytes())
        else:
            return chain
        chain.append((node, key))
        value = node.outputs[0]


def _group_chains(main: ir.Graph, scan: ir.Node) -> int:
    """The parts of a Split that go through the same pointwise nodes (the LSTM's three sigmoids) as
    one run of those nodes over their columns put side by side, then a Split of its result: the
    columns of the Split's input are permuted where its terms are made (``_plan``), so the parts
    that share a chain are contiguous. Each element goes through the same ops; only where it lies
    changes."""
    body = scan.attributes["body"].value
    count = 0
    changed = True
    while changed:
        changed = False
        shapes = _body_shapes(scan)
        for split in [n for n in body if n.op_type == "Split" and n.domain == ""]:
            dims = shapes.get(id(split.inputs[0])) if split.inputs else None
            sizes = _last_axis_split(split, dims[-1] if dims else None, len(dims or ()))
            if sizes is None or any(o.is_graph_output() for o in split.outputs):
                continue
            chains = [_chain(o, len(dims)) for o in split.outputs]
            keys = [tuple(k for _, k in c) for c in chains]
            group = next((g for g in ([j for j, k in enumerate(keys) if k == key] for key in keys if key)
                          if len(g) > 1), None)
            if group is None or not _group(main, scan, split, sizes, chains, group, shapes):
                continue
            count += 1
            changed = True
            break
    return count


def _group(main: ir.Graph, scan: ir.Node, split: ir.Node, sizes: list[int], chains: list,
           group: list[int], shapes: dict[int, tuple[int, ...]]) -> bool:
    """Rewrite one group (``_group_chains``); False, changing nothing, when the columns cannot move."""
    body = scan.attributes["body"].value
    first = group[0]
    order = [j for j in range(first) if j not in group] + group + [j for j in range(first, len(sizes)) if j not in group]
    starts = np.cumsum([0, *sizes])
    perm = np.concatenate([np.arange(starts[j], starts[j + 1]) for j in order])
    src = split.inputs[0]
    whole = len(group) == len(sizes)
    if not whole:
        edits = _plan(main, scan, src, _Cols(perm, np.ones(len(perm), np.int8)), split, shapes)
        if edits is None:
            return False
        for edit in edits:
            edit()
    # the Split in the new order, the group's parts as one
    rank = len(shapes[id(src)])
    nodes: list[ir.Node] = []
    if whole:
        block = src
    else:
        merged = [j for j in order if j not in group[1:]]
        new_sizes = [sum(sizes[j] for j in group) if j == first else sizes[j] for j in merged]
        outer = ir.node("Split", [src, m.new_initializer(main, np.array(new_sizes, np.int64), "gate_sizes")],
                        {"axis": rank - 1}, num_outputs=len(merged))
        nodes.append(outer)
        for j, out in zip(merged, outer.outputs):
            out.type = split.outputs[j].type or src.type
            if j != first:
                out.shape = split.outputs[j].shape
                split.outputs[j].replace_all_uses_with(out)
        block = outer.outputs[merged.index(first)]
    # the chain once over the group's columns
    value = block
    for node, _ in chains[first]:
        ins = [value if _is_chain_input(node, v, chains[first]) else v for v in node.inputs]
        twin = ir.node(node.op_type, ins)
        twin.outputs[0].type = node.outputs[0].type or src.type
        nodes.append(twin)
        value = twin.outputs[0]
    parts = ir.node("Split", [value, m.new_initializer(main, np.array([sizes[j] for j in group], np.int64), "gate_sizes")],
                    {"axis": rank - 1}, num_outputs=len(group))
    nodes.append(parts)
    body.insert_before(split, nodes)
    for j, out in zip(group, parts.outputs):
        last = chains[j][-1][0].outputs[0]
        out.type, out.shape = last.type or src.type, last.shape
        _take_over(last, out)
    for j in group:
        for node, _ in reversed(chains[j]):
            body.remove(node, safe=True)
    body.remove(split, safe=True)
    return True


def _is_chain_input(node: ir.Node, value: ir.Value | None, chain: list) -> bool:
    """True when ``value`` is what ``node`` reads from the chain (the part, or the node before)."""
    k = [n for n, _ in chain].index(node)
    prev = chain[k - 1][0].outputs[0] if k else None
    if prev is not None:
        return value is prev
    return value is not None and m.const(value) is None


def _take_over(old: ir.Value, new: ir.Value) -> None:
    old.replace_all_uses_with(new, replace_graph_outputs=True)
    name = old.name
    old.name = None
    new.name = name


def _sums(scan: ir.Node) -> int:
    """``(a + b) + c`` (the inner Add read only by the outer) as ``Sum(a, b, c)``: ONNX Runtime adds a
    Sum's inputs in order, so the bits are the same (floats; ``c + (a + b)`` too, addition
    commutes), one kernel instead of two in every step. Not where either Add reads a product
    (``h @ w``): ONNX Runtime runs that Add inside the MatMul (a Gemm), which a Sum would undo."""
    body = scan.attributes["body"].value
    count = 0
    for node in list(body):
        if node.op_type not in ("Add", "Sum") or node.domain != "" or node.graph is not body:
            continue
        out = node.outputs[0]
        if out.dtype not in (ir.DataType.FLOAT, ir.DataType.DOUBLE) or len(node.inputs) != 2 or _reads_product(node):
            continue
        for side in (0, 1):
            inner = m.producer(node.inputs[side])
            if inner is None or inner.op_type not in ("Add", "Sum") or inner.domain != "" or inner.graph is not body:
                continue
            if _only_use(inner.outputs[0]) is not node or any(v is None for v in inner.inputs) or _reads_product(inner):
                continue
            total = ir.node("Sum", [*inner.inputs, node.inputs[1 - side]])
            m.replace(body, out, total, node)
            body.remove(node, safe=True)
            body.remove(inner, safe=True)
            count += 1
            break
    return count


def _reads_product(node: ir.Node) -> bool:
    return any(m.producer(v, "MatMul") is not None and _only_use(v) is node for v in node.inputs if v is not None)


_UNARY = frozenset({"Exp", "Neg", "Tanh", "Sigmoid", "Identity", "Relu", "Abs", "Log", "Sqrt", "Reciprocal",
                    "Erf", "Sin", "Cos", "Floor", "Ceil", "Sign"})
_BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"})


def _body_shapes(scan: ir.Node) -> dict[int, tuple[int, ...]]:
    """Static shapes of the Scan body's values (by id): the inputs' from the Scan's inputs (a state
    as its initial value, a row as the scan input less its first axis), followed through
    elementwise ops and MatMul."""
    body = scan.attributes["body"].value
    n_state = _n_state(scan)
    shapes: dict[int, tuple[int, ...]] = {}
    for k, v in enumerate(body.inputs):
        outer = m.static_dims(scan.inputs[k])
        known = m.static_dims(v) or (None if outer is None else outer if k < n_state else outer[1:])
        if known is not None:
            shapes[id(v)] = tuple(known)

    def shape(v: ir.Value | None) -> tuple[int, ...] | None:
        if v is None:
            return None
        if id(v) in shapes:
            return shapes[id(v)]
        known = m.static_dims(v)
        if known is None:
            arr = m.folded(v)
            known = None if arr is None else list(arr.shape)
        return None if known is None else tuple(known)

    for node in body:
        ins = [shape(v) for v in node.inputs]
        out: tuple[int, ...] | None = None
        try:
            if node.op_type in _UNARY and len(ins) == 1:
                out = ins[0]
            elif node.op_type in _BINARY and len(ins) == 2 and ins[0] is not None and ins[1] is not None:
                out = tuple(np.broadcast_shapes(ins[0], ins[1]))
            elif node.op_type == "MatMul" and len(ins) == 2 and ins[0] is not None and ins[1] is not None:
                a, b = ins
                if len(a) >= 2 and len(b) >= 2 and a[-1] == b[-2]:
                    out = (*np.broadcast_shapes(a[:-2], b[:-2]), a[-2], b[-1])
            elif node.op_type in ("Sum", "Max", "Min", "Mean") and ins and all(d is not None for d in ins):
                out = tuple(np.broadcast_shapes(*ins))  # type: ignore[arg-type]
            elif node.op_type == "Split" and ins and ins[0] is not None and node.domain == "":
                dims = ins[0]
                axis = int(m.attr(node, "axis", 0))
                sizes = _split_sizes(node, dims[axis]) if -len(dims) <= axis < len(dims) else None
                if sizes is not None and len(sizes) == len(node.outputs) and sum(sizes) == dims[axis]:
                    for o, size in zip(node.outputs, sizes):
                        shapes[id(o)] = tuple(size if a == axis % len(dims) else int(d) for a, d in enumerate(dims))
        except ValueError:
            out = None
        if out is not None and node.domain == "" and len(node.outputs) == 1:
            shapes[id(node.outputs[0])] = tuple(int(d) for d in out)
    return shapes


def _merge_slices(main: ir.Graph, scan: ir.Node) -> int:
    body = scan.attributes["body"].value
    shapes = _body_shapes(scan)
    groups: dict[int, list[tuple[int, int, int, ir.Node]]] = {}
    for node in body:
        dims = shapes.get(id(node.inputs[0])) if node.op_type == "Slice" and node.inputs else None
        cut = _one_axis_cut(node, dims) if dims is not None else None
        if cut is not None:
            groups.setdefault(id(node.inputs[0]), []).append((*cut, node))
    count = 0
    for pieces in groups.values():
        if len(pieces) < 2 or len({axis for axis, _, _, _ in pieces}) != 1:
            continue
        pieces.sort(key=lambda p: p[1])
        axis = pieces[0][0]
        src = pieces[0][3].inputs[0]
        if pieces[0][1] != 0 or pieces[-1][2] != shapes[id(src)][axis] or any(
                p[2] != q[1] for p, q in zip(pieces, pieces[1:])):
            continue
        sizes = m.new_initializer(main, np.array([e - s for _, s, e, _ in pieces], np.int64), "slice_sizes")
        split = ir.node("Split", [src, sizes], {"axis": axis}, num_outputs=len(pieces))
        order = {id(n): k for k, n in enumerate(body)}
        body.insert_before(min((p[3] for p in pieces), key=lambda n: order[id(n)]), split)
        for (_, _, _, node), out in zip(pieces, split.outputs):
            old = node.outputs[0]
            out.type = old.type if old.type is not None else src.type
            out.shape = old.shape
            old.replace_all_uses_with(out, replace_graph_outputs=True)
            name, old.name = old.name, None
            out.name = name
            body.remove(node, safe=True)
        count += 1
    return count


def _one_axis_cut(node: ir.Node, dims: tuple[int, ...]) -> tuple[int, int, int] | None:
    """(axis, start, end) of a Slice of a non-constant value of shape ``dims`` that keeps every axis
    whole but one, with constant bounds and steps of 1."""
    if node.domain != "" or not 3 <= len(node.inputs) <= 5 or m.const(node.inputs[0]) is not None:
        return None
    consts = [m.const(v) if v is not None else None for v in node.inputs[1:]]
    if any(c is None for c, v in zip(consts, node.inputs[1:]) if v is not None):
        return None
    starts, ends = np.atleast_1d(consts[0]), np.atleast_1d(consts[1])
    axes = np.atleast_1d(consts[2]) if len(consts) > 2 and consts[2] is not None else np.arange(len(starts))
    if len(consts) > 3 and consts[3] is not None and np.any(consts[3] != 1):
        return None
    if not len(starts) == len(ends) == len(axes):
        return None
    cut = None
    for s, e, a in zip(starts, ends, axes):
        if not -len(dims) <= int(a) < len(dims):
            return None
        axis = int(a) % len(dims)
        d = dims[axis]
        lo, hi = int(s) + d if s < 0 else int(s), int(e) + d if e < 0 else int(e)
        lo, hi = min(max(lo, 0), d), min(max(hi, 0), d)
        if lo == 0 and hi == d:
            continue
        if cut is not None or not lo < hi:
            return None
        cut = (axis, lo, hi)
    return cut
