"""A reduction followed by an Unsqueeze of the reduced axes, as one reduction with ``keepdims=1``.

StableHLO reductions drop the reduced axes and ``jnp.mean(..., keepdims=True)`` puts them back
with a broadcast: ``Unsqueeze(ReduceSum(x, axes, keepdims=0), axes)``, often with the lowering's
pointwise fix of a sum's zero sign, ``Where(Equal(s, 0), +0, s)``, in between. The same values
come out of ``ReduceSum(x, axes, keepdims=1)`` and the pointwise nodes on it (their other inputs
are scalars), one node fewer per mean.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m

_REDUCE = frozenset({"ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean", "ReduceProd", "ReduceL2",
                     "ReduceL1", "ReduceLogSumExp", "ReduceSumSquare"})
_POINTWISE = frozenset({"Where", "Equal", "Add", "Sub", "Mul", "Div", "Max", "Min", "Neg", "Abs", "Sqrt",
                        "Cast", "IsNaN", "Not", "Or", "And"})


def rewrite(graph: ir.Graph) -> int:
    """Fold Unsqueezes of reduced axes into their reductions in ``graph``; returns how many."""
    count = 0
    for node in list(graph):
        if node.domain in ("", "ai.onnx") and node.op_type == "Unsqueeze" and _fold(graph, node):
            count += 1
    return count


def _fold(graph: ir.Graph, unsqueeze: ir.Node) -> bool:
    axes = m.const(unsqueeze.inputs[1]) if len(unsqueeze.inputs) > 1 else None
    if axes is None or unsqueeze.inputs[0] is None:
        return False
    chain = _chain(unsqueeze.inputs[0])
    if chain is None:
        return False
    reduce, members = chain
    x = reduce.inputs[0]
    rank = m.rank(x)
    raxes = m.reduce_axes(reduce)
    if rank is None or raxes is None or not raxes or m.attr(reduce, "keepdims", 1) != 0:
        return False
    if m.attr(reduce, "noop_with_empty_axes", 0):
        return False
    if sorted(a % rank for a in raxes) != sorted(int(a) % rank for a in np.atleast_1d(axes)):
        return False
    reduce.attributes["keepdims"] = ir.AttrInt64("keepdims", 1)
    dims = list(x.shape)
    for a in raxes:
        dims[a % rank] = 1
    for v in [reduce.outputs[0], *(n.outputs[0] for n in members)]:
        v.shape = ir.Shape(dims)
    out = unsqueeze.outputs[0]
    source = unsqueeze.inputs[0]
    out.replace_all_uses_with(source, replace_graph_outputs=True)
    return True


def _chain(value: ir.Value) -> tuple[ir.Node, list[ir.Node]] | None:
    """(the reduction, the pointwise nodes after it) when ``value`` is a reduction's result, possibly
    through pointwise nodes whose other inputs are scalar constants; every value used only there."""
    members: list[ir.Node] = []
    seen: set[int] = set()
    frontier = [value]
    reduce = None
    while frontier:
        v = frontier.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        node = v.producer()
        if node is None or node.domain not in ("", "ai.onnx") or v.is_graph_output():
            return None
        if len(node.outputs) != 1:
            return None
        if node.op_type in _REDUCE:
            if reduce is not None and reduce is not node:
                return None
            reduce = node
            continue
        if node.op_type not in _POINTWISE or node.attributes.keys() - {"to"}:
            return None
        members.append(node)
        for i in node.inputs:
            if i is None:
                return None
            arr = m.const(i)
            if arr is not None:
                if arr.size != 1 or arr.ndim > 1:
                    return None
                continue
            frontier.append(i)
    if reduce is None:
        return None
    inside = {id(n) for n in members} | {id(reduce)}
    for n in [reduce, *members]:
        for use in n.outputs[0].uses():
            if id(use.node) not in inside and n.outputs[0] is not value:
                return None
    if len(value.uses()) != 1:
        return None
    return reduce, members
