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
- Its gates: ``Exp(-a)`` as ``Exp`` of the negated terms, gates that go through the same
  pointwise nodes (an LSTM's three sigmoids, flax's GRUCell's r and z) run them once (``scan_gates``, ``scan_gate_pairs``).
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

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites import scan_gate_pairs, scan_gates
from jaxconv.onnx.rewrites._scan_body import body_shapes, n_state, one_axis_cut, only_use, plain, split_reader

_ELEMENTWISE = ("Add", "Sub", "Mul", "Div")


def rewrite(main: ir.Graph) -> int:
    """Rewrite the per-row work of every Scan in ``main`` (nested ones too); returns how many changes."""
    count = 0
    scans = [n for n in ir.traversal.RecursiveGraphIterator(main) if n.op_type == "Scan" and n.domain == ""]
    for scan in scans:
        if not plain(scan):
            continue
        count += _hoist_rows(main, scan)
        count += _merge_slices(main, scan)
        count += scan_gates.fold_negations(main, scan)
        count += scan_gates.group_chains(main, scan)
        count += scan_gate_pairs.merge_pairs(main, scan)
        count += _sums(scan)
    return count


def _hoist_rows(main: ir.Graph, scan: ir.Node) -> int:
    count = 0
    changed = True
    while changed:
        changed = False
        for k in range(n_state(scan), len(scan.inputs)):
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
    node = only_use(row)
    if node is None or node.op_type not in _ELEMENTWISE or node.domain != "" or len(node.inputs) != 2:
        return False
    side = 0 if node.inputs[0] is row else 1
    other = node.inputs[1 - side]
    arr = m.folded(other)  # a bias reshaped for the row (flax's SimpleCell) is not folded yet
    shape, full = m.static_dims(row), m.static_dims(xs)
    out = node.outputs[0]
    if arr is None or shape is None or full is None or other is row or row.dtype is None:
        return False
    if arr.dtype != row.dtype.numpy() or arr.ndim > len(shape) or out.is_graph_output():
        return False
    if node.op_type == "Add" and split_reader(out) is not None:
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
            if only_use(inner.outputs[0]) is not node or any(v is None for v in inner.inputs) or _reads_product(inner):
                continue
            total = ir.node("Sum", [*inner.inputs, node.inputs[1 - side]])
            m.replace(body, out, total, node)
            body.remove(node, safe=True)
            body.remove(inner, safe=True)
            count += 1
            break
    return count


def _reads_product(node: ir.Node) -> bool:
    return any(m.producer(v, "MatMul") is not None and only_use(v) is node for v in node.inputs if v is not None)

def _merge_slices(main: ir.Graph, scan: ir.Node) -> int:
    body = scan.attributes["body"].value
    shapes = body_shapes(scan)
    groups: dict[int, list[tuple[int, int, int, ir.Node]]] = {}
    for node in body:
        dims = shapes.get(id(node.inputs[0])) if node.op_type == "Slice" and node.inputs else None
        cut = one_axis_cut(node, dims) if dims is not None else None
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
            m.take_over(old, out)
            body.remove(node, safe=True)
        count += 1
    return count
