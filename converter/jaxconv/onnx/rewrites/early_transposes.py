"""A Transpose after Pads, Slices and Concats of one tensor moved before them, onto that smaller tensor.

A convolution's explicit padding at a model's input (Keras' ``ZeroPadding2D`` before the first layer of
MobileNetV3, ResNet, EfficientNet) pads the NHWC image, and the Transpose to NCHW follows the Pad: moved
before it, the Pad reads the NCHW image right before the Conv, which takes it as its own padding
(keras-hub MobileNetV3: its Pad gone, ORT 0.96x the time; ResNet, EfficientNet, MiT, wav2vec2's
feature convolutions one Pad fewer each, 0.99-1.01x). A reflected padding (``jnp.pad(mode="reflect")``:
Slices and Concats of the image) moves the same way.

A Transpose moves through a Concat (along the permuted axis), a Slice of constant axes (the axes
permuted), and a Pad of constant pads (the pads permuted), into each data input; an input read by several
of the nodes it moves through (the Slices of one padded tensor) takes one Transpose. The move is made
where every node it passes is read only by the nodes that move (or by the Transpose itself), the shapes
are known (sizes, or the names of symbolic ones: a batch exported as ``f32[b, ...]``), and one Transpose, of
fewer elements, replaces the one there. Values only move: the numbers
cannot change.

Measured and not made: where the chain starts from two tensors. LongT5's local attention pads its keys
to blocks, slices each block with its neighbours and concatenates the global keys; its four Transposes of
``[2, 8, 35, 4, 32]`` moved onto the blocks (``[2, 8, 9, 4, 32]``) and the global keys (``[2, 8, 8, 4,
32]``) took 24 us less a call in ORT's profile, but its Concats, along an inner axis now, 19 us more, and
the four more Transposes a call cost their own: 1.02x the time (ORT alone, 3 sessions a side).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites import symbolic

_MOVABLE = frozenset({"Concat", "Slice", "Pad", "Identity"})  # (Identities the clean-up removes later)


def rewrite(graph: ir.Graph) -> int:
    """Move the Transposes of ``graph`` (and its subgraphs) before the Concats, Slices and Pads that feed them
    where fewer elements are transposed; returns how many moved."""
    count = 0
    for g in list(m.all_graphs(graph)):
        for node in list(g):
            if node.graph is g and node.op_type == "Transpose" and node.domain in ("", "ai.onnx"):
                count += _move(g, node)
    return count


def _elements(value: ir.Value) -> tuple[int, list[str]] | None:
    """The element count of ``value`` as a number times its symbolic sizes' names (``[b, 66, 66, 3]``: 13068
    and ``['b']``), comparable where the names are the same."""
    dims = m.named_dims(value)
    if dims is None:
        return None
    count, names = 1, []
    for d in dims:
        c, n = symbolic.factors(d)
        count, names = count * c, names + n
    return count, sorted(names)


def _axes(node: ir.Node, rank: int) -> list[int] | None:
    """The axes a Concat, Slice or Pad works on (normalized); None where they are not constants."""
    if node.op_type == "Identity":
        return []
    if node.op_type == "Concat":
        axis = m.attr(node, "axis")
        return None if axis is None else [int(axis) % rank]
    if node.op_type == "Slice":
        if len(node.inputs) < 3:
            return None
        if len(node.inputs) < 4 or node.inputs[3] is None:
            starts = m.const(node.inputs[1])
            return None if starts is None else list(range(len(starts)))
        axes = m.const(node.inputs[3])
        return None if axes is None else [int(a) % rank for a in axes]
    if node.op_type == "Pad":
        if len(node.inputs) < 2 or m.const(node.inputs[1]) is None or m.attr(node, "pads") is not None:
            return None
        if len(node.inputs) > 3 and node.inputs[3] is not None:
            axes = m.const(node.inputs[3])
            return None if axes is None else [int(a) % rank for a in axes]
        return list(range(rank))
    return None


def _data_inputs(node: ir.Node) -> list[ir.Value]:
    return list(node.inputs) if node.op_type == "Concat" else [node.inputs[0]]


def _plan(top: ir.Node, perm: list[int]) -> tuple[list[ir.Node], list[ir.Value]] | None:
    """The nodes a Transpose of ``perm`` moves through (producers first) and the values it lands on."""
    rank = len(perm)
    moved: dict[int, ir.Node] = {}
    todo = [top.inputs[0]]
    while todo:
        value = todo.pop()
        node = value.producer()
        if node is None or id(node) in moved or node.op_type not in _MOVABLE or node.domain not in ("", "ai.onnx") \
                or value.is_graph_output() or _axes(node, rank) is None or len(node.outputs) != 1:
            continue
        if any(i is None or len(m.named_dims(i) or []) != rank for i in _data_inputs(node)):
            continue
        moved[id(node)] = node
        todo.extend(_data_inputs(node))
    # keep only the nodes whose output every reader is the Transpose or a node that moves, repeatedly
    changed = True
    while changed:
        changed = False
        for key, node in list(moved.items()):
            readers = [u.node for u in node.outputs[0].uses()]
            if not all(r is top or id(r) in moved for r in readers):
                del moved[key]
                changed = True
    # only the nodes the Transpose reaches through moved ones
    reached: dict[int, ir.Node] = {}
    todo = [top.inputs[0]]
    while todo:
        node = todo.pop().producer()
        if node is not None and id(node) in moved and id(node) not in reached:
            reached[id(node)] = node
            todo.extend(_data_inputs(node))
    if not reached:
        return None
    order = [n for n in top.graph if id(n) in reached]  # the graph's order: producers first
    landing: dict[int, ir.Value] = {}
    for node in order:
        for value in _data_inputs(node):
            if value.producer() is None or id(value.producer()) not in reached:
                landing[id(value)] = value
    return order, list(landing.values())


def _move(graph: ir.Graph, top: ir.Node) -> int:
    x = top.inputs[0]
    rank = m.rank(x)
    perm = m.transpose_perm(top, rank) if rank is not None else None
    before = _elements(x)
    if perm is None or m.is_identity(perm) or before is None:
        return 0
    plan = _plan(top, perm)
    if plan is None:
        return 0
    order, landing = plan
    if len(landing) != 1:
        return 0  # one Transpose for another (the module docstring: not where the chain starts from two)
    after = _elements(landing[0])
    if after is None or after[1] != before[1] or after[0] >= before[0]:
        return 0
    first = ir.node("Transpose", [landing[0]], attributes={"perm": perm})
    _typed(first.outputs[0], landing[0], perm)
    made = [first]
    new = {id(landing[0]): first.outputs[0]}  # each value the moved nodes read -> its transposed copy
    for node in order:
        copy = _permuted_copy(graph, node, perm, [new[id(v)] for v in _data_inputs(node)])
        _typed(copy.outputs[0], node.outputs[0], perm)
        made.append(copy)
        new[id(node.outputs[0])] = copy.outputs[0]
    m.replace(graph, top.outputs[0], made, top)
    return 1


def _typed(value: ir.Value, like: ir.Value, perm: list[int]) -> None:
    """``value`` takes ``like``'s type and its dimensions permuted by ``perm``."""
    value.type = like.type
    dims = m.named_dims(like)
    if dims is not None:
        value.shape = ir.Shape([dims[p] for p in perm])


def _permuted_copy(graph: ir.Graph, node: ir.Node, perm: list[int], data: list[ir.Value]) -> ir.Node:
    """``node`` on data transposed by ``perm``: its axes (or pads) taken to where ``perm`` puts them."""
    rank = len(perm)
    where = [perm.index(a) for a in range(rank)]  # where each source axis goes
    axes = _axes(node, rank)
    assert axes is not None
    if node.op_type == "Identity":
        return ir.node("Identity", data)
    if node.op_type == "Concat":
        return ir.node("Concat", data, attributes={"axis": where[axes[0]]})
    if node.op_type == "Slice":
        new_axes = m.new_initializer(graph, np.array([where[a] for a in axes], np.int64), "slice_axes")
        rest = list(node.inputs[4:5])
        return ir.node("Slice", [data[0], node.inputs[1], node.inputs[2], new_axes, *rest])
    pads = m.const(node.inputs[1])
    assert pads is not None
    moved = m.moved_pads(pads, [where[a] for a in axes], rank)
    value = node.inputs[2] if len(node.inputs) > 2 else None
    inputs = [data[0], m.new_initializer(graph, moved, "pads")] + ([value] if value is not None else [])
    return ir.node("Pad", inputs, attributes=dict(node.attributes))
