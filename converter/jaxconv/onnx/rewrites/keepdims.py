"""A reduction followed by an Unsqueeze of the reduced axes, as one reduction with ``keepdims=1``.

StableHLO reductions drop the reduced axes and ``jnp.mean(..., keepdims=True)`` puts them back
with a broadcast: ``Unsqueeze(ReduceSum(x, axes, keepdims=0), axes)``, often with the lowering's
pointwise fix of a sum's zero sign, ``Where(Equal(s, 0), +0, s)``, in between, or a variance
computed from two such means (Flax's LayerNorm). The same values come out of the reductions with
``keepdims=1`` and the pointwise nodes on them (their other inputs are one-element constants), when
everything outside the region reads it through an Unsqueeze of the reduced axes (or a Reshape that
only puts them back): one node fewer per Unsqueeze.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites._dim_products import named_dims

_REDUCE = frozenset({"ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean", "ReduceProd", "ReduceL2",
                     "ReduceL1", "ReduceLogSumExp", "ReduceSumSquare"})
_POINTWISE = frozenset({"Where", "Equal", "Add", "Sub", "Mul", "Div", "Max", "Min", "Neg", "Abs", "Sqrt",
                        "Cast", "IsNaN", "Not", "Or", "And", "Relu", "Reciprocal", "Exp", "Log"})


def rewrite(graph: ir.Graph) -> int:
    """Fold Unsqueezes of reduced axes into their reductions in ``graph``; returns how many."""
    _drop_dead(graph)  # earlier rules leave unused nodes, whose uses would hide a region's real readers
    count = 0
    for node in list(graph):
        if node.domain in ("", "ai.onnx") and node.op_type in ("Unsqueeze", "Reshape") and node.graph is graph:
            count += _fold(node)
    return count


def _drop_dead(graph: ir.Graph) -> None:
    for node in reversed(list(graph)):
        if all(not out.uses() and not out.is_graph_output() for out in node.outputs):
            graph.remove(node, safe=True)


def _fold(unsqueeze: ir.Node) -> int:
    """Fold ``unsqueeze`` (an Unsqueeze, or a Reshape that only puts axes back) and the others of the same
    region; returns how many went."""
    if len(unsqueeze.inputs) < 2 or unsqueeze.inputs[0] is None:
        return 0
    region = _region(unsqueeze.inputs[0])
    if region is None:
        return 0
    reduces = [n for n in region if n.op_type in _REDUCE]
    x = reduces[0].inputs[0]
    rank = m.rank(x)
    raxes = m.reduce_axes(reduces[0])
    if rank is None or not raxes or any(r.inputs[0].shape != x.shape for r in reduces):
        return 0
    want = sorted({int(a) % rank for a in raxes})
    if not _same_unsqueeze(unsqueeze, want, rank):
        return 0
    if _const_rank(region) > rank - len(want):
        return 0  # a one-element constant of higher rank would broadcast the region's values
    for r in reduces:
        raxes = m.reduce_axes(r)
        if (not raxes or m.attr(r, "keepdims", 1) != 0 or m.attr(r, "noop_with_empty_axes", 0)
                or sorted(a % rank for a in raxes) != want):
            return 0
    inside = {id(n) for n in region}
    exits = []
    for n in region:
        out = n.outputs[0]
        if out.is_graph_output():
            return 0
        for use in out.uses():
            if id(use.node) in inside:
                continue
            if not _same_unsqueeze(use.node, want, rank) or use.idx != 0:
                return 0
            exits.append(use.node)
    for r in reduces:
        r.attributes["keepdims"] = ir.AttrInt64("keepdims", 1)
    dims = list(x.shape)
    for a in want:
        dims[a] = 1
    for n in region:
        n.outputs[0].shape = ir.Shape(dims)
    for node in exits:
        node.outputs[0].replace_all_uses_with(node.inputs[0], replace_graph_outputs=True)
    return len(exits)


def _const_rank(region: list[ir.Node]) -> int:
    """The highest rank of the one-element constants the region's pointwise nodes read."""
    ranks = [0]
    for n in region:
        if n.op_type not in _REDUCE:
            ranks += [arr.ndim for arr in (m.folded(i, limit=1) for i in n.inputs) if arr is not None]
    return max(ranks)


def _same_unsqueeze(node: ir.Node, want: list[int], rank: int) -> bool:
    """Whether ``node`` puts back the reduced axes ``want``: an Unsqueeze of them, or a Reshape to its
    input's shape with them (a static ``jnp.mean(..., keepdims=True)`` in flax.nnx.LayerNorm; on
    symbolic sizes its target is computed at run time, so the declared shapes tell)."""
    if node.op_type not in ("Unsqueeze", "Reshape") or node.domain not in ("", "ai.onnx") or len(node.inputs) < 2:
        return False
    if node.op_type == "Unsqueeze":
        axes = m.const(node.inputs[1])
        return axes is not None and sorted(int(a) % rank for a in np.atleast_1d(axes)) == want
    src, out = named_dims(node.inputs[0]), named_dims(node.outputs[0])
    if src is None or out is None or len(src) + len(want) != rank:
        return False
    dims = list(src)
    for a in want:
        dims.insert(a, 1)
    return out == dims


def _region(value: ir.Value) -> list[ir.Node] | None:
    """The reductions (``keepdims=0``) ``value`` is computed from and the pointwise nodes between,
    whose other inputs are one-element constants (of a rank the caller checks); None when ``value``
    is computed otherwise."""
    region: list[ir.Node] = []
    seen: set[int] = set()
    frontier = [value]
    while frontier:
        v = frontier.pop()
        node = v.producer()
        if node is None or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
            return None
        if id(node) in seen:
            continue
        seen.add(id(node))
        region.append(node)
        if node.op_type in _REDUCE:
            continue
        if node.op_type not in _POINTWISE or node.attributes.keys() - {"to"}:
            return None
        for i in node.inputs:
            if i is None:
                return None
            arr = m.folded(i, limit=1)
            if arr is None:
                frontier.append(i)
            elif arr.size != 1:
                return None
    if not any(n.op_type in _REDUCE for n in region):
        return None
    return region
