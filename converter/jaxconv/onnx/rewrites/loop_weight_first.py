"""``W @ hᵀ`` in a loop body (a vmapped Equinox cell) computed as ``h @ Wᵀ``, the Transposes gone.

``eqx.nn.GRUCell`` and ``LSTMCell`` compute ``weight @ x`` for one example; vmapped over the batch
inside ``lax.scan`` the lowering writes, in every step, ``Transpose(h) -> MatMul(W, .)``, then Slices
of the gates' rows or a sum of two such products, and a Transpose back to ``[batch, gates]``. So
the step runs two or four Transposes more than it needs, and the RNN rules (the input projection
hoisted before the loop, the LSTM op, the gate rules of ``scan_rows``) do not see the cell they
know. For a Transpose ``[1, 0]`` of such a value, the value is built transposed:
``MatMul(W, Transpose(v))`` as ``MatMul(v, Wᵀ)`` (``Wᵀ`` a constant), a Slice or Split of rows as the
Slice or Split of the same columns, a pointwise op of such values (and of one-element constants) as
that op of theirs, up to the Transposes, whose readers then read the new values. Each element is the
same dot product of the same row and column, summed over the same ``k`` in ORT's GEMM
(``weight_first``), and the same pointwise ops: the same numbers (the tests compare the bits). Where a
value on the way has a reader other than these, it stays too and is computed twice.

Measured on the zoo's ``eqx_rnn`` (eqx GRUCell then LSTMCell, B4 T64 I32 H128, each driven by
``lax.scan``, vmapped; ORT 1.32, 2 cores, jaxconv's session options, alternating with jax.jit in one
process, load 4.6): the GRU's body 29 -> 20 nodes with its input projection one MatMul before the Scan,
the LSTM the LSTM op (behind its finiteness guard); time over jax.jit's 3.40 -> 1.05, CPU time 3.72 ->
1.16 (a second run, load 5.1: 3.31 -> 1.15, CPU 3.43 -> 1.40).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _constants
from jaxconv.onnx.rewrites import _match as m

_ELEMENTWISE = ("Add", "Sub", "Mul", "Div")
_MAX_DEPTH = 16


def rewrite(main: ir.Graph) -> int:
    """Build the transposed weight-first products of every Loop body in ``main`` (nested ones too) as
    ``h @ Wᵀ``; returns how many Transposes went."""
    count = 0
    loops = [n for n in ir.traversal.RecursiveGraphIterator(main) if n.op_type in ("Loop", "Scan") and n.domain == ""]
    for loop in loops:
        body = loop.attributes["body"].value
        made: dict[int, ir.Value] = {}
        changed = 0
        for t in list(m.each_node(body, "Transpose")):
            if _perm(t) != [1, 0] or not _flippable(t.inputs[0], _MAX_DEPTH):
                continue
            nodes: list[ir.Node] = []
            flipped = _flip(main, t.inputs[0], made, nodes)
            body.insert_before(t, nodes)
            out = t.outputs[0]
            flipped.type = out.type if out.type is not None else flipped.type
            if out.shape is not None:
                flipped.shape = out.shape
            if out.is_graph_output():
                ident = ir.node("Identity", [flipped])
                body.insert_before(t, ident)
                m.take_over(out, ident.outputs[0])
            else:
                out.replace_all_uses_with(flipped)
            changed += 1
        if changed:
            _drop_dead(body)
        count += changed
    return count


def _perm(node: ir.Node) -> list[int] | None:
    perm = m.attr(node, "perm")
    return None if perm is None else [int(p) for p in perm]


def _weight(value: ir.Value | None) -> np.ndarray | None:
    arr = _constants.evaluate(value)
    return arr if arr is not None and arr.ndim == 2 and arr.dtype.kind == "f" else None


def _transposed_input(value: ir.Value | None) -> ir.Value | None:
    """``v`` where ``value`` is ``Transpose(v, [1, 0])``."""
    node = m.producer(value, "Transpose")
    return node.inputs[0] if node is not None and _perm(node) == [1, 0] else None


def _slice_axes(node: ir.Node) -> list[int] | None:
    """The axes (0 or 1) a 2-D Slice with constant starts, ends and unit steps cuts."""
    if len(node.inputs) < 4 or any(m.const(v) is None for v in node.inputs[1:4]):
        return None
    if len(node.inputs) > 4 and node.inputs[4] is not None:
        steps = m.const(node.inputs[4])
        if steps is None or np.any(np.atleast_1d(steps) != 1):
            return None
    axes = [int(a) + 2 if int(a) < 0 else int(a) for a in np.atleast_1d(m.const(node.inputs[3]))]
    return axes if all(a in (0, 1) for a in axes) else None


# whose result for an element does not depend on where it lies (not Log: ``_scan_body``)
_UNARY = frozenset({"Neg", "Exp", "Tanh", "Sigmoid", "Relu", "Abs", "Sqrt", "Reciprocal", "Erf", "Identity"})


def _small_const(value: ir.Value | None) -> bool:
    """A constant of one element, which broadcasts the same way against a value and its transpose."""
    arr = m.folded(value)
    return arr is not None and arr.size == 1 and arr.ndim <= 2


def _flippable(value: ir.Value | None, depth: int) -> bool:
    """True when ``value`` (2-D) can be built transposed from transposed products: a product by a
    constant weight of a transposed value, Slices and Splits of such, pointwise ops on them (with
    constants of one element)."""
    node = m.producer(value)
    if node is None or depth == 0 or node.domain != "" or (value.dtype is not None and value.dtype.numpy().kind != "f"):
        return False
    op = node.op_type
    if op == "MatMul" and len(node.inputs) == 2:
        w = _weight(node.inputs[0])
        v = _transposed_input(node.inputs[1])
        return w is not None and v is not None and (v.dtype is None or w.dtype == v.dtype.numpy())
    if op == "Slice":
        return _slice_axes(node) is not None and _flippable(node.inputs[0], depth - 1)
    if op == "Split":
        axis = m.attr(node, "axis", 0)
        return axis in (0, 1, -1, -2) and _flippable(node.inputs[0], depth - 1)
    if len(node.outputs) != 1 or node.attributes:
        return False
    if op in _UNARY and len(node.inputs) == 1:
        return _flippable(node.inputs[0], depth - 1)
    if op in _ELEMENTWISE and len(node.inputs) == 2:
        kinds = [_small_const(v) for v in node.inputs]
        return not all(kinds) and all(k or _flippable(v, depth - 1) for v, k in zip(node.inputs, kinds))
    return False


def _flip(main: ir.Graph, value: ir.Value, made: dict[int, ir.Value], nodes: list[ir.Node]) -> ir.Value:
    """``value`` transposed (``_flippable`` said it can be), its new nodes appended to ``nodes``; a value
    built once (a product several Slices read) is read again."""
    if id(value) in made:
        return made[id(value)]
    node = value.producer()
    if node.op_type == "MatMul":
        w = _weight(node.inputs[0])
        wt = m.new_initializer(main, np.ascontiguousarray(w.T), f"{node.inputs[0].name or 'w'}_t")
        new = ir.node("MatMul", [_transposed_input(node.inputs[1]), wt])
    elif node.op_type == "Slice":
        inner = _flip(main, node.inputs[0], made, nodes)
        axes = np.array([1 - a for a in _slice_axes(node)], np.int64)
        axes_value = m.new_initializer(main, axes, "flipped_axes")
        new = ir.node("Slice", [inner, node.inputs[1], node.inputs[2], axes_value, *node.inputs[4:]])
    elif node.op_type == "Split":
        inner = _flip(main, node.inputs[0], made, nodes)
        axis = m.attr(node, "axis", 0) % 2
        attrs = {"axis": 1 - axis}
        if "num_outputs" in node.attributes:
            attrs["num_outputs"] = m.attr(node, "num_outputs")
        new = ir.node("Split", [inner, *node.inputs[1:]], attrs, num_outputs=len(node.outputs))
    else:
        new = ir.node(node.op_type, [v if _small_const(v) else _flip(main, v, made, nodes) for v in node.inputs])
    for old, out in zip(node.outputs, new.outputs):
        out.type = old.type
        dims = m.static_dims(old)
        if dims is not None:
            out.shape = ir.Shape(dims[::-1])
        made[id(old)] = out
    nodes.append(new)
    return made[id(value)]


def _drop_dead(body: ir.Graph) -> None:
    """Remove the body's nodes whose outputs nothing reads (the products the flipped ones replace)."""
    changed = True
    while changed:
        changed = False
        for node in reversed(list(body)):
            if node.domain == "" and node.op_type not in ("Loop", "Scan", "If") and not any(
                    o.uses() or o.is_graph_output() for o in node.outputs):
                body.remove(node, safe=True)
                changed = True
