"""Max pooling's NaN/-inf guard run only when a pool's input has a NaN or an infinity.

ONNX Runtime's MaxPool drops NaN and turns a window of -inf into -FLT_MAX (its blocked NCHWc kernel;
the plain one keeps only a NaN last in its window), so the lowering follows ``P = MaxPool(x)`` with a
second MaxPool over a per-element code (2 NaN, 1 finite or +inf, 0 -inf) and two Wheres. When ``x``
holds no NaN and no infinity, the code is 1 everywhere and the guard returns P unchanged.

``rewrite`` (with the other early rules) puts each guard behind ``If(ReduceSum(x) > -inf, then:
MaxPool(x), else: the guard)``, which keeps its Wheres away from the rules after it. The test is false
where ``x`` holds a NaN (the sum is NaN) or a -inf (the sum is -inf, or NaN with a +inf): the two
values ORT's MaxPool gets wrong; a +inf alone it pools exactly. An overflowing sum only sends finite
inputs down the exact branch, or (to +inf) down the plain one, exact for finite inputs. ``chains`` (last, after the
layout rules) takes them out again and, where the pool reads a Conv's output (through its bias, scale
and activation, channels a multiple of 8: ORT's blocked NCHWc layout runs them fused):

- pools the planes in place: the lowering pools ``[N*C, 1, H, W]`` between two Reshapes; the pool,
  the code and the Wheres work per plane, so they read ``[N, C, H, W]`` itself and the Reshapes go,
  and ORT keeps its blocked layout from the Conv before the pool to the Conv after it;
- computes the layers from the nearest value outside them (an input, a Transpose, a Reshape: the
  start) through the pools of a chain (conv, activation, pool, conv, ...) and on to the smallest later
  value nothing else reads, with plain MaxPools, then ``If(t > -inf, then: that value, else: the same
  nodes with their guards from the start)``. The test is false when any pool's input holds a NaN or
  a -inf (``t`` the sum over the pools' inputs of ``ReduceSum``, through ``GlobalAveragePool`` where
  ORT keeps the input blocked, so that it is read without a reorder); a pool whose input holds
  neither is exact, so when the test holds every plain pool is, and the nodes after them too.

A pool elsewhere (of a residual sum, of an input) keeps its planes behind its own If: pooling
``[N, C, H, W]`` there makes ORT reorder the whole input for a blocked MaxPool; where C is not a
multiple of ORT's block, ORT keeps the plain layout, and the pool reads ``[N, C, H, W]`` itself.
"""

from __future__ import annotations

import math
from typing import Callable

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


# ops ORT runs per element or per channel, kept between a pool and the layers before it
_LAYER_OPS = frozenset({
    "Conv", "Relu", "Abs", "Add", "Sub", "Mul", "Div", "Sum", "Max", "Min", "MaxPool", "AveragePool",
    "BatchNormalization", "Identity", "Sigmoid", "Tanh", "LeakyRelu", "Clip", "Neg", "Where", "Greater", "Less",
    "Cast", "IsNaN", "Equal",
})
_MAX_REGION = 256
_BLOCK = 8  # ORT's NCHWc block is 8 (AVX2) or 16 (AVX-512) channels


class _Guard:
    """One guarded max pool: its input ``x``, its plain MaxPool and the guard's result."""

    def __init__(self, x: ir.Value, plain: ir.Node, result: ir.Value) -> None:
        self.x, self.plain, self.result = x, plain, result


def _find_guards(graph: ir.Graph) -> list[_Guard]:
    found = []
    for node in graph:
        if node.op_type == "Where" and node.domain == "":
            got = _guard(node)
            if got is not None:
                found.append(_Guard(got[0], got[1], node.outputs[0]))
    return found


def _guard_nodes(graph: ir.Graph, g: _Guard) -> list[ir.Node] | None:
    """The guard's nodes (the plain pool first) when they serve only the guard, else None."""
    nodes = _ancestors(g.result, {id(g.x)}, graph)
    inside = {id(n) for n in nodes}
    if id(g.plain) not in inside:
        return None
    for node in nodes:
        for o in node.outputs:
            if o is g.result:
                continue
            if o.is_graph_output() or any(id(u.node) not in inside for u in o.uses()):
                return None
    return nodes


def _scalar_operands(node: ir.Node, inside: set[int], x: ir.Value) -> bool:
    """Every input of ``node`` is ``x``, a guard value or a constant of one element."""
    for v in node.inputs:
        if v is None or v is x:
            continue
        p = v.producer()
        if p is not None and id(p) in inside:
            continue
        arr = m.const(v)
        if arr is None or arr.size != 1:
            return False
    return True


def _by_scalar(value: ir.Value) -> ir.Value | None:
    """``v`` for ``value = Mul(v, c)`` with ``c`` a one-element constant (min pooling's negation)."""
    pair = m.binary(m.producer(value), "Mul")
    if pair is None:
        return None
    for v, c in (pair, pair[::-1]):
        arr = m.const(c)
        if arr is not None and arr.size == 1 and m.const(v) is None:
            return v
    return None


def _unplane(graph: ir.Graph, g: _Guard) -> bool:
    """Pool ``[N, C, ...]`` itself where the guard pools it as ``[N*C, 1, ...]`` between two Reshapes
    (min pooling: with a negation inside each)."""
    nodes = _guard_nodes(graph, g)
    if nodes is None or any(not any(u.node is n for n in nodes) for u in g.x.uses()):
        return False
    planes_in, between = g.x, []
    while (inner := _by_scalar(planes_in)) is not None and len(inner.uses()) == 1 and len(between) < 2:
        between.append(planes_in.producer())
        planes_in = inner
    before = m.producer(planes_in, "Reshape")
    src = before.inputs[0] if before is not None else None
    if src is None or src.shape is None or g.x.shape is None or len(src.shape) != len(g.x.shape) or len(src.shape) < 3:
        return False
    # A Reshape keeps the element count: [N, C, *s] to [P, 1, *s] with the same static s has P = N * C
    # for any N (a symbolic batch too).
    dims, planes = list(src.shape), list(g.x.shape)
    if not all(isinstance(d, int) for d in dims[1:] + planes[1:]) or planes[1] != 1 or dims[2:] != planes[2:]:
        return False
    inside = {id(n) for n in nodes}
    if not all(n.op_type == "MaxPool" or _scalar_operands(n, inside, g.x) for n in nodes):
        return False
    planes_out, after = g.result, []
    while len(planes_out.uses()) == 1 and not planes_out.is_graph_output() and len(after) < 2:
        use = planes_out.uses()[0]
        if _by_scalar(use.node.outputs[0]) is not planes_out:
            break
        after.append(use.node)
        planes_out = use.node.outputs[0]
    uses = planes_out.uses()
    out = g.result.shape
    if not uses or planes_out.is_graph_output() or out is None or not all(isinstance(d, int) for d in out[1:]):
        return False
    back = [dims[0], dims[1], *list(out)[2:]]
    for u in uses:  # back to [N, C, *pooled]: the count P = N * C makes the first size N
        r = u.node
        if r.op_type != "Reshape" or u.idx != 0 or r.outputs[0].shape is None or len(r.outputs[0].shape) != len(back) \
                or list(r.outputs[0].shape)[1:] != back[1:]:
            return False
    for u in list(planes_in.uses()):
        u.node.replace_input_with(u.idx, src)
    for node in [*between, *nodes, *after]:
        for o in node.outputs:
            o.shape = None
    if not between:
        g.x = src
    g.x.shape = ir.Shape(dims)
    g.result.shape = planes_out.shape = ir.Shape(back)
    for u in list(uses):
        u.node.outputs[0].replace_all_uses_with(planes_out, replace_graph_outputs=False)
    return True


def _region(graph: ir.Graph, end: ir.Value, before: Callable[[ir.Node], bool] | None = None,
            ) -> tuple[list[ir.Node], list[ir.Value]] | None:
    """The nodes ``end`` is computed by, back to start values, and those starts, or None where a value
    between them is read elsewhere. Without ``before``, the nodes are layer ops and the starts the values
    other nodes make; with it, the walk stops only at nodes ``before`` accepts (made before the layers)."""
    found: dict[int, ir.Node] = {}
    starts: dict[int, ir.Value] = {}
    stack = [end]
    while stack:
        v = stack.pop()
        if m.const(v) is not None:
            continue
        node = v.producer()
        if node is None or node.graph is not graph or node.domain != "" or (
                node.op_type not in _LAYER_OPS if before is None else before(node) or node.op_type in m.CONTROL_OPS
                or m.is_const_expr(v)):  # a weight's Transpose: folded later, read from outside
            starts[id(v)] = v
            continue
        if id(node) in found:
            continue
        found[id(node)] = node
        if len(found) > _MAX_REGION:
            return None
        stack.extend(i for i in node.inputs if i is not None)
    nodes = [n for n in graph if id(n) in found]
    for node in nodes:
        for o in node.outputs:
            if o is end:
                continue
            if o.is_graph_output() or any(id(u.node) not in found for u in o.uses()):
                return None
    return nodes, list(starts.values())


def _size(value: ir.Value) -> float:
    """The element count of ``value`` (infinite where its shape is not static)."""
    shape = value.shape
    if shape is None or not all(isinstance(d, int) for d in shape):
        return math.inf
    return float(np.prod([int(d) for d in shape]))


def _test_nodes(xs: list[ir.Value]) -> list[ir.Node]:
    """Nodes whose last output is false when any of ``xs`` holds a NaN or a -inf (``sum > -inf``)."""
    nodes: list[ir.Node] = []
    sums = []
    for x in xs:
        src = x
        shape = x.shape
        if shape is not None and len(shape) >= 3 and isinstance(shape[1], int) and shape[1] % _BLOCK == 0:
            gap = ir.node("GlobalAveragePool", [x])  # read in ORT's blocked layout, no reorder of x
            nodes.append(gap)
            src = gap.outputs[0]
        total = ir.node("ReduceSum", [src], {"keepdims": 0})
        nodes.append(total)
        sums.append(total.outputs[0])
    if len(sums) > 1:
        nodes.append(ir.node("Sum", sums))
    t = nodes[-1].outputs[0]
    dtype = xs[0].dtype.numpy() if xs[0].dtype is not None else np.float32
    low = ir.node("Constant", [], {"value": ir.tensor(np.array(-np.inf, dtype))})
    return [*nodes, low, ir.node("Greater", [t, low.outputs[0]])]


def _branch_on(graph: ir.Graph, test: ir.Value, result: ir.Value, exact: list[ir.Node], fast: ir.Node,
               after: ir.Node) -> None:
    """``result`` as ``If(test, then: fast, else: exact)`` (``m.branch_on`` with the branches swapped:
    the test holds where the plain pools are exact)."""
    m.branch_on(graph, test, result, exact, fast, after, ("pool_guard", "pool_plain"))
    branch = next(u.node for u in test.uses() if u.node.op_type == "If")
    guard, plain = branch.attributes["then_branch"].value, branch.attributes["else_branch"].value
    branch.attributes["then_branch"] = ir.AttrGraph("then_branch", plain)
    branch.attributes["else_branch"] = ir.AttrGraph("else_branch", guard)


def _guard_chain(graph: ir.Graph, guards: list[_Guard], last: _Guard) -> list[_Guard] | None:
    """Put the layers that end in, or run on after, ``last``'s pool behind one finiteness test.

    The layers end at the last value after the pool whose layers are read nowhere else (a ResNet's
    whole body up to its global pooling), so that ORT's blocked layout runs through them; returns the
    guards they hold, None where no layer computes a pool's input.
    """
    got = _region(graph, last.result)
    if got is None:
        return None
    order = list(graph)
    at = order.index(last.result.producer())
    pos = {id(n): i for i, n in enumerate(order)}
    first = min(pos[id(n)] for n in got[0])
    end = last.result
    # a later end whose nodes are read nowhere else: the smallest (the If's plain branch copies it), the
    # farthest of equal ones
    later = [n for n in order[at + 1:at + 1 + _MAX_REGION] if n.domain == "" and n.op_type not in m.CONTROL_OPS
             and len(n.outputs) == 1 and not n.outputs[0].is_graph_output() and _size(n.outputs[0]) <= _size(end)]
    for node in sorted(later, key=lambda n: (_size(n.outputs[0]), -pos[id(n)])):
        longer = _region(graph, node.outputs[0], lambda n: pos[id(n)] < first)
        if longer is not None and any(n is last.result.producer() for n in longer[0]):
            got, end = longer, node.outputs[0]
            break
    nodes, _ = got
    ids = {id(n) for n in nodes}
    taken = [g for g in guards if id(g.result.producer()) in ids and id(g.plain) in ids]
    if last not in taken or not any(g.x.producer() is not None and id(g.x.producer()) in ids for g in taken):
        return None  # no layer before a pool: the guard alone
    mapping: dict[int, ir.Value] = {}
    fast = m.clone(nodes, mapping)
    for g in taken:  # the fast copy reads each plain pool where the original reads its guard
        for use in list(mapping[id(g.result)].uses()):
            use.node.replace_input_with(use.idx, mapping[id(g.plain.outputs[0])])
    fast_end = mapping[id(end)]
    if end is last.result:
        fast_end = mapping[id(last.plain.outputs[0])]
    test = _test_nodes([mapping.get(id(g.x), g.x) for g in taken])
    graph.insert_before(nodes[-1], fast + test)
    same = ir.node("Identity", [fast_end])
    _branch_on(graph, test[-1].outputs[0], end, nodes, same, test[-1])
    return taken


def _guard_alone(graph: ir.Graph, g: _Guard) -> bool:
    """``If(non-finite x, then: the guard, else: MaxPool(x))``."""
    x, plain, result = g.x, g.plain, g.result
    guard = _guard_nodes(graph, g)
    if guard is None:
        return False
    guard = [n for n in guard if n is not plain]
    inside = {id(n) for n in guard}
    test = _test_nodes([x])
    graph.insert_before(plain, test)
    pool_out = plain.outputs[0]
    if not pool_out.is_graph_output() and all(id(u.node) in inside for u in pool_out.uses()):
        guard.insert(0, plain)  # only the guard reads the plain pool: each branch pools for itself
        fast = ir.node("MaxPool", [x], {a.name: a for a in plain.attributes.values()})
    else:
        fast = ir.node("Identity", [pool_out])
    anchor = plain if fast.op_type == "Identity" else test[-1]
    _branch_on(graph, test[-1].outputs[0], result, guard, fast, anchor)
    return True


def rewrite(graph: ir.Graph) -> int:
    """Put every max-pooling guard of ``graph`` behind a finiteness test; returns how many.

    The early form, which keeps the guard's Wheres away from the other rules; ``chains`` re-forms it.
    """
    count = 0
    for node in list(graph):
        if node.graph is graph and node.op_type == "Where" and node.domain == "":
            got = _guard(node)
            count += got is not None and _guard_alone(graph, _Guard(got[0], got[1], node.outputs[0]))
    return count


def chains(graph: ir.Graph) -> int:
    """After the layout rules: pool planes in place and guard each chain of conv and pool layers once,
    in ``graph`` and its subgraphs; returns how many guards moved."""
    count = 0
    for g in list(m.all_graphs(graph)):
        count += _chains(g)
    return count


def _unwrap(graph: ir.Graph, branch: ir.Node) -> _Guard | None:
    """The guard ``rewrite`` put behind ``branch`` (an If), moved back before it."""
    if branch.op_type != "If" or branch.domain != "" or len(branch.outputs) != 1:
        return None
    guard = branch.attributes.get("else_branch")
    if guard is None or guard.type != ir.AttributeType.GRAPH or guard.value.name != "pool_guard":
        return None
    body = guard.value
    result = body.outputs[0]
    node = result.producer()
    got = _guard(node) if node is not None and node.graph is body else None
    if got is None:
        return None
    x, plain = got
    body.outputs.clear()
    for n in list(body):
        body.remove(n)
        graph.insert_before(branch, n)
    out = branch.outputs[0]
    name = out.name
    fast = branch.attributes.get("then_branch")
    if fast is not None and fast.type == ir.AttributeType.GRAPH:  # its nodes stop reading x
        fast.value.outputs.clear()
        for n in reversed(list(fast.value)):
            fast.value.remove(n, safe=True)
    cond = branch.inputs[0]
    out.replace_all_uses_with(result, replace_graph_outputs=True)
    graph.remove(branch, safe=True)
    result.name = name
    _drop_dead(graph, cond)
    return _Guard(x, plain, result)


def _drop_dead(graph: ir.Graph, value: ir.Value | None) -> None:
    """Remove ``value``'s producer and its inputs' producers while nothing reads them."""
    node = value.producer() if value is not None else None
    if node is None or node.graph is not graph or any(o.uses() or o.is_graph_output() for o in node.outputs):
        return
    inputs = list(node.inputs)
    graph.remove(node, safe=True)
    for v in inputs:
        _drop_dead(graph, v)


# ops ORT's blocked (NCHWc) layout runs fused into the Conv before them, with a constant other operand
_CONV_FUSED = frozenset({"Relu", "Sigmoid", "Tanh", "Clip", "LeakyRelu", "HardSigmoid"})


def _after_conv(g: _Guard) -> bool:
    """True when the guard pools a Conv's output (through its bias, scale and activation), with a
    channel count ORT keeps blocked: there the pool and its test read the blocked tensor. Elsewhere
    (a residual sum, an input) pooling [N, C, H, W] makes ORT reorder the whole input for a blocked
    MaxPool, where the planes' MaxPool reads it as it is."""
    v = g.x
    while (inner := _by_scalar(v)) is not None:
        v = inner
    before = m.producer(v, "Reshape")
    v = before.inputs[0] if before is not None and before.inputs[0] is not None else v
    shape = v.shape
    if shape is None or len(shape) < 3 or not isinstance(shape[1], int) or shape[1] % _BLOCK:
        return False
    for _ in range(8):
        node = m.producer(v)
        if node is None or len(v.uses()) != 1 or v.is_graph_output():
            return False
        if node.op_type == "Conv":
            return True
        if node.op_type in _CONV_FUSED:
            v = node.inputs[0]
            continue
        pair = m.binary(node, node.op_type) if node.op_type in ("Add", "Mul", "Sub") else None
        if pair is None or m.is_const_expr(pair[0]) == m.is_const_expr(pair[1]):
            return False
        v = pair[1] if m.is_const_expr(pair[0]) else pair[0]
    return False


def _unblocked(g: _Guard) -> bool:
    """True when the guard pools planes of ``[N, C, ...]`` with C not a multiple of ORT's block: ORT
    pools ``[N, C, ...]`` itself there in its plain layout, with no reorder, so the planes' two
    Reshapes can go (Equinox's vmapped pool over a 3-channel conv)."""
    v = g.x
    while (inner := _by_scalar(v)) is not None:
        v = inner
    before = m.producer(v, "Reshape")
    shape = before.inputs[0].shape if before is not None and before.inputs[0] is not None else None
    return shape is not None and len(shape) >= 3 and isinstance(shape[1], int) and shape[1] % _BLOCK != 0


def _chains(graph: ir.Graph) -> int:
    if not any(n.op_type == "If" for n in graph):
        return 0
    m.sweep(graph)
    found = [g for g in (_unwrap(graph, n) for n in list(graph)) if g is not None]
    guards = [g for g in found if _after_conv(g)]
    alone = [g for g in found if g not in guards]
    if sum(_unplane(graph, g) for g in alone if _unblocked(g)):
        m.sweep(graph)
    count = sum(_guard_alone(graph, g) for g in alone)  # each in its own If
    if sum(_unplane(graph, g) for g in guards):
        m.sweep(graph)  # the Reshapes around the planes
    done: set[int] = set()
    for g in reversed(guards):
        if id(g) in done:
            continue
        taken = _guard_chain(graph, [k for k in guards if id(k) not in done], g)
        if taken is None:
            taken = [g] if _guard_alone(graph, g) else []
        done.update(id(k) for k in taken)
        count += len(taken)
    return count
