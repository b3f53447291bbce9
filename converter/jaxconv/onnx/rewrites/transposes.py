"""Transposes that only look general because of size-1 axes, given the form ORT's fast kernel runs.

ONNX Runtime's Transpose moves one axis to another place with a fast copy; any other permutation
takes an element-by-element path several times slower. Size-1 axes count in that test: attention
written with a grouped-heads einsum gives ``[b, h, q, 1, k]`` probabilities transposed by
``[0, 1, 4, 3, 2]``, which is the fast swap of the last two axes of ``[b, h, q, k]`` but runs the
slow path (113 µs against 11 µs on [2, 4, 64, 1, 64], one thread). Such a Transpose becomes
``Reshape`` (size-1 axes dropped) -> ``Transpose`` (one axis moved) -> ``Reshape``, or one ``Reshape``
when only size-1 axes move, also where that is a one-axis move: the fast path still copies every element
(jax.nn.dot_product_attention's grouped scores, ``[b, k, t, 1, s]`` by ``[3, 0, 1, 2, 4]``: 180 µs a call
on [8, 4, 128, 1, 128], one thread), a Reshape none. Values only move: the numbers cannot change. The
Reshape of a symbolic shape copies a symbolic size that stays on its axis (a batch exported symbolic: a
Flax GroupNorm of one group moves its size-1 group axis past the batch, ``[b, c, h, 1, w]`` by
``[0, 3, 1, 2, 4]``); a symbolic size is never taken for 1.

A permutation that stays general once the size-1 axes are gone is left alone: splitting it into two
one-axis moves is faster with ORT's optimizer off, but ORT merges consecutive Transposes again
(through Reshapes too).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites._dim_products import named_dims, reshape_entries


def rewrite(graph: ir.Graph) -> int:
    """Rewrite the slow-path Transposes of ``graph`` and its subgraphs; returns how many."""
    return m.count_everywhere(graph, "Transpose", _one)


def is_one_axis_move(perm: list[int]) -> bool:
    """Whether ``perm`` moves a single axis (ORT's fast Transpose), or is the identity."""
    n = len(perm)
    if perm == list(range(n)):
        return True
    for src in range(n):
        rest = [a for a in range(n) if a != src]
        for dst in range(n):
            if rest[:dst] + [src] + rest[dst:] == perm:
                return True
    return False


def _one(graph: ir.Graph, node: ir.Node) -> int:
    x = node.inputs[0] if node.inputs else None
    if not node.outputs[0].uses() and not node.outputs[0].is_graph_output():
        return 0  # dead (a rule before moved its readers away)
    shape = named_dims(x) if x is not None else None  # symbolic sizes by name: never taken for 1
    if x is None or shape is None:
        return 0
    perm = m.attr(node, "perm")
    perm = list(range(len(shape)))[::-1] if perm is None else [int(p) for p in perm]
    if len(perm) != len(shape) or 1 not in shape or 0 in shape or perm == list(range(len(shape))):
        return 0  # a zero-size tensor moves nothing (and its Reshape would need allowzero=1)
    kept = [a for a in range(len(shape)) if shape[a] != 1]
    inner = [kept.index(p) for p in perm if shape[p] != 1]  # the permutation of the kept axes
    only_unit_axes_move = inner == list(range(len(inner)))
    static = all(isinstance(d, int) for d in shape)
    if not static and not _reads_input_values(x):
        return 0  # a mask computed from shapes: later rules fold through the Transpose, not a Reshape of copied sizes
    if not only_unit_axes_move and (is_one_axis_move(perm) or not is_one_axis_move(inner) or not static):
        return 0
    out_shape = [shape[p] for p in perm]
    nodes: list[ir.Node] = []
    if only_unit_axes_move:
        target = reshape_entries(shape, out_shape)  # a symbolic batch: copied (0) where it stays
        if target is None:
            return 0
        nodes.append(ir.node("Reshape", [x, _i64(target)]))
    else:
        squeezed = ir.node("Reshape", [x, _i64([shape[a] for a in kept])])
        moved = ir.node("Transpose", [squeezed.outputs[0]], attributes={"perm": inner})
        nodes += [squeezed, moved, ir.node("Reshape", [moved.outputs[0], _i64(out_shape)])]
    consts = [n for v in (nodes[0].inputs[1], nodes[-1].inputs[1]) for n in [v.producer()] if n is not None]
    m.replace(graph, node.outputs[0], list(dict.fromkeys(consts)) + nodes, node)
    return 1


def _reads_input_values(value: ir.Value, limit: int = 64) -> bool:
    """Whether ``value`` is computed from the values of a graph input (not only from constants and input
    shapes, as a causal mask broadcast to a symbolic batch is); True past ``limit`` nodes."""
    seen: set[int] = set()
    frontier = [value]
    while frontier:
        v = frontier.pop()
        if v.is_graph_input():
            return True
        node = v.producer()
        if node is None or id(node) in seen or node.op_type in ("Shape", "Size"):
            continue
        seen.add(id(node))
        if len(seen) > limit or node.op_type in m.CONTROL_OPS:
            return True
        frontier += [i for i in node.inputs if i is not None]
    return False


def _i64(values: list) -> ir.Value:
    return ir.node("Constant", [], {"value": ir.tensor(np.array(values, np.int64))}).outputs[0]
