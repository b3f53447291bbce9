"""Straight-line copies of one recurrence step folded back into the Loop that ``lax.scan`` lowers to.

A Python loop over time steps (``for t in range(T): h = cell(h, x[:, t])``, Haiku's
``hk.static_unroll``, ``lax.scan(..., unroll=True)``) leaves no while loop in StableHLO: the graph
holds T copies of the step, each reading row t of a sequence (a Slice of one row along an axis, or a
Gather of one index) and the state the copy before wrote. ONNX Runtime pays a fixed cost per node, so
the copies are the cost, and the rules that read a scan (``loops`` hoisting the input projection, ``lstm``,
``gru``, ``scan``, ``scan_rows``) see no loop.

The rule finds T >= ``MIN_STEPS`` copies and writes them as one Loop in the lowering's form (a counter
from 0, ``Less(counter + 1, T)``, the row ``Slice(xs, i, i + 1)`` of each sequence, scan outputs through
Identity), whose body is one copy's nodes, moved: the same ops in the same order on the same values,
so the numbers do not change.

- Copies: every node is given the last step whose row it reads (none: before the loop). A node whose
  readers all lie in the next step moves there (a cell's ``h @ U`` then belongs to the step that adds it
  to ``x @ W``, and the last copy, which has no next step to feed, is whole too); first with the nodes
  before it that only it reads (a Dense's ``h @ U + b``), then, where those copies do not match, alone.
  The middle copy is the template; every other copy is matched to it node by node (op, attributes,
  constants by value) from its rows on, and its inputs from the copy before (copy 0: from outside,
  the initial state) are checked to be the same template values.
- Symbolic sizes: the axis of rows is static, the others may be named sizes (a symbolic batch), read whole.
  A carry whose initial value the first copy broadcasts (a zero ``[1, 1]`` to ``[b, h]``) starts at the
  run-time shape of another initial value of the carry's shape.
- Outputs: a value the next copy reads is a carry; one read after the loop in the last copy is the
  Loop's final carry; per-step values that a Concat stacks (``jnp.stack``, through Unsqueeze, Reshape
  and no-op Expands) are a scan output, moved to the stacking axis by one Transpose; any other
  per-step reader reads its row of a scan output (a Gather).
"""

from __future__ import annotations

import hashlib

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _dim_products
from jaxconv.onnx.rewrites import _match as m

MIN_STEPS = 5  # fewer copies stay as they are (loops.to_scan unrolls up to 4 steps of a wide state)

_SHAPE_CHAIN = frozenset({"Unsqueeze", "Reshape", "Identity", "Squeeze", "Expand"})


def rewrite(graph: ir.Graph) -> int:
    """Fold the unrolled recurrences of ``graph`` (the main graph) into Loops; returns how many."""
    count = 0
    tried: set[tuple] = set()
    while True:
        rows = _row_sets(graph)
        candidates = [r for r in rows if r.key not in tried]
        if not candidates:
            return count
        if count == 0:
            m.sweep(graph)  # dead nodes would count as readers of the copies' values
        steps = max(len(r.values) for r in candidates)
        batch = [r for r in candidates if len(r.values) == steps]
        tried.update(r.key for r in batch)
        if _fold(graph, batch, steps):
            count += 1
            graph.sort()


class _Rows:
    """The values ``values[t]`` = row t of ``source`` along ``axis`` (``keeps_axis``: a Slice, size 1
    there; else a Gather, the axis dropped)."""

    def __init__(self, source: ir.Value, axis: int, keeps_axis: bool, values: list[ir.Value]) -> None:
        self.source, self.axis, self.keeps_axis, self.values = source, axis, keeps_axis, values
        self.key = (id(source), axis, keeps_axis)


def _row_sets(graph: ir.Graph) -> list[_Rows]:
    """Every complete set of row reads of one value along one axis (rows 0..T-1, each read once)."""
    found: dict[tuple, dict[int, list[ir.Value]]] = {}
    sources: dict[tuple, ir.Value] = {}
    for node in graph:
        got = _row_of(node)
        if got is None:
            continue
        source, axis, keeps, t = got
        key = (id(source), axis, keeps)
        sources[key] = source
        found.setdefault(key, {}).setdefault(t, []).append(node.outputs[0])
    sets = []
    for key, by_step in found.items():
        source = sources[key]
        steps = int(source.shape[key[1]])
        if steps < MIN_STEPS or sorted(by_step) != list(range(steps)) or any(
                len(v) != 1 for v in by_step.values()):
            continue
        sets.append(_Rows(source, key[1], key[2], [by_step[t][0] for t in range(steps)]))
    return sets


def _row_of(node: ir.Node) -> tuple[ir.Value, int, bool, int] | None:
    """(source, axis, keeps_axis, t) when ``node`` reads row t of a value whose axis of rows is static (its
    other axes may be named symbolic sizes, read whole)."""
    if node.domain != "" or not node.inputs or node.inputs[0] is None or len(node.outputs) != 1:
        return None
    source = node.inputs[0]
    dims = _dim_products.named_dims(source)
    if dims is None or not dims:
        return None
    if node.op_type == "Gather" and len(node.inputs) == 2:
        index = m.const(node.inputs[1])
        axis = int(m.attr(node, "axis", 0))
        if index is None or index.ndim != 0 or index.dtype.kind not in "iu" or not (
                -len(dims) <= axis < len(dims)) or not isinstance(dims[axis % len(dims)], int):
            return None
        axis %= len(dims)
        size = int(dims[axis])
        t = int(index) + (size if int(index) < 0 else 0)
        return (source, axis, False, t) if 0 <= t < size else None
    if node.op_type != "Slice" or not 3 <= len(node.inputs) <= 5:
        return None
    args = [m.const(v) if v is not None else None for v in node.inputs[1:]]
    if any(a is None for a, v in zip(args, node.inputs[1:]) if v is not None):
        return None
    starts, ends = (np.atleast_1d(a).astype(np.int64) for a in args[:2])
    given = [*args[2:], None, None]
    axes = np.arange(starts.size) if given[0] is None else np.atleast_1d(given[0]).astype(np.int64)
    steps = np.ones_like(starts) if given[1] is None else np.atleast_1d(given[1]).astype(np.int64)
    if not starts.size == ends.size == axes.size == steps.size or np.any(steps != 1):
        return None
    row = None
    for s, e, a in zip(starts.tolist(), ends.tolist(), axes.tolist()):
        if not -len(dims) <= a < len(dims):
            return None
        a %= len(dims)
        cut = _dim_products.axis_cut(dims[a], s, e)
        if cut == "whole":
            continue
        if cut is None or cut[1] - cut[0] != 1 or row is not None:
            return None
        row = (a, cut[0])
    if row is None:
        return None
    return source, row[0], True, row[1]


# ---------------------------------------------------------------------------------------------- copies


def _steps_of(graph: ir.Graph, rows: list[_Rows], cascade: bool) -> tuple[dict[int, int], set[int]]:
    """node id -> the step it belongs to (-1: none), and the ids of the row-reading nodes. ``cascade``:
    a node whose readers moved to the next step may move too (a flax Dense's ``h @ U + b``), as long as
    that adds at most one value to those the next step reads; else only nodes the next step reads move."""
    row_step: dict[int, int] = {}
    for r in rows:
        for t, v in enumerate(r.values):
            row_step[id(v.producer())] = t
    step: dict[int, int] = {}
    nodes = list(graph)
    for node in nodes:
        if id(node) in row_step:
            step[id(node)] = row_step[id(node)]
            continue
        s = -1
        for v in node.inputs:
            p = v.producer() if v is not None else None
            if p is not None:
                s = max(s, step.get(id(p), -1))
        step[id(node)] = s
    first = dict(step)  # a node that only feeds the next step moves there
    for node in (reversed(nodes) if cascade else nodes):
        s = first[id(node)]
        if s < 0 or id(node) in row_step or any(o.is_graph_output() for o in node.outputs):
            continue
        readers = [u.node for o in node.outputs for u in o.uses()]
        seen = step if cascade else first
        if not readers or any(seen.get(id(u), -2) != s + 1 for u in readers):
            continue
        if cascade:  # only while the step's values it reads cross to the next step anyway (but one)
            fresh = {id(v) for v in node.inputs if v is not None and v.producer() is not None
                     and step.get(id(v.producer())) == s and not any(
                         u.node is not node and step.get(id(u.node), -2) > s for u in v.uses())}
            if len(fresh) > 1:
                continue
        step[id(node)] = s + 1
    return step, set(row_step)


class _Copy:
    """One copy's correspondence with the template: values and nodes by the template's ids."""

    def __init__(self) -> None:
        self.values: dict[int, ir.Value] = {}
        self.nodes: dict[int, ir.Node] = {}
        self.taken: set[int] = set()  # ids of this copy's nodes
        # (the template's input from the copy before, this copy's)
        self.carried: list[tuple[ir.Value, ir.Value]] = []

    def fork(self) -> _Copy:
        twin = _Copy()
        twin.values, twin.nodes, twin.taken = dict(self.values), dict(self.nodes), set(self.taken)
        twin.carried = list(self.carried)
        return twin


class _Matcher:
    """Matches copies of the step to the template (the nodes of step ``mid``)."""

    def __init__(self, template: list[ir.Node], mid: int, step: dict[int, int], rows: list[_Rows]) -> None:
        self.template, self.mid, self.step, self.rows = template, mid, step, rows
        self.inside = {id(n) for n in template}
        self.row_ids = {id(r.values[mid]) for r in rows}
        self.digests: dict[int, str | None] = {}

    def kind(self, value: ir.Value) -> str:
        """How the template reads ``value``: its row, its own value, the copy before's, or an invariant."""
        if id(value) in self.row_ids:
            return "row"
        p = value.producer()
        if p is None:
            return "invariant"
        if id(p) in self.inside:
            return "template"
        s = self.step.get(id(p), -1)
        if s == self.mid - 1:
            return "carried"
        return "invariant" if s < 0 else "bad"

    def match(self, t: int) -> _Copy | None:
        copy = _Copy()
        if t == self.mid:
            for node in self.template:
                copy.nodes[id(node)] = node
                copy.taken.add(id(node))
                copy.values.update((id(o), o) for o in node.outputs)
                copy.carried.extend(
                    (v, v) for v in node.inputs if v is not None and self.kind(v) == "carried")
        for r in self.rows:
            copy.values[id(r.values[self.mid])] = r.values[t]
        pending = list(self.template)
        while pending:
            left = []
            for node in pending:
                if id(node) in copy.nodes:
                    continue
                got = self._by_inputs(node, copy)
                if got is None:
                    left.append(node)
                elif got is False:
                    return None
                else:
                    copy = got
            if len(left) == len(pending):
                return None
            pending = left
        return copy

    def _by_inputs(self, node: ir.Node, copy: _Copy) -> _Copy | None | bool:
        """The copy extended by ``node``'s image, found among the readers of an input's image; None when
        no input's image is known yet, False when none matches."""
        for k, v in enumerate(node.inputs):
            if v is None or id(v) not in copy.values:
                continue
            image = copy.values[id(v)]
            for use in image.uses():
                if use.idx != k or id(use.node) in copy.taken:
                    continue
                trial = copy.fork()
                if self._node(node, use.node, trial):
                    return trial
            return False
        return None

    def _node(self, node: ir.Node, other: ir.Node, copy: _Copy) -> bool:
        if id(node) in copy.nodes:
            return copy.nodes[id(node)] is other
        if id(other) in copy.taken or id(other) in self.inside or not _same_op(node, other, self):
            return False
        copy.nodes[id(node)] = other
        copy.taken.add(id(other))
        for a, b in zip(node.outputs, other.outputs):
            copy.values[id(a)] = b
        return all(self._value(a, b, copy) for a, b in zip(node.inputs, other.inputs))

    def _value(self, a: ir.Value | None, b: ir.Value | None, copy: _Copy) -> bool:
        if a is None or b is None:
            return a is b
        if id(a) in copy.values:
            return copy.values[id(a)] is b
        kind = self.kind(a)
        if kind == "template":
            pa, pb = a.producer(), b.producer()
            if pb is None or pa is None or list(pa.outputs).index(a) != list(pb.outputs).index(b):
                return False
            return self._node(pa, pb, copy)
        if kind == "carried":
            copy.carried.append((a, b))
            return True
        if kind == "invariant":
            return a is b or (self.digest(a) is not None and self.digest(a) == self.digest(b))
        return False

    def digest(self, value: ir.Value) -> str | None:
        """A constant's dtype, shape and bytes, hashed (None when ``value`` is no constant)."""
        key = id(value)
        if key not in self.digests:
            arr = m.const(value)
            data = None if arr is None else np.ascontiguousarray(arr).tobytes()
            self.digests[key] = None if arr is None or data is None else (
                f"{arr.dtype.str}{arr.shape}" + hashlib.sha256(data).hexdigest())
        return self.digests[key]


def _same_op(a: ir.Node, b: ir.Node, matcher: _Matcher) -> bool:
    if (a.op_type, a.domain, a.overload, len(a.inputs), len(a.outputs)) != (
            b.op_type, b.domain, b.overload, len(b.inputs), len(b.outputs)):
        return False
    if set(a.attributes) != set(b.attributes):
        return False
    for name, x in a.attributes.items():
        y = b.attributes[name]
        if x.type != y.type or x.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
            return False
        if x.type == ir.AttributeType.TENSOR:
            if not np.array_equal(x.value.numpy(), y.value.numpy()) or x.value.dtype != y.value.dtype:
                return False
        elif x.value != y.value:
            return False
    return True


# ---------------------------------------------------------------------------------------------- folding


def _fold(graph: ir.Graph, rows: list[_Rows], steps: int) -> bool:
    for cascade in (True, False):
        found = _copies(graph, rows, steps, cascade)
        if found is not None:
            template, copies, carries, seen = found
            widths = _start_widths(template, carries, copies[0])
            if widths is None:
                return False
            _build(graph, rows, steps, template, copies, steps // 2, carries, seen, widths)
            return True
    return False


def _start_widths(template: list[ir.Node], initial: dict[int, ir.Value], first: _Copy) -> dict[int, ir.Value] | None:
    """The values whose shapes carries' initial values widen to before the Loop (a Scan's states keep one
    shape), by carry; None where a carry cannot start the Loop.

    A carry starts with its initial value where both have one shape, or where both are static
    (``_broadcast_to`` widens it). Where the carry has named sizes and its initial value is smaller (a zero
    ``[1, 1]`` the first step broadcasts to ``[b, h]``), it takes the shape of another initial value of the
    carry's shape."""
    by_id = {id(o): o for n in template for o in n.outputs}
    widths: dict[int, ir.Value] = {}
    for key, start in initial.items():
        carry = by_id[key]
        if m.static_dims(start) is not None and m.static_dims(carry) is not None:
            continue
        have, want = _dim_products.named_dims(start), _dim_products.named_dims(carry)
        if have is not None and have == want:
            continue
        like = [v for v in initial.values() if want is not None and _dim_products.named_dims(v) == want
                and (v.producer() is None or id(v.producer()) not in first.taken)]
        if not like or have is None or len(have) > len(want) or any(
                h not in (1, w) for h, w in zip(have[::-1], want[::-1])):
            return None
        widths[key] = like[0]
    return widths


def _copies(graph: ir.Graph, rows: list[_Rows], steps: int, cascade: bool) -> tuple | None:
    """(template, the copies matched to it, the carries' initial values, the copies' node ids), or None."""
    step, row_nodes = _steps_of(graph, rows, cascade)
    mid = steps // 2
    template = _template(graph, step, mid, row_nodes)
    if not template:
        return None
    matcher = _Matcher(template, mid, step, rows)
    if any(matcher.kind(v) == "bad" for n in template for v in n.inputs if v is not None):
        return None
    if _rows_are_weights(template, rows, mid, step):
        return None
    copies: list[_Copy] = []
    for t in range(steps):
        copy = matcher.match(t)
        if copy is None:
            return None
        copies.append(copy)
    seen: set[int] = set()
    for copy in copies:
        if seen & copy.taken:
            return None
        seen |= copy.taken
    carries = _carries(copies, mid, seen)
    if carries is None or _reads_its_own_results(graph, rows, seen):
        return None
    return template, copies, carries, seen


def _reads_its_own_results(graph: ir.Graph, rows: list[_Rows], taken: set[int]) -> bool:
    """True when a copy, or a sequence the rows come from, reads a value computed from the copies' own
    results outside them (an associative scan's later levels): one Loop in their place would read its
    own output, a cycle."""
    after: set[int] = set()
    for node in graph:  # in order: every node computed from a copy's result, outside the copies
        if id(node) in taken:
            continue
        for value in node.inputs:
            producer = value.producer() if value is not None else None
            if producer is not None and (id(producer) in taken or id(producer) in after):
                after.add(id(node))
                break
    for node in graph:
        if id(node) in taken and any(v is not None and v.producer() is not None and id(v.producer()) in after
                                     for v in node.inputs):
            return True
    return any(r.source.producer() is not None and id(r.source.producer()) in after for r in rows)


_PRODUCTS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum"})
_ROW, _STATE = 1, 2


def _rows_are_weights(template: list[ir.Node], rows: list[_Rows], mid: int, step: dict[int, int]) -> bool:
    """True when a product in the step multiplies a value computed from the step's rows alone by one
    computed from the state: the rows are a stack of layers' weights (``x @ w[i]`` in a Python loop over
    layers, the weights a graph input), not a sequence. A Loop over layers would hide each layer from
    the rules that read the main graph (attention, layer norm), so such copies stay as they are."""
    inside = {id(n) for n in template}
    flags: dict[int, int] = {id(r.values[mid]): _ROW for r in rows}
    for node in template:
        got = []
        for value in node.inputs:
            flag = 0
            if value is not None:
                flag = flags.get(id(value), 0)
                producer = value.producer()
                if id(value) not in flags and producer is not None and id(producer) not in inside \
                        and step.get(id(producer), -1) == mid - 1:
                    flag = _STATE
            got.append(flag)
        if node.op_type in _PRODUCTS and node.domain == "" and len(got) >= 2 and {got[0], got[1]} == {_ROW, _STATE}:
            return True
        for out in node.outputs:
            flags[id(out)] = int(np.bitwise_or.reduce(got)) if got else 0
    return False


def _template(graph: ir.Graph, step: dict[int, int], mid: int, row_nodes: set[int]) -> list[ir.Node]:
    """The nodes of step ``mid`` and the constant work before the loop that only they read, in graph order."""
    inside = {id(n) for n in graph if step[id(n)] == mid and id(n) not in row_nodes}
    for node in reversed(list(graph)):
        if step[id(node)] >= 0 or id(node) in inside or any(o.is_graph_output() for o in node.outputs):
            continue
        readers = [u.node for o in node.outputs for u in o.uses()]
        if readers and all(id(u) in inside for u in readers) and node.op_type not in m.CONTROL_OPS:
            inside.add(id(node))
    for node in reversed(list(graph)):  # shape ops that only lead out of the step (to a stack) stay outside
        if id(node) in inside and node.op_type in _SHAPE_CHAIN and node.domain == "" and not any(
                id(u.node) in inside for o in node.outputs for u in o.uses()):
            inside.discard(id(node))
    # and so does the work before the loop that only those read (the run-time shapes they Expand to)
    for node in reversed(list(graph)):
        if id(node) in inside and step[id(node)] < 0 and not all(
                id(u.node) in inside for o in node.outputs for u in o.uses()):
            inside.discard(id(node))
    return [n for n in graph if id(n) in inside]


def _carries(copies: list[_Copy], mid: int, taken: set[int]) -> dict[int, ir.Value] | None:
    """Template value id -> the initial value copy 0 reads in its place, for each value a copy reads
    from the copy before; None when a copy reads anything else."""
    before = copies[mid - 1]
    origin = {id(v): k for k, v in before.values.items()}  # the copy before's value -> template value id
    initial: dict[int, ir.Value] = {}
    for t, copy in enumerate(copies):
        for a, b in copy.carried:
            key = origin.get(id(a))
            if key is None:
                return None
            if t == 0:
                p = b.producer()
                if p is not None and id(p) in taken:
                    return None
                known = initial.setdefault(key, b)
                if known is not b:  # the same state broadcast for some readers only: the widest
                    if m.through_shape_ops(known) is not m.through_shape_ops(b):
                        return None
                    if len(_dim_products.dims(b) or []) > len(_dim_products.dims(known) or []) or (
                            _estimate(b) > _estimate(known)):
                        initial[key] = b
            elif copies[t - 1].values.get(key) is not b:
                return None
    return initial


def _estimate(value: ir.Value) -> int:
    """How many elements ``value`` holds, a named size counted as ``_dim_products.GUESS`` (0: unknown)."""
    sizes = _dim_products.dims(value)
    return 0 if sizes is None else _dim_products.estimate(sizes)


def _build(graph: ir.Graph, rows: list[_Rows], steps: int, template: list[ir.Node], copies: list[_Copy],
           mid: int, initial: dict[int, ir.Value], taken: set[int], widths: dict[int, ir.Value]) -> None:
    """Write the Loop in place of the copies (``widths``: ``_start_widths``)."""
    first = next(n for n in graph if id(n) in taken)
    by_id = {id(o): o for n in template for o in n.outputs}
    # the per-step values read after the loop, and which of them a Concat stacks
    outside: dict[int, list[list[ir.Value]]] = {}
    for key, value in by_id.items():
        per_step = [copy.values[key] for copy in copies]
        if any(_outside_uses(v, taken) or v.is_graph_output() for v in per_step):
            outside[key] = per_step
    body = ir.Graph([], [], nodes=[], name="unrolled_step")
    i64 = ir.TensorType(ir.DataType.INT64)
    iter_in = ir.Value(name="iter", type=i64, shape=ir.Shape([]))
    cond_in = ir.Value(name="cond_in", type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([]))
    counter = ir.Value(name="step", type=i64, shape=ir.Shape([]))
    carry_ids = list(initial)
    for key in carry_ids:  # a value without a shape has its initial value's
        v = by_id[key]
        v.type, v.shape = v.type or initial[key].type, v.shape or initial[key].shape
    carry_in = [ir.Value(name=f"carry_{k}", type=by_id[key].type, shape=by_id[key].shape)
                for k, key in enumerate(carry_ids)]
    body.inputs.extend([iter_in, cond_in, counter, *carry_in])
    inputs_before = _row_inputs(graph, body, rows, counter, mid, first)
    # the template's reads of the copy before become the carries
    before = {id(v): k for k, v in copies[mid - 1].values.items()}
    carry_of = dict(zip(carry_ids, carry_in))
    own = {id(n) for n in template}
    for node in template:
        for k, v in enumerate(node.inputs):
            if v is None:
                continue
            if id(v) in inputs_before:
                node.replace_input_with(k, inputs_before[id(v)](node))
            elif before.get(id(v)) in carry_of and id(v.producer()) not in own:
                node.replace_input_with(k, carry_of[before[id(v)]])
    stacked = [key for key in outside if not (key in carry_of and _only_last(outside[key], taken))]
    # the Loop's outputs and their readers after it
    loop_outputs = [ir.Value(name="loop_steps", type=i64, shape=ir.Shape([]))]
    final: dict[int, ir.Value] = {}
    for key in carry_ids:
        v = by_id[key]
        final[key] = ir.Value(name=f"{v.name or 'carry'}_final", type=v.type, shape=v.shape)
        loop_outputs.append(final[key])
    ys: dict[int, ir.Value] = {}
    for key in stacked:
        v = by_id[key]
        shape = ir.Shape([steps, *v.shape]) if v.shape is not None else None
        ys[key] = ir.Value(name=f"{v.name or 'y'}_steps", type=v.type, shape=shape)
        loop_outputs.append(ys[key])
    true = m.new_initializer(graph, np.array(True), "loop_true")
    zero = m.new_initializer(graph, np.array(0, np.int64), "loop_start")
    starts = [_broadcast_to(graph, initial[k], by_id[k], first, widths.get(k)) for k in carry_ids]
    loop = ir.Node("", "Loop", [None, true, zero, *starts],
                   attributes=[ir.AttrGraph("body", body)], outputs=loop_outputs)
    graph.insert_before(first, loop)
    after: list[ir.Node] = []
    for key, per_step in outside.items():
        _rewire(graph, per_step, final.get(key), ys.get(key), taken, after)
    if after:
        graph.insert_after(loop, after)
    # the body: the template's nodes, then the counter and condition
    others = [copy.nodes[id(n)] for t, copy in enumerate(copies) if t != mid for n in template]
    for node in others:
        for k in range(len(node.inputs)):
            node.replace_input_with(k, None)
    graph.remove(others)
    graph.remove(template)
    body.extend(template)
    one = _body_const(body, np.array(1, np.int64))
    bound = _body_const(body, np.array(steps, np.int64))
    nxt = ir.node("Add", [counter, one])
    nxt.outputs[0].type, nxt.outputs[0].shape = i64, ir.Shape([])
    less = ir.node("Less", [nxt.outputs[0], bound])
    less.outputs[0].type, less.outputs[0].shape = ir.TensorType(ir.DataType.BOOL), ir.Shape([])
    body.extend([nxt, less])
    outs = [less.outputs[0], nxt.outputs[0], *(by_id[k] for k in carry_ids)]
    for key in stacked:
        ident = ir.node("Identity", [by_id[key]])
        ident.outputs[0].type, ident.outputs[0].shape = by_id[key].type, by_id[key].shape
        body.append(ident)
        outs.append(ident.outputs[0])
    body.outputs.extend(outs)
    if not stacked and carry_ids:
        _emit_state(graph, loop, body, steps)
    for r in rows:  # the row reads nothing reads now
        for v in r.values:
            p = v.producer()
            if p is not None and p.graph is graph and not v.uses() and not v.is_graph_output():
                graph.remove(p, safe=True)


def _emit_state(graph: ir.Graph, loop: ir.Node, body: ir.Graph, steps: int) -> None:
    """A Loop with no per-step output that is no LSTM cell also emits its first state each step
    (read by nothing), so that ``loops.to_scan`` makes it a Scan, and ``gru`` reads a GRU cell in it:
    ORT runs a Loop's steps far slower (a flax GRUCell in a Python loop of 64 steps, B8 H128: CPU time
    1.25x the unrolled graph's as a Loop)."""
    from jaxconv.onnx.rewrites import lstm

    if lstm._match(loop) is not None:
        return
    state = body.outputs[2]
    ident = ir.node("Identity", [state])
    ident.outputs[0].type, ident.outputs[0].shape = state.type, state.shape
    body.append(ident)
    body.outputs.append(ident.outputs[0])
    shape = ir.Shape([steps, *state.shape]) if state.shape is not None else None
    outputs = [ir.Value(name=o.name, type=o.type, shape=o.shape) for o in loop.outputs]
    outputs.append(ir.Value(name=f"{state.name or 'state'}_steps", type=state.type, shape=shape))
    twin = ir.Node("", "Loop", list(loop.inputs), attributes=[ir.AttrGraph("body", body)], outputs=outputs)
    graph.insert_after(loop, twin)
    for old, new in zip(loop.outputs, outputs):
        old.replace_all_uses_with(new, replace_graph_outputs=True)
        name, old.name = old.name, None
        new.name = name
    for k in range(len(loop.inputs)):
        loop.replace_input_with(k, None)
    graph.remove(loop)


def _row_inputs(graph: ir.Graph, body: ir.Graph, rows: list[_Rows], counter: ir.Value, mid: int,
                first: ir.Node) -> dict:
    """Template row value id -> a function giving the body's row for a reader (the lowering's
    ``Slice(xs, i, i + 1)`` of ``xs`` with the step axis first, a Transpose before the loop otherwise)."""
    start = ir.node("Unsqueeze", [counter, _body_const(body, np.array([0], np.int64))])
    start.outputs[0].type, start.outputs[0].shape = counter.type, ir.Shape([1])
    end = ir.node("Add", [start.outputs[0], _body_const(body, np.array([1], np.int64))])
    end.outputs[0].type, end.outputs[0].shape = counter.type, ir.Shape([1])
    body.extend([start, end])
    axes0 = _body_const(body, np.array([0], np.int64))
    made: dict = {}
    for r in rows:
        xs = r.source
        dims = _dim_products.named_dims(xs) or []
        if r.axis != 0:
            perm = [r.axis, *(a for a in range(len(dims)) if a != r.axis)]
            moved = ir.node("Transpose", [xs], {"perm": perm})
            moved.outputs[0].type, moved.outputs[0].shape = xs.type, ir.Shape([dims[a] for a in perm])
            graph.insert_before(first, moved)
            xs = moved.outputs[0]
        sl = ir.node("Slice", [xs, start.outputs[0], end.outputs[0], axes0])
        row_dims = [1, *(d for a, d in enumerate(dims) if a != r.axis)]
        sl.outputs[0].type, sl.outputs[0].shape = xs.type, ir.Shape(row_dims)
        body.append(sl)
        same_layout = r.keeps_axis and r.axis == 0
        made[id(r.values[mid])] = _row_reader(body, sl.outputs[0], r.values[mid], same_layout,
                                              r.axis if r.keeps_axis else None)
    return made


def _row_reader(body: ir.Graph, row: ir.Value, old: ir.Value, same_layout: bool, kept_axis: int | None):
    """A function of a reader: the body's row (``row``: its step axis first, size 1) in ``old``'s shape.
    A Reshape reads ``row`` itself (the same elements in the same order); a Slice's row with the step
    axis first is ``row`` already; others read one Reshape (a Gather's row: a Squeeze). Where ``old`` has
    named sizes, a Squeeze of its axis of rows squeezes the step axis of ``row`` instead."""
    cache: list[ir.Value] = []

    def reader(node: ir.Node) -> ir.Value:
        target = m.const(node.inputs[1]) if node.op_type == "Reshape" and len(node.inputs) == 2 else None
        if node.inputs[0] is old and target is not None and 0 not in target.tolist():
            return row
        if same_layout and old.shape is not None and len(old.shape) == len(row.shape or []):
            return row
        if m.static_dims(old) is None and _squeezes(node, old, kept_axis):
            node.replace_input_with(1, _body_const(body, np.array([0], np.int64)))
            return row
        if not cache:
            cache.append(_in_shape_of(body, row, old, kept_axis))
        return cache[0]

    return reader


def _squeezes(node: ir.Node, old: ir.Value, axis: int | None) -> bool:
    """Whether ``node`` is ``Squeeze(old, [axis])``."""
    if axis is None or node.op_type != "Squeeze" or node.domain != "" or len(node.inputs) != 2 \
            or node.inputs[0] is not old or old.shape is None:
        return False
    axes = m.const(node.inputs[1])
    return axes is not None and [int(a) % len(old.shape) for a in np.atleast_1d(axes)] == [axis]


def _in_shape_of(body: ir.Graph, row: ir.Value, old: ir.Value, kept_axis: int | None) -> ir.Value:
    """``row`` (``[1, *rest]``) reshaped to ``old``'s shape: one Reshape where that shape is static; else the
    step axis squeezed and, for a Slice's row (``kept_axis``: its axis of rows), put back there."""
    dims = m.static_dims(old)
    if dims is not None:
        fix = ir.node("Reshape", [row, _body_const(body, np.array(dims, np.int64))])
        fix.outputs[0].type, fix.outputs[0].shape = old.type, old.shape
        body.append(fix)
        return fix.outputs[0]
    squeeze = ir.node("Squeeze", [row, _body_const(body, np.array([0], np.int64))])
    squeeze.outputs[0].type = old.type
    body.append(squeeze)
    if kept_axis is None:
        squeeze.outputs[0].shape = old.shape
        return squeeze.outputs[0]
    back = ir.node("Unsqueeze", [squeeze.outputs[0], _body_const(body, np.array([kept_axis], np.int64))])
    back.outputs[0].type, back.outputs[0].shape = old.type, old.shape
    body.append(back)
    return back.outputs[0]


def _broadcast_to(graph: ir.Graph, value: ir.Value, like: ir.Value, before: ir.Node,
                  width: ir.Value | None = None) -> ir.Value:
    """``value`` Expanded to ``like``'s shape where it is smaller (an initial state the first step
    broadcast: a Scan's states keep one shape); every element read is the same. ``width``: a value of
    ``like``'s shape outside the copies, whose run-time shape it takes (``like`` has named sizes)."""
    if width is not None:
        shape = ir.node("Shape", [width])
        shape.outputs[0].type, shape.outputs[0].shape = ir.TensorType(ir.DataType.INT64), ir.Shape([len(like.shape)])
        expand = ir.node("Expand", [value, shape.outputs[0]])
        expand.outputs[0].type, expand.outputs[0].shape = value.type, like.shape
        graph.insert_before(before, [shape, expand])
        return expand.outputs[0]
    have, want = m.static_dims(value), m.static_dims(like)
    if have is None or want is None or have == want or len(have) > len(want):
        return value
    if any(h not in (1, w) for h, w in zip(have[::-1], want[::-1])):
        return value
    expand = ir.node("Expand", [value, m.new_initializer(graph, np.array(want, np.int64), "carry_shape")])
    expand.outputs[0].type, expand.outputs[0].shape = value.type, ir.Shape(want)
    graph.insert_before(before, expand)
    return expand.outputs[0]


def _body_const(body: ir.Graph, arr: np.ndarray) -> ir.Value:
    node = ir.node("Constant", [], {"value": ir.tensor(arr)})
    node.outputs[0].type = ir.TensorType(ir.DataType.from_numpy(arr.dtype))
    node.outputs[0].shape = ir.Shape(arr.shape)
    body.append(node)
    return node.outputs[0]


def _outside_uses(value: ir.Value, taken: set[int]) -> list:
    return [u for u in value.uses() if id(u.node) not in taken]


def _only_last(per_step: list[ir.Value], taken: set[int]) -> bool:
    """True when only the last copy's value is read after the loop (a final state)."""
    return all(not _outside_uses(v, taken) and not v.is_graph_output() for v in per_step[:-1])


def _rewire(graph: ir.Graph, per_step: list[ir.Value], final: ir.Value | None, ys: ir.Value | None,
            taken: set[int], after: list[ir.Node]) -> None:
    """The readers after the loop of the copies' values ``per_step`` read the Loop's outputs: the final
    carry (the last copy's value), the stacked rows whole where a Concat stacks them, else one row."""
    if ys is not None:
        _replace_stack(graph, per_step, ys, taken, after)
    for t, v in enumerate(per_step):
        uses = _outside_uses(v, taken)
        if not uses and not v.is_graph_output():
            continue
        if final is not None and t == len(per_step) - 1:
            new = final
        else:
            assert ys is not None
            index = m.new_initializer(graph, np.array(t, np.int64), "step_index")
            row = ir.node("Gather", [ys, index], {"axis": 0})
            row.outputs[0].type, row.outputs[0].shape = v.type, v.shape
            after.append(row)
            new = row.outputs[0]
        for use in uses:
            use.node.replace_input_with(use.idx, new)
        if v.is_graph_output():
            for k, out in enumerate(graph.outputs):
                if out is v:
                    graph.outputs[k] = new
            new.name, v.name = v.name, None


def _replace_stack(graph: ir.Graph, per_step: list[ir.Value], ys: ir.Value, taken: set[int],
                   after: list[ir.Node]) -> None:
    """A Concat (or a tree of Concats) of every step's value with a new axis, in order, as ``ys``
    (Transposed where the axis is not the first); the Concats and the shape ops before them go."""
    ends = [_stacked_row(v, taken) for v in per_step]
    if any(e is None for e in ends):
        return
    top, axis = ends[0][1], ends[0][2]  # type: ignore[index]
    tops = [top]  # the Concat and those that only join it with others along the axis, outermost last
    while True:
        out = tops[-1].outputs[0]
        uses = list(out.uses())
        if len(uses) != 1 or out.is_graph_output() or uses[0].node.op_type != "Concat" or uses[0].node.domain:
            break
        if _axis(uses[0].node) != axis:
            break
        tops.append(uses[0].node)
    for top in reversed(tops):  # the outermost that stacks exactly the steps' values
        concats: list[ir.Node] = [top]
        leaves: list[ir.Value] = []
        _leaves(top, axis, leaves, concats)
        if [e[0] for e in ends] == leaves:  # type: ignore[index]
            break
    else:
        return
    rank = len(per_step[0].shape)
    new = ys
    if axis != 0:
        perm = [*range(1, axis + 1), 0, *range(axis + 1, rank + 1)]
        move = ir.node("Transpose", [ys], {"perm": perm})
        move.outputs[0].type, move.outputs[0].shape = top.outputs[0].type, top.outputs[0].shape
        after.append(move)
        new = move.outputs[0]
    else:
        new.shape = top.outputs[0].shape
    m.take_over(top.outputs[0], new)
    chains = [n for e in ends for n in e[3]]  # type: ignore[index]
    dead = list({id(n): n for n in [*concats, *chains]}.values())
    for node in dead:
        for k in range(len(node.inputs)):
            node.replace_input_with(k, None)
    graph.remove(dead)


def _axis(concat: ir.Node) -> int | None:
    rank = m.rank(concat.outputs[0])
    if rank is None:
        return None
    return int(m.attr(concat, "axis", 0)) % rank


def _leaves(concat: ir.Node, axis: int, out: list[ir.Value], concats: list[ir.Node]) -> None:
    for v in concat.inputs:
        p = m.producer(v, "Concat")
        if p is not None and len(list(v.uses())) == 1 and not v.is_graph_output() and _axis(p) == axis:
            concats.append(p)
            _leaves(p, axis, out, concats)
        else:
            out.append(v)


def _stacked_row(value: ir.Value, taken: set[int]) -> tuple[ir.Value, ir.Node, int, list[ir.Node]] | None:
    """(the value a Concat reads, the Concat, its axis, the nodes between) when ``value`` reaches a Concat
    after the loop through shape ops that only add a size-1 axis there (and no-op Expands)."""
    dims = _dim_products.named_dims(value)
    if dims is None:
        return None
    for use in _outside_uses(value, taken):
        v, node, chain = value, use.node, []
        while node.op_type in _SHAPE_CHAIN and node.domain == "" and node.inputs[0] is v:
            if node.op_type == "Expand" and (
                    _dim_products.named_dims(node.outputs[0]) != _dim_products.named_dims(v)
                    or _dim_products.named_dims(v) is None):
                break
            chain.append(node)
            v = node.outputs[0]
            uses = list(v.uses())
            if len(uses) != 1 or v.is_graph_output():
                break
            node = uses[0].node
        if node.op_type != "Concat" or node.domain != "" or not chain or chain[-1].outputs[0] is not v:
            continue
        if len(list(v.uses())) != 1:
            continue
        axis = _axis(node)
        got = _dim_products.named_dims(v)
        if axis is not None and got == [*dims[:axis], 1, *dims[axis:]]:
            return v, node, axis, chain
    return None
