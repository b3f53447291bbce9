"""Work a Scan's body does on each row of a scan input, done once on the whole input before the Scan.

Runs after ``loops.to_scan``. A ``lax.scan`` whose input projection ``loops`` hoisted (``xs @ w``
for every step before the loop) still adds the bias and splits the gates in every step, and a
sigmoid written ``1 / (1 + exp(-a))`` negates its pre-activation in every step. Per Scan:

- A scan input row read only by an Add, Sub, Mul or Div with a constant that does not broadcast the
  row is replaced by that op over the whole input, before the Scan (the same op on each element).
- A scan input row read only by a Split is split before the Scan, one scan input per part; a Split
  of an elementwise op with a constant is pushed above it (the constant cut with it), and a Split of
  a ``MatMul`` by a constant becomes one MatMul per column block (``split_matmul``, same products).
- Slices of one body value that cut it into consecutive pieces along one axis (the others whole)
  are one Split: one kernel instead of one per piece (the sigmoid's r and z halves). The Loop's
  body did not know its shapes when ``symbolic`` merges Slices; the Scan's body has them from its
  inputs (followed here through elementwise ops and MatMul).
- ``Exp(-a)``, ``a`` a sum of the step's row, a constant and products ``h @ w`` by a constant ``w``,
  is computed as ``Exp(a')`` with ``a'`` the same sum of the negated terms: ``w`` negated in the
  body, the row's producer before the Scan negated in its constants (``x @ -w``, ``-b``), or by one
  Neg over the whole input. Negating every term negates each product and each rounded sum exactly
  (round to nearest is symmetric); only the sign of a zero, which Exp does not read, and the sign
  of a NaN, which nothing defines, can differ.

On the benchmark GRU (t64 b16 h256: a body of 17 kernels becomes 13, the main graph 3 nodes 6, the
same outputs bit for bit) one thread's CPU time per call is 0.95-0.97x the old graph's (ORT 1.32,
old and new alternating in one process, 250-300 rotations, load 8-9; 0.97-0.98x without the Split
of the sigmoid's halves), two threads' 0.95-1.02x. What is left is mostly the two recurrent
products of each step, at the core's peak (about 100 GFLOP/s), and with two threads each of them
is a parallel section of ORT's pool.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites.split_matmul import _split as _split_matmul

_ELEMENTWISE = ("Add", "Sub", "Mul", "Div")


def rewrite(main: ir.Graph) -> int:
    """Hoist per-row work out of every Scan in ``main`` (nested ones too); returns how many changes."""
    count = 0
    scans = [n for n in ir.traversal.RecursiveGraphIterator(main) if n.op_type == "Scan" and n.domain == ""]
    for scan in scans:
        if not _plain(scan):
            continue
        count += _hoist_rows(main, scan)
        count += _fold_negations(main, scan)
        count += _merge_slices(main, scan)
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
    body = scan.attributes["body"].value
    count = 0
    changed = True
    while changed:
        changed = False
        for k in range(_n_state(scan), len(scan.inputs)):
            if _hoist_elementwise(main, scan, k) or _hoist_split(main, scan, k):
                count += 1
                changed = True
                break
    if count:
        for node in reversed(list(body)):
            if not any(o.uses() or o.is_graph_output() for o in node.outputs):
                body.remove(node, safe=True)
    return count


def _hoist_elementwise(main: ir.Graph, scan: ir.Node, k: int) -> bool:
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


def _hoist_split(main: ir.Graph, scan: ir.Node, k: int) -> bool:
    body = scan.attributes["body"].value
    row, xs = body.inputs[k], scan.inputs[k]
    split = _only_use(row)
    shape, full = m.static_dims(row), m.static_dims(xs)
    if split is None or split.op_type != "Split" or split.domain != "" or shape is None or full is None:
        return False
    axis = int(m.attr(split, "axis", 0))
    if not -len(shape) <= axis < len(shape):
        return False
    axis %= len(shape)
    sizes = _split_sizes(split, shape[axis])
    if sizes is None or len(sizes) != len(split.outputs) or sum(sizes) != shape[axis] or min(sizes) <= 0:
        return False
    if any(o.is_graph_output() for o in split.outputs):
        return False
    graph = scan.graph
    sizes_value = m.new_initializer(main, np.array(sizes, np.int64), "row_split_sizes")
    outer = ir.node("Split", [xs, sizes_value], {"axis": axis + 1}, num_outputs=len(sizes))
    parts_rows = []
    for part, size in zip(outer.outputs, sizes):
        dims = list(full)
        dims[axis + 1] = size
        part.type, part.shape = xs.type, ir.Shape(dims)
        new_row = ir.Value(name=f"{row.name or 'row'}_{len(parts_rows)}", type=row.type, shape=ir.Shape(dims[1:]))
        parts_rows.append(new_row)
    graph.insert_before(scan, outer)
    n = len(sizes)
    inputs = list(scan.inputs)
    for j in range(len(inputs)):
        scan.replace_input_with(j, None)
    new_inputs = inputs[:k] + list(outer.outputs) + inputs[k + 1:]
    scan.resize_inputs(len(new_inputs))
    for j, v in enumerate(new_inputs):
        scan.replace_input_with(j, v)
    scan.attributes["num_scan_inputs"] = ir.AttrInt64("num_scan_inputs",
                                                      int(scan.attributes["num_scan_inputs"].value) + n - 1)
    for old, new in zip(split.outputs, parts_rows):
        old.replace_all_uses_with(new)
    body_inputs = list(body.inputs)
    body.inputs.clear()
    body.inputs.extend(body_inputs[:k] + parts_rows + body_inputs[k + 1:])
    body.remove(split, safe=True)
    _push_split_up(main, graph, outer)
    return True


def _push_split_up(main: ir.Graph, graph: ir.Graph, split: ir.Node) -> None:
    """``Split(op(p, c))`` (op elementwise, ``c`` constant, read only there) as ``op(Split(p), c cut)``
    per part, then ``Split(MatMul(x, w))`` as one MatMul per column block."""
    while True:
        src = split.inputs[0]
        node = m.producer(src, *_ELEMENTWISE)
        full = m.static_dims(src)
        if node is None or node.graph is not graph or full is None or _only_use(src) is not split:
            break
        consts = [m.const(v) for v in node.inputs]
        if len(node.inputs) != 2 or sum(c is not None for c in consts) != 1:
            break
        side = 0 if consts[0] is None else 1
        arr = consts[1 - side]
        p = node.inputs[side]
        if m.static_dims(p) != full or arr.ndim > len(full):
            break
        axis = int(m.attr(split, "axis", 0)) % len(full)
        lead = axis - (len(full) - arr.ndim)  # the constant's axis along the split, when it has one
        sizes = [int(m.static_dims(o)[axis]) for o in split.outputs]
        inner = ir.node("Split", [p, split.inputs[1]], {"axis": axis}, num_outputs=len(sizes))
        graph.insert_before(node, inner)
        start = 0
        for part, piece, size in zip(split.outputs, inner.outputs, sizes):
            piece.type, piece.shape = part.type, part.shape
            if lead >= 0 and arr.shape[lead] != 1:
                cut = np.take(arr, np.arange(start, start + size), axis=lead)
                c = m.new_initializer(main, cut, "row_const_part")
            else:
                c = node.inputs[1 - side]
            start += size
            op = ir.node(node.op_type, [piece, c] if side == 0 else [c, piece])
            m.replace(graph, part, op, split)
        graph.remove(split, safe=True)
        graph.remove(node, safe=True)
        split = inner
    _split_matmul(graph, split)


def _fold_negations(main: ir.Graph, scan: ir.Node) -> int:
    body = scan.attributes["body"].value
    count = 0
    for neg in [n for n in body if n.op_type == "Neg" and n.domain == ""]:
        out = neg.outputs[0]
        uses = list(out.uses())
        if not uses or out.is_graph_output() or any(u.node.op_type != "Exp" or u.node.domain != "" for u in uses):
            continue
        add = m.producer(neg.inputs[0], "Add")
        if add is None or len(add.inputs) != 2 or _only_use(add.outputs[0]) is not neg:
            continue
        if not all(_negatable(scan, v, add) for v in add.inputs):
            continue
        terms = [_negated(main, scan, v) for v in add.inputs]
        new = ir.node("Add", terms)
        new.outputs[0].type, new.outputs[0].shape = out.type, out.shape
        body.insert_before(neg, new)
        out.replace_all_uses_with(new.outputs[0])
        body.remove(neg, safe=True)
        body.remove(add, safe=True)
        count += 1
    return count


def _negatable(scan: ir.Node, value: ir.Value | None, reader: ir.Node) -> bool:
    """True when ``-value`` can be had without a node in the body: a constant, a product by a
    constant (read only by ``reader``), or a scan input row read only by ``reader``."""
    if value is None:
        return False
    arr = m.const(value)
    if arr is not None:
        return arr.dtype.kind == "f"
    body = scan.attributes["body"].value
    if value in body.inputs[_n_state(scan):]:
        return _only_use(value) is reader and value.dtype is not None and value.dtype.is_floating_point()
    mm = m.producer(value, "MatMul")
    if mm is None or _only_use(value) is not reader:
        return False
    w = m.const(mm.inputs[1])
    return w is not None and w.dtype.kind == "f"


def _negated(main: ir.Graph, scan: ir.Node, value: ir.Value) -> ir.Value:
    body = scan.attributes["body"].value
    arr = m.const(value)
    if arr is not None:
        return m.new_initializer(main, -arr, f"{value.name or 'c'}_neg")
    if value in body.inputs:
        k = list(body.inputs).index(value)
        scan.replace_input_with(k, _negated_outer(main, scan.graph, scan, scan.inputs[k]))
        return value
    mm = value.producer()
    assert mm is not None
    w = m.new_initializer(main, -m.const(mm.inputs[1]), f"{mm.inputs[1].name or 'w'}_neg")
    mm.replace_input_with(1, w)
    return value


def _negated_outer(main: ir.Graph, graph: ir.Graph, before: ir.Node, value: ir.Value) -> ir.Value:
    """``-value`` before ``before``: the constants of its producer negated where it is read only by
    ``before`` (``x @ w``, ``p + b``, recursively), else one Neg."""
    node = value.producer()
    if node is not None and node.graph is graph and node.domain == "" and _only_use(value) is before:
        if node.op_type == "MatMul" and m.const(node.inputs[1]) is not None:
            w = m.const(node.inputs[1])
            if w.dtype.kind == "f":
                node.replace_input_with(1, m.new_initializer(main, -w, f"{node.inputs[1].name or 'w'}_neg"))
                return value
        if node.op_type == "Add" and len(node.inputs) == 2:
            consts = [m.const(v) for v in node.inputs]
            if sum(c is not None for c in consts) == 1:
                side = 0 if consts[0] is None else 1
                arr = consts[1 - side]
                if arr.dtype.kind == "f":
                    inner = _negated_outer(main, graph, node, node.inputs[side])
                    node.replace_input_with(side, inner)
                    node.replace_input_with(1 - side, m.new_initializer(main, -arr, "row_const_neg"))
                    return value
    neg = ir.node("Neg", [value])
    neg.outputs[0].type, neg.outputs[0].shape = value.type, value.shape
    graph.insert_before(before, neg)
    return neg.outputs[0]



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
            arr = m.const(v)
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
