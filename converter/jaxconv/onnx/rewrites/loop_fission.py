"""A Loop whose state splits into layers that feed one another forward, as one Loop a layer.

Stacked recurrent layers written as one scan step (``hk.DeepRNN`` under ``hk.static_unroll``, which
``unrolled_steps`` folds into one Loop; a ``lax.scan`` step that runs layer 1's cell, then layer 2's on
layer 1's new h) lower to one Loop whose body holds every cell. The rules that read a scan (``loops``'
input projection, ``lstm``, ``gru``) read a body of one cell, so such a Loop stayed one Scan.

The body's carries are grouped by what their updates read: carries that read one another (an LSTM's
c and h) are one group, and the groups, ordered so that each reads only groups before it, become one
Loop each, in that order (a carry on no cycle, such as the previous row of ``xs``, joins the last group
it reads). Each body node runs in the last Loop it can (a ReLU between two layers runs with the layer
that reads it); a value one Loop makes and a later one reads is a scan output of the first and a row of
it (``Squeeze(Slice(ys, i, i + 1))``, the form ``loops`` and the RNN rules read) in the second. An exact
elementwise op that reads only such rows and constants (the ReLU between layers) runs once on the
stacked rows between the Loops, so that the next layer's input projection can leave its Loop too.

Each step runs the same ops in the same order on the same values, and the values that cross between
Loops are stored and read back unchanged: the same numbers. A body whose groups feed back into one
another is one group and stays one Loop; so do Loops without a fixed trip count (``loops.trip_count``),
bodies holding subgraphs or random ops, and Loops in subgraphs (the RNN rules read the main graph's).

Only a gated cell (a group of one or two carries whose update computes a sigmoid: an LSTM's, a GRU's)
gets a Loop of its own; consecutive other groups share one. Each Loop's steps cost a fixed time, so
three tanh-RNN layers as three Scans took 1.05-1.20x the CPU time of one Scan (T 16-64, B 1-4, H 32-64;
neutral at B8 H128), their input projections out of the loops or not.

Measured (ORT 1.32, 2 cores, alternating in one process, 41 rotations a round): the zoo's hk_deeprnn
(hk.DeepRNN([LSTM(64), relu, LSTM(64)]) under hk.static_unroll, T64 B2 I32) is two LSTM ops and a ReLU
between them instead of one Scan of both cells (65 nodes with the subgraphs, the exact Loops of the
guards included, against 47): CPU time over jax.jit's 1.02-1.48 -> 0.37-0.45, 0.27-0.44 of the time
without the rule (six rounds, load 8.8-10.2); time over jax.jit's 0.26-3.35 -> 0.12-0.37. Two jax LSTM
cells in one ``lax.scan`` step (T64 B8 I32 H128): CPU time 0.61 of that without the rule.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _dim_products
from jaxconv.onnx.rewrites import _match as m

_STATEFUL = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                       "Multinomial", "Bernoulli"})
# ops whose result for an element is one exact or correctly rounded operation on its operands' elements:
# the same bits on one row as on every row at once
_EXACT_ELEMENTWISE = frozenset({"Relu", "Neg", "Abs", "Identity", "Add", "Sub", "Mul", "Div", "Equal", "Less",
                                "Greater", "Not", "And", "Or", "Where"})
_BETWEEN = -1  # the place of a node that runs on the stacked rows, before the first Loop that reads it
_COUNTER = 2  # the body input of the counter; the carries follow it
SPLIT_UNGATED = False  # also give a Loop of its own to each group that is no gated cell (tests of the split)


def rewrite(main: ir.Graph) -> int:
    """Split every Loop of ``main`` whose carries fall into forward-feeding groups into one Loop a group;
    returns how many Loops were split. A Loop in a subgraph stays whole: the RNN rules read the main
    graph's."""
    count = 0
    for loop in [n for n in main if n.op_type == "Loop" and n.domain == ""]:
        plan = _plan(loop)
        if plan is not None and _split(main, loop, plan):
            count += 1
    return count


class _Plan:
    """Where the carries and the live body nodes of one Loop go.

    Attributes:
        groups: for each new Loop, the body-input positions of its carries (every Loop has the counter).
        place: id of a node that reads a carry -> the Loop it runs in, or ``_BETWEEN``.
        free: ids of the live nodes that read no carry (counter arithmetic, invariants), copied into each
            Loop that reads them.
        outputs: for each scan output, the Loop that returns it.
        steps: the trip count.
    """

    def __init__(self, groups: list[list[int]], place: dict[int, int], free: set[int], outputs: list[int],
                 steps: int) -> None:
        self.groups, self.place, self.free, self.outputs, self.steps = groups, place, free, outputs, steps


def _plan(loop: ir.Node) -> _Plan | None:
    """``loop``'s split into forward-feeding groups, or None where it has fewer than two."""
    from jaxconv.onnx.rewrites.loops import trip_count

    body = loop.attributes["body"].value
    n_in = len(body.inputs)
    steps = trip_count(loop)
    if steps is None or n_in < _COUNTER + 3 or len(loop.inputs) != n_in or None in loop.inputs[1:]:
        return None
    if body.inputs[1].uses() or len(body.outputs) < n_in - 1:
        return None
    if any(n.op_type in _STATEFUL or any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
                                         for a in n.attributes.values()) for n in body):
        return None
    carries = list(range(_COUNTER + 1, n_in))  # body-input positions; carry p's update: output p - 1
    deps = _carries_read(body)
    if deps.get(id(body.outputs[0])) or deps.get(id(body.outputs[1])):
        return None  # the condition or the counter reads a carry
    reads = {p: deps.get(id(body.outputs[p - 1]), frozenset()) for p in carries}
    for p in carries:
        if body.outputs[p - 1] is body.inputs[p]:  # passed through unchanged: on no cycle
            reads[p] = frozenset()
    groups = _groups(carries, reads)
    if not SPLIT_UNGATED:
        groups = _gated_apart(body, groups, deps)
    if len(groups) < 2:
        return None
    home = {p: g for g, group in enumerate(groups) for p in group}

    def earliest(value: ir.Value) -> int | None:
        read = deps.get(id(value))
        return max(home[p] for p in read) if read else None

    outputs = [len(groups) - 1 if earliest(v) is None else earliest(v) for v in body.outputs[n_in - 1:]]
    wanted: dict[int, int] = {}  # id of a value -> the first Loop that reads it
    returned = [(body.outputs[p - 1], home[p]) for p in carries]
    returned += list(zip(body.outputs[n_in - 1:], outputs))
    for value, g in returned:
        wanted[id(value)] = min(wanted.get(id(value), g), g)
    live = {id(v) for v in body.outputs}
    place: dict[int, int] = {}
    free: set[int] = set()
    for node in reversed(list(body)):  # each node in the last Loop it can run in: the first that reads it
        if not any(id(o) in live for o in node.outputs):
            continue  # dead
        live.update(id(v) for v in node.inputs if v is not None)
        if not any(deps.get(id(o)) for o in node.outputs):
            free.add(id(node))
            continue
        where = min(wanted[id(o)] for o in node.outputs if id(o) in wanted)
        place[id(node)] = where
        for v in node.inputs:
            if v is not None and deps.get(id(v)):
                wanted[id(v)] = min(wanted.get(id(v), where), where)
    _between(body, place, deps, home)
    return _Plan(groups, place, free, outputs, steps)


def _carries_read(body: ir.Graph) -> dict[int, frozenset[int]]:
    """id of each body value -> the body-input positions of the carries it is computed from."""
    deps: dict[int, frozenset[int]] = {id(body.inputs[p]): frozenset([p])
                                       for p in range(_COUNTER + 1, len(body.inputs))}
    for node in body:
        read = frozenset().union(*(deps.get(id(v), frozenset()) for v in node.inputs if v is not None))
        for out in node.outputs:
            deps[id(out)] = read
    return deps


def _groups(carries: list[int], reads: dict[int, frozenset[int]]) -> list[list[int]]:
    """The carries in groups: the carries of a cycle of reads together, ordered so that a group reads
    only groups before it; a carry on no cycle joins the last group it reads (else the first)."""
    reach = {p: set(reads[p]) for p in carries}
    changed = True
    while changed:
        changed = False
        for p in carries:
            more = set().union(*(reach[q] for q in reach[p])) - reach[p]
            if more:
                reach[p] |= more
                changed = True
    cycles: list[list[int]] = []
    for p in carries:
        if p in reach[p] and not any(p in c for c in cycles):
            cycles.append([q for q in carries if q in reach[p] and p in reach[q]])
    order: list[list[int]] = []
    while len(order) < len(cycles):  # Kahn's order; of those ready, the one of the first carry first
        placed = {q for c in order for q in c}
        ready = [c for c in cycles if c not in order
                 and all(q in placed or q in c for d in cycles for q in d if q in reach[c[0]])]
        order.append(ready[0])  # the cycles are the strongly connected parts: one is always ready
    home = {p: g for g, c in enumerate(order) for p in c}
    groups = [list(c) for c in order]
    for p in carries:
        if p not in home and groups:
            groups[max((home[q] for q in reach[p] if q in home), default=0)].append(p)
    return [sorted(g) for g in groups]


def _gated_apart(body: ir.Graph, groups: list[list[int]], deps: dict[int, frozenset[int]]) -> list[list[int]]:
    """``groups`` with each run of consecutive groups that are no gated cell merged into one: a group of
    one or two carries whose update computes a sigmoid (an LSTM's or a GRU's, which the RNN rules may
    make one op) stands alone; others share a Loop, as each Loop's steps cost a fixed time."""
    home = {p: g for g, group in enumerate(groups) for p in group}
    gated = set()
    for node in body:
        read = deps.get(id(node.outputs[0])) if node.outputs else None
        if read and _is_sigmoid(node):
            gated.add(max(home[p] for p in read))
    merged: list[list[int]] = []
    alone_before = True
    for g, group in enumerate(groups):
        alone = g in gated and len(group) <= 2
        if alone or alone_before:
            merged.append(list(group))
        else:
            merged[-1].extend(group)
        alone_before = alone
    return [sorted(group) for group in merged]


def _is_sigmoid(node: ir.Node) -> bool:
    """A Sigmoid, or the lowering's ``c / (c + exp(z))``."""
    if node.op_type == "Sigmoid":
        return True
    add = m.producer(node.inputs[1], "Add") if node.op_type == "Div" and len(node.inputs) == 2 else None
    return add is not None and any(m.producer(v, "Exp") is not None for v in add.inputs)


def _between(body: ir.Graph, place: dict[int, int], deps: dict[int, frozenset[int]],
             home: dict[int, int]) -> None:
    """Mark ``_BETWEEN`` the exact elementwise nodes that read only values of earlier Loops (their rows)
    and constants of no more axes than those rows: they run once on the stacked rows, between the Loops."""
    made_in = {id(body.inputs[p]): g for p, g in home.items()}  # id of a carried value -> where it is made
    for node in body:
        where = place.get(id(node))
        if where is None:
            continue
        rows = [v for v in node.inputs if v is not None and deps.get(id(v))]
        others = [v for v in node.inputs if v is not None and not deps.get(id(v))]
        ranks = {m.rank(v) for v in rows}
        if (node.op_type in _EXACT_ELEMENTWISE and node.domain == "" and not node.attributes and where > 0
                and all(made_in[id(v)] < where for v in rows) and len(ranks) == 1 and None not in ranks):
            rank = ranks.pop()
            if all(_operand_rank(v, body) is not None and _operand_rank(v, body) <= rank for v in others):
                where = place[id(node)] = _BETWEEN
        made_in.update((id(o), where) for o in node.outputs)


def _operand_rank(value: ir.Value, body: ir.Graph) -> int | None:
    """The rank of an operand that is the same at every step: a constant, or a value from outside the body."""
    arr = m.const(value)
    if arr is not None:
        return arr.ndim
    return None if _in_body(value, body) else m.rank(value)


def _split(main: ir.Graph, loop: ir.Node, plan: _Plan) -> bool:
    """Write ``loop`` as the Loops of ``plan`` (and the nodes between them) in its place; False (nothing
    changed) where a new body would read a value of the old body it was not given."""
    body = loop.attributes["body"].value
    made_in = {id(body.inputs[p]): g for g, group in enumerate(plan.groups) for p in group}
    for node in body:
        if id(node) in plan.place:
            made_in.update((id(o), plan.place[id(node)]) for o in node.outputs)
    stacked: dict[int, ir.Value] = {}  # id of a body value -> the outer value holding it for every step
    new_nodes: list[ir.Node] = []
    results: dict[int, ir.Value] = {}  # position in loop.outputs -> the value that stands for it
    for g in range(len(plan.groups)):
        new_nodes += _between_nodes(main, body, plan, stacked)
        built = _one_loop(loop, plan, g, made_in, stacked)
        if built is None:
            return False
        made, outs = built
        new_nodes += made
        results.update(outs)
    graph = loop.graph
    for node in new_nodes:
        graph.insert_before(loop, node)
    for k, old in enumerate(loop.outputs):
        new = results[k]
        new.type = old.type if old.type is not None else new.type
        if new.shape is None or not new.shape.is_static():  # a scan output's row count the Loop did not state
            new.shape = old.shape
        m.take_over(old, new)
    for k in range(len(loop.inputs)):
        loop.replace_input_with(k, None)
    graph.remove(loop)
    return True


def _between_nodes(main: ir.Graph, body: ir.Graph, plan: _Plan,
                   stacked: dict[int, ir.Value]) -> list[ir.Node]:
    """Copies of the ``_BETWEEN`` nodes whose rows are all stacked now, on every row at once (their
    constants from the body as initializers); ``stacked`` takes their outputs."""
    from onnx_ir._cloner import Cloner

    copies = []
    for node in body:
        if plan.place.get(id(node)) != _BETWEEN or id(node.outputs[0]) in stacked:
            continue
        inputs = [v for v in node.inputs if v is not None]
        if any(id(v) not in stacked and _in_body(v, body) and m.const(v) is None for v in inputs):
            continue  # a row not stacked yet
        value_map: dict = {}
        for v in inputs:
            if id(v) in stacked:
                value_map[v] = stacked[id(v)]
            elif _in_body(v, body):
                value_map[v] = m.new_initializer(main, m.const(v), "between_loops")
        copy = Cloner(attr_map={}, value_map=value_map, metadata_props={},
                      allow_outer_scope_values=True).clone_node(node)
        for old, new in zip(node.outputs, copy.outputs):
            new.shape = _rows_shape(old, plan.steps)
            stacked[id(old)] = new
        copies.append(copy)
    return copies


def _in_body(value: ir.Value, body: ir.Graph) -> bool:
    """True when ``value`` is made in ``body`` (an input, an initializer or a node's output)."""
    node = value.producer()
    return value in body.inputs or value.name in body.initializers or (
        node is not None and node.graph is body)


def _rows_shape(value: ir.Value, steps: int) -> ir.Shape | None:
    """``[steps, *value.shape]`` where ``value`` (a step's value) has a known shape (named sizes too)."""
    dims = _dim_products.named_dims(value)
    return None if dims is None else ir.Shape([steps, *dims])


def _one_loop(loop: ir.Node, plan: _Plan, g: int, made_in: dict[int, int],
              stacked: dict[int, ir.Value]) -> tuple[list[ir.Node], dict[int, ir.Value]] | None:
    """Loop g of ``plan`` (the counter and its group's carries; a row of each value of earlier Loops it
    reads), and the old Loop's outputs its outputs stand for; ``stacked`` takes the
    values it stacks for later Loops. None where its body would read a value of the old body it was not
    given."""
    from onnx_ir._cloner import Cloner

    body = loop.attributes["body"].value
    n_in = len(body.inputs)
    group = plan.groups[g]
    positions = [0, 1, _COUNTER, *group]
    inputs = [ir.Value(name=body.inputs[p].name, type=body.inputs[p].type, shape=body.inputs[p].shape)
              for p in positions]
    value_map: dict = dict(zip([body.inputs[p] for p in positions], inputs))
    mine = [n for n in body if plan.place.get(id(n)) == g]
    scans = [j for j, home in enumerate(plan.outputs) if home == g]
    returned = [body.outputs[0], body.outputs[1], *(body.outputs[p - 1] for p in group),
                *(body.outputs[n_in - 1 + j] for j in scans)]
    earlier = [v for n in mine for v in n.inputs if v is not None and made_in.get(id(v), g) != g]
    index_type = body.inputs[_COUNTER].dtype or loop.inputs[_COUNTER].dtype or ir.DataType.INT64
    nodes = _rows(list(dict.fromkeys(earlier)), inputs[2], index_type, stacked, value_map)
    for v in body.initializers.values():
        value_map[v] = ir.Value(name=v.name, type=v.type, shape=v.shape, const_value=v.const_value)
    needed = _free_closure(body, plan, [v for n in mine for v in n.inputs] + returned)
    cloner = Cloner(attr_map={}, value_map=value_map, metadata_props={}, allow_outer_scope_values=True)
    nodes += [cloner.clone_node(n) for n in body if id(n) in needed or plan.place.get(id(n)) == g]
    scanned = {id(_through_identity(body.outputs[n_in - 1 + j])): k for k, j in enumerate(scans)}
    read_later = _read_later(body, plan, g, made_in)
    later = [v for v in read_later if id(v) not in scanned]  # the others: a scan output already
    identities = [ir.node("Identity", [value_map[v]]) for v in later]  # scan outputs for the Loops after
    for v, ident in zip(later, identities):
        ident.outputs[0].type, ident.outputs[0].shape = v.type, v.shape
    nodes += identities
    outs = [value_map.get(v, v) for v in returned] + [n.outputs[0] for n in identities]
    new_body = ir.Graph(inputs, outs, nodes=nodes, name=f"{body.name or 'body'}_{g}",
                        initializers=[value_map[v] for v in body.initializers.values()])
    if not _closed(new_body, body):
        return None
    loop_inputs = [None, loop.inputs[1], loop.inputs[_COUNTER], *(loop.inputs[p] for p in group)]
    new_loop = ir.node("Loop", loop_inputs, {"body": new_body}, num_outputs=len(outs) - 1)
    results = {0: new_loop.outputs[0]}  # the final counter (every Loop's is the same)
    for k, p in enumerate(group):
        results[p - 2] = new_loop.outputs[1 + k]
    for k, j in enumerate(scans):
        out = results[n_in - 2 + j] = new_loop.outputs[1 + len(group) + k]
        out.shape = _rows_shape(body.outputs[n_in - 1 + j], plan.steps)
    for v, out in zip(later, new_loop.outputs[1 + len(group) + len(scans):]):
        out.type, out.shape = v.type, _rows_shape(v, plan.steps)
        stacked[id(v)] = out
    for v in read_later:
        if id(v) in scanned:
            stacked[id(v)] = results[n_in - 2 + scans[scanned[id(v)]]]
    return [new_loop], results


def _through_identity(value: ir.Value) -> ir.Value:
    """The value an Identity returns (a body returns its scan outputs through one), else ``value``."""
    node = m.producer(value, "Identity")
    return node.inputs[0] if node is not None and node.inputs[0] is not None else value


def _rows(values: list[ir.Value], counter: ir.Value, dtype: ir.DataType, stacked: dict[int, ir.Value],
          value_map: dict) -> list[ir.Node]:
    """Nodes that read step ``counter``'s row (``dtype``: the counter's) of the stacked form of each of
    ``values`` (``Squeeze(Slice(rows, [i], [i] + 1, axes=[0]), [0])``, the form ``loops`` reads), mapped in
    ``value_map``."""
    if not values:
        return []
    index_type = dtype.numpy()
    axis0 = ir.node("Constant", [], {"value": ir.tensor(np.array([0], np.int64))})
    one = ir.node("Constant", [], {"value": ir.tensor(np.array([1], index_type))})
    axes = ir.node("Constant", [], {"value": ir.tensor(np.array([0], index_type))})  # Slice's index type
    start = ir.node("Unsqueeze", [counter, axis0.outputs[0]])
    end = ir.node("Add", [start.outputs[0], one.outputs[0]])
    nodes = [axis0, one, axes, start, end]
    for v in values:
        step = ir.node("Slice", [stacked[id(v)], start.outputs[0], end.outputs[0], axes.outputs[0]])
        row = ir.node("Squeeze", [step.outputs[0], axis0.outputs[0]])
        row.outputs[0].type, row.outputs[0].shape = v.type, v.shape
        nodes += [step, row]
        value_map[v] = row.outputs[0]
    return nodes


def _free_closure(body: ir.Graph, plan: _Plan, wanted: list[ir.Value | None]) -> set[int]:
    """ids of the free nodes (counter arithmetic, invariants) that compute ``wanted``."""
    needed: set[int] = set()
    stack = [v for v in wanted if v is not None]
    while stack:
        node = stack.pop().producer()
        if node is None or node.graph is not body or id(node) not in plan.free or id(node) in needed:
            continue
        needed.add(id(node))
        stack += [v for v in node.inputs if v is not None]
    return needed


def _read_later(body: ir.Graph, plan: _Plan, g: int, made_in: dict[int, int]) -> list[ir.Value]:
    """The values Loop g makes (its carries' inputs included) that a later Loop or a node between reads."""
    n_in = len(body.inputs)
    read = [v for n in body if id(n) in plan.place and plan.place[id(n)] != g for v in n.inputs]
    read += [body.outputs[n_in - 1 + j] for j, home in enumerate(plan.outputs) if home != g]
    return list(dict.fromkeys(v for v in read if v is not None and made_in.get(id(v)) == g))


def _closed(new_body: ir.Graph, old_body: ir.Graph) -> bool:
    """True when every value ``new_body`` reads or returns is its own or from outside ``old_body``."""
    old = {id(v) for v in old_body.inputs} | {id(o) for n in old_body for o in n.outputs}
    old |= {id(v) for v in old_body.initializers.values()}
    read = [v for n in new_body for v in n.inputs] + list(new_body.outputs)
    return not any(v is not None and id(v) in old for v in read)
