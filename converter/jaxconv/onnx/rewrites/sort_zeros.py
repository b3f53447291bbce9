"""A float top-k's pass that orders -0.0 after +0.0 run only where the input holds a -0.0.

XLA's ``lax.top_k`` orders -0.0 below +0.0 (``jnp.sort`` and ``argsort`` take them as equal and
have no such pass). The lowering sorts such a key in two stable TopK passes: first by "is -0.0"
(``Cast(IsInf(Reciprocal(x)))`` as uint8, all ``n`` positions), then by the values in that order
(``GatherElements``), composing the permutations. The first pass is a full sort of the whole axis
even for ``top_k(x, 5)``: ``[8, 32000]``, k = 10 took 8.8 ms of 9.3 in ORT (one thread) against
0.49 ms for jax.jit.

Where no element is -0.0 the first pass's keys are all 0, so its stable permutation is the identity
and the second pass alone gives the same indices. The rule puts the two passes behind an ``If`` on
``ReduceMax`` of those uint8 keys; the else-branch is the value pass on the key itself. The numbers
are the same either way (a permutation chosen by the same comparisons); measured on one thread
(process CPU time, medians, ``scripts/bench_kernels.py --only topk``): ``[8, 32000]`` k = 10
4.96 -> 0.36-0.49 ms, ``[16, 1000]`` k = 5 0.46 -> 0.05 ms (jax.jit 0.49-0.62 and 0.06-0.08).
"""

from __future__ import annotations

import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m


def rewrite(graph: ir.Graph) -> int:
    """Guard the sign-of-zero TopK passes in ``graph`` and its subgraphs; returns how many."""
    return m.count_everywhere(graph, "TopK", _one)


def _zero_keys(value: ir.Value | None) -> bool:
    """True when ``value`` is ``Cast<uint8>(IsInf<detect_positive=0>(Reciprocal(x)))``: 1 at each -0.0."""
    cast = m.producer(value, "Cast")
    if cast is None or m.attr(cast, "to") != ir.DataType.UINT8.value:
        return False
    inf = m.producer(cast.inputs[0], "IsInf")
    if inf is None or m.attr(inf, "detect_positive", 1) != 0 or m.attr(inf, "detect_negative", 1) != 1:
        return False
    return m.producer(inf.inputs[0], "Reciprocal") is not None


def _single_use(value: ir.Value, op_type: str, idx: int) -> ir.Node | None:
    uses = value.uses()
    if len(uses) != 1 or value.is_graph_output():
        return None
    node, at = uses[0]
    return node if node.op_type == op_type and node.domain == "" and at == idx else None


def _one(graph: ir.Graph, first: ir.Node) -> int:
    if first.domain != "" or len(first.inputs) != 2 or not _zero_keys(first.inputs[0]):
        return 0
    keys, count = first.inputs
    axis = m.attr(first, "axis", -1)
    shape = keys.shape if keys is not None else None
    k = m.const(count)
    if shape is None or k is None or k.size != 1 or m.attr(first, "sorted", 1) != 1:
        return 0
    axis = axis % len(shape)
    if not isinstance(shape[axis], int) or int(k.reshape(-1)[0]) != shape[axis]:
        return 0  # the pass must keep every position: then all-zero keys give the identity
    order = first.outputs[1]
    if first.outputs[0].uses() or first.outputs[0].is_graph_output() or order.is_graph_output():
        return 0
    uses = order.uses()
    if len(uses) != 2 or any(u.node.op_type != "GatherElements" or u.node.domain != "" for u in uses):
        return 0
    gather = next((u.node for u in uses if u.idx == 1 and u.node.inputs[0] is not order), None)
    compose = next((u.node for u in uses if u.idx == 0), None)
    if gather is None or compose is None or gather is compose:
        return 0
    second = _single_use(gather.outputs[0], "TopK", 0)
    if second is None or second.outputs[0].uses() or second.outputs[0].is_graph_output():
        return 0
    if compose.inputs[1] is not second.outputs[1] or len(second.outputs[1].uses()) != 1:
        return 0
    if any(m.attr(n, "axis", -1) % len(shape) != axis for n in (gather, second, compose)):
        return 0
    result = compose.outputs[0]
    if result.is_graph_output():  # (the then-branch's output; top_k's int32 indices are a Cast of it)
        return 0
    top = ir.node("ReduceMax", [keys], {"keepdims": 0})
    any_negative_zero = ir.node("Cast", [top.outputs[0]], {"to": ir.DataType.BOOL.value})
    graph.insert_before(first, [top, any_negative_zero])
    exact = [first, gather, second, compose]
    for node in exact:
        graph.remove(node)
    fast = ir.node("TopK", [gather.inputs[0], second.inputs[1]],
                   {a.name: a for a in second.attributes.values()}, num_outputs=2)
    then_branch = ir.Graph([], [result], nodes=exact, name="sort_zeros_exact")
    else_branch = ir.Graph([], [fast.outputs[1]], nodes=[fast], name="sort_zeros_fast")
    branch = ir.node("If", [any_negative_zero.outputs[0]],
                     {"then_branch": then_branch, "else_branch": else_branch})
    graph.insert_after(any_negative_zero, branch)
    new = branch.outputs[0]
    for v in (new, fast.outputs[1]):
        v.type, v.shape = result.type, result.shape
    fast.outputs[0].type, fast.outputs[0].shape = second.outputs[0].type, second.outputs[0].shape
    name = result.name
    for use in list(result.uses()):
        if use.node.graph is not then_branch:
            use.node.replace_input_with(use.idx, new)
    result.name = f"{name}_exact" if name else None
    new.name = name
    return 1
