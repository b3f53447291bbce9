"""An LSTM cell written in a lax.scan, as the ONNX LSTM op.

Matches the Loop a forward ``lax.scan`` lowers to (after ``loops`` moved ``xs @ w`` out of it),
whose body is the standard cell::

    c' = sigmoid(f) * c + sigmoid(i) * tanh(g);   h' = sigmoid(o) * tanh(c');   carry (h', c'), emit h'

with sigmoid written exactly as ``1 / (1 + exp(-z))``. Each gate's pre-activation is read as a
sum of terms (``x @ w + h @ u + b``, the GRU rule's reader): one fused product split into jax's
(i, f, g, o) columns, or one Dense per gate as flax's ``LSTMCell`` writes it, or flax's
``OptimizedLSTMCell`` kernels concatenated in the graph; the carry may be (h, c) or flax's (c, h).
ORT's LSTM kernel runs the whole sequence in one op (its sigmoid and tanh agree with these to
float32 rounding); a +0.0 initial state is left to the op's default.

A Loop without ``ys`` (a scan whose outputs nothing reads: flax ``nn.RNN(return_carry=True)``, the last
layer of a stacked classifier) is matched too, h told from c as the carry made from ``tanh(c')``, and
its sequence may be the previous layer's outputs, whose rows shape inference left unknown
(``gru._static_shape``). The zoo's ``linen_stacked`` (2 x LSTMCell(128), B8 T64): the second layer the
LSTM op too (it was a Loop running 41 nodes a step); time over jax.jit's 1.29 -> 0.41, CPU time
1.62 -> 0.89 (load 6.8, alternating in one process; at load 3.7: 1.54 -> 0.50, CPU 1.99 -> 0.88).
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
    """The LSTM cell in ``loop``'s body: its gates' weights in ONNX's layout, the sequence, the state."""
    from jaxconv.onnx.rewrites.gru import _Cell, _state_fits
    from jaxconv.onnx.rewrites.loops import trip_count

    body = loop.attributes["body"].value
    if len(loop.inputs) != 5 or len(body.inputs) != 5 or (len(body.outputs), len(loop.outputs)) not in ((5, 4), (4, 3)):
        return None
    steps = trip_count(loop)
    if steps is None:
        return None
    if len(loop.outputs) == 4:
        ys = body.outputs[4]
        ident = m.producer(ys, "Identity")
        ys = ident.inputs[0] if ident is not None else ys
        if ys not in (body.outputs[2], body.outputs[3]):
            return None
        orders = [0 if ys is body.outputs[2] else 1]  # the carry order: (h, c) by hand, (c, h) by flax
    else:  # no ys (flax's nn.RNN(return_carry=True) whose outputs nothing reads): h is the carry made from c
        orders = [0, 1]
    for k_h in orders:
        h_in, c_in = body.inputs[3 + k_h], body.inputs[4 - k_h]
        h_out, c_out = body.outputs[2 + k_h], body.outputs[3 - k_h]
        # h' = sigmoid(o) * tanh(c')
        got = _sig_times(h_out, lambda y: (m.producer(y, "Tanh") is not None
                                           and m.producer(y, "Tanh").inputs[0] is c_out))
        if got is not None:
            break
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
    # each gate's pre-activation: xs[t] @ w + h @ u + b (one fused product sliced, or one per gate)
    cell = _Cell(loop, h_in, body.inputs[2])
    parts = {k: cell.linear(v) for k, v in (("i", i), ("f", f), ("g", g), ("o", o))}
    seq = cell.sequence(steps)
    if any(p is None for p in parts.values()) or seq is None:
        return None
    xs, batch, n_in = seq
    recurrent = [p.wh for p in parts.values() if p.wh is not None]
    if not recurrent or recurrent[0].ndim != 2:
        return None
    hidden = recurrent[0].shape[0]  # h @ u: u has a row per state element
    full = {"wx": (n_in, hidden), "wh": (hidden, hidden), "b": (hidden,)}
    arrays: dict = {}
    for kind, shape in full.items():
        for k, part in parts.items():
            arr = getattr(part, kind)
            arr = np.zeros(shape, np.float32) if arr is None else arr
            if kind == "b" and arr.ndim == 1 and arr.shape[0] == 1:  # a scalar added (haiku's forget bias 1)
                arr = np.broadcast_to(arr, shape)
            if arr.shape != shape or arr.dtype != np.float32:
                return None
            arrays[kind, k] = arr
    if not all(_state_fits(loop, k, batch, hidden) for k in (3, 4)):
        return None
    projs = list(dict.fromkeys(pr for part in parts.values() for pr in part.projs))
    return {"projs": projs, "xs": xs, "batch": batch, "batch_major": cell.batch_major, "arrays": arrays, "hidden": hidden,
            "steps": steps, "k_h": k_h,
            "h0": loop.inputs[3 + k_h], "c0": loop.inputs[4 - k_h]}


def _onnx_weights(got: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ONNX's W [1, 4H, I], R [1, 4H, H] and B [1, 8H] (gates i, o, f, c) from the matched parts."""
    a = got["arrays"]
    order = ("i", "o", "f", "g")
    w = np.concatenate([a["wx", k].T for k in order])[None]
    r = np.concatenate([a["wh", k].T for k in order])[None]
    b = np.concatenate([a["b", k] for k in order] + [np.zeros(4 * got["hidden"], np.float32)])[None]
    return tuple(np.ascontiguousarray(x, np.float32) for x in (w, r, b))


def _const(graph: ir.Graph, name: str, arr: np.ndarray) -> ir.Value:
    value = ir.Value(name=name, const_value=ir.tensor(arr))
    while value.name in graph.initializers:
        value.name += "_"
    graph.register_initializer(value)
    return value


def rewrite(graph: ir.Graph) -> int:
    """Replace LSTM-cell scans in ``graph`` (the main graph) by the LSTM op; returns how many.

    ORT's LSTM kernel clamps its activations' inputs, which turns NaN into numbers (a NaN in x, h0
    or c0, or one that ``inf - inf`` makes inside ``x @ w``, where jax.jit gives NaN), so the op runs
    only when the sequence and the initial state are finite (``If(ReduceSumSquare(x) < inf)``, see
    ``_guarded``); otherwise the exact Loop runs.
    """
    from jaxconv.onnx.rewrites.gru import op_sequence

    count = 0
    for loop in [n for n in graph if n.op_type == "Loop" and n.domain == ""]:
        got = _match(loop)
        if got is None:
            continue
        w_arr, r_arr, b_arr = _onnx_weights(got)
        if not all(np.isfinite(x).all() for x in (w_arr, r_arr, b_arr)):
            continue
        hdim = got["hidden"]
        w, r = _const(graph, "lstm_w", w_arr), _const(graph, "lstm_r", r_arr)
        b = _const(graph, "lstm_b", b_arr)
        axis0 = _const(graph, "lstm_axis0", np.array([0], np.int64))
        axis1 = _const(graph, "lstm_axis1", np.array([1], np.int64))
        h0, c0 = _initial_state(got["h0"], axis0), _initial_state(got["c0"], axis0)
        pre, xs = op_sequence(got)
        lstm = ir.node("LSTM", [xs, w, r, b, None, *(n.outputs[0] if n else None for n in (h0, c0))],
                       {"hidden_size": hdim}, num_outputs=3)
        ys = ir.node("Squeeze", [lstm.outputs[0], axis1])
        h_last = ir.node("Squeeze", [lstm.outputs[1], axis0])
        c_last = ir.node("Squeeze", [lstm.outputs[2], axis0])
        batch = got["batch"]  # a number, or a symbolic size's name
        for out in (ys.outputs[0], h_last.outputs[0], c_last.outputs[0]):
            out.type = xs.type
        ys.outputs[0].shape = ir.Shape([got["steps"], batch, hdim])
        h_last.outputs[0].shape = c_last.outputs[0].shape = ir.Shape([batch, hdim])
        counter_dtype = loop.outputs[0].dtype
        dtype = counter_dtype.numpy() if counter_dtype else np.int64
        final = ir.node("Constant", [], {"value": ir.tensor(np.array(got["steps"], dtype))})
        fast = [*pre, *(n for n in (h0, c0) if n), lstm, ys, h_last, c_last, final]
        state = [h_last.outputs[0], c_last.outputs[0]]
        fast_out = [final.outputs[0], *(state if got["k_h"] == 0 else state[::-1]), ys.outputs[0]]
        fast_out = fast_out[:len(loop.outputs)]  # a Loop without ys: the final state only
        _guarded(graph, loop, fast, fast_out, [got["xs"], got["h0"], got["c0"]])
        count += 1
    return count


def _initial_state(value: ir.Value, axis0: ir.Value) -> ir.Node | None:
    """``Unsqueeze(value, [0])`` for an RNN op's initial state; None (the op's default) for +0.0 zeros."""
    arr = m.repeated_const(value)
    if arr is not None and arr.dtype.kind == "f" and not np.any(arr) and not np.any(np.signbit(arr)):
        return None
    node = ir.node("Unsqueeze", [value, axis0])
    node.outputs[0].type = value.type
    if value.shape is not None:
        node.outputs[0].shape = ir.Shape([1, *value.shape])
    return node


def _guarded(graph: ir.Graph, loop: ir.Node, fast: list[ir.Node], fast_out: list[ir.Value],
             finite: list[ir.Value], also: tuple[list[ir.Node], ir.Value] | None = None) -> None:
    """Put ``If(ReduceSumSquare(x) < inf)`` in the Loop's place: ``fast`` for finite inputs, else the Loop.

    A sum of squares is never -inf: it is +inf or NaN exactly when an element is non-finite (or,
    for huge finite inputs, when it overflows, which only sends them down the exact Loop). Inputs
    known finite (constants) stay out of it; with none left, ``fast`` replaces the Loop outright.
    The If returns only the Loop outputs something reads; nodes before it that only the exact Loop
    reads move into its branch. ``also``: nodes and the one-element bool they compute, a further test
    ``fast`` needs (the GRU op's batch size at run time).
    """
    from jaxconv.onnx.rewrites.loops import drop_noop_reshapes

    finite = list(dict.fromkeys(v for v in finite if not _known_finite(v)))
    used = [k for k, v in enumerate(loop.outputs) if v.uses() or v.is_graph_output()] or [0]
    old_outputs = [loop.outputs[k] for k in used]
    if not finite and also is None:
        graph.insert_before(loop, [n for n in fast if _reads_out(n, fast, [fast_out[k] for k in used])])
        news = [fast_out[k] for k in used]
        for old, new in zip(old_outputs, news):
            _take_place(graph, old, new, None)
        for k in range(len(loop.inputs)):
            loop.replace_input_with(k, None)
        graph.remove(loop)
        for new in news:
            drop_noop_reshapes(graph, new)
        return
    tests = _finite_test(finite) if finite else []
    if also is not None:
        tests = [*tests, *also[0]] if not tests else [*tests, *also[0], ir.node("And", [tests[-1].outputs[0], also[1]])]
    ok = tests[-1]
    graph.insert_before(loop, tests)
    graph.remove(loop)
    exact = ir.Graph([], old_outputs, nodes=[loop], name="scan_exact")
    quick = ir.Graph([], [fast_out[k] for k in used], nodes=fast, name="scan_fast")
    for node in reversed(list(quick)):  # outputs the If does not return
        if not any(o.uses() or o.is_graph_output() for o in node.outputs):
            quick.remove(node, safe=True)
    branch = ir.node("If", [ok.outputs[0]], {"then_branch": quick, "else_branch": exact},
                     num_outputs=len(old_outputs))
    graph.insert_after(ok, branch)
    for old, new, known in zip(old_outputs, branch.outputs, [fast_out[k] for k in used]):
        _take_place(graph, old, new, known.shape, exact)
    _sink_into(graph, branch, exact)
    for new in branch.outputs:
        drop_noop_reshapes(graph, new)


def _finite_test(finite: list[ir.Value]) -> list[ir.Node]:
    """``ReduceSumSquare`` of each of ``finite`` (their sum) ``< inf``: the nodes, the test last."""
    sums = [ir.node("ReduceSumSquare", [v], {"keepdims": 0}) for v in finite]
    total = [ir.node("Sum", [n.outputs[0] for n in sums])] if len(sums) > 1 else []
    inf = ir.node("Constant", [], {"value": ir.tensor(np.array(np.inf, np.float32))})
    total_value = (total or sums)[-1].outputs[0]
    if total_value.dtype is None and finite[0].dtype is not None:
        total_value.dtype = finite[0].dtype
    if finite[0].dtype is not None and finite[0].dtype != ir.DataType.FLOAT:
        inf = ir.node("Constant", [], {"value": ir.tensor(np.array(np.inf, finite[0].dtype.numpy()))})
    return [*sums, *total, inf, ir.node("Less", [total_value, inf.outputs[0]])]


def _reads_out(node: ir.Node, nodes: list[ir.Node], outs: list[ir.Value]) -> bool:
    """True when ``outs`` depend on ``node`` through ``nodes``."""
    wanted = {id(v) for v in outs}
    for other in reversed(nodes):
        if any(id(o) in wanted for o in other.outputs):
            wanted.update(id(i) for i in other.inputs if i is not None)
    return any(id(o) in wanted for o in node.outputs)


def _take_place(graph: ir.Graph, old: ir.Value, new: ir.Value, known: ir.Shape | None,
                inside: ir.Graph | None = None) -> None:
    """Readers of ``old`` outside ``inside`` (graph outputs too) read ``new``, which takes its name,
    type and shape (``known`` where every size is a number or a symbolic size's name: the row count the Loop's
    shape left unknown, a symbolic batch the thread record weighs; the same for ``old`` inside)."""
    new.type = old.type if old.type is not None else new.type
    named = known is not None and all(isinstance(d, int) or d.value is not None for d in known)
    new.shape = known if named else old.shape
    if named and inside is not None:
        old.shape = known  # the exact branch's result too: ONNX's inference merges the If's branches
    name = old.name
    for use in list(old.uses()):
        if inside is None or use.node.graph is not inside:
            use.node.replace_input_with(use.idx, new)
    for k, v in enumerate(graph.outputs):
        if v is old:
            graph.outputs[k] = new
    old.name = f"{name}_exact" if name and inside is not None else None
    new.name = name


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
