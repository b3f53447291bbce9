"""Loops in the form ORT runs fastest (lax.scan / fori_loop lower to Loop).

``rewrite`` (before the RNN-cell rules, which match Loops):

- Loop-invariant nodes (every input defined outside the body) run once, before the Loop.
- A scan's input projection: ``MatMul(reshape(slice(xs, i, i + 1)), w)`` in the body, with ``xs``
  and ``w`` from outside, becomes one MatMul over all of ``xs`` before the Loop and a slice of its
  result in the body. Each row of the big product is the same dot product as the per-step one. Also
  where shape inference left ``xs``'s rows unknown (the previous layer's outputs: flax's stacked
  ``nn.RNN``) or ``w`` is a constant transposed in the graph (``loop_weight_first``'s ``Wᵀ``).
- A reversed scan's step ``Slice(xs, T - 1 - i)`` (``lax.scan(reverse=True)``, Keras' ``go_backwards``)
  reads row ``i`` of ``xs`` reversed once before the Loop, the forward form the rules above and the
  RNN rules read (``_reversed_steps``). The zoo's ``keras_rnn`` (Bidirectional(LSTM(64)) then GRU,
  B2 T64): the backward LSTM the LSTM op like the forward one, 8 index nodes a step gone; time over
  jax.jit's 2.36 -> 1.44, CPU time 2.38 -> 1.41 (load 4.2, alternating in one process; again at load
  4.5: 2.63 -> 1.50, CPU 2.72 -> 1.64).
- A scan unrolled k steps a body on rows it regroups itself (``nnx.RNN(unroll=k)``: each body step
  reads ``[k, B, I]``, Splits it and Reshapes each ``[B, I]`` for its own ``x @ w``) has that
  regrouping, which never touches the last axis, done once before the Loop for every step
  (``_regroup_steps``), so each ``x @ w`` is the input projection above and leaves too (k products
  before the Loop, as many scan inputs). The zoo's ``nnx_gru`` (two layers, B4 H128, unroll 4):
  body MatMuls 8 -> 4 a layer, and ``scan_rows`` folds the sigmoids' negations into each projection's
  weight again; time new / old 0.96-0.98, CPU time 0.91-0.93 (load 8.1-8.4, alternating in one process).

- A ``fori_loop`` that reads one row of its sequences and writes one row of a buffer each step, by index
  (keras-hub's RWKV7: six sequences read along axis 1, the output written along axis 1), in the form
  ``to_scan`` reads: a carried index stepping with the Loop's counter from its start is the counter
  (``_lockstep_counters``); a row read at a wrapped and clamped index along any axis is a row of the sequence
  transposed once before the Loop (``_axis_steps``); a carried buffer whose every row one ScatterND writes
  once, read by nothing else in the body, is a scan output moved to its axis after the Loop
  (``_row_writes``). The same rows in the same steps: the same numbers. RWKV7 (B2 T64, two layers) over
  jax.jit: 5.3x -> 2.0x (the Loop sliced six sequences and copied its 64 KB buffer every step); a Scan's
  step still costs ORT about 25 us where XLA's compiled loop takes 4.

``to_scan`` (after them): a Loop with a fixed trip count and scan outputs (a ``lax.scan`` with
``ys``) becomes a Scan, or straight-line code for a few steps of a wide state; a Loop without scan
outputs (``fori_loop``) stays one, the form the SavedModel/TFLite translation of jaxconv's ONNX
(``tf/onnx_to_tf``) reads. The Loop's counter becomes a scan input (``Range(0, T)``), and the
body's ``Slice(xs, i, i + 1)`` of outer values become scan inputs too, so no step computes an
index or slices. Each step runs the same ops as before, so the numbers do not change. A small
constant initial state (zeros broadcast to the carry's shape) becomes an initializer, and a Reshape
that only restated the scan output's row count (which the Loop could not state) goes.

The rule, measured (ORT 1.32, 2 cores, load 12-13, a ``tanh(h @ w + x)`` cell, p25 wall and
median CPU time relative to the Loop, one and two threads alike): the Scan takes 0.25-0.55 of the
Loop's time with a 1 x 8 or 4 x 64 state, for 2-16 steps, and 0.77-0.90 with 16 x 256; unrolled,
0.36-0.57 and 0.54-0.87. Unrolling wins only for 2-4 steps of the 16 x 256 state (0.54-0.71 against
the Scan's 0.78-0.90); why was not isolated (the weight as an initializer of the Scan body instead
of an outer value changed nothing, so it is not weight prepacking).
So a loop of at most ``_UNROLL_STEPS`` steps carrying at least ``_UNROLL_MIN_CARRY`` elements is
unrolled, and every other fixed-count scan is a Scan.

A body that convolves (flax's ConvLSTMCell, Haiku's Conv2DLSTM: NHWC states, a Conv of the input and
one of the hidden state a step, four gates) runs unrolled up to ``_UNROLL_CONV_STEPS`` steps: in the
main graph ORT runs the convolutions in its blocked (NCHWc) layout, in a Scan's body it does not (the
hidden state's 3x3 convolution 55 against 32 us a step, one thread), and the Scan's own cost a step
goes. Haiku's Conv2DLSTM (B 2, 16x16x3
frames, 8 channels), over jax.jit: 8 steps 1.40x as a Scan, 0.84x unrolled; 16 steps 1.43x -> 0.84x;
32 steps 1.55x -> 0.88x (999 nodes); flax's ConvLSTMCell, 8 steps, 1.55x -> 0.93x.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _constants
from jaxconv.onnx.rewrites import _match as m

_STATEFUL = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                       "Bernoulli"})


def _body_values(body: ir.Graph) -> set[int]:
    """ids of the values defined inside ``body`` (its inputs and every node's outputs, nested graphs included)."""
    ids = {id(v) for v in body.inputs}
    for node in ir.traversal.RecursiveGraphIterator(body):
        ids.update(id(o) for o in node.outputs)
    return ids


def _visible_in(value: ir.Value, graph: ir.Graph, main: ir.Graph) -> bool:
    """True when ``graph`` (holding the Loop) can read ``value``: made there, or a main-graph input/initializer."""
    node = value.producer()
    if node is None:
        return value in main.inputs or value.name in main.initializers or value in graph.inputs
    return node.graph is graph or node.graph is main


def _hoist_invariants(loop: ir.Node, body: ir.Graph) -> int:
    inside = _body_values(body)
    outer = loop.graph
    moved = 0
    for node in list(body):
        if node.op_type in _STATEFUL or node.domain != "" or any(
                a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values()):
            continue
        if any(v is not None and id(v) in inside for v in node.inputs):
            continue
        if any(o.is_graph_output() for o in node.outputs):
            continue
        body.remove(node)
        outer.insert_before(loop, node)
        inside.difference_update(id(o) for o in node.outputs)
        moved += 1
    return moved


def _step_slice(value: ir.Value, inside: set[int]) -> ir.Node | None:
    """The ``Slice(xs, i, i + 1, axes=[0])`` producing ``value``, with ``xs`` from outside the body."""
    sl = m.producer(value, "Slice")
    got = None if sl is None else _any_axis_step(sl, inside)
    return sl if got is not None and got[1] == 0 else None


def _hoist_projection(loop: ir.Node, body: ir.Graph, main: ir.Graph) -> int:
    inside = _body_values(body)
    outer = loop.graph
    count = 0
    for mm in list(body):
        if mm.op_type != "MatMul" or mm.domain != "":
            continue
        a, w = mm.inputs
        if w is None or id(w) in inside or _rank(w) != 2 or not _visible_in(w, outer, main):
            continue
        row = m.producer(a, "Reshape", "Squeeze")
        sl = _step_slice(row.inputs[0], inside) if row is not None else None
        if sl is None:
            continue
        xs = sl.inputs[0]
        # rows (axis 0) may be unknown, and the batch where a Squeeze drops axis 0 (a symbolic batch)
        if (xs.shape is None or len(xs.shape) < 2 or not isinstance(xs.shape[-1], int)
                or not _drops_axis0(row, xs) or not _visible_in(xs, outer, main)):
            continue
        projected = ir.node("MatMul", [xs, w])
        width = _width(w)
        if width is not None:
            projected.outputs[0].shape = ir.Shape([*list(xs.shape)[:-1], width])
            projected.outputs[0].type = xs.type
        outer.insert_before(loop, projected)
        step = ir.node("Slice", [projected.outputs[0], *sl.inputs[1:]])
        squeeze = ir.node("Squeeze", [step.outputs[0], _i64(body, [0])])
        m.replace(body, mm.outputs[0], [step, squeeze], mm)
        count += 1
    return count


_ROW_OPS = ("Reshape", "Squeeze", "Unsqueeze", "Split", "Identity")


def _regroup_steps(loop: ir.Node, body: ir.Graph, main: ir.Graph) -> int:
    """A step's rows regrouped in the body before a product by a weight from outside (a scan unrolled
    k steps a body, as ``nnx.RNN(unroll=k)`` writes it: each body step reads ``[k, B, I]``, Splits it
    and Reshapes each ``[B, I]`` for its own ``x @ w``) regrouped once before the Loop instead, every
    step at once (the same ops one axis further in), the body reading its row of the result as
    ``Squeeze(Slice(.., i, i + 1))``: the form ``_hoist_projection`` moves the product out of. The
    ops move whole rows of the last axis and never change it: the same values in the same steps."""
    inside = _body_values(body)
    outer = loop.graph
    made: dict[int, ir.Value] = {}  # id of a body value -> the outer value holding it for every step
    count = 0
    for mm in list(body):
        if mm.op_type != "MatMul" or mm.domain != "" or len(mm.inputs) != 2:
            continue
        a, w = mm.inputs
        if w is None or id(w) in inside or _rank(w) != 2 or not _visible_in(w, outer, main):
            continue
        found = _row_chain(a, inside)
        if found is None or a is None or id(a) in made:
            continue
        sl, chain = found
        xs = sl.inputs[0]
        if len(chain) == 1 and _drops_axis0(chain[0][0], xs):
            continue  # the form _hoist_projection reads already
        shapes = _chain_shapes(xs, chain)
        if shapes is None or not _visible_in(xs, outer, main):
            continue
        if id(sl.outputs[0]) not in made:  # the step's rows, every step: [T, 1, ...]
            unsqueeze = ir.node("Unsqueeze", [xs, _i64_outer(main, [1], "row_groups")])
            outer.insert_before(loop, unsqueeze)
            _set_rows(unsqueeze.outputs[0], xs, shapes[0])
            made[id(sl.outputs[0])] = unsqueeze.outputs[0]
        for (node, _), shape in zip(chain, shapes):
            if id(node.outputs[0]) not in made:
                _regroup_outside(main, loop, node, made, xs, shape)
        step = ir.node("Slice", [made[id(a)], *sl.inputs[1:]])
        row = ir.node("Squeeze", [step.outputs[0], _i64(body, [0])])
        body.insert_after(chain[-1][0], [step, row])
        row.outputs[0].type, row.outputs[0].shape = a.type, a.shape
        m.take_over(a, row.outputs[0])
        count += 1
    return count


def _regroup_outside(main: ir.Graph, loop: ir.Node, node: ir.Node, made: dict[int, ir.Value], xs: ir.Value,
                     step_shape: list[int]) -> None:
    """``node`` (a row op of the body, reading a step of shape ``step_shape``) as the same op on every
    step at once before ``loop``: its axes one further in, its constants initializers of ``main``;
    ``made`` takes its outputs."""
    attrs = {k: v.value for k, v in node.attributes.items()}
    args = [made[id(node.inputs[0])]]
    op, rank = node.op_type, len(step_shape)
    arg = m.const(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] is not None else None
    if op == "Reshape" and arg is not None:
        args.append(_i64_outer(main, [0, *[int(t) for t in arg]], "row_groups"))  # 0: the steps as they are
    elif op in ("Squeeze", "Unsqueeze") and arg is not None:
        axes_rank = rank if op == "Squeeze" else rank + arg.size
        args.append(_i64_outer(main, [int(a) % axes_rank + 1 for a in np.atleast_1d(arg)], "row_groups"))
    elif op == "Split":
        attrs["axis"] = int(m.attr(node, "axis", 0)) % rank + 1
        if arg is not None:
            args.append(_i64_outer(main, [int(v) for v in np.atleast_1d(arg)], "row_groups"))
    copy = ir.node(op, args, attrs, num_outputs=len(node.outputs))
    loop.graph.insert_before(loop, copy)
    for k, (old, new) in enumerate(zip(node.outputs, copy.outputs)):
        made[id(old)] = new
        _set_rows(new, xs, _row_op_shape(node, k, step_shape))


def _set_rows(value: ir.Value, xs: ir.Value, step_shape: list[int] | None) -> None:
    """``value`` (every step of ``xs`` regrouped) typed as ``xs``, shaped ``[steps, *step_shape]`` (the
    steps as ``xs`` states them, known or not)."""
    value.type = xs.type
    if xs.shape is not None and len(xs.shape) and step_shape is not None:
        value.shape = ir.Shape([xs.shape[0], *step_shape])


def _chain_shapes(xs: ir.Value | None, chain: list[tuple[ir.Node, int]]) -> list[list[int]] | None:
    """The shapes of one step's rows of ``xs`` (static but for its rows) and of each op's output on
    the path through the ``chain`` of row ops, when none moves or changes the last axis; else None."""
    rest = list(xs.shape)[1:] if xs is not None and xs.shape is not None else []
    if not rest or not all(isinstance(d, int) for d in rest):
        return None
    shapes = [[1, *[int(d) for d in rest]]]
    for node, index in chain:
        shape = _row_op_shape(node, index, shapes[-1])
        if not shape or shape[-1] != shapes[0][-1]:
            return None
        shapes.append(shape)
    return shapes


def _row_chain(value: ir.Value | None, inside: set[int]) -> tuple[ir.Node, list[tuple[ir.Node, int]]] | None:
    """(the step's ``Slice(xs, i, i + 1)``, the row ops from it to ``value`` in order, each with the
    output the path leaves by) when ``value`` is reached from that Slice by ``_ROW_OPS`` alone."""
    chain: list[tuple[ir.Node, int]] = []
    for _ in range(8):
        if value is None:
            return None
        sl = _step_slice(value, inside)
        if sl is not None:
            return (sl, chain[::-1]) if chain else None
        node = m.producer(value, *_ROW_OPS)
        if node is None or node.domain != "" or not node.inputs or node.inputs[0] is None:
            return None
        chain.append((node, value.index() or 0))
        value = node.inputs[0]
    return None


def _row_op_shape(node: ir.Node, index: int, shape: list[int]) -> list[int] | None:
    """The shape of ``node``'s output ``index`` from an input of ``shape``, when the op leaves the last
    axis where it is; else None."""
    rank = len(shape)
    op = node.op_type
    if op == "Identity":
        return shape
    arg = m.const(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] is not None else None
    if op == "Reshape":
        if arg is None or arg.ndim != 1 or len(arg) == 0 or m.attr(node, "allowzero", 0):
            return None
        target = [int(t) for t in arg]
        if target[-1] != shape[-1] or any(t < -1 for t in target) or target.count(-1) > 1:
            return None
        dims = [shape[k] if t == 0 and k < rank else t for k, t in enumerate(target)]
        known = int(np.prod([d for d in dims if d != -1]))
        total = int(np.prod(shape))
        if -1 in dims:
            if known == 0 or total % known:
                return None
            dims[dims.index(-1)] = total // known
        return dims if int(np.prod(dims)) == total else None
    if op in ("Squeeze", "Unsqueeze"):
        if arg is None:
            return None
        out_rank = rank - len(np.atleast_1d(arg)) if op == "Squeeze" else rank + len(np.atleast_1d(arg))
        axes = sorted({int(a) % max(rank if op == "Squeeze" else out_rank, 1) for a in np.atleast_1d(arg)})
        if op == "Squeeze":
            if rank - 1 in axes or any(shape[a] != 1 for a in axes):
                return None
            return [d for k, d in enumerate(shape) if k not in axes]
        if out_rank - 1 in axes:
            return None
        dims = list(shape)
        for a in axes:
            dims.insert(a, 1)
        return dims
    if op == "Split":
        axis = int(m.attr(node, "axis", 0)) % rank
        if axis == rank - 1:
            return None
        if arg is not None:
            sizes = [int(v) for v in np.atleast_1d(arg)]
        else:
            parts = len(node.outputs)
            if shape[axis] % parts:
                return None
            sizes = [shape[axis] // parts] * parts
        if sum(sizes) != shape[axis] or len(sizes) != len(node.outputs):
            return None
        return [sizes[index] if k == axis else d for k, d in enumerate(shape)]
    return None


def _width(w: ir.Value) -> int | None:
    """The number of columns of the 2-D weight ``w`` (from its constant where it has no shape)."""
    if w.shape is not None and len(w.shape) == 2 and isinstance(w.shape[1], int):
        return w.shape[1]
    arr = _constants.evaluate(w)
    return None if arr is None or arr.ndim != 2 else int(arr.shape[1])


def _rank(value: ir.Value) -> int | None:
    """``value``'s rank, or its constant's (a weight transposed in the graph has no shape yet)."""
    rank = m.rank(value)
    if rank is None:
        arr = _constants.evaluate(value)
        rank = None if arr is None else arr.ndim
    return rank


def _split_concat_products(loop: ir.Node, body: ir.Graph, main: ir.Graph) -> int:
    """``Concat([x_t, h], -1) @ w`` (haiku's LSTM: one Linear over the step's input and the state),
    with ``x_t`` a row of an outer ``xs`` and ``w`` constant, as ``x_t @ w[:n] + h @ w[n:]``, so the
    input part can leave the loop. The sum of two products rounds like the one product up to float32
    rounding of the addition order."""
    inside = _body_values(body)
    count = 0
    for mm in list(body):
        if mm.op_type != "MatMul" or mm.domain != "" or len(mm.inputs) != 2:
            continue
        cat = m.producer(mm.inputs[0], "Concat")
        w = m.const(mm.inputs[1])
        if cat is None or w is None or w.ndim != 2 or any(v is None for v in cat.inputs):
            continue
        widths: list[int | None] = []
        step = False
        for part in cat.inputs:
            row = m.producer(part, "Reshape", "Squeeze")
            sl = _step_slice(row.inputs[0], inside) if row is not None else None
            xs = sl.inputs[0] if sl is not None else None
            if xs is not None and _static_width(xs) and _drops_axis0(row, xs):
                step = True
                widths.append(int(xs.shape[-1]) if len(xs.shape) >= 2 else None)
            else:
                shape = part.shape
                last = shape[-1] if shape is not None and len(shape) else None
                widths.append(last if isinstance(last, int) else None)
        rank = len(widths) and m.rank(cat.inputs[0])
        axis = m.attr(cat, "axis", 0)
        if not step or widths.count(None) > 1 or not rank or axis not in (-1, rank - 1):
            continue
        if None in widths:
            widths[widths.index(None)] = w.shape[0] - sum(x for x in widths if x is not None)
        if min(widths) <= 0 or sum(widths) != w.shape[0]:
            continue
        nodes: list[ir.Node] = []
        total: ir.Value | None = None
        start = 0
        for part, width in zip(cat.inputs, widths):
            piece = _weight_value(main, mm.inputs[1], w[start:start + width])
            start += width
            nodes.append(ir.node("MatMul", [part, piece]))
            if total is not None:
                nodes.append(ir.node("Add", [total, nodes[-1].outputs[0]]))
            total = nodes[-1].outputs[0]
        m.replace(body, mm.outputs[0], nodes, mm)
        count += 1
    return count


def _static_width(xs: ir.Value) -> bool:
    """Whether ``xs``'s rows have a static width: a static shape, or a static last dim (the others may be
    named sizes: a symbolic batch)."""
    shape = xs.shape
    return shape is not None and (shape.is_static() or (len(shape) >= 2 and isinstance(shape[-1], int)))


def _weight_value(main: ir.Graph, like: ir.Value, arr: np.ndarray) -> ir.Value:
    """An initializer of the main graph holding ``arr`` (rows of the weight ``like``)."""
    value = ir.Value(name=f"{like.name or 'w'}_rows", type=ir.TensorType(ir.DataType.from_numpy(arr.dtype)),
                     shape=ir.Shape(arr.shape), const_value=ir.tensor(np.ascontiguousarray(arr)))
    while value.name in main.initializers:
        value.name += "_"
    main.register_initializer(value)
    return value


def _i64(graph: ir.Graph, values: list[int]) -> ir.Value:
    node = ir.node("Constant", [], {"value": ir.tensor(np.asarray(values, np.int64))})
    graph.insert_before(graph.node(0), node) if len(graph) else graph.append(node)
    return node.outputs[0]


def rewrite(main: ir.Graph) -> int:
    """Hoist loop-invariant work out of every Loop in ``main`` (nested ones too); returns how many
    nodes moved."""
    count = 0
    loops = [n for n in ir.traversal.RecursiveGraphIterator(main) if n.op_type == "Loop" and n.domain == ""]
    for loop in reversed(loops):  # inner loops first: what leaves an inner body may leave the outer one too
        loop = without_unread_rows(loop)
        body = loop.attributes["body"].value
        count += _hoist_invariants(loop, body)  # first: a weight the body builds from constants leaves too
        count += _split_concat_products(loop, body, main)
        count += _lockstep_counters(loop, body)
        count += _axis_steps(loop, body, main)
        loop, written = _row_writes(loop)
        body = loop.attributes["body"].value
        count += written
        count += _reversed_steps(loop, body, main)
        count += _regroup_steps(loop, body, main)
        count += _hoist_projection(loop, body, main)
    return count


def without_unread_rows(loop: ir.Node) -> ir.Node:
    """``loop`` (a Loop or a Scan), or one in its place without the scan outputs nothing reads (a scan's
    stacked carries of which only the outputs are used: flax's ``nn.RNN``, whose unread rows the RNN rules
    do not expect; a Scan read only at its last row, ``scan_last_row``), their body outputs and what only
    they needed dropped. The other outputs and their numbers stay as they are."""
    body = loop.attributes["body"].value
    scan = loop.op_type == "Scan"
    condition = 0 if scan else 1  # a Loop body's first output is its condition
    n_state = len(loop.inputs) - int(loop.attributes["num_scan_inputs"].value) if scan else len(body.inputs) - 2
    read = [k for k in range(n_state, len(loop.outputs))
            if loop.outputs[k].uses() or loop.outputs[k].is_graph_output()]
    if n_state < 0 or len(body.outputs) != condition + len(loop.outputs) or len(read) == len(loop.outputs) - n_state:
        return loop
    kept = list(range(n_state)) + read
    outputs = body.outputs[:condition] + [body.outputs[condition + k] for k in kept]
    body.outputs.clear()
    body.outputs.extend(outputs)
    attrs = {name: attr.value for name, attr in loop.attributes.items()}
    for name in ("scan_output_axes", "scan_output_directions"):  # one entry a stacked output
        if name in attrs:
            attrs[name] = [int(attrs[name][k - n_state]) for k in read]
    graph = loop.graph
    new = ir.node(loop.op_type, list(loop.inputs), attrs, num_outputs=len(kept))
    graph.insert_before(loop, new)
    for k, value in zip(kept, new.outputs):
        _take_over(graph, loop.outputs[k], value)
    for k in range(len(loop.inputs)):
        loop.replace_input_with(k, None)
    graph.remove(loop)
    _drop_dead(body)
    return new


def _lockstep_counters(loop: ir.Node, body: ir.Graph) -> int:
    """A carried integer that starts where the Loop's counter starts and steps by one with it (a
    ``fori_loop``'s own index beside the counter the Loop keeps) is read as the counter in the body."""
    steps = trip_count(loop)
    if steps is None or len(body.inputs) < 4:
        return 0
    counter = body.inputs[2]
    start = m.folded(loop.inputs[2])
    count = 0
    for k in range(3, len(body.inputs)):
        carry, first = body.inputs[k], loop.inputs[k]
        if carry.dtype != counter.dtype or k - 1 >= len(body.outputs) or not carry.uses():
            continue
        step = m.binary(m.producer(body.outputs[k - 1]), "Add")
        value = m.folded(first)
        if step is None or step[0] is not carry or not m.is_scalar_const(step[1], 1.0) or value is None \
                or value.size != 1 or start is None or int(value.reshape(-1)[0]) != int(start.reshape(-1)[0]):
            continue
        for use in list(carry.uses()):
            use.node.replace_input_with(use.idx, counter)
        count += 1
    return count


def _axis_steps(loop: ir.Node, body: ir.Graph, main: ir.Graph) -> int:
    """A step's ``Slice(xs, s, s + 1)`` of an outer ``xs`` along any axis, ``s`` the counter by way of index
    arithmetic (``dynamic_index_in_dim(xs, i, axis)`` in a ``fori_loop``: the index wrapped for a negative
    value and clamped), as ``Slice(xs_t, i, i + 1)`` of ``xs`` transposed once before the Loop to have that
    axis first, the row put back in its place by a Squeeze and an Unsqueeze: the form ``to_scan`` reads. The
    same row in the same step: the same numbers."""
    steps = trip_count(loop)
    if steps is None or len(body.inputs) < 3:
        return 0
    counter = body.inputs[2]
    if counter.dtype not in (ir.DataType.INT32, ir.DataType.INT64):
        return 0
    inside = _body_values(body)
    outer = loop.graph
    count = 0
    moved: dict[tuple[int, int], ir.Value] = {}
    for sl in list(body):
        got = _any_axis_step(sl, inside)
        if got is None:
            continue
        xs, axis = got
        rank = _rank(xs)
        index = _index_values(sl.inputs[1], counter, steps)
        if rank is None or index is None or list(index) != list(range(steps)) or _rows(xs, axis=axis) != steps:
            continue
        if (axis == 0 and _is_counter(sl.inputs[1], counter, steps)) or not _visible_in(xs, outer, main):
            continue  # already the form to_scan reads
        if (id(xs), axis) not in moved:
            perm = [axis, *(a for a in range(rank) if a != axis)]
            first = ir.node("Transpose", [xs], {"perm": perm}) if axis else None
            if first is not None:
                first.outputs[0].type = xs.type
                if xs.shape is not None:
                    first.outputs[0].shape = ir.Shape([xs.shape[a] for a in perm])
                outer.insert_before(loop, first)
            moved[(id(xs), axis)] = first.outputs[0] if first is not None else xs
        one = ir.node("Constant", [], {"value": ir.tensor(np.array([1], counter.dtype.numpy()))})
        zero = ir.node("Constant", [], {"value": ir.tensor(np.array([0], np.int64))})
        put = ir.node("Constant", [], {"value": ir.tensor(np.array([axis], np.int64))})
        start = ir.node("Unsqueeze", [counter, zero.outputs[0]])
        end = ir.node("Add", [start.outputs[0], one.outputs[0]])
        axes = ir.node("Constant", [], {"value": ir.tensor(np.array([0], counter.dtype.numpy()))})  # Slice's type
        step = ir.node("Slice", [moved[(id(xs), axis)], start.outputs[0], end.outputs[0], axes.outputs[0]])
        row = ir.node("Squeeze", [step.outputs[0], zero.outputs[0]])
        back = ir.node("Unsqueeze", [row.outputs[0], put.outputs[0]])
        m.replace(body, sl.outputs[0], [one, zero, put, start, end, axes, step, row, back], sl)
        count += 1
    return count


_MAX_WRITE_STEPS = 4096  # a written buffer's indices are worked out for every step up to this many


def _row_writes(loop: ir.Node) -> tuple[ir.Node, int]:
    """A carried buffer that each step writes one row of along an axis (``dynamic_update_index_in_dim(out,
    y, i, axis)`` in a ``fori_loop``: a ScatterND at every position of the axes before it and ``i`` on that
    axis, the buffer read by nothing else in the body), with as many rows as steps, as a scan output: the
    step's row, stacked by the Loop, then moved to the axis. Every row is written once, so the buffer's
    initial value never shows; the rows are the same values. Returns the Loop (a new one where rows moved)."""
    count = 0
    while True:
        steps = trip_count(loop)
        body = loop.attributes["body"].value
        if steps is None or steps > _MAX_WRITE_STEPS or len(body.inputs) < 4:
            return loop, count
        found = next(((k, got) for k in range(3, len(body.inputs))
                      if (got := _written_rows(body, k, body.inputs[2], steps, m.static_dims(loop.inputs[k])))), None)
        if found is None:
            return loop, count
        loop = _as_scan_output(loop, found[0], *found[1])
        count += 1


def _written_rows(body: ir.Graph, k: int, counter: ir.Value, steps: int,
                  dims: list[int] | None) -> tuple[ir.Node, int, list[int]] | None:
    """(ScatterND, axis, the buffer's dims) where body input ``k`` is such a buffer (``_row_writes``)."""
    buf = body.inputs[k]
    sc = m.producer(body.outputs[k - 1], "ScatterND")
    if dims is None or sc is None or sc.inputs[0] is not buf or m.attr(sc, "reduction", "none") not in ("none", b"none"):
        return None
    if any(u.node is not sc for u in buf.uses()) or list(sc.outputs[0].uses()) or \
            [o for o in body.outputs if o is sc.outputs[0]] != [sc.outputs[0]]:
        return None
    rows = []
    for i in range(steps):
        arr = _constants.evaluate_with(sc.inputs[1], {counter: np.array(i, counter.dtype.numpy())})
        if arr is None or arr.ndim < 2:
            return None
        rows.append(arr)
    axis = rows[0].shape[-1] - 1
    if not 0 <= axis < len(dims) or dims[axis] != steps:
        return None
    lead = np.indices(dims[:axis]).reshape(axis, -1).T if axis else np.zeros((1, 0), np.int64)
    for i, arr in enumerate(rows):
        want = np.concatenate([lead, np.full((len(lead), 1), i)], axis=1)
        if arr.reshape(-1, axis + 1).shape != want.shape or not np.array_equal(arr.reshape(-1, axis + 1), want):
            return None
    updates = m.static_dims(sc.inputs[2])
    if updates is None or int(np.prod(updates)) != int(np.prod(dims)) // steps:
        return None
    return sc, axis, dims


def _as_scan_output(loop: ir.Node, k: int, sc: ir.Node, axis: int, dims: list[int]) -> ir.Node:
    body = loop.attributes["body"].value
    graph = loop.graph
    row_dims = dims[:axis] + dims[axis + 1:]
    target = ir.node("Constant", [], {"value": ir.tensor(np.array(row_dims, np.int64))})
    row = ir.node("Reshape", [sc.inputs[2], target.outputs[0]])
    row.outputs[0].type = sc.outputs[0].type
    row.outputs[0].shape = ir.Shape(row_dims)
    body.insert_after(sc, [target, row])
    n_carry = len(body.inputs) - 2
    outputs = [o for j, o in enumerate(body.outputs) if j != k - 1] + [row.outputs[0]]
    inputs = [v for j, v in enumerate(body.inputs) if j != k]
    body.outputs.clear()
    body.outputs.extend(outputs)
    body.inputs.clear()
    body.inputs.extend(inputs)
    _drop_dead(body)
    attrs = {name: attr.value for name, attr in loop.attributes.items()}
    new = ir.node("Loop", [v for j, v in enumerate(loop.inputs) if j != k], attrs, num_outputs=len(loop.outputs))
    graph.insert_before(loop, new)
    new.outputs[-1].type = row.outputs[0].type
    new.outputs[-1].shape = ir.Shape([dims[axis], *row_dims])
    perm = [*range(1, axis + 1), 0, *range(axis + 1, len(dims))]
    stacked = ir.node("Transpose", [new.outputs[-1]], {"perm": perm})
    graph.insert_after(new, stacked)
    old = list(loop.outputs)
    kept = [o for j, o in enumerate(old[:n_carry]) if j != k - 2] + old[n_carry:]
    for before, after in zip(kept, new.outputs[:-1]):
        _take_over(graph, before, after)
    _take_over(graph, old[k - 2], stacked.outputs[0], ir.Shape(dims))
    for j in range(len(loop.inputs)):
        loop.replace_input_with(j, None)
    graph.remove(loop)
    return new


def _any_axis_step(sl: ir.Node, inside: set[int]) -> tuple[ir.Value, int] | None:
    """(xs, axis) for ``Slice(xs, s, s + 1, axes=[axis])`` of an ``xs`` from outside the body, step 1."""
    if sl.op_type != "Slice" or sl.domain != "" or len(sl.inputs) < 4 or sl.inputs[0] is None:
        return None
    xs = sl.inputs[0]
    axes = m.const(sl.inputs[3])
    if id(xs) in inside or axes is None or np.size(axes) != 1:
        return None
    if len(sl.inputs) > 4 and sl.inputs[4] is not None:
        stride = m.const(sl.inputs[4])
        if stride is None or list(np.atleast_1d(stride)) != [1]:
            return None
    ends = m.binary(m.producer(sl.inputs[2]), "Add")
    if ends is None:
        return None
    start, one = (ends if ends[0] is sl.inputs[1] else ends[::-1])
    if start is not sl.inputs[1] or not m.is_scalar_const(one, 1.0):
        return None
    axis = int(np.atleast_1d(axes)[0])
    if axis >= 0:
        return xs, axis
    rank = _rank(xs)
    return None if rank is None else (xs, axis + rank)


def _reversed_steps(loop: ir.Node, body: ir.Graph, main: ir.Graph) -> int:
    """``Slice(xs, T - 1 - i, T - i)`` of an outer ``xs`` of T rows (a reversed scan: Keras'
    ``go_backwards``, flax's ``reverse=True``) as ``Slice(xs_reversed, i, i + 1)``, with ``xs``'s rows
    reversed once before the Loop (a Slice of step -1): the forward form the projection hoisting, the
    RNN rules and ``to_scan`` read. The same rows in the same steps: the same numbers."""
    steps = trip_count(loop)
    if steps is None or len(body.inputs) < 3:
        return 0
    counter = body.inputs[2]
    inside = _body_values(body)
    outer = loop.graph
    count = 0
    reversed_xs: dict[int, ir.Value] = {}
    for sl in list(body):
        if sl.op_type != "Slice" or sl.domain != "" or _step_slice(sl.outputs[0], inside) is not sl:
            continue
        xs = sl.inputs[0]
        rows = _rows(xs)
        index = _index_values(sl.inputs[1], counter, steps)
        if rows != steps or index is None or list(index) != list(range(steps - 1, -1, -1)):
            continue
        if not _visible_in(xs, outer, main) or counter.dtype not in (ir.DataType.INT32, ir.DataType.INT64):
            continue
        if id(xs) not in reversed_xs:
            flip = ir.node("Slice", [xs, _i64_outer(main, [-1]), _i64_outer(main, [-(1 << 62)]),
                                     _i64_outer(main, [0]), _i64_outer(main, [-1])])
            flip.outputs[0].type = xs.type
            flip.outputs[0].shape = ir.Shape([steps, *list(xs.shape)[1:]]) if xs.shape is not None else None
            outer.insert_before(loop, flip)
            reversed_xs[id(xs)] = flip.outputs[0]
        one = ir.node("Constant", [], {"value": ir.tensor(np.array([1], counter.dtype.numpy()))})
        axis = ir.node("Constant", [], {"value": ir.tensor(np.array([0], np.int64))})
        axes = ir.node("Constant", [], {"value": ir.tensor(np.array([0], counter.dtype.numpy()))})  # Slice's type
        start = ir.node("Unsqueeze", [counter, axis.outputs[0]])
        end = ir.node("Add", [start.outputs[0], one.outputs[0]])
        step = ir.node("Slice", [reversed_xs[id(xs)], start.outputs[0], end.outputs[0], axes.outputs[0]])
        m.replace(body, sl.outputs[0], [one, axis, axes, start, end, step], sl)
        count += 1
    return count


_INDEX_EVAL = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Min": np.minimum, "Max": np.maximum}
_INDEX_TESTS = {"Less": np.less, "LessOrEqual": np.less_equal, "Greater": np.greater,
                "GreaterOrEqual": np.greater_equal, "Equal": np.equal}


def _index_values(value: ir.Value | None, counter: ir.Value, steps: int, depth: int = 12) -> np.ndarray | None:
    """The values of a scalar (or one-element) integer index computed from the counter, for each
    counter value in [0, steps), by following integer arithmetic on constants; None otherwise."""
    if value is counter:
        return np.arange(steps, dtype=np.int64)
    arr = m.const(value)
    if arr is not None:
        return np.full(steps, int(arr.reshape(-1)[0]), np.int64) if arr.size == 1 and arr.dtype.kind in "iu" else None
    node = m.producer(value)
    if node is None or depth == 0 or node.domain != "" or not node.inputs or node.inputs[0] is None:
        return None
    op = node.op_type
    if op in ("Unsqueeze", "Squeeze", "Reshape", "Identity") or (op == "Concat" and len(node.inputs) == 1):
        return _index_values(node.inputs[0], counter, steps, depth - 1)
    if op == "Cast":
        if m.attr(node, "to") not in (ir.DataType.INT32, ir.DataType.INT64, 6, 7):
            return None
        return _index_values(node.inputs[0], counter, steps, depth - 1)
    if op == "Clip":
        x = _index_values(node.inputs[0], counter, steps, depth - 1)
        bounds = [m.const(v) if v is not None else None for v in node.inputs[1:3]]
        if x is None or any(b is not None and b.size != 1 for b in bounds):
            return None
        lo, hi = (None if b is None else int(b.reshape(-1)[0]) for b in (bounds + [None, None])[:2])
        return x if lo is None and hi is None else np.clip(x, lo, hi)
    if op in _INDEX_EVAL and len(node.inputs) == 2:
        a, b = (_index_values(v, counter, steps, depth - 1) for v in node.inputs)
        return None if a is None or b is None else _INDEX_EVAL[op](a, b)
    if op == "Where" and len(node.inputs) == 3:  # a negative index wrapped (``i < 0 ? i + T : i``)
        cond = _index_test(node.inputs[0], counter, steps, depth - 1)
        a, b = (_index_values(v, counter, steps, depth - 1) for v in node.inputs[1:])
        return None if cond is None or a is None or b is None else np.where(cond, a, b)
    return None


def _index_test(value: ir.Value | None, counter: ir.Value, steps: int, depth: int) -> np.ndarray | None:
    """A comparison of two counter-computed indices, for each counter value (``_index_values``)."""
    node = m.producer(value)
    if node is None or node.op_type not in _INDEX_TESTS or len(node.inputs) != 2 or depth == 0:
        return None
    a, b = (_index_values(v, counter, steps, depth - 1) for v in node.inputs)
    return None if a is None or b is None else _INDEX_TESTS[node.op_type](a, b)


def _i64_outer(main: ir.Graph, values: list[int], name: str = "reverse_rows") -> ir.Value:
    return m.new_initializer(main, np.asarray(values, np.int64), name)


def trip_count(loop: ir.Node) -> int | None:
    """T for a Loop that runs exactly T >= 1 times: no M, a counter carried from 0 by +1, and
    ``counter + 1 < T`` (T constant) as its condition, true on entry; else None."""
    body = loop.attributes["body"].value
    if len(loop.inputs) < 3 or loop.inputs[0] is not None or len(body.inputs) < 3 or len(body.outputs) < 2:
        return None
    counter = body.inputs[2]
    start = m.folded(loop.inputs[2])
    step = m.binary(m.producer(body.outputs[1]), "Add")
    less = m.binary(m.producer(body.outputs[0]), "Less")
    if start is None or start.size != 1 or int(start) != 0 or step is None or step[0] is not counter:
        return None
    if not m.is_scalar_const(step[1], 1.0):
        return None
    bound = m.folded(less[1]) if less is not None else None
    if less is None or less[0] is not body.outputs[1] or bound is None or bound.size != 1:
        return None
    first, pair = m.folded(loop.inputs[1]), m.binary(m.producer(loop.inputs[1]), "Less")
    if first is None and pair is not None and m.folded(pair[0]) is not None and m.folded(pair[1]) is not None:
        first = int(m.folded(pair[0])) < int(m.folded(pair[1]))  # the first step's condition, not folded yet
    if first is None or np.size(first) != 1 or not bool(first):
        return None
    return int(m.folded(less[1]))


_MAX_STEPS = 1 << 20  # the counter's Range is an initializer of this many elements at most


def to_scan(main: ir.Graph) -> int:
    """Turn every fixed-trip-count Loop in ``main`` (nested ones too) into a Scan; returns how many."""
    count = 0
    loops = [n for n in ir.traversal.RecursiveGraphIterator(main) if n.op_type == "Loop" and n.domain == ""]
    for loop in loops:
        count += _to_scan(loop)
    return count


def scan_steps(loop: ir.Node) -> int | None:
    """The step count of a Loop that ``to_scan`` turns into a Scan (or unrolls), else None."""
    body = loop.attributes["body"].value
    steps = trip_count(loop)
    if steps is None or not 1 <= steps <= _MAX_STEPS or body.inputs[0].uses() or body.inputs[1].uses():
        return None
    counter = body.inputs[2]
    dtype = counter.dtype or (loop.inputs[2].dtype if loop.inputs[2] is not None else None)
    if dtype is None or dtype not in (ir.DataType.INT32, ir.DataType.INT64):
        return None
    n_carry = len(body.inputs) - 3
    if len(loop.inputs) != 3 + n_carry or any(v is None for v in loop.inputs[3:]):
        return None
    if len(body.outputs) == 2 + n_carry and not _sliced_inputs(body, counter, _body_values(body), steps):
        return None  # no scan outputs and no rows read (a fori_loop): left a Loop, as the TF translation reads it
    return steps


def _to_scan(loop: ir.Node) -> int:
    body = loop.attributes["body"].value
    steps = scan_steps(loop)
    if steps is None:
        return 0
    counter = body.inputs[2]
    dtype = counter.dtype or (loop.inputs[2].dtype if loop.inputs[2] is not None else None)
    if dtype is None:  # scan_steps found one
        return 0
    n_carry = len(body.inputs) - 3
    graph = loop.graph
    inside = _body_values(body)
    sliced = _sliced_inputs(body, counter, inside, steps)
    # the counter as a scan input; the condition and the step leave the body
    index_name = f"{counter.name or 'counter'}_index"
    index = ir.Value(name=index_name, type=ir.TensorType(dtype), shape=ir.Shape([]))
    counter.replace_all_uses_with(index)
    carries_out, stacked_out = list(body.outputs[2:2 + n_carry]), list(body.outputs[2 + n_carry:])
    body.outputs.clear()
    body.outputs.extend(carries_out + stacked_out)
    scan_in = [np.arange(steps, dtype=dtype.numpy())]
    body_in = [index]
    for xs, (value, squeezes, slices) in sliced.items():
        row = ir.Value(name=f"{xs.name or 'xs'}_row", type=xs.type, shape=ir.Shape(list(xs.shape)[1:]))
        for sq in squeezes:
            sq.outputs[0].replace_all_uses_with(row)
        for sl in slices:  # a consumer other than Squeeze reads the row with its leading 1
            unsq = ir.node("Unsqueeze", [row, _i64(body, [0])])
            body.insert_after(sl, unsq)
            sl.outputs[0].replace_all_uses_with(unsq.outputs[0])
        scan_in.append(value)
        body_in.append(row)
    _drop_dead(body)
    kept = [k for k, v in enumerate(body_in) if v.uses()] or [0]  # inputs the body still reads
    body_in, scan_in = [body_in[k] for k in kept], [scan_in[k] for k in kept]
    old_inputs = list(body.inputs)
    body.inputs.clear()
    body.inputs.extend(old_inputs[3:] + body_in)
    if _unrolls(loop, steps):
        sources = [v if isinstance(v, ir.Value) else None for v in scan_in]
        results = _unroll(graph, loop, body, n_carry, sources, steps, dtype)
    else:
        scan_in = [_const_value(graph, loop, v) if isinstance(v, np.ndarray) else v for v in scan_in]
        carries = [_filled_carry(graph, v) for v in loop.inputs[3:]]
        scan = ir.node("Scan", [*carries, *scan_in],
                       {"body": body, "num_scan_inputs": len(scan_in)}, num_outputs=len(loop.outputs) - 1)
        graph.insert_before(loop, scan)
        results = list(scan.outputs)
    final = loop.outputs[0]
    if final.uses() or final.is_graph_output():
        last = ir.node("Constant", [], {"value": ir.tensor(np.array(steps, dtype.numpy()))})
        graph.insert_before(loop, last)
        _take_over(graph, final, last.outputs[0])
    for old, new, known in zip(loop.outputs[1:], results, _result_shapes(loop, body, n_carry, steps)):
        _take_over(graph, old, new, known)
        drop_noop_reshapes(graph, new)
    for k in range(len(loop.inputs)):  # no longer a reader: what only the Loop read is dead now
        loop.replace_input_with(k, None)
    graph.remove(loop)
    return 1


def drop_noop_reshapes(graph: ir.Graph, value: ir.Value) -> int:
    """Readers ``Reshape(value, target)`` that leave ``value``'s static shape as it is read ``value``
    (the lowering reshapes a Loop's stacked output to the row count the Loop could not state)."""
    shape = value.shape
    if shape is None or not shape.is_static():
        return 0
    dims = [int(d) for d in shape.numpy()]
    count = 0
    for use in list(value.uses()):
        node = use.node
        if node.op_type != "Reshape" or node.domain != "" or use.idx != 0 or node.graph is not graph:
            continue
        target = m.const(node.inputs[1]) if len(node.inputs) > 1 else None
        if target is None or target.ndim != 1 or len(target) != len(dims):
            continue
        zero_copies = not m.attr(node, "allowzero", 0)
        if any(int(t) != d and not (t == 0 and zero_copies) for t, d in zip(target, dims)):
            continue
        out = node.outputs[0]
        if out.is_graph_output() and value.is_graph_output():
            continue
        _take_over(graph, out, value, shape)
        graph.remove(node, safe=True)
        count += 1
    return count


_CARRY_FILL_ELEMENTS = 1 << 14  # a broadcast constant initial carry this small becomes an initializer


def _filled_carry(graph: ir.Graph, value: ir.Value) -> ir.Value:
    """``value``, or an initializer holding it when it is a small constant broadcast (a zero state):
    the Scan reads it as it is, and the broadcast's node goes."""
    arr = m.repeated_const(value)
    shape = value.shape
    if arr is None or value.producer() is None or shape is None or not shape.is_static():
        return value
    dims = [int(d) for d in shape.numpy()]
    if arr.size == 0 or np.prod(dims) > _CARRY_FILL_ELEMENTS or not np.all(arr == arr.flat[0]):
        return value
    if arr.dtype.kind == "f" and np.isnan(arr.flat[0]):
        return value
    if value.dtype is not None and value.dtype.numpy() != arr.dtype:
        return value
    filled = ir.Value(name=f"{value.name or 'carry'}_filled", shape=ir.Shape(dims), type=value.type,
                      const_value=ir.tensor(np.full(dims, arr.flat[0], arr.dtype)))
    while filled.name in graph.initializers:
        filled.name += "_"
    graph.register_initializer(filled)
    return filled


def _result_shapes(loop: ir.Node, body: ir.Graph, n_carry: int, steps: int) -> list[ir.Shape | None]:
    """The shapes the scan's results are known to have: each carry keeps its initial value's shape,
    each stacked output is ``steps`` rows of the body's output (None where a dim is unknown)."""
    known: list[ir.Shape | None] = []
    for k, out in enumerate(body.outputs):
        shape = loop.inputs[3 + k].shape if k < n_carry else out.shape
        if shape is None or not shape.is_static():
            shape = out.shape if k < n_carry else None
        if shape is None or not shape.is_static():
            known.append(None)
            continue
        known.append(shape if k < n_carry else ir.Shape([steps, *shape.numpy()]))
    return known


_UNROLL_STEPS = 4  # unrolled up to this many steps ...
_UNROLL_MIN_CARRY = 1024  # ... when the carried state has at least this many elements
_UNROLL_CONV_STEPS = 32  # a body with a convolution (a ConvLSTM cell): unrolled up to this many steps
_CONVOLUTIONS = frozenset({"Conv", "ConvTranspose"})


def _unrolls(loop: ir.Node, steps: int) -> bool:
    """The measured rules: a few steps of a body carrying at least ``_UNROLL_MIN_CARRY`` elements; up to
    ``_UNROLL_CONV_STEPS`` steps of a body that convolves."""
    body = loop.attributes["body"].value
    if steps <= _UNROLL_CONV_STEPS and any(
            n.op_type in _CONVOLUTIONS and n.domain == "" for n in ir.traversal.RecursiveGraphIterator(body)):
        return True
    if steps > _UNROLL_STEPS:
        return False
    size = 0
    for v in loop.inputs[3:]:
        if v.shape is None or not v.shape.is_static():
            return False
        size += int(np.prod(v.shape.numpy())) if len(v.shape) else 1
    return size >= _UNROLL_MIN_CARRY


def _unroll(graph: ir.Graph, loop: ir.Node, body: ir.Graph, n_carry: int, scan_in: list[ir.Value | None],
            steps: int, dtype: ir.DataType) -> list[ir.Value]:
    """The scan-form ``body`` (inputs: carries, then one per ``scan_in``, None for the counter) copied
    ``steps`` times before ``loop``; returns the final carries and the stacked outputs."""
    from onnx_ir._cloner import Cloner

    carries = list(loop.inputs[3:])
    stacked: list[list[ir.Value]] = [[] for _ in body.outputs[n_carry:]]
    axis0 = _const_value(graph, loop, np.array([0], np.int64))
    constants = {v: _outer_initializer(graph, v) for v in body.initializers.values()}  # the body's own
    for t in range(steps):
        value_map: dict = {**constants, **dict(zip(body.inputs[:n_carry], carries))}
        for inp, xs in zip(body.inputs[n_carry:], scan_in):
            if xs is None:
                value_map[inp] = _const_value(graph, loop, np.array(t, dtype.numpy()))
            else:
                row = ir.node("Gather", [xs, _const_value(graph, loop, np.array(t, np.int64))], {"axis": 0})
                graph.insert_before(loop, row)
                value_map[inp] = row.outputs[0]
        cloner = Cloner(attr_map={}, value_map=value_map, metadata_props={}, allow_outer_scope_values=True)
        for node in body:
            graph.insert_before(loop, cloner.clone_node(node))
        outs = [value_map.get(v, v) for v in body.outputs]
        carries = outs[:n_carry]
        for k, y in enumerate(outs[n_carry:]):
            row = ir.node("Unsqueeze", [y, axis0])
            graph.insert_before(loop, row)
            stacked[k].append(row.outputs[0])
    results = list(carries)
    for rows in stacked:
        if len(rows) == 1:
            results.append(rows[0])
            continue
        cat = ir.node("Concat", rows, {"axis": 0})
        graph.insert_before(loop, cat)
        results.append(cat.outputs[0])
    return results


def _outer_initializer(graph: ir.Graph, value: ir.Value) -> ir.Value:
    """An initializer of ``graph`` holding the body initializer ``value`` (a rule that ran on the
    body, e.g. ``symbolic``'s Split sizes, may have made one), for the body's unrolled copies."""
    outer = ir.Value(name=value.name or "body_const", type=value.type, shape=value.shape,
                     const_value=value.const_value)
    while outer.name in graph.initializers:
        outer.name += "_"
    graph.register_initializer(outer)
    return outer


_ROW_WISE = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min", "Neg", "Abs", "Exp", "Log", "Tanh", "Sigmoid",
                       "Relu", "Sqrt", "Cast", "Identity", "Where"})


def _rows(xs: ir.Value, depth: int = 4, axis: int = 0) -> int | None:
    """The row count of ``xs`` (its size along ``axis``): its static dim, or the steps of the Loop or Scan
    that stacked it (a scan's outputs, whose row count shape inference leaves unknown: the saved values a
    backward scan reads), also through elementwise ops on such outputs (a cotangent ``2 * hs``), Transposes
    and products by a matrix (the next layer's input projection of a stacked RNN: Keras' SimpleRNN layers
    read the previous layer's outputs transposed twice)."""
    if xs.shape is not None and len(xs.shape) > axis and isinstance(xs.shape[axis], int):
        return xs.shape[axis]
    node = xs.producer()
    if node is None or node.domain != "" or depth == 0:
        return None
    if node.op_type in _ROW_WISE and xs.shape is not None:
        found = set()
        for v in node.inputs:
            if v is None or v.shape is None:
                return None
            if len(v.shape) == len(xs.shape):
                found.add(_rows(v, depth - 1, axis))
        found.discard(1)  # a broadcast row
        return found.pop() if len(found) == 1 else None
    if node.op_type == "Transpose":
        perm = m.attr(node, "perm", None)
        return _rows(node.inputs[0], depth - 1, perm[axis]) if perm is not None and axis < len(perm) else None
    rank = m.rank(node.inputs[0]) if node.inputs else None
    if node.op_type == "MatMul" and rank is not None and axis < rank - 1 and m.rank(node.inputs[1]) == 2:
        return _rows(node.inputs[0], depth - 1, axis)  # a projection of every row
    if node.op_type not in ("Loop", "Scan") or axis != 0:
        return None
    k = list(node.outputs).index(xs)
    if node.op_type == "Loop":
        n_state = len(node.attributes["body"].value.inputs) - 2
        return trip_count(node) if k >= n_state else None
    n_state = len(node.inputs) - int(node.attributes["num_scan_inputs"].value)
    if k < n_state or any(int(a) != 0 for a in getattr(node.attributes.get("scan_input_axes"), "value", ())):
        return None
    first = node.inputs[n_state]
    dims = first.shape if first is not None else None
    return dims[0] if dims is not None and len(dims) >= 1 and isinstance(dims[0], int) else None


def _sliced_inputs(body: ir.Graph, counter: ir.Value, inside: set[int], steps: int) -> dict:
    """Outer ``xs`` (axis 0 of length ``steps``) read in the body as ``Slice(xs, i, i + 1, axes=[0])``
    with ``i`` the counter: xs -> (xs, the Squeeze(axes=[0]) nodes of those rows, the other Slices)."""
    found: dict = {}
    for sl in list(body):
        if sl.op_type != "Slice" or sl.domain != "" or sl.inputs[0] is None:
            continue
        if _step_slice(sl.outputs[0], inside) is not sl or not _is_counter(sl.inputs[1], counter, steps):
            continue
        xs = sl.inputs[0]
        if xs.shape is None or len(xs.shape) < 1 or _rows(xs) != steps or xs.type is None:
            continue
        entry = found.setdefault(xs, (xs, [], []))
        uses = list(sl.outputs[0].uses())
        squeezes = [u.node for u in uses if u.idx == 0 and _drops_axis0(u.node, xs)]
        entry[1].extend(squeezes)
        if len(squeezes) < len(uses) or sl.outputs[0].is_graph_output():
            entry[2].append(sl)
    return found


def _drops_axis0(node: ir.Node, xs: ir.Value) -> bool:
    """True for ``Squeeze(row, [0])`` and ``Reshape(row, xs.shape[1:])`` (a row of ``xs``)."""
    if node.domain != "" or len(node.inputs) != 2:
        return False
    arg = m.const(node.inputs[1])
    if arg is None:
        return False
    arg = [int(a) for a in np.atleast_1d(arg)]
    if node.op_type == "Squeeze":
        return arg == [0]
    rest = list(xs.shape)[1:]
    static = all(isinstance(d, int) for d in rest)
    return node.op_type == "Reshape" and static and arg == rest and 0 not in rest


def _is_counter(value: ir.Value | None, counter: ir.Value, steps: int) -> bool:
    """True when ``value`` equals the counter for every counter in [0, steps): casts, unsqueezes
    and clamps that leave [0, steps - 1] unchanged."""
    while value is not counter:
        node = m.producer(value)
        if node is None or not node.inputs or node.inputs[0] is None:
            return False
        if node.op_type == "Clip":
            lo = m.const(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] is not None else None
            hi = m.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None else None
            if (lo is not None and float(np.max(lo)) > 0) or (
                    hi is not None and float(np.min(hi)) < steps - 1):
                return False
        elif node.op_type in ("Max", "Min"):
            pair = m.binary(node, node.op_type)
            if pair is None or m.const(pair[1]) is None:
                return False
            bound = m.const(pair[1])
            if (node.op_type == "Max" and float(np.max(bound)) > 0) or (
                    node.op_type == "Min" and float(np.min(bound)) < steps - 1):
                return False
        elif node.op_type == "Concat":
            if len(node.inputs) != 1:
                return False
        elif node.op_type == "Cast":
            if m.attr(node, "to") not in (ir.DataType.INT32, ir.DataType.INT64, 6, 7):
                return False
        elif node.op_type not in ("Unsqueeze", "Identity", "Reshape"):
            return False
        value = node.inputs[0]
    return True


def _const_value(graph: ir.Graph, before: ir.Node, arr: np.ndarray) -> ir.Value:
    node = ir.node("Constant", [], {"value": ir.tensor(arr)})
    graph.insert_before(before, node)
    return node.outputs[0]


def _drop_dead(body: ir.Graph) -> None:
    """Remove body nodes nothing reads (the old condition and counter step among them)."""
    for node in reversed(list(body)):
        if not any(o.uses() or o.is_graph_output() for o in node.outputs):
            body.remove(node, safe=True)


def _take_over(graph: ir.Graph, old: ir.Value, new: ir.Value, known: ir.Shape | None = None) -> None:
    """Every use of ``old`` (graph outputs included) reads ``new``, which takes its name, type and
    shape (``known`` where that is given: a scan's row count the Loop's shape left unknown)."""
    new.type = old.type if old.type is not None else new.type
    new.shape = known if known is not None else old.shape if old.shape is not None else new.shape
    m.take_over(old, new)
