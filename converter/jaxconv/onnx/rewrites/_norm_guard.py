"""The overflow guard of the layer-norm rules (``layer_norm``, ``keras_norm``): where a row's squares or its
sum overflow float32, the written-out norms give NaN (``inf - inf``, ``-inf / inf``) or the offset (an
infinite variance), while ORT's LayerNormalization centres the row before squaring it and gives a finite
norm. So the op runs behind ``If(ReduceSumSquare(x) < FLT_MAX / 8, then: the op, else: the written-out
nodes)``: a total of squares below that bounds every row's sum of ``x``, of ``x * x`` and of
``(x - mean)**2``, in any order, below FLT_MAX, and NaN and infinities take the exact nodes too.

Where the norm's input is bounded (``_bounds``: a model of token ids, whose values all follow from constant
tables) so that no row's squares can come near that limit, the op runs without the guard.

Both branches compute each row from the same row of ``x``, so a cut of rows may move into them, the test
then reading the cut rows (``row_slices``): ``guarded`` tells such an If.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _bounds, _input_guard
from jaxconv.onnx.rewrites import _match as m

# a total of squares below this bounds every row's sum of (x - mean)**2, in any order, below FLT_MAX
SQUARES_LIMIT = float(np.finfo(np.float32).max) / 8
_GUARD = "jaxconv.norm_guard"  # an If's node.meta: (the norm's input, its ReduceSumSquare test)


def unguarded(x: ir.Value, dim: int, memo: _bounds.Memo) -> bool:
    """Whether ``x``'s elements are NaN or small enough that every row's sum of squares of ``dim`` elements,
    ``dim * (2 * bound) ** 2``, is below the guard's limit (a NaN row is NaN in both forms)."""
    bound = _bounds.magnitude(x, memo)
    return bound < math.inf and dim * (2 * bound) ** 2 < SQUARES_LIMIT


def guard(graph: ir.Graph, x: ir.Value, dim: int, chain: list[ir.Node], last: ir.Node, op: ir.Node,
          names: tuple[str, str]) -> None:
    """Compute ``last``'s output (the written-out norm of ``x`` over rows of ``dim``: ``chain`` and ``last``,
    nodes of ``graph``) as ``If(ReduceSumSquare(x) < SQUARES_LIMIT, op, chain and last)``, or with the graph's
    input test (``_input_guard``) where bounded inputs bound ``x`` below the limit."""
    ordered = _in_order([*chain, last])
    shared = _input_guard.shared_test(graph, x, lambda bound: dim * (2 * bound) ** 2 < SQUARES_LIMIT)
    if shared is not None:  # the If where the first node of the norm was
        (test, after), total = _input_guard.anchored(graph, shared, ordered), None
    else:
        limit = m.new_initializer(graph, np.array(SQUARES_LIMIT, np.float32), "norm_square_limit")
        total = ir.node("ReduceSumSquare", [x], {"keepdims": 0})
        small = ir.node("Less", [total.outputs[0], limit])  # false for NaN too
        graph.insert_before(ordered[0], [total, small])
        test, after = small.outputs[0], small
    branch = m.branch_on(graph, test, last.outputs[0], ordered, op, after, names, exact_if=False).producer()
    assert branch is not None
    branch.meta[_bounds.SAME_AS] = op
    branch.meta[_GUARD] = (x, total)


def guarded(node: ir.Node) -> tuple[ir.Value, ir.Node | None] | None:
    """``(x, test)`` for an If that ``guard`` made, still as made: its branches compute a norm of ``x`` row by
    row, and ``test`` (``ReduceSumSquare(x)``, read by the If's condition alone) decides which runs; ``test``
    None where the graph's input test decides (``_input_guard``)."""
    found = node.meta.get(_GUARD) if node.op_type == "If" else None
    if found is None:
        return None
    x, test = found
    if test is not None and (test.graph is not node.graph or test.inputs[0] is not x
                             or len(m.live_uses(test.outputs[0])) != 1):
        return None
    return x, test


def _in_order(nodes: list[ir.Node]) -> list[ir.Node]:
    """``nodes`` ordered so that each comes after those of them it reads (the graph may not be sorted yet)."""
    ours = {id(n) for n in nodes}
    done: set[int] = set()
    ordered: list[ir.Node] = []

    def visit(node: ir.Node) -> None:
        if id(node) in done:
            return
        done.add(id(node))
        for v in node.inputs:
            p = v.producer() if v is not None else None
            if p is not None and id(p) in ours:
                visit(p)
        ordered.append(node)

    for node in nodes:
        visit(node)
    return ordered
