"""One test of a graph's float inputs for the guards that bounds make unneeded but for those inputs.

A guard runs a fast op behind ``If(ReduceSumSquare(v) < limit)``, a pass over ``v`` (a layer norm's input,
attention scores) each: the benchmark transformer runs twelve of them. Where ``v`` follows from the graph's
float inputs by bounded steps (``_bounds``: a layer norm is bounded whatever its input, attention's
probabilities mix rows of v, products by constant weights grow by their column sums), a bound on the inputs
bounds ``v``: ``test`` is ``ReduceSumSquare(x) < INPUT_BOUND ** 2`` for each float input ``x`` ``v`` is computed
from (every element then finite and below the bound: a float32 sum of squares is at least each square), made once,
and ``shared_test`` gives it to a guard whose condition holds for every ``v`` that bound allows. Inputs
beyond the bound (or NaN, or infinite) take every such guard's exact branch.

The benchmark transformer (8 layer norms, 4 masks of causal attention; ORT alone, alternating): 11 passes
over activations and scores fewer, 0.977-0.987x the time (the Ifs stay: their dispatch is most of a guard's cost).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _bounds
from jaxconv.onnx.rewrites import _match as m

INPUT_BOUND = 2.0 ** 24  # every float input element below this in magnitude (its squares' sum below 2 ** 48)
_TEST = "jaxconv.input_guard"  # graph.meta: the shared tests' values, by the inputs they test
_FLOATS = (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)


def shared_test(graph: ir.Graph, value: ir.Value, holds: Callable[[float], bool], nan: bool = False) -> ir.Value | None:
    """The graph's input test where it proves a guard's condition on ``value``: ``holds(bound)`` for the bound
    ``value`` has when every float input is within ``INPUT_BOUND`` (and, with ``nan``, ``value`` cannot be
    NaN then); None where it does not, or the graph has no float input."""
    floats = _read_inputs(graph, value)
    if not floats:
        return None
    memo = _within_bound(floats)
    bound = _bounds.magnitude(value, memo)
    if not bound < float("inf") or not holds(bound) or (nan and not _bounds.nan_free(value, memo)):
        return None
    return _test(graph, floats)


def nan_free_when_tested(graph: ir.Graph, value: ir.Value) -> bool:
    """Whether ``value`` cannot be NaN where the graph's input test passes (every float input it is computed
    from within ``INPUT_BOUND``), or whatever the inputs where it reads none."""
    return _bounds.nan_free(value, _within_bound(_read_inputs(graph, value)))


def _within_bound(floats: list[ir.Value]) -> _bounds.Memo:
    """The bounds the inputs' test proves: every element of each of ``floats`` below ``INPUT_BOUND``."""
    return {id(v): (v, INPUT_BOUND) for v in floats}


def _read_inputs(graph: ir.Graph, value: ir.Value) -> list[ir.Value]:
    """The float inputs of ``graph`` that ``value`` is computed from, in the graph's order: a loop body's test
    reads its carries, not the weights its other inputs slice."""
    seen = {id(v) for v in _bounds.computed_from(value)}
    return [v for v in graph.inputs if v.dtype in _FLOATS and id(v) in seen]


def anchored(graph: ir.Graph, test: ir.Value, exact: list[ir.Node]) -> tuple[ir.Value, ir.Node]:
    """(the test, a node of ``graph`` to put the guard's If after) for a guard of the nodes ``exact`` (in order;
    ``_match.branch_on`` moves them into a branch): the node before the first of them, or where none is, an
    Identity of the test put there."""
    ours = {id(n) for n in exact}
    before = None
    for node in graph:
        if node is exact[0]:
            break
        if id(node) not in ours:
            before = node
    if before is not None:
        return test, before
    copy = ir.node("Identity", [test])
    copy.outputs[0].type, copy.outputs[0].shape = test.type, test.shape
    graph.insert_before(exact[0], copy)
    return copy.outputs[0], copy


def _test(graph: ir.Graph, floats: list[ir.Value]) -> ir.Value:
    """The test of ``floats`` (inputs of ``graph``), made once for each set of inputs."""
    made_tests = graph.meta.setdefault(_TEST, {})
    key = tuple(id(v) for v in floats)
    made = made_tests.get(key)
    if made is not None and made.producer() is not None and made.producer().graph is graph:
        return made
    nodes: list[ir.Node] = []
    limit = m.new_initializer(graph, np.array(INPUT_BOUND ** 2, np.float32), "input_square_limit")
    test: ir.Value | None = None
    for x in floats:
        total = ir.node("ReduceSumSquare", [x if x.dtype == ir.DataType.FLOAT else _cast(nodes, x)], {"keepdims": 0})
        small = ir.node("Less", [total.outputs[0], limit])  # false for NaN and infinities too
        total.outputs[0].type, small.outputs[0].type = ir.TensorType(ir.DataType.FLOAT), ir.TensorType(ir.DataType.BOOL)
        nodes += [total, small]
        if test is not None:
            both = ir.node("And", [test, small.outputs[0]])
            both.outputs[0].type = ir.TensorType(ir.DataType.BOOL)
            nodes.append(both)
        test = nodes[-1].outputs[0]
    for node in nodes:
        if node.op_type != "Cast":  # (the scalars: a Cast keeps its input's shape)
            node.outputs[0].shape = ir.Shape([])
    first = next(iter(graph), None)
    if first is None:
        graph.extend(nodes)
    else:
        graph.insert_before(first, nodes)
    assert test is not None
    test.name = "inputs_bounded" if not made_tests else None  # (onnx_ir names a later one)
    made_tests[key] = test
    return test


def _cast(nodes: list[ir.Node], x: ir.Value) -> ir.Value:
    """``x`` as float32 (a float64 input's squares tested where float32 bounds them; a float16 one's without
    overflowing at 256)."""
    cast = ir.node("Cast", [x], {"to": ir.DataType.FLOAT})
    cast.outputs[0].type, cast.outputs[0].shape = ir.TensorType(ir.DataType.FLOAT), x.shape
    nodes.append(cast)
    return cast.outputs[0]
