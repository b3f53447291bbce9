"""Max pooling's NaN/-inf guard run only when the input has a NaN or an infinity.

ONNX Runtime's MaxPool drops NaN and turns a window of -inf into -FLT_MAX, so the lowering follows
``P = MaxPool(x)`` with a second MaxPool over a per-element code (2 NaN, 1 finite or +inf, 0 -inf)
and two Wheres. When ``sum(x)`` is finite, x holds no NaN and no infinity, the code is 1
everywhere and the guard returns P unchanged, so

    If(IsNaN(s - s), then: the guard, else: P)     with s = ReduceSum(x)

gives the same values and, on finite inputs, skips the guard (one reduction instead of a MaxPool
and six elementwise passes). Where only the guard reads P, each branch computes its own MaxPool, so
the plain branch is the pool itself rather than a copy of P.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m


def _where(node: ir.Node | None) -> tuple[ir.Value, ir.Value, ir.Value] | None:
    if node is None or node.op_type != "Where" or node.domain != "" or len(node.inputs) != 3:
        return None
    return node.inputs[0], node.inputs[1], node.inputs[2]


def _compare(value: ir.Value, op_type: str, threshold: float) -> ir.Value | None:
    """``v`` for ``value = op(v, threshold)``."""
    pair = m.binary(m.producer(value), op_type)
    if pair is None or not m.is_scalar_const(pair[1], threshold):
        return None
    return pair[0]


def _cast_of(value: ir.Value | None) -> ir.Value | None:
    node = m.producer(value, "Cast")
    return None if node is None else node.inputs[0]


def _code_source(code: ir.Value) -> ir.Value | None:
    """x when ``code = Cast(x > -inf) + Cast(IsNaN(x)) * 2``."""
    pair = m.binary(m.producer(code), "Add")
    if pair is None:
        return None
    above, nan2 = pair
    x = _compare(_cast_of(above), "Greater", -math.inf) if _cast_of(above) is not None else None
    mul = m.binary(m.producer(nan2), "Mul")
    if x is None or mul is None or not m.is_scalar_const(mul[1], 2.0):
        return None
    isnan = m.producer(_cast_of(mul[0]), "IsNaN")
    return x if isnan is not None and isnan.inputs[0] is x else None


def _same_pool(a: ir.Node, b: ir.Node) -> bool:
    keys = ("kernel_shape", "strides", "dilations", "pads", "auto_pad", "ceil_mode", "storage_order")
    return all(m.attr(a, k) == m.attr(b, k) for k in keys)


def _guard(out: ir.Node) -> tuple[ir.Value, ir.Node] | None:
    """(x, plain MaxPool node) when ``out`` is the last Where of the guard around ``MaxPool(x)``."""
    w2 = _where(out)
    if w2 is None or not (m.repeated_const(w2[1]) is not None and np.isnan(m.repeated_const(w2[1])).all()):
        return None
    seen = _compare(w2[0], "Greater", 1.5)
    w1 = _where(m.producer(w2[2]))
    if seen is None or w1 is None or _compare(w1[0], "Less", 0.5) is not seen:
        return None
    fill = m.repeated_const(w1[1])
    if fill is None or not np.all(fill == -np.inf):
        return None
    plain, guard_pool = m.producer(w1[2], "MaxPool"), m.producer(seen, "MaxPool")
    if plain is None or guard_pool is None or len(plain.outputs) != 1 or not _same_pool(plain, guard_pool):
        return None
    x = plain.inputs[0]
    if _code_source(guard_pool.inputs[0]) is not x:
        return None
    return x, plain


def _ancestors(value: ir.Value, stop: set[int], graph: ir.Graph) -> list[ir.Node]:
    """Nodes of ``graph`` that ``value`` depends on, stopping at values in ``stop`` and constants."""
    found: dict[int, ir.Node] = {}
    stack = [value]
    while stack:
        v = stack.pop()
        if id(v) in stop or m.const(v) is not None:
            continue
        node = v.producer()
        if node is None or node.graph is not graph or id(node) in found:
            continue
        found[id(node)] = node
        stack.extend(i for i in node.inputs if i is not None)
    return [n for n in graph if id(n) in found]  # graph order is a topological order


def _rewrite(graph: ir.Graph, out: ir.Node) -> bool:
    got = _guard(out)
    if got is None:
        return False
    x, plain = got
    result = out.outputs[0]
    guard = _ancestors(result, {id(x), id(plain.outputs[0])}, graph)
    inside = {id(n) for n in guard}
    for node in guard:  # the guard's nodes must serve only the guard
        for o in node.outputs:
            if o is not result and (o.is_graph_output() or any(id(u.node) not in inside for u in o.uses())):
                return False
    test = m.non_finite_test(x)
    graph.insert_before(plain, test)
    pool_out = plain.outputs[0]
    if not pool_out.is_graph_output() and all(id(u.node) in inside for u in pool_out.uses()):
        guard.insert(0, plain)  # only the guard reads the plain pool: each branch pools for itself
        fast = ir.node("MaxPool", [x], {a.name: a for a in plain.attributes.values()})
    else:
        fast = ir.node("Identity", [pool_out])
    anchor = plain if fast.op_type == "Identity" else test[-1]
    m.branch_on(graph, test[-1].outputs[0], result, guard, fast, anchor, ("pool_guard", "pool_plain"))
    return True


def rewrite(graph: ir.Graph) -> int:
    """Put every max-pooling guard of ``graph`` behind a finiteness test; returns how many."""
    count = 0
    for node in list(graph):
        if node.graph is graph and node.op_type == "Where" and node.domain == "":
            count += _rewrite(graph, node)
    return count
