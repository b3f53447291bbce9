"""A float max or min reduction's NaN propagation run only where the input holds a NaN.

ONNX Runtime's ReduceMax and ReduceMin drop a NaN unless it comes first; XLA's propagate it. The
lowering computes, beside the reduction, which slices hold a NaN (``ReduceMax`` of
``Cast<uint8>(IsNaN(x))`` over the same axes) and puts NaN there with a Where: two more passes over
the input, the IsNaN's the slowest of the three. ``jnp.max(x, -1)`` of ``[16, 128, 1024]`` took
0.76 ms in ORT (one thread) against 0.39 ms for jax.jit.

The rule puts the IsNaN, its reduction and the Where behind an ``If`` on ``IsNaN(ReduceSum(x))``
over the whole input (true where any element is NaN, or a sum meets both infinities: there the
exact branch runs too); the else-branch is the reduction alone, which is what the Where returns
where no slice holds a NaN. Same numbers either way. One thread, process CPU time, medians
(``scripts/bench_kernels.py --only reduce``): ``[16, 128, 1024]`` max over the last axis
0.60 -> 0.43 ms (jax.jit 0.30, load 7.3).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m

_REDUCTIONS = ("ReduceMax", "ReduceMin")


def rewrite(graph: ir.Graph) -> int:
    """Guard the NaN propagation of the max/min reductions in ``graph`` and its subgraphs; returns how many."""
    return m.count_everywhere(graph, "Where", _one)


def _same_reduction(a: ir.Node, b: ir.Node) -> bool:
    """True when ``a`` and ``b`` reduce over the same constant axes with the same keepdims."""
    if m.attr(a, "keepdims", 1) != m.attr(b, "keepdims", 1) or m.attr(a, "noop_with_empty_axes", 0) \
            or m.attr(b, "noop_with_empty_axes", 0):
        return False
    axes_a = m.const(a.inputs[1]) if len(a.inputs) > 1 else None
    axes_b = m.const(b.inputs[1]) if len(b.inputs) > 1 else None
    if axes_a is None or axes_b is None:
        return len(a.inputs) == len(b.inputs) == 1
    return np.array_equal(axes_a, axes_b)


def _one(graph: ir.Graph, where: ir.Node) -> int:
    if where.domain != "" or len(where.inputs) != 3:
        return 0
    cond, fill, out = where.inputs
    to_bool = m.producer(cond, "Cast")
    reduce = out.producer() if out is not None else None
    fill_value = m.const(fill)
    if to_bool is None or m.attr(to_bool, "to") != ir.DataType.BOOL.value or reduce is None \
            or reduce.op_type not in _REDUCTIONS or reduce.domain != "" or fill_value is None \
            or fill_value.size != 1 or not np.isnan(fill_value).all():
        return 0
    has_nan = m.producer(to_bool.inputs[0], "ReduceMax")
    to_byte = m.producer(has_nan.inputs[0], "Cast") if has_nan is not None else None
    is_nan = m.producer(to_byte.inputs[0], "IsNaN") if to_byte is not None else None
    x = reduce.inputs[0]
    if is_nan is None or m.attr(to_byte, "to") != ir.DataType.UINT8.value or is_nan.inputs[0] is not x \
            or x is None or not _same_reduction(reduce, has_nan):
        return 0
    exact = [is_nan, to_byte, has_nan, to_bool, reduce, where]
    inside = {id(n) for n in exact}
    for node in exact[:-1]:
        value = node.outputs[0]
        if value.is_graph_output() or any(id(u.node) not in inside for u in value.uses()):
            return 0
    total = ir.node("ReduceSum", [x], {"keepdims": 0})
    test = ir.node("IsNaN", [total.outputs[0]])
    graph.insert_before(exact[0], [total, test])
    fast = ir.node(reduce.op_type, list(reduce.inputs), {a.name: a for a in reduce.attributes.values()})
    order = {id(n): i for i, n in enumerate(graph)}
    exact.sort(key=lambda n: order[id(n)])
    m.branch_on(graph, test.outputs[0], where.outputs[0], exact, fast, test, ("nan_reduce_exact", "nan_reduce"))
    return 1
