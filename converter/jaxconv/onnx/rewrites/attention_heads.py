"""Attention heads projected head-major: ``x @ W`` split into heads by a Reshape and a Transpose as one
MatMul by the weight laid out per head.

q, k and v are ``Transpose(Reshape(x @ W [+ c], [b, t, h, dh]), [0, 2, 1, 3])`` (k's ``[0, 2, 3, 1]``)
with ``W`` a constant ``[d, h * dh]``. ``Unsqueeze(x, 1) @ W'`` with ``W'`` the weight as ``[h, d, dh]``
gives the ``[b, h, t, dh]`` result directly: each element is the same dot product of a row of ``x`` and
a column of ``W``; a bias ``c`` is added as ``[h, 1, dh]``. k keeps a ``[0, 1, 3, 2]`` Transpose, which
ONNX Runtime folds into the product with q (FusedMatMul), so three of the four Transposes of a layer go;
ORT ran them on one thread. The batched product is a little less efficient than the one product: on the
benchmark transformer (one process alternating, load 5.5-5.7) CPU time per call 0.96x on two threads,
0.98x on one, wall 0.95x and 0.98x; outputs bit for bit the same.

Where every reader of the heads, up to the Transposes ``[0, 2, 1, 3]`` that merge them back to
``[b, t, h, dh]``, treats the two leading axes as batch axes (the products of the heads, the scaling,
the mask, the Softmax), the heads go the other way round, ``[h, b, t, dh]``: ``Unsqueeze(x, 0)`` by the
weight as ``[h, 1, d, dh]``, the same products, and the merge becomes ``[1, 2, 0, 3]``, which moves the
``[b * t, dh]`` blocks of each head in one piece where ``[0, 2, 1, 3]`` moves them batch by batch (ORT's
profile of [8, 4, 128, 64], load 5-7: 60-120 against 170-190 µs, on one thread or two). A mask with a
batch axis, ``[b, 1, 1, L]``, gets a ``[1, 0, 2, 3]`` Transpose, which keeps its memory order. The
benchmark transformer's four merges: 0.83 -> 0.50 ms per call on one thread, 0.73 -> 0.47 on two (a
quieter run: 0.80 -> 0.22); the products' times are the same, CPU time per call 0.98-1.00x (within the
load's noise); outputs bit for bit the same.

Flax BERT divides q by ``sqrt(dh)`` between the Reshape and the Transpose: the same Div by the same
one-element value follows the product per head. The rule then fires on the benchmark BERT too (nodes
172 -> 157): its kernels 39.6 -> 39.5 ms per call on one thread (ORT's profile, load 5: the products per
head take 0.24 ms a layer more than the one product, the 4 Transposes and the Div they drop as much),
CPU time 1.01x, within the noise; outputs bit for bit the same.

Hugging Face's Flax attention moves the probabilities through Transposes and Reshapes that give them
back (``attention._round_trip``); the block reads the probabilities directly instead (the trip would
scramble heads-first values). Its BERT and RoBERTa in the zoo then go heads first: CPU time per call
0.90-0.96x and 0.98x (one thread, alternating, load 6); outputs within 7e-7 of the graph before (the
products per head sum in another order than the one product).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _constants as constants
from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites.attention import _round_trip

_PERMS = ([0, 2, 1, 3], [0, 2, 3, 1])
_MERGE = [0, 2, 1, 3]  # [b, h, t, dh] -> [b, t, h, dh]; [1, 2, 0, 3] from [h, b, t, dh]
# ops that treat the two leading axes of the heads as batch axes: elementwise (their other operands
# broadcast over those axes or are moved with them), batched products, Softmax over a later axis
_ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Min", "Max", "Where", "Exp", "Neg", "Identity", "Cast",
                          "Not", "And", "Or", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual",
                          "IsNaN", "IsInf", "Sqrt", "Abs", "Tanh", "Sigmoid", "Relu", "Erf"})


@dataclass
class _Split:
    """One head split: ``transpose`` of the heads of ``x @ w (+ bias)``."""

    transpose: ir.Node
    x: ir.Value
    w: np.ndarray  # [d, h * dh]
    bias: np.ndarray | None
    heads: int
    size: int
    scale: ir.Node | None = None  # a Div or Mul by a float32 scalar between the Reshape and the Transpose


def rewrite(graph: ir.Graph) -> int:
    """Rewrite the head splits of ``graph`` (not its subgraphs); returns how many."""
    for node in reversed(list(graph)):  # earlier rules' leftovers, which the clean-up drops, read values too
        if all(not out.uses() and not out.is_graph_output() for out in node.outputs):
            graph.remove(node, safe=True)
    splits: dict[int, _Split] = {}
    for node in list(m.each_node(graph, "Transpose")):
        found = _match(node)
        if found is not None:
            splits[id(node.outputs[0])] = found
    first: dict[int, bool] = {}  # per split: heads first; every block is found before the graph changes
    blocks = []
    for key, split in splits.items():
        if key in first:
            continue
        block = _block(graph, split.transpose.outputs[0], splits)
        if block is None or any(id(v) in first for v in block[0]):
            first[key] = False
            continue
        blocks.append(block)
        first.update((id(v), True) for v in block[0])
    for _, nodes, values, sinks, trips in blocks:
        for end, origin in trips:  # the values again: read them directly (the trip would scramble them)
            end.replace_all_uses_with(origin)
        _swap(graph, nodes, [v for v in values if not any(v is end for end, _ in trips)], sinks)
    unsqueezed: dict[tuple[int, int], ir.Value] = {}
    for key, split in splits.items():
        _apply(graph, split, unsqueezed, head_first=first[key])
    return len(splits)


def _single(value: ir.Value | None) -> bool:
    """One reader of ``value``, not counting a rule's leftovers nothing reads."""
    if value is None or value.is_graph_output():
        return False
    memo: dict[int, bool] = {}
    return sum(not _dead(use.node, memo) for use in value.uses()) == 1


def _match(transpose: ir.Node) -> _Split | None:
    perm = list(m.attr(transpose, "perm", []) or [])
    scale = m.producer(transpose.inputs[0], "Div", "Mul")  # BERT's q / sqrt(dh) before its Transpose
    if scale is not None:  # any one-element c: Transpose(R / c) = Transpose(R) / c, element for element
        c = scale.inputs[1]
        if c is None or c.dtype != ir.DataType.FLOAT or c.shape is None or len(c.shape) > 4 \
                or any(d != 1 for d in c.shape) or not _single(scale.outputs[0]):
            return None
    split = m.producer((scale or transpose).inputs[0], "Reshape")
    if perm not in _PERMS or split is None or not _single(split.outputs[0]):
        return None
    heads = split.outputs[0]
    if heads.shape is None or len(heads.shape) != 4 or heads.dtype != ir.DataType.FLOAT:
        return None
    h, dh = heads.shape[2], heads.shape[3]
    y = split.inputs[0]
    if not isinstance(h, int) or not isinstance(dh, int) or h < 1 or dh < 1 or not _single(y):
        return None
    bias = None
    biased = m.product_plus(y)
    if biased is not None:
        product, other = biased
        bias = m.folded(other, constants.MAX_ELEMENTS)
        if bias is None or bias.dtype != np.float32 or bias.size != h * dh or bias.shape[-1:] != (h * dh,) \
                or not _single(product):
            return None
        y = product
    matmul = m.producer(y, "MatMul")
    if matmul is None:
        return None
    x, w_value = matmul.inputs
    w = m.folded(w_value, constants.MAX_ELEMENTS)  # a constant, or one reshaped (not folded yet)
    if x is None or x.shape is None or len(x.shape) != 3 or w is None or w.dtype != np.float32 \
            or w.shape != (x.shape[2], h * dh) or tuple(heads.shape[:2]) != tuple(x.shape[:2]):
        return None
    return _Split(transpose, x, w, bias, h, dh, scale)


def _apply(graph: ir.Graph, split: _Split, unsqueezed: dict[tuple[int, int], ir.Value], head_first: bool) -> None:
    """Replace ``split`` by the product with the weight per head: ``[b, h, t, dh]``, or ``[h, b, t, dh]``."""
    transpose, x, w, h, dh = split.transpose, split.x, split.w, split.heads, split.size
    axis = 0 if head_first else 1
    x4 = unsqueezed.get((id(x), axis))
    if x4 is None or x4.producer() is None or x4.producer().graph is not graph:
        node = ir.node("Unsqueeze", [x, m.new_initializer(graph, np.array([axis], np.int64), "heads_axis")])
        graph.insert_before(transpose, node)
        x4 = unsqueezed[(id(x), axis)] = node.outputs[0]
    per_head = w.reshape(w.shape[0], h, dh).transpose(1, 0, 2)
    lead = (h, 1) if head_first else (h,)
    per_head = m.new_initializer(graph, per_head.reshape(*lead, w.shape[0], dh).copy(), "w_heads")
    nodes = [ir.node("MatMul", [x4, per_head])]
    if split.bias is not None:
        c = m.new_initializer(graph, split.bias.reshape(*lead, 1, dh).copy(), "b_heads")
        nodes.append(ir.node("Add", [nodes[-1].outputs[0], c]))
    if split.scale is not None:  # a scalar: the same op on the same elements, in whichever layout
        nodes.append(ir.node(split.scale.op_type, [nodes[-1].outputs[0], split.scale.inputs[1]]))
    if list(m.attr(transpose, "perm", [])) == [0, 2, 3, 1]:
        nodes.append(ir.node("Transpose", [nodes[-1].outputs[0]], {"perm": [0, 1, 3, 2]}))
    m.replace(graph, transpose.outputs[0], nodes, transpose)  # (the block's shapes are swapped already)


def _swapped(shape: ir.Shape) -> ir.Shape:
    dims = list(shape)
    return ir.Shape([dims[1], dims[0], *dims[2:]])


def _batch_reader(node: ir.Node) -> bool:
    """Whether ``node`` treats the two leading axes of its rank-4 inputs as batch axes."""
    if node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type == "Transpose":
        return list(m.attr(node, "perm", []) or []) == [0, 1, 3, 2]
    if node.op_type in ("Softmax", "LogSoftmax"):
        return m.attr(node, "axis", -1) in (2, 3, -1, -2)
    return node.op_type in _ELEMENTWISE or node.op_type == "MatMul"


Block = tuple[list[ir.Value], list[ir.Node], list[ir.Value], list[ir.Node], list[tuple[ir.Value, ir.Value]]]


def _block(graph: ir.Graph, start: ir.Value, splits: dict[int, _Split]) -> Block | None:
    """(the head splits, the nodes, their rank-4 values, the merging Transposes) of the attention that
    reads ``start``: the rank-4 values joined to it by nodes that treat the leading axes as batch axes,
    when every reader of them is such a node or a merge, and every other input of those nodes broadcasts
    over the leading axes (or has a 1 in one of them); else None."""
    values: dict[int, ir.Value] = {}
    dead: dict[int, bool] = {}
    nodes: dict[int, ir.Node] = {}
    sinks: dict[int, ir.Node] = {}
    sources: list[ir.Value] = []
    same: dict[int, ir.Value] = {}  # the end of a round trip: the value it starts from
    queue = [start]
    while queue:
        value = queue.pop()
        if id(value) in values:
            continue
        if value.is_graph_output() or _rank(value) != 4:
            return None
        values[id(value)] = value
        if id(value) in splits:
            sources.append(value)
        made = value.producer()
        if made is not None and id(value) not in splits and id(value) not in same and id(made) not in nodes:
            if not _batch_reader(made) or made.graph is not graph:
                return None
            nodes[id(made)] = made
            queue.extend(made.outputs)
            queue.extend(_joined(made, splits))
        for use in value.uses():
            node = use.node
            if id(node) in nodes or id(node) in sinks or _dead(node, dead):
                continue
            if node.op_type == "Transpose" and node.domain in ("", "ai.onnx") \
                    and list(m.attr(node, "perm", []) or []) == _MERGE:
                sinks[id(node)] = node
                continue
            trip = _round_trip(value)  # Hugging Face's Transposes and Reshapes that give the value back
            if trip and trip[0] is node:
                same[id(trip[-1].outputs[0])] = value
                queue.append(trip[-1].outputs[0])
                continue
            if not _batch_reader(node) or node.graph is not graph:
                return None
            nodes[id(node)] = node
            queue.extend(node.outputs)
            queue.extend(_joined(node, splits))
    if not sinks or len(sources) < 2:
        return None
    for node in nodes.values():
        for value in node.inputs:
            if value is not None and id(value) not in values and _outside_rank(value) is None:
                return None
    trips = [(values[key], origin) for key, origin in same.items()]
    return sources, list(nodes.values()), list(values.values()), list(sinks.values()), trips


def _joined(node: ir.Node, splits: dict[int, _Split]) -> list[ir.Value]:
    """The inputs of ``node`` that belong to its block: head splits and rank-4 results of batch readers."""
    out = []
    for value in node.inputs:
        if value is None:
            continue
        made = value.producer()
        if id(value) in splits or (made is not None and _batch_reader(made) and _rank(value) == 4
                                   and made.graph is node.graph):
            out.append(value)
    return out


def _rank(value: ir.Value, depth: int = 8) -> int | None:
    """``value``'s rank: its shape's, or for an elementwise result or a product the largest of its
    inputs', for a Transpose or a Softmax its input's."""
    if value.shape is not None:
        return len(value.shape)
    made = value.producer()
    if made is None or depth == 0 or not made.inputs or made.inputs[0] is None:
        return None
    if made.op_type in ("Transpose", "Softmax", "LogSoftmax"):
        return _rank(made.inputs[0], depth - 1)
    if made.op_type not in _ELEMENTWISE | {"Xor", "MatMul"}:
        return None
    ranks = [_rank(v, depth - 1) if v is not None else None for v in made.inputs]
    if None in ranks or (made.op_type == "MatMul" and min(r for r in ranks if r is not None) < 2):
        return None
    return max(r for r in ranks if r is not None)


def _dead(node: ir.Node, memo: dict[int, bool]) -> bool:
    """Whether nothing reads ``node``'s results, but nodes nothing reads (a rule's leftovers, which the
    clean-up drops): no graph output is reached from it. Walked with a list, not recursion: a deep
    graph after the heads (half-float models Cast around every op) would exceed Python's recursion
    limit. ``memo`` (id of a node -> dead) carries what one walk learnt to the next."""
    found = memo.get(id(node))
    if found is not None:
        return found
    reached, todo = {id(node)}, [node]
    while todo:
        for out in todo.pop().outputs:
            if out.is_graph_output():
                memo[id(node)] = False
                return False
            for use in out.uses():
                key = id(use.node)
                if memo.get(key) is False:
                    memo[id(node)] = False
                    return False
                if key not in reached and key not in memo:
                    reached.add(key)
                    todo.append(use.node)
    memo.update(dict.fromkeys(reached, True))  # no graph output reached from any of them either
    return True


def _outside_rank(value: ir.Value) -> int | None:
    """How a value from outside the block broadcasts against its leading axes: 2 (over both: rank 2 or
    less, or static 1s there), 4 (rank 4 with a static 1 in one of them: a Transpose that swaps them
    keeps its memory order); None otherwise."""
    rank = _rank(value)
    if rank is not None and rank <= 2:
        return 2
    lead = _lead(value)
    if lead == [1, 1]:
        return 2
    return 4 if rank == 4 and lead is not None and 1 in lead else None


def _lead(value: ir.Value, depth: int = 8) -> list[object] | None:
    """The two leading dimensions of ``value`` as a rank-4 operand (1 where it broadcasts; a dimension
    that is not known is None): from its shape, or broadcast from an elementwise producer's inputs."""
    if value.shape is not None:
        dims = list(value.shape)
        return ([1] * (4 - len(dims)) + dims)[:2] if len(dims) <= 4 else None
    made = value.producer()
    if made is None or depth == 0 or made.op_type not in _ELEMENTWISE | {"Xor"} or not made.inputs:
        return None
    leads = [_lead(v, depth - 1) if v is not None else None for v in made.inputs]
    if any(lead is None for lead in leads):
        return None
    out: list[object] = []
    for axis in range(2):
        sizes = [lead[axis] for lead in leads if lead is not None and lead[axis] != 1]
        out.append(1 if not sizes else sizes[0] if all(d == sizes[0] for d in sizes) else None)
    return out


def _swap(graph: ir.Graph, nodes: list[ir.Node], values: list[ir.Value], sinks: list[ir.Node]) -> None:
    """The block in ``[h, b, ...]`` order: moved outside operands, the merges, the values' shapes."""
    inside = {id(v) for v in values}
    moved: dict[int, ir.Value] = {}
    for node in nodes:
        for i, value in enumerate(node.inputs):
            if value is None or id(value) in inside or _outside_rank(value) != 4:
                continue
            swapped = moved.get(id(value))
            if swapped is None:
                t = ir.node("Transpose", [value], {"perm": [1, 0, 2, 3]})
                made = value.producer()
                if made is not None and made.graph is graph:
                    graph.insert_after(made, t)
                else:
                    graph.insert_before(next(iter(graph)), t)
                swapped = moved[id(value)] = t.outputs[0]
                swapped.type = value.type
                swapped.shape = _swapped(value.shape) if value.shape is not None else None
            node.replace_input_with(i, swapped)
    for value in values:
        if value.shape is not None:
            value.shape = _swapped(value.shape)
    for sink in sinks:
        sink.attributes["perm"] = ir.AttrInt64s("perm", [1, 2, 0, 3])
