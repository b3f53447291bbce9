"""Rows a model throws away left uncomputed: a Slice of rows moved up through the row-wise ops before it.

A BERT-style classifier reads one token of its last layer (``nn.Dense(2)(x[:, 0])``, a pooler's
``hidden[:, 0]``), yet the layer computes every token: its feed-forward products, GELU, layer norms,
residual sums and attention output projection work on all ``t`` rows and ``t - 1`` of them are
dropped. Each of those ops computes a row of its output from the same row of its inputs, so
slicing the inputs instead of the output gives the same elements from the same operations.

A Slice of a value that only it reads, over axes none of which the producer mixes, moves above
the producer (the producer then runs on the slice), and again above the one before it, until it
meets an op that mixes rows, a value read elsewhere too (the residual stream: that operand is
sliced where it is read), or a graph input. Row-wise here:

- elementwise ops (GELU, activations, Add/Sub/Mul/Div/Sum/Max/Min/Where, Cast): each operand is
  cut along the axes it has at full size; one that broadcasts along a cut axis is left whole;
- ``MatMul``: the rows and batch axes of its result (the batch axes cut in whichever operand has
  them at full size); never the columns. A cut that leaves one row per product stays after a
  product by a computed matrix (attention's ``p @ v``): ORT runs that on its vector kernel, which
  sums in another order than its matrix kernel; a constant matrix (packed) gives the same sums;
- ``LayerNormalization``: the axes before its normalized ones; ``Softmax``, ``LogSoftmax`` (opset 13
  on): every axis but theirs;
- ``Transpose`` (the cut moves to the axis it reads) and a ``Reshape`` that keeps every axis up to
  the last cut one.

Every element kept is computed by the same kernel from the same operands, so the numbers do not
change (NaN, infinities and -0.0 included): in ONNX Runtime 1.32 the outputs are those of the whole
computation bit for bit (tested). Only slices that keep at most half of the elements move: a
smaller cut would copy each operand instead of the one result.

The benchmark BERT's last layer (4 layers, b4 t128 d256, classifier on the first token) then runs
its output projection, residual sums, layer norms and feed-forward block on 4 rows instead of 512:
0.84x the CPU time per call on one thread and 0.83x the wall time on two (ORT 1.32, old and new
graphs alternating in one process, load 9), the same outputs bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites import _norm_guard

ELEMENTWISE = frozenset({
    "Abs", "Add", "And", "Cast", "Ceil", "Div", "Elu", "Equal", "Erf", "Exp", "Floor", "Gelu", "Greater",
    "GreaterOrEqual", "HardSigmoid", "Identity", "IsInf", "IsNaN", "LeakyRelu", "Less", "LessOrEqual", "Log",
    "Max", "Mean", "Min", "Mul", "Neg", "Not", "Or", "Pow", "Reciprocal", "Relu", "Round", "Selu", "Sigmoid",
    "Sign", "Softplus", "Sqrt", "Sub", "Sum", "Tanh", "Where", "Xor",
})
NORMS = frozenset({"LayerNormalization", "Softmax", "LogSoftmax"})

Cut = dict[int, tuple[int, int, int]]  # axis -> (start, end, step), as the Slice gives them


def rewrite(graph: ir.Graph, opset: int) -> int:
    """Move the Slices of ``graph`` and its subgraphs up through the row-wise ops before them; returns how
    many moves."""
    return sum(_rewrite(g, opset) for g in list(m.all_graphs(graph)))


def _rewrite(graph: ir.Graph, opset: int) -> int:
    moved = 0
    work = [n for n in m.each_node(graph, "Slice")]
    while work:
        node = work.pop()
        if node.graph is not graph:
            continue
        made = _move(graph, node, opset)
        if made is not None:
            moved += 1
            work.extend(made)
    return moved


def _cut(node: ir.Node) -> Cut | None:
    """The Slice's cut by axis (normalized to its input's rank), or None when not constant."""
    x = node.inputs[0]
    rank = m.rank(x)
    if rank is None or len(node.inputs) < 3:
        return None
    parts = [m.const(node.inputs[k]) if k < len(node.inputs) else None for k in range(1, 5)]
    starts, ends, axes, steps = parts
    if starts is None or ends is None:
        return None
    if len(node.inputs) > 3 and node.inputs[3] is not None and axes is None:
        return None
    if len(node.inputs) > 4 and node.inputs[4] is not None and steps is None:
        return None
    starts, ends = np.atleast_1d(starts), np.atleast_1d(ends)
    axes = np.arange(len(starts)) if axes is None else np.atleast_1d(axes)
    steps = np.ones(len(starts), np.int64) if steps is None else np.atleast_1d(steps)
    cut: Cut = {}
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = int(a) + rank if int(a) < 0 else int(a)
        if not 0 <= a < rank or a in cut or int(st) == 0:
            return None
        cut[a] = (int(s), int(e), int(st))
    return cut


def _length(dim: Any, part: tuple[int, int, int]) -> int | None:
    return len(range(*slice(*part).indices(dim))) if isinstance(dim, int) else None


FEW_ROWS = 8  # a cut of a symbolic axis to at most this many rows is taken to keep at most half of it


def _halves(x: ir.Value, cut: Cut) -> bool:
    """The cut keeps at most half of ``x``'s elements along its axes: on static sizes, or where it cuts a
    symbolic axis (a sequence of run-time length) to at most ``FEW_ROWS`` rows from the start (a
    classifier's first token: sequences are longer)."""
    assert x.shape is not None
    kept, whole, symbolic = 1, 1, False
    for a, part in cut.items():
        dim = x.shape[a]
        if not isinstance(dim, int):
            start, end, step = part
            if step != 1 or not 0 <= start < end or end - start > FEW_ROWS:
                return False
            symbolic = True
            continue
        n = _length(dim, part)
        if n is None:
            return False
        kept, whole = kept * n, whole * int(dim)
    return symbolic or (whole > 0 and 2 * kept <= whole)


def _same_dim(a: Any, b: Any) -> bool:
    if isinstance(a, int) or isinstance(b, int):
        return a == b
    return a.value is not None and a.value == b.value


def _operand_cut(v: ir.Value | None, out: ir.Value, cut: Cut, skip: int = 0) -> Cut | None:
    """The cut of operand ``v`` that gives ``cut`` of the broadcast result ``out`` (axes aligned on the right);
    axes of ``v`` it broadcasts (size 1) stay whole. ``skip``: trailing axes of ``v`` that are not
    broadcast against ``out`` (a MatMul operand's matrix axes). None when ``v``'s shape does not tell."""
    if not cut:
        return {}
    if v is None or v.shape is None or out.shape is None:
        return None
    r, rv = len(out.shape), len(v.shape)
    own: Cut = {}
    for a, part in cut.items():
        j = a - (r - rv)
        if j < 0:
            continue
        if j >= rv - skip:
            return None
        if v.shape[j] == 1 and not _same_dim(out.shape[a], 1):
            continue
        if not _same_dim(v.shape[j], out.shape[a]):
            return None
        own[j] = part
    return own


def _inputs_cut(node: ir.Node, out: ir.Value, cut: Cut) -> list[Cut | None] | None:
    """Each input's cut (None: read whole) for ``cut`` of ``out``, or None when the node mixes the axes."""
    op, r = node.op_type, len(out.shape or ())
    if op in ELEMENTWISE:
        cuts = [_operand_cut(v, out, cut) for v in node.inputs]
        return None if any(c is None for c in cuts) else cuts
    if op in NORMS:
        axis = int(m.attr(node, "axis", -1))
        axis = axis + r if axis < 0 else axis
        if any(a >= axis for a in cut) or (op != "LayerNormalization" and any(a == axis for a in cut)):
            return None
        if op == "Softmax" or op == "LogSoftmax":
            return [dict(cut)]
        return [dict(cut)] + [None] * (len(node.inputs) - 1)  # scale, bias: over the normalized axes
    if op == "MatMul":
        a, b = node.inputs
        ra, rb = m.rank(a), m.rank(b)
        rows = {k: v for k, v in cut.items() if k != r - 2}
        # b is a matrix or a stack of them (not a vector) when the result has a's rank or more
        if ra is None or ra < 2 or r < ra or r - 1 in cut or (rb is None and rows) or (rb is not None and rb < 2):
            return None
        cut_a = _operand_cut(a, out, rows, skip=2)
        cut_b = _operand_cut(b, out, rows, skip=2)
        if cut_a is None or cut_b is None:
            return None
        if r - 2 in cut:
            assert a is not None and a.shape is not None
            rows_left = _length(out.shape[r - 2], cut[r - 2])
            packed = m.repeated_const(b) is not None and rb == 2  # a constant matrix: ORT packs it
            if not packed and (rows_left is None or rows_left < 2):
                return None  # one row by a matrix ORT has not packed: its vector kernel sums in another order
            cut_a[len(a.shape) - 2] = cut[r - 2]
        return [cut_a, cut_b]
    if op == "Transpose":
        perm = m.attr(node, "perm")
        if perm is None or len(perm) != r:
            return None
        v = node.inputs[0]
        if v is not None and v.shape is None and out.shape is not None:  # what inference left out
            v.shape = ir.Shape([out.shape[list(perm).index(k)] for k in range(r)])
        return [{int(perm[a]): part for a, part in cut.items()}]
    return None


def _reshape(graph: ir.Graph, node: ir.Node, out: ir.Value, cut: Cut) -> tuple[ir.Node, ir.Node] | None:
    """(Slice of the data, Reshape of it to the cut shape) for a Reshape that keeps every axis up to the
    last cut one."""
    x = node.inputs[0]
    if x is None or x.shape is None or out.shape is None or m.attr(node, "allowzero", 0):
        return None
    last = max(cut)
    if len(x.shape) <= last or any(not isinstance(d, int) for d in (*x.shape, *out.shape)):
        return None
    if tuple(x.shape[:last + 1]) != tuple(out.shape[:last + 1]):
        return None
    shape = [int(d) for d in out.shape]
    for a, part in cut.items():
        shape[a] = len(range(*slice(*part).indices(shape[a])))
    if 0 in shape:
        return None
    sliced = _slice(graph, x, cut)
    target = m.new_initializer(graph, np.array(shape, np.int64), f"{out.name or 'x'}_cut_shape")
    return sliced, ir.node("Reshape", [sliced.outputs[0], target])


def _slice(graph: ir.Graph, v: ir.Value, cut: Cut) -> ir.Node:
    axes = sorted(cut)
    name = v.name or "x"
    consts = [m.new_initializer(graph, np.array([cut[a][k] for a in axes], np.int64), f"{name}_cut_{what}")
              for k, what in enumerate(("starts", "ends"))]
    axes_v = m.new_initializer(graph, np.array(axes, np.int64), f"{name}_cut_axes")
    steps = m.new_initializer(graph, np.array([cut[a][2] for a in axes], np.int64), f"{name}_cut_steps")
    node = ir.node("Slice", [v, *consts, axes_v, steps])
    out = node.outputs[0]
    out.type, out.shape = v.type, v.shape
    _cut_shape(out, v, cut)
    return node


def _merge_twins(graph: ir.Graph, node: ir.Node, cut: Cut) -> ir.Node:
    """One Slice for ``node`` and the other Slices of its input with the same cut (a residual stream and
    the branch beside it, both cut after a sum): the first of them in the graph, read by all their
    readers. Returns it."""
    x = node.inputs[0]
    twins = [node]
    for use in list(x.uses()):
        other = use.node
        if other is node or other.op_type != "Slice" or other.domain not in ("", "ai.onnx") or use.idx != 0 \
                or other.graph is not graph or other.outputs[0].is_graph_output():
            continue
        theirs = _cut(other)
        if theirs is not None and x.shape is not None:
            theirs = {a: p for a, p in theirs.items() if p[2] != 1 or _length(x.shape[a], p) != x.shape[a]}
        if theirs == cut:
            twins.append(other)
    if len(twins) == 1:
        return node
    order = {id(n): k for k, n in enumerate(graph)}
    twins.sort(key=lambda n: order[id(n)])
    for other in twins[1:]:
        other.outputs[0].replace_all_uses_with(twins[0].outputs[0])
        graph.remove(other, safe=True)
    return twins[0]


def _move(graph: ir.Graph, node: ir.Node, opset: int) -> list[ir.Node] | None:
    """Move the Slice ``node`` above its input's producer; returns the Slices made, None when it stays."""
    x, y = node.inputs[0], node.outputs[0]
    cut = _cut(node)
    if cut is not None and x.shape is not None:  # axes the Slice keeps whole
        cut = {a: p for a, p in cut.items() if p[2] != 1 or _length(x.shape[a], p) != x.shape[a]}
    prod = m.producer(x)
    if cut is None or not cut or prod is None or prod.graph is not graph or x.is_graph_output() \
            or x.shape is None or not _halves(x, cut):
        return None
    node = _merge_twins(graph, node, cut)
    y = node.outputs[0]
    if len(list(x.uses())) != 1 or any(o.uses() or o.is_graph_output() for o in prod.outputs if o is not x):
        return None
    if prod.op_type in ("Softmax", "LogSoftmax") and opset < 13:
        return None  # before opset 13 they flatten the axes from ``axis`` on
    if _norm_guard.guarded(prod) is not None:
        return _into_guard(graph, node, prod, cut)
    if prod.op_type == "Reshape":
        made = _reshape(graph, prod, x, cut)
        if made is None:
            return None
        m.replace(graph, y, list(made), node)
        slices = [made[0]]
    else:
        cuts = _inputs_cut(prod, x, cut)
        if cuts is None or x is not prod.outputs[0]:
            return None
        slices = [_slice(graph, v, c) if c and v is not None else None for v, c in zip(prod.inputs, cuts)]
        inputs = [s.outputs[0] if s is not None else v for s, v in zip(slices, prod.inputs)]
        moved = ir.Node(prod.domain, prod.op_type, inputs, attributes=list(prod.attributes.values()), num_outputs=1)
        m.replace(graph, y, [s for s in slices if s is not None] + [moved], node)
        slices = [s for s in slices if s is not None]
    graph.remove(node, safe=True)
    graph.remove(prod, safe=True)
    return slices


def _into_guard(graph: ir.Graph, node: ir.Node, branch: ir.Node, cut: Cut) -> list[ir.Node] | None:
    """Move the Slice ``node`` of a guarded layer norm's If (``_norm_guard``) into it: both branches and the
    test read the cut rows of the norm's input instead (the test then decides for the rows computed; a test of
    the graph's inputs stays).
    Returns the Slice made, or None when the cut reaches the normalized axis."""
    x, test = _norm_guard.guarded(branch)  # type: ignore[misc]
    r = m.rank(x)
    y = node.outputs[0]
    if r is None or x.shape is None or any(a >= r - 1 for a in cut) or y.is_graph_output():
        return None
    sliced = _slice(graph, x, cut)
    graph.insert_before(test if test is not None else branch, sliced)
    new = sliced.outputs[0]
    if test is not None:  # (the graph's input test reads the inputs, not x)
        test.replace_input_with(0, new)
    for sub in (branch.attributes["then_branch"].as_graph(), branch.attributes["else_branch"].as_graph()):
        for inner in sub:
            for k, v in enumerate(inner.inputs):
                if v is x:
                    inner.replace_input_with(k, new)
            for out in inner.outputs:
                _cut_shape(out, x, cut)
    _cut_shape(branch.outputs[0], x, cut)
    y.replace_all_uses_with(branch.outputs[0])
    graph.remove(node, safe=True)
    return [sliced]


def _cut_shape(v: ir.Value, x: ir.Value, cut: Cut) -> None:
    """``v``'s shape after the rows of ``x`` are cut, where ``v`` has ``x``'s rank and its sizes on the cut
    axes (a row statistic, ``[b, t, 1]``, too)."""
    if v.shape is None or x.shape is None or len(v.shape) != len(x.shape):
        return
    dims = list(v.shape)
    for a, part in cut.items():
        if _same_dim(dims[a], x.shape[a]):
            dims[a] = _length(x.shape[a], part) if isinstance(x.shape[a], int) else None
    v.shape = ir.Shape(dims)
