"""An LSTM cell written in a lax.scan, as the ONNX LSTM op.

Matches the Loop a forward ``lax.scan`` lowers to (after ``loops`` moved ``xs @ wx`` out of it),
whose body is the standard cell with jax's gate order (i, f, g, o from one split of
``x @ wx + h @ wh + b``)::

    c' = sigmoid(f) * c + sigmoid(i) * tanh(g);   h' = sigmoid(o) * tanh(c');   carry (h', c'), emit h'

with sigmoid written exactly as ``1 / (1 + exp(-z))``. ORT's LSTM kernel runs the whole sequence
in one op (its sigmoid and tanh agree with these to float32 rounding).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m

_INDEX_OPS = frozenset({"Cast", "Min", "Max", "Clip", "Unsqueeze", "Concat", "Identity"})


def _sigmoid_of(value: ir.Value | None) -> ir.Value | None:
    div = m.binary(m.producer(value), "Div")
    if div is None or not m.is_scalar_const(div[0], 1.0):
        return None
    add = m.binary(m.producer(div[1]), "Add")
    if add is None:
        return None
    for one, e in (add, add[::-1]):
        if m.is_scalar_const(one, 1.0):
            exp = m.producer(e, "Exp")
            neg = m.producer(exp.inputs[0], "Neg") if exp is not None else None
            if neg is not None:
                return neg.inputs[0]
    return None


def _split_mul(value: ir.Value) -> tuple[ir.Value, ir.Value] | None:
    return m.binary(m.producer(value), "Mul")


def _sig_times(value: ir.Value, other_test) -> tuple[ir.Value, ir.Value] | None:
    """(z, y) for ``value = sigmoid(z) * y`` (either order) with ``other_test(y)``."""
    pair = _split_mul(value)
    if pair is None:
        return None
    for s, y in (pair, pair[::-1]):
        z = _sigmoid_of(s)
        if z is not None and other_test(y):
            return z, y
    return None


def _add_terms(value: ir.Value, depth: int = 3) -> list[ir.Value]:
    pair = m.binary(m.producer(value), "Add")
    if pair is None or depth == 0:
        return [value]
    return _add_terms(pair[0], depth - 1) + _add_terms(pair[1], depth - 1)


def _column_slice(value: ir.Value, gates: list) -> tuple[int, int] | None:
    """(start, stop) of a Slice taking whole rows and columns start:stop of a 2-D value."""
    sl = m.producer(value, "Slice")
    if sl is None or len(sl.inputs) < 4:
        return None
    if gates and sl.inputs[0] is not gates[0]:
        return None
    starts, ends, axes = (m.const(v) for v in sl.inputs[1:4])
    steps = m.const(sl.inputs[4]) if len(sl.inputs) > 4 and sl.inputs[4] is not None else None
    if starts is None or ends is None or axes is None or (steps is not None and np.any(steps != 1)):
        return None
    spans = {int(a) % 2: (int(s), int(e)) for a, s, e in zip(np.atleast_1d(axes), np.atleast_1d(starts), np.atleast_1d(ends))}
    rows = spans.get(0, (0, 1 << 62))
    if rows[0] != 0 or 1 not in spans:
        return None
    if not gates:
        gates.append(sl.inputs[0])
    gates.append(rows[1])
    return spans[1]


def _is_counter_index(value: ir.Value, counter: ir.Value) -> bool:
    while value is not counter:
        node = m.producer(value)
        if node is None or node.op_type not in _INDEX_OPS:
            return False
        if node.op_type == "Concat" and len([i for i in node.inputs if i is not None]) != 1:
            return False
        value = node.inputs[0]
    return True


def _match(loop: ir.Node) -> dict | None:
    body = loop.attributes["body"].value
    if len(loop.inputs) != 5 or len(body.inputs) != 5 or len(body.outputs) != 5 or len(loop.outputs) != 4:
        return None
    if loop.inputs[0] is not None:
        return None
    counter, h_in, c_in = body.inputs[2], body.inputs[3], body.inputs[4]
    # trip count: counter from 0, +1 per step, continue while counter + 1 < T
    start = m.folded(loop.inputs[2])
    step = m.binary(m.producer(body.outputs[1]), "Add")
    less = m.binary(m.producer(body.outputs[0]), "Less")
    if start is None or int(start) != 0 or step is None or step[0] is not counter or not m.is_scalar_const(step[1], 1.0):
        return None
    if less is None or less[0] is not body.outputs[1] or m.folded(less[1]) is None:
        return None
    steps = int(m.folded(less[1]))
    first = m.binary(m.producer(loop.inputs[1]), "Less")
    if not (m.folded(loop.inputs[1]) is not None and bool(m.folded(loop.inputs[1]))) and not (
            first is not None and m.folded(first[0]) is not None and m.folded(first[1]) is not None
            and int(m.folded(first[0])) < int(m.folded(first[1]))):
        return None
    h_out, c_out, ys = body.outputs[2], body.outputs[3], body.outputs[4]
    ident = m.producer(ys, "Identity")
    if (ident.inputs[0] if ident is not None else ys) is not h_out:
        return None
    # h' = sigmoid(o) * tanh(c')
    got = _sig_times(h_out, lambda y: m.producer(y, "Tanh") is not None and m.producer(y, "Tanh").inputs[0] is c_out)
    if got is None:
        return None
    o = got[0]
    # c' = sigmoid(f) * c + sigmoid(i) * tanh(g)
    terms = m.binary(m.producer(c_out), "Add")
    if terms is None:
        return None
    f = i = g = None
    for t in terms:
        fc = _sig_times(t, lambda y: y is c_in)
        ig = _sig_times(t, lambda y: m.producer(y, "Tanh") is not None)
        if fc is not None:
            f = fc[0]
        elif ig is not None:
            i, g = ig[0], m.producer(ig[1], "Tanh").inputs[0]
    if f is None or i is None:
        return None
    gates: list = []
    spans = [_column_slice(v, gates) for v in (i, f, g, o)]
    if any(s is None for s in spans):
        return None
    hidden = spans[0][1] - spans[0][0]
    if [s for s in spans] != [(k * hidden, (k + 1) * hidden) for k in range(4)]:
        return None
    # gates = xs[t] @ wx + h @ wh + b
    proj = rec = bias = None
    for term in _add_terms(gates[0]):
        mm = m.producer(term, "MatMul")
        sq = m.producer(term, "Squeeze")
        if mm is not None and mm.inputs[0] is h_in and m.const(mm.inputs[1]) is not None:
            rec = m.const(mm.inputs[1])
        elif sq is not None:
            sl = m.producer(sq.inputs[0], "Slice")
            outer = m.producer(sl.inputs[0], "MatMul") if sl is not None else None
            if (outer is None or outer.graph is not loop.graph or m.const(outer.inputs[1]) is None
                    or list(np.atleast_1d(m.const(sl.inputs[3]))) != [0] or not _is_counter_index(sl.inputs[1], counter)):
                return None
            proj = outer
        elif m.folded(term) is not None:
            bias = m.folded(term)
        else:
            return None
    if proj is None or rec is None:
        return None
    xs, wx = proj.inputs[0], m.const(proj.inputs[1])
    if xs.shape is None or len(xs.shape) != 3 or xs.shape[0] != steps or wx.dtype != np.float32:
        return None
    if not isinstance(xs.shape[1], int) or min(gates[1:]) < xs.shape[1]:  # every slice takes all rows
        return None
    if wx.shape[1] != 4 * hidden or rec.shape != (hidden, 4 * hidden):
        return None
    if bias is None:
        bias = np.zeros(4 * hidden, np.float32)
    bias = bias.reshape(-1, 4 * hidden)
    if not np.all(bias == bias[:1]):
        return None
    return {"proj": proj, "xs": xs, "wx": wx, "wh": rec, "b": bias[0], "hidden": hidden, "steps": steps,
            "h0": loop.inputs[3], "c0": loop.inputs[4]}


def _iofc(w: np.ndarray, hidden: int) -> np.ndarray:
    """jax's (i, f, g, o) gate columns as ONNX's (i, o, f, c) rows."""
    i, f, g, o = (w[..., k * hidden:(k + 1) * hidden] for k in range(4))
    return np.ascontiguousarray(np.concatenate([i, o, f, g], axis=-1).T)


def _const(graph: ir.Graph, name: str, arr: np.ndarray) -> ir.Value:
    value = ir.Value(name=name, const_value=ir.tensor(arr))
    while value.name in graph.initializers:
        value.name += "_"
    graph.register_initializer(value)
    return value


def rewrite(graph: ir.Graph) -> int:
    """Replace LSTM-cell scans in ``graph`` (the main graph) by the LSTM op; returns how many.

    ORT's LSTM kernel clamps its activations' inputs, which turns NaN into numbers, so the op runs
    only when the sequence and the initial state are finite (``If(IsNaN(s - s))`` with ``s`` their
    sum); otherwise the exact Loop runs.
    """
    count = 0
    for loop in [n for n in graph if n.op_type == "Loop" and n.domain == ""]:
        got = _match(loop)
        if got is None or not all(np.isfinite(got[k]).all() for k in ("wx", "wh", "b")):
            continue
        hdim = got["hidden"]
        w = _const(graph, "lstm_w", _iofc(got["wx"], hdim)[None])
        r = _const(graph, "lstm_r", _iofc(got["wh"], hdim)[None])
        b = _const(graph, "lstm_b", np.concatenate([_iofc(got["b"][None], hdim)[:, 0], np.zeros(4 * hdim, np.float32)])[None])
        axis0 = _const(graph, "lstm_axis0", np.array([0], np.int64))
        axis1 = _const(graph, "lstm_axis1", np.array([1], np.int64))
        h0, c0 = _initial_state(got["h0"], axis0), _initial_state(got["c0"], axis0)
        lstm = ir.node("LSTM", [got["xs"], w, r, b, None, *(n.outputs[0] if n else None for n in (h0, c0))],
                       {"hidden_size": hdim}, num_outputs=3)
        ys = ir.node("Squeeze", [lstm.outputs[0], axis1])
        h_last = ir.node("Squeeze", [lstm.outputs[1], axis0])
        c_last = ir.node("Squeeze", [lstm.outputs[2], axis0])
        counter_dtype = loop.outputs[0].dtype
        final = ir.node("Constant", [], {"value": ir.tensor(np.array(got["steps"], counter_dtype.numpy() if counter_dtype else np.int64))})
        fast = [n for n in (h0, c0) if n] + [lstm, ys, h_last, c_last, final]
        fast_out = [final.outputs[0], h_last.outputs[0], c_last.outputs[0], ys.outputs[0]]
        _guarded(graph, loop, fast, fast_out, [got["xs"], got["h0"], got["c0"]])
        count += 1
    return count


def _initial_state(value: ir.Value, axis0: ir.Value) -> ir.Node | None:
    """``Unsqueeze(value, [0])`` for an RNN op's initial state; None (the op's default) for +0.0 zeros."""
    arr = m.repeated_const(value)
    if arr is not None and arr.dtype.kind == "f" and not np.any(arr) and not np.any(np.signbit(arr)):
        return None
    return ir.node("Unsqueeze", [value, axis0])


def _guarded(graph: ir.Graph, loop: ir.Node, fast: list[ir.Node], fast_out: list[ir.Value],
             finite: list[ir.Value]) -> None:
    """Put ``If(IsNaN(sum - sum))`` in the Loop's place: the Loop for non-finite inputs, else ``fast``.

    Inputs known finite (constants) stay out of the sum; the If returns only the Loop outputs
    something reads; nodes before it that only the exact Loop reads move into its branch.
    """
    finite = list(dict.fromkeys(v for v in finite if not _known_finite(v)))
    sums = [ir.node("ReduceSum", [v], {"keepdims": 0}) for v in finite]
    total = [ir.node("Sum", [n.outputs[0] for n in sums])] if len(sums) > 1 else []
    diff = ir.node("Sub", [(total or sums)[-1].outputs[0]] * 2)
    bad = ir.node("IsNaN", [diff.outputs[0]])
    used = [k for k, v in enumerate(loop.outputs) if v.uses() or v.is_graph_output()] or [0]
    old_outputs = [loop.outputs[k] for k in used]
    graph.insert_before(loop, [*sums, *total, diff, bad])
    graph.remove(loop)
    exact = ir.Graph([], old_outputs, nodes=[loop], name="scan_exact")
    quick = ir.Graph([], [fast_out[k] for k in used], nodes=fast, name="scan_fast")
    for node in list(quick):  # outputs the If does not return
        if not any(o.uses() or o.is_graph_output() for o in node.outputs):
            quick.remove(node)
    branch = ir.node("If", [bad.outputs[0]], {"then_branch": exact, "else_branch": quick},
                     num_outputs=len(old_outputs))
    graph.insert_after(bad, branch)
    for old, new in zip(old_outputs, branch.outputs):
        new.type, new.shape = old.type, old.shape
        name = old.name
        for use in list(old.uses()):
            if use.node.graph is not exact:
                use.node.replace_input_with(use.idx, new)
        for k, v in enumerate(graph.outputs):
            if v is old:
                graph.outputs[k] = new
        old.name = f"{name}_exact" if name else None
        new.name = name
    _sink_into(graph, branch, exact)


def _known_finite(value: ir.Value) -> bool:
    arr = m.repeated_const(value)
    return arr is not None and arr.dtype.kind == "f" and bool(np.isfinite(arr).all())


def _sink_into(graph: ir.Graph, branch: ir.Node, exact: ir.Graph) -> None:
    """Move nodes of ``graph`` whose outputs only ``exact`` (or its subgraphs) reads into ``exact``
    (the input projections, the broadcasts of the Loop's constants)."""
    inside = {id(g) for g in m.all_graphs(exact)}
    moved = True
    while moved:
        moved = False
        for node in reversed(list(graph)):
            if node is branch or node.graph is not graph:
                continue
            uses = [u for o in node.outputs for u in o.uses()]
            if not uses or any(o.is_graph_output() for o in node.outputs):
                continue
            if all(id(u.node.graph) in inside for u in uses):
                graph.remove(node)
                exact.insert_before(exact.node(0), node)
                moved = True
