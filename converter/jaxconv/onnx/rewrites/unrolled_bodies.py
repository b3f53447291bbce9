"""A Loop whose body runs k copies of one recurrence step folded into a Loop of one step over k times the trips.

``lax.scan(step, h, xs, unroll=k)`` (and ``nnx.RNN(cell, unroll=k)``, ``nn.RNN(..., unroll=k)``) lowers to
a while loop over ``T / k`` trips whose body reads ``xs`` regrouped ``[T / k, k, ...]``, takes its trip's
``[1, k, ...]`` and runs the step k times on its rows, each copy on the state the copy before wrote, the
k per-step outputs stacked by one Concat. The rules that read a scan (``loops`` hoisting the input
projection, ``lstm``, ``gru``, ``scan``, ``scan_rows``) read a body of one step, so such a body stays a
Loop of k cells.

The rule finds the copies in the body with ``unrolled_steps``' matcher (the same op types, attributes and
constants by value, copy j reading row j of the trip's rows and copy j - 1's values) and keeps one, the
template: the body then reads row ``i`` of ``xs`` ungrouped (``[T, ...]``, a Reshape before the Loop),
carries the template's state, stacks the template's output and runs ``T`` trips. Each step runs the same
ops in the same order on the same values, so the numbers do not change. The Loop's stacked output is
read as before through a Reshape back to ``[T / k, k * ...]`` (none where its readers only reshape it).
A reversed scan (``reverse=True``: trip ``T / k - 1 - i``, its rows from the last) reads ``xs``'s rows
reversed the same way, and its stacked rows, which the lowering reverses after the Loop, are then the
Loop's own reversed (none where its readers only reshape them). Where T is not a multiple of k, jax runs
the last T mod k steps after the Loop in straight-line code; they stay as they are. The rows may hold named
sizes (a symbolic batch): sizes are then products of names (``_dim_products.Size``), a named axis is read
whole or not at all, ``xs`` is regrouped by a Reshape to a run-time shape, and the copies' Expands to their
own run-time shapes (jax's broadcasts on a symbolic shape) count as copies of one another.

Measured (ORT 1.32, 2 cores, load 9.2-12.2, CPU time per call, medians over rounds of up to 41 calls of
each form alternating in one process): the zoo's ``nnx_gru`` (two ``nnx.RNN(GRUCell, unroll=4)`` layers,
B4 T64 H128; 169 -> 55 nodes, subgraphs included) becomes two GRU ops: CPU time 0.56x the graph without
the rule, 0.82x jax.jit's (1.49x before); ``lax.scan(lstm_step, unroll=4)`` (B4 T64 H32) becomes the LSTM
op: 0.35x (forward), 0.28x (``reverse=True``); ``unroll=3`` with T 10 (one step left after the Loop): 0.59x.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _dim_products, loops, unrolled_steps
from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites._dim_products import Dim, Size

_INT64_MIN = int(np.iinfo(np.int64).min)



def rewrite(main: ir.Graph) -> int:
    """Fold the bodies of k step copies of every Loop in ``main`` (nested ones too); returns how many."""
    found = [n for n in ir.traversal.RecursiveGraphIterator(main) if n.op_type == "Loop" and n.domain == ""]
    return sum(_fold(loop, main) for loop in found)


class _Group:
    """A trip's rows of one sequence: ``Slice(xs, g(i), g(i) + 1)`` of ``xs`` ``[N, k, *rest]``, and the
    value each copy's row is (``rows[p]``: row p of the trip's k rows, shaped ``row_shape``). ``rest`` may
    hold named sizes (a symbolic batch)."""

    def __init__(self, read: ir.Node, backward: bool, rows: list[ir.Value], row_shape: list[Dim]) -> None:
        self.read, self.backward, self.rows, self.row_shape = read, backward, rows, row_shape
        self.xs: ir.Value = read.inputs[0]  # type: ignore[assignment]


def _fold(loop: ir.Node, main: ir.Graph) -> int:
    body = loop.attributes["body"].value
    trips = loops.trip_count(loop)
    n_carry = len(body.inputs) - 3
    if trips is None or n_carry < 1 or len(loop.inputs) != 3 + n_carry or any(v is None for v in loop.inputs[3:]):
        return 0
    counter = body.inputs[2]
    final_counter = loop.outputs[0]
    if counter.dtype not in (ir.DataType.INT32, ir.DataType.INT64) or final_counter.uses() \
            or final_counter.is_graph_output():
        return 0
    groups = _groups(body, counter, trips)
    if not groups or len({len(g.rows) for g in groups}) != 1 or len({g.backward for g in groups}) != 1:
        return 0
    k = len(groups[0].rows)
    backward = groups[0].backward
    order = [k - 1 - t if backward else t for t in range(k)]  # the copy t's row of the trip
    m.sweep(body)  # dead nodes would count as readers of the copies' values
    rows = [unrolled_steps._Rows(g.read.outputs[0], 0, True, [g.rows[p] for p in order]) for g in groups]
    if len({id(v.producer()) for r in rows for v in r.values}) != k * len(rows):
        return 0
    found = _copies(body, rows, k, n_carry)
    if found is None:
        return 0
    template, copies, initial, taken = found
    mid = k // 2
    shapes = [_dim_products.named_dims(v) for v in loop.inputs[3:]]
    plan = _plan(body, template, copies, initial, taken, rows, mid, shapes)
    if plan is None:
        return 0
    carry_keys, stacks = plan
    _rewrite_body(main, loop, body, template, copies, rows, groups, mid, carry_keys, stacks, trips * k)
    _rewrite_outputs(main, loop, n_carry, stacks, trips, k)
    return 1


def _copies(body: ir.Graph, rows: list, k: int, n_carry: int) -> tuple | None:
    """``unrolled_steps``' copies of the step in ``body``, matched with the Concats that stack the copies'
    outputs set aside: with two copies the template is the last, and a Concat reading every copy would
    count as its node."""
    stacks = [m.producer(v, "Concat") for v in body.outputs[2 + n_carry:]]
    parts = [list(cat.inputs) if cat is not None else [] for cat in stacks]
    for cat, inputs in zip(stacks, parts):
        for j in range(len(inputs)):
            cat.replace_input_with(j, None)  # type: ignore[union-attr]
    try:
        for cascade in (True, False):
            found = unrolled_steps._copies(body, rows, k, cascade)
            if found is not None:
                return found
        return None
    finally:
        for cat, inputs in zip(stacks, parts):
            for j, v in enumerate(inputs):
                cat.replace_input_with(j, v)  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------------------- the rows


def _groups(body: ir.Graph, counter: ir.Value, trips: int) -> list[_Group] | None:
    """Every trip's read of a sequence ``[trips, k, ...]`` and its rows, when each is read in whole rows
    by its copies (a row each, all of one shape); None when a read is anything else."""
    inside = loops._body_values(body)
    groups = []
    for node in body:
        if node.op_type != "Slice" or node.domain != "" or loops._step_slice(node.outputs[0], inside) is not node:
            continue
        xs = node.inputs[0]
        dims = _dim_products.named_dims(xs)
        index = loops._index_values(node.inputs[1], counter, trips)
        if dims is None or len(dims) < 2 or dims[0] != trips or not isinstance(dims[1], int) or dims[1] < 2 \
                or index is None:
            return None
        if list(index) == list(range(trips)):
            backward = False
        elif list(index) == list(range(trips - 1, -1, -1)):
            backward = True
        else:
            return None
        found = _row_values(body, node.outputs[0], dims)
        if found is None:
            return None
        row_shape = found[1]
        if not all(isinstance(d, int) for d in row_shape) and row_shape not in ([1, *dims[2:]], dims[2:]):
            return None  # a row of named sizes is read as the Slice's row or without its step axis
        groups.append(_Group(node, backward, *found))
    return groups


def _size(dims: list[Dim]) -> Size:
    """The number of elements of ``dims``, a product of named sizes."""
    return _dim_products.product([Size(d) if isinstance(d, int) else Size(1, (d,)) for d in dims])


def _as_dim(size: Size) -> Dim | None:
    """``size`` as one dimension: a number, or one named size (None for a product of names)."""
    if size.static is not None:
        return size.static
    return size.names[0] if size.coef == 1 and len(size.names) == 1 else None


_ROW_OPS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Slice", "Split", "Gather", "Identity"})


def _row_values(body: ir.Graph, trip: ir.Value, dims: list[Dim]) -> tuple[list[ir.Value], list[Dim]] | None:
    """(the value holding each row p of the trip's ``[1, k, *rest]``, its shape) when the body reads the
    trip's rows through row ops alone, each row once and all of one shape."""
    k, width = int(dims[1]), _size(dims[2:])
    blocks: dict[int, tuple[int, int, list[Dim]]] = {id(trip): (0, k, [1, *dims[1:]])}
    rows: dict[int, ir.Value] = {}
    shapes = set()
    for node in body:
        for value in node.inputs:
            if value is None or id(value) not in blocks:
                continue
            outs = _row_op(node, blocks[id(value)], width) if node.inputs[0] is value else None
            if outs is not None:
                blocks.update((id(o), b) for o, b in zip(node.outputs, outs))
                continue
            lo, hi, shape = blocks[id(value)]
            if hi - lo != 1 or rows.get(lo, value) is not value:
                return None
            rows[lo] = value
            shapes.add(tuple(shape))
    if sorted(rows) != list(range(k)) or len(shapes) != 1 or any(v.is_graph_output() for v in rows.values()):
        return None
    return [rows[p] for p in range(k)], list(shapes.pop())


def _row_op(node: ir.Node, block: tuple[int, int, list[Dim]], width: Size) -> list[tuple[int, int, list[Dim]]] | None:
    """The rows (first, end, shape) each output of ``node`` holds, reading ``block`` (rows ``first`` to
    ``end`` of the trip, flat in that order, shaped ``shape``; ``width`` elements a row); None when
    ``node`` is no row op or cuts rows."""
    if node.op_type not in _ROW_OPS or node.domain != "":
        return None
    lo, hi, shape = block
    rank = len(shape)
    args = [m.const(v) if v is not None else None for v in node.inputs[1:]]
    if any(a is None and v is not None for a, v in zip(args, node.inputs[1:])):
        return None
    op = node.op_type
    if op == "Identity":
        return [block]
    if op == "Reshape":
        if m.attr(node, "allowzero", 0) or not args or args[0] is None:
            return None
        target = [int(t) for t in np.atleast_1d(args[0])]
        out: list[Dim] = [shape[j] if t == 0 and j < rank else t for j, t in enumerate(target)]
        total = _size(shape)
        if out.count(-1) == 1:
            rest = total.over(_size([d for d in out if d != -1]))
            inferred = _as_dim(rest) if rest is not None else None
            if inferred is None:
                return None
            out[out.index(-1)] = inferred
        if any(isinstance(d, int) and d < 0 for d in out):
            return None
        return [(lo, hi, out)] if _size(out) == total else None
    if op in ("Squeeze", "Unsqueeze"):
        if not args or args[0] is None:
            return None
        given = [int(a) for a in np.atleast_1d(args[0])]
        if op == "Squeeze":
            axes = {a % rank for a in given}
            if any(shape[a] != 1 for a in axes):
                return None
            return [(lo, hi, [d for j, d in enumerate(shape) if j not in axes])]
        out_rank = rank + len(given)
        out = list(shape)
        for a in sorted(a % out_rank for a in given):
            out.insert(a, 1)
        return [(lo, hi, out)]
    if op == "Slice":
        return _sliced(block, width, *args) if len(args) >= 2 else None
    if op == "Gather":
        index = args[0] if args else None
        axis = int(m.attr(node, "axis", 0)) % rank
        if index is None or index.ndim != 0 or not isinstance(shape[axis], int):
            return None
        start = int(index) % int(shape[axis])
        got = _part(block, width, axis, start, 1)
        return None if got is None else [(got[0], got[1], [d for j, d in enumerate(shape) if j != axis])]
    if op == "Split":
        axis = int(m.attr(node, "axis", 0)) % rank
        parts = len(node.outputs)
        if not isinstance(shape[axis], int):
            return None
        if args and args[0] is not None:
            sizes = [int(s) for s in np.atleast_1d(args[0])]
        elif int(shape[axis]) % parts == 0:
            sizes = [int(shape[axis]) // parts] * parts
        else:
            return None
        if len(sizes) != parts or sum(sizes) != shape[axis]:
            return None
        outs = []
        for start, size in zip(np.cumsum([0, *sizes[:-1]]).tolist(), sizes):
            got = _part(block, width, axis, start, size)
            if got is None:
                return None
            outs.append(got)
        return outs
    return None


def _sliced(block: tuple[int, int, list[Dim]], width: Size, starts, ends, axes=None, steps=None):
    shape = block[2]
    rank = len(shape)
    starts, ends = np.atleast_1d(starts).astype(np.int64), np.atleast_1d(ends).astype(np.int64)
    axes = np.arange(starts.size) if axes is None else np.atleast_1d(axes).astype(np.int64)
    if steps is not None and np.any(np.atleast_1d(steps) != 1):
        return None
    cut = None
    for s, e, a in zip(starts.tolist(), ends.tolist(), axes.tolist()):
        got = _dim_products.axis_cut(shape[a % rank], s, e)
        if got == "whole":
            continue
        if got is None or cut is not None or got[1] <= got[0]:
            return None
        cut = (a % rank, got[0], got[1] - got[0])
    if cut is None:
        return [block]
    return None if (got := _part(block, width, *cut)) is None else [got]


def _part(block: tuple[int, int, list[Dim]], width: Size, axis: int, start: int, size: int):
    """Elements ``start:start + size`` of ``block`` along ``axis``, as rows, when they are whole rows
    in one run (every axis before ``axis`` of size 1)."""
    lo, hi, shape = block
    if any(d != 1 for d in shape[:axis]):
        return None
    inner = _size(shape[axis + 1:])
    first, count = _rows_in(inner * Size(start), width), _rows_in(inner * Size(size), width)
    if first is None or count is None:
        return None
    out = list(shape)
    out[axis] = size
    return lo + first, lo + first + count, out


def _rows_in(elements: Size, width: Size) -> int | None:
    """How many rows of ``width`` elements ``elements`` are, when a whole number."""
    if elements.coef == 0:
        return 0
    rows = elements.over(width)
    return None if rows is None or rows.names else rows.coef


# ---------------------------------------------------------------------------------------------- the plan


class _Stack:
    """A stacked output: the Concat of the copies' values (through ``chain``s of shape ops), in copy
    order or reversed, and the template copy's value the folded body stacks instead."""

    def __init__(self, index: int, value: ir.Value, reversed_: bool, shape: list[int] | None) -> None:
        self.index, self.value, self.reversed, self.shape = index, value, reversed_, shape


_CHAIN_OPS = frozenset({"Unsqueeze", "Expand", "Reshape", "Identity", "Squeeze"})


def _plan(body: ir.Graph, template: list[ir.Node], copies: list, initial: dict[int, ir.Value], taken: set[int],
          rows: list, mid: int, shapes: list[list[Dim] | None]) -> tuple[list[int], list[_Stack]] | None:
    """(the template value each carry is, the stacked outputs) when the body is the copies, their rows,
    carries and stacks alone; else None. ``shapes``: the carries' initial shapes, where static."""
    k, n_carry = len(copies), len(shapes)
    carry_keys = []
    for n in range(n_carry):
        state = body.inputs[3 + n]
        keys = [key for key, v in initial.items() if v is state]
        if len(keys) != 1 or body.outputs[2 + n] is not copies[-1].values.get(keys[0]):
            return None
        carry_keys.append(keys[0])
    if len(initial) != n_carry:
        return None
    image: dict[int, tuple[int, int]] = {}  # a copy's value -> (its copy, the template value's id)
    made: list[tuple[int, ir.Value]] = []
    for t, copy in enumerate(copies):
        for key, value in copy.values.items():
            if value.producer() is not None and id(value.producer()) in copy.taken:
                image[id(value)] = (t, key)
                made.append((t, value))
    carry_shapes = {key: shape for key, shape in zip(carry_keys, shapes) if shape is not None}
    stacks, outside = [], set()
    for s, out in enumerate(body.outputs[2 + n_carry:]):
        got = _stack(out, image, k, mid, carry_shapes)
        if got is None:
            return None
        stack, nodes = got
        stacks.append(_Stack(2 + n_carry + s, *stack))
        outside.update(nodes)
    finals = {id(v) for v in body.outputs[2:2 + n_carry]}
    for t, value in made:
        if value.is_graph_output() and (t != k - 1 or id(value) not in finals):
            return None
        if any(id(u.node) not in taken and id(u.node) not in outside for u in value.uses()):
            return None
    if _reads_state_as_invariant(body, template, copies[mid - 1], rows, mid):
        return None
    return carry_keys, stacks


def _stack(out: ir.Value, image: dict[int, tuple[int, int]], k: int, mid: int, carry_shapes: dict[int, list[Dim]]):
    """((the template copy's value to stack, whether the Concat stacks the copies in reverse, its shape
    where known), the ids of the Concat and its chains) for a body output that Concats one value of each
    copy along axis 0. A copy's value is stacked itself, not the chain of shape ops after it, where the
    chain only adds or drops axes of size 1 (a state, whose shape the Loop's initial state gives): the
    same elements in the same order, the form the RNN rules read."""
    cat = m.producer(out, "Concat")
    if cat is None or int(m.attr(cat, "axis", -1)) != 0 or len(cat.inputs) != k:
        return None
    order, keys, chains = [], set(), []
    for part in cat.inputs:
        chain: list[ir.Node] = []
        value = part
        while value is not None and id(value) not in image:
            node = m.producer(value, *_CHAIN_OPS)
            if node is None or len(value.uses()) != 1 or value.is_graph_output():
                return None
            chain.append(node)
            value = node.inputs[0]
        if value is None:
            return None
        t, key = image[id(value)]
        order.append(t)
        keys.add(key)
        chains.append(chain)
    if len(keys) != 1 or order not in (list(range(k)), list(range(k - 1, -1, -1))):
        return None
    if any(not _same_chain(chains[0], c) for c in chains[1:]):
        return None
    q = order.index(mid)
    template_part, shape = cat.inputs[q], None
    start = chains[q][-1].inputs[0] if chains[q] else template_part
    if key in carry_shapes and _reshapes_only(chains[q][::-1], carry_shapes[key]):
        template_part, shape = start, carry_shapes[key]
    nodes = {id(cat), *(id(n) for c in chains for n in c)}
    return (template_part, order[0] != 0, shape), nodes


def _reshapes_only(chain: list[ir.Node], shape: list[Dim]) -> bool:
    """True when the ``chain`` of shape ops (first to last) on a value of ``shape`` keeps its elements in
    order: Reshapes, Squeezes and Unsqueezes, and Expands to the shape they read."""
    for node in chain:
        if node.op_type == "Expand" and not all(isinstance(d, int) for d in shape):
            if not _keeps_shape(node):
                return False
            continue
        if node.op_type == "Expand":
            target = m.const(node.inputs[1])
            if target is None or target.ndim != 1 or len(target) > len(shape):
                return False
            if [int(d) for d in np.broadcast_shapes(tuple(shape), tuple(int(t) for t in target))] != shape:
                return False
            continue
        got = _row_op(node, (0, 1, shape), Size(1))
        if got is None:
            return False
        shape = got[0][2]
    return True


def _same_chain(a: list[ir.Node], b: list[ir.Node]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if (x.op_type, len(x.inputs)) != (y.op_type, len(y.inputs)) or dict(
                (n, v.value) for n, v in x.attributes.items()) != dict((n, v.value) for n, v in y.attributes.items()):
            return False
        if x.op_type == "Expand" and _keeps_shape(x) and _keeps_shape(y):
            continue  # to its input's own named shape, computed at run time by each copy
        for p, q in zip(x.inputs[1:], y.inputs[1:]):
            cp, cq = m.const(p), m.const(q)
            if p is not q and (cp is None or cq is None or cp.dtype != cq.dtype or not np.array_equal(cp, cq)):
                return False
    return True


def _keeps_shape(node: ir.Node) -> bool:
    """Whether ``node``'s output has its first input's shape, named sizes included (an Expand that copies)."""
    dims = _dim_products.named_dims(node.inputs[0]) if node.inputs and node.inputs[0] is not None else None
    return dims is not None and _dim_products.named_dims(node.outputs[0]) == dims


def _reads_state_as_invariant(body: ir.Graph, template: list[ir.Node], before, rows: list, mid: int) -> bool:
    """True when a template node reads a value of the body that changes from trip to trip (the counter, a
    state the trip began with) other than as its row or the copy before's values: one step of the folded
    Loop would read it at every step."""
    varying = {id(v) for v in body.inputs}
    for node in body:
        if any(v is not None and id(v) in varying for v in node.inputs):
            varying.update(id(o) for o in node.outputs)
    own = {id(o) for n in template for o in n.outputs}
    allowed = own | {id(r.values[mid]) for r in rows} | {id(v) for v in before.values.values()}
    return any(v is not None and id(v) in varying and id(v) not in allowed for n in template for v in n.inputs)


# ---------------------------------------------------------------------------------------------- rewriting


def _rewrite_body(main: ir.Graph, loop: ir.Node, body: ir.Graph, template: list[ir.Node], copies: list,
                  rows: list, groups: list[_Group], mid: int, carry_keys: list[int], stacks: list[_Stack],
                  steps: int) -> None:
    """The body as the template copy alone over ``steps`` trips, reading row ``i`` of each sequence."""
    counter = body.inputs[2]
    new: list[ir.Node] = []
    index = counter
    if counter.dtype != ir.DataType.INT64:
        cast = ir.node("Cast", [counter], {"to": ir.DataType.INT64})
        new.append(cast)
        index = cast.outputs[0]
    start = ir.node("Unsqueeze", [index, m.new_initializer(main, np.array([0], np.int64), "step_axis")])
    end = ir.node("Add", [start.outputs[0], m.new_initializer(main, np.array([1], np.int64), "step_one")])
    new += [start, end]
    for value in (start.outputs[0], end.outputs[0]):
        value.type, value.shape = ir.TensorType(ir.DataType.INT64), ir.Shape([1])
    for group, r in zip(groups, rows):
        xs_rows = _sequence_rows(main, loop, group, steps)
        dims = _dim_products.named_dims(xs_rows) or []
        sl = ir.node("Slice", [xs_rows, start.outputs[0], end.outputs[0], m.new_initializer(
            main, np.array([0], np.int64), "step_axis")])
        sl.outputs[0].type, sl.outputs[0].shape = xs_rows.type, ir.Shape([1, *dims[1:]])
        new.append(sl)
        row_value = sl.outputs[0]
        if all(isinstance(d, int) for d in group.row_shape):
            row = ir.node("Reshape", [sl.outputs[0], m.new_initializer(
                main, np.array(group.row_shape, np.int64), "row_shape")])
        elif group.row_shape == dims[1:]:  # named sizes (``_groups``): the row without its step axis
            row = ir.node("Squeeze", [sl.outputs[0], m.new_initializer(main, np.array([0], np.int64), "step_axis")])
        else:
            row = None
        if row is not None:
            row.outputs[0].type, row.outputs[0].shape = xs_rows.type, ir.Shape(group.row_shape)
            new.append(row)
            row_value = row.outputs[0]
        r.values[mid].replace_all_uses_with(row_value)
    body.insert_before(body.node(0), new)
    before = {id(v): key for key, v in copies[mid - 1].values.items()}
    state_of = {key: body.inputs[3 + n] for n, key in enumerate(carry_keys)}
    own = {id(n) for n in template}
    for node in template:
        for j, v in enumerate(node.inputs):
            if v is not None and before.get(id(v)) in state_of and id(v.producer()) not in own:
                node.replace_input_with(j, state_of[before[id(v)]])
    by_id = {id(o): o for n in template for o in n.outputs}
    for n, key in enumerate(carry_keys):
        body.outputs[2 + n] = by_id[key]
    for stack in stacks:
        value = stack.value
        if stack.shape is not None and m.static_dims(value) is None:
            value.shape = ir.Shape(stack.shape)
        if value.is_graph_output() or value in body.outputs:
            ident = ir.node("Identity", [value])
            ident.outputs[0].type, ident.outputs[0].shape = value.type, value.shape
            body.append(ident)
            value = ident.outputs[0]
        body.outputs[stack.index] = value
    less = m.producer(body.outputs[0], "Less")
    bound = m.folded(less.inputs[1]) if less is not None else None
    assert less is not None and bound is not None  # loops.trip_count read them
    less.replace_input_with(1, m.new_initializer(main, np.array(steps, bound.dtype), "loop_steps"))
    loops._drop_dead(body)


def _sequence_rows(main: ir.Graph, loop: ir.Node, group: _Group, steps: int) -> ir.Value:
    """``xs`` ``[N, k, *rest]`` as its ``N * k`` rows before ``loop`` (reversed for a backward scan); ``rest``
    read at run time where it holds named sizes."""
    dims = _dim_products.named_dims(group.xs) or []
    shape = [steps, *dims[2:]]
    nodes: list[ir.Node] = []
    if all(isinstance(d, int) for d in shape):
        flat = ir.node("Reshape", [group.xs, m.new_initializer(main, np.array(shape, np.int64), "sequence_rows")])
        nodes.append(flat)
        rows = flat.outputs[0]
    else:
        rows = _reshaped(main, group.xs, [steps], 2, nodes)
    rows.type, rows.shape = group.xs.type, ir.Shape(shape)
    if group.backward:
        flip = ir.node("Slice", [rows, *(m.new_initializer(main, np.array([v], np.int64), "reverse_rows")
                                         for v in (-1, _INT64_MIN, 0, -1))])
        flip.outputs[0].type, flip.outputs[0].shape = group.xs.type, ir.Shape(shape)
        nodes.append(flip)
    loop.graph.insert_before(loop, nodes)
    return nodes[-1].outputs[0]


def _rewrite_outputs(main: ir.Graph, loop: ir.Node, n_carry: int, stacks: list[_Stack], trips: int, k: int) -> None:
    """Each stacked output, now ``T`` rows of the template's value, read as the ``[T / k, k * ...]`` rows
    of the Concat before: where a reader does more than reshape it, a Reshape (and a reversal of each
    trip's k rows where the Concat stacked the copies backwards)."""
    graph = loop.graph
    for stack in stacks:
        out = loop.outputs[1 + stack.index - 2]
        out.shape = None if stack.shape is None else ir.Shape([trips * k, *stack.shape])
        if _only_reshaped(out, stack.reversed):
            for use in out.uses() if stack.reversed else ():  # the reversals read the new rows
                use.node.outputs[0].shape = out.shape
            continue
        nodes: list[ir.Node] = []
        value = out
        if stack.reversed:
            value = _reshaped(main, value, [trips, k], 1, nodes)
            flip = ir.node("Slice", [value, *(m.new_initializer(main, np.array([v], np.int64), "reverse_rows")
                                              for v in (-1, _INT64_MIN, 1, -1))])
            nodes.append(flip)
            value = flip.outputs[0]
            value.type = out.type
        # back to [trips, k * p0, *rest] of the Concat's parts [p0, *rest]: the rows are the parts themselves
        # (after the reversal [trips, k, p0, *rest]), or the states a chain of shape ops made them from
        value = _reshaped(main, value, [trips, -1], 3 if stack.reversed and stack.shape is None else 2, nodes)
        graph.insert_after(loop, nodes)
        for use in list(out.uses()):
            if id(use.node) not in {id(n) for n in nodes}:
                use.node.replace_input_with(use.idx, value)
        if out.is_graph_output():
            m.take_over(out, value)


def _reshaped(main: ir.Graph, value: ir.Value, lead: list[int], keep_from: int, nodes: list[ir.Node]) -> ir.Value:
    """``value`` reshaped to ``lead`` followed by its own dimensions from ``keep_from`` on (read at run time)."""
    tail = ir.node("Shape", [value], {"start": keep_from})
    target = ir.node("Concat", [m.new_initializer(main, np.array(lead, np.int64), "stack_rows"), tail.outputs[0]],
                     {"axis": 0})
    reshape = ir.node("Reshape", [value, target.outputs[0]])
    reshape.outputs[0].type = value.type
    nodes += [tail, target, reshape]
    return reshape.outputs[0]


def _only_reshaped(out: ir.Value, reversed_: bool) -> bool:
    """True when every reader of the stacked rows ``out`` only reshapes them (a Reshape to a constant shape
    without 0s), or, for rows the Concat stacked backwards, reverses them whole first (the lowering's
    Slice of step -1 after a reversed scan): the folded Loop's rows are then read as they are."""
    if out.is_graph_output() or not out.uses():
        return False
    for use in out.uses():
        node = use.node
        if reversed_:
            if not _whole_reversal(node) or node.outputs[0].is_graph_output() or not node.outputs[0].uses():
                return False
            if not all(_plain_reshape(u.node) and u.idx == 0 for u in node.outputs[0].uses()):
                return False
        elif not (_plain_reshape(node) and use.idx == 0):
            return False
    return True


def _plain_reshape(node: ir.Node) -> bool:
    target = m.const(node.inputs[1]) if node.op_type == "Reshape" and len(node.inputs) == 2 else None
    return target is not None and node.domain == "" and not m.attr(node, "allowzero", 0) and 0 not in target.tolist()


def _whole_reversal(node: ir.Node) -> bool:
    """``Slice(x, -1, <= -len, axes=[0], steps=[-1])``: ``x``'s rows reversed."""
    if node.op_type != "Slice" or node.domain != "" or len(node.inputs) != 5:
        return False
    args = [m.const(v) for v in node.inputs[1:]]
    if any(a is None or a.size != 1 for a in args):
        return False
    start, end, axis, step = (int(np.atleast_1d(a)[0]) for a in args)  # type: ignore[union-attr]
    return start == -1 and end <= -(1 << 31) and axis == 0 and step == -1
