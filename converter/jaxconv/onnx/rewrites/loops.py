"""Work moved out of Loop bodies (lax.scan / fori_loop lower to Loop).

- Loop-invariant nodes (every input defined outside the body) run once, before the Loop.
- A scan's input projection: ``MatMul(reshape(slice(xs, i, i + 1)), w)`` in the body, with ``xs``
  and ``w`` from outside, becomes one MatMul over all of ``xs`` before the Loop and a slice of its
  result in the body. Each row of the big product is the same dot product as the per-step one.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m

_STATEFUL = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                       "Bernoulli"})


def _body_values(body: ir.Graph) -> set[int]:
    """ids of the values defined inside ``body`` (its inputs and every node's outputs, nested graphs included)."""
    ids = {id(v) for v in body.inputs}
    for node in ir.traversal.RecursiveGraphIterator(body):
        ids.update(id(o) for o in node.outputs)
    return ids


def _visible_in(value: ir.Value, graph: ir.Graph, main: ir.Graph) -> bool:
    """True when ``graph`` (holding the Loop) can read ``value``: made there, or a main-graph input/initializer."""
    node = value.producer()
    if node is None:
        return value in main.inputs or value.name in main.initializers or value in graph.inputs
    return node.graph is graph or node.graph is main


def _hoist_invariants(loop: ir.Node, body: ir.Graph) -> int:
    inside = _body_values(body)
    outer = loop.graph
    moved = 0
    for node in list(body):
        if node.op_type in _STATEFUL or node.domain != "" or any(
                a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values()):
            continue
        if any(v is not None and id(v) in inside for v in node.inputs):
            continue
        if any(o.is_graph_output() for o in node.outputs):
            continue
        body.remove(node)
        outer.insert_before(loop, node)
        inside.difference_update(id(o) for o in node.outputs)
        moved += 1
    return moved


def _step_slice(value: ir.Value, inside: set[int]) -> ir.Node | None:
    """The ``Slice(xs, i, i + 1, axes=[0])`` producing ``value``, with ``xs`` from outside the body."""
    sl = m.producer(value, "Slice")
    if sl is None or len(sl.inputs) < 4 or sl.inputs[0] is None or id(sl.inputs[0]) in inside:
        return None
    axes = m.const(sl.inputs[3])
    if axes is None or list(np.atleast_1d(axes)) != [0]:
        return None
    if len(sl.inputs) > 4 and sl.inputs[4] is not None:
        steps = m.const(sl.inputs[4])
        if steps is None or list(np.atleast_1d(steps)) != [1]:
            return None
    ends = m.binary(m.producer(sl.inputs[2]), "Add")
    if ends is None:
        return None
    start, one = (ends if ends[0] is sl.inputs[1] else ends[::-1])
    if start is not sl.inputs[1] or not m.is_scalar_const(one, 1.0):
        return None
    return sl


def _hoist_projection(loop: ir.Node, body: ir.Graph, main: ir.Graph) -> int:
    inside = _body_values(body)
    outer = loop.graph
    count = 0
    for mm in list(body):
        if mm.op_type != "MatMul" or mm.domain != "":
            continue
        a, w = mm.inputs
        if w is None or id(w) in inside or m.rank(w) != 2 or not _visible_in(w, outer, main):
            continue
        reshape = m.producer(a, "Reshape")
        if reshape is None:
            continue
        sl = _step_slice(reshape.inputs[0], inside)
        if sl is None:
            continue
        xs = sl.inputs[0]
        target = m.const(reshape.inputs[1])
        if (xs.shape is None or not xs.shape.is_static() or len(xs.shape) < 2 or target is None or
                list(target) != list(xs.shape)[1:] or not _visible_in(xs, outer, main)):
            continue
        projected = ir.node("MatMul", [xs, w])
        outer.insert_before(loop, projected)
        step = ir.node("Slice", [projected.outputs[0], *sl.inputs[1:]])
        squeeze = ir.node("Squeeze", [step.outputs[0], _i64(body, [0])])
        m.replace(body, mm.outputs[0], [step, squeeze], mm)
        count += 1
    return count


def _i64(graph: ir.Graph, values: list[int]) -> ir.Value:
    node = ir.node("Constant", [], {"value": ir.tensor(np.asarray(values, np.int64))})
    graph.insert_before(graph.node(0), node) if len(graph) else graph.append(node)
    return node.outputs[0]


def rewrite(main: ir.Graph) -> int:
    """Hoist loop-invariant work out of every Loop in ``main`` (nested ones too); returns how many nodes moved."""
    count = 0
    loops = [n for n in ir.traversal.RecursiveGraphIterator(main) if n.op_type == "Loop" and n.domain == ""]
    for loop in reversed(loops):  # inner loops first: what leaves an inner body may leave the outer one too
        body = loop.attributes["body"].value
        count += _hoist_projection(loop, body, main)
        count += _hoist_invariants(loop, body)
    return count
