"""Signed-zero fixes that cannot change a result, dropped; a sum divided by its count as ReduceMean.

XLA gives +0.0 where ONNX Runtime can give -0.0: a sum of -0.0 values (XLA starts from +0.0, ORT from
the first element), jax's ``max(x, 0)`` where ORT's Relu keeps -0.0. The lowering and the activations
rule follow such values with a fix, ``Where(Equal(v, 0), +0.0, v)`` or ``Abs(Relu(x))``. A fix is
dropped where it provably changes nothing, in ORT's arithmetic:

- ``v`` cannot be -0.0 given its producers: a sum of values none of which is -0.0 is not -0.0 (IEEE
  addition gives -0.0 only for -0.0 + -0.0), nor is a square, an ``Abs``, an ``Exp``, a Softmax, or
  another fix; ``Add`` with one such operand, data movement and ``Sqrt``/``Relu``/max of such values
  keep it so;
- no consumer can tell: every path from the fix ends where +0.0 and -0.0 give the same result
  (added to a value that is never -0.0, e.g. a constant bias with no zeros; compared; squared),
  through ops whose results then differ at most in the sign of a zero (sums, products, Conv).

In a loop body a fix whose value is the new carry is a body output, whose sign the next step sees: it
is dropped only where ``v`` cannot be -0.0 (Haiku's VanillaRNN: ``relu(x @ wx + bx + (h @ wh + bh))``,
a bias without -0.0 added last).

ORT's NoopElimination drops an ``Add``/``Sub`` of a one-element zero constant, so such a constant
proves nothing (a zero bias of more elements is added, and turns -0.0 into +0.0). Once a sum's fix
is gone, ``ReduceSum(x) / n`` with ``n`` the count of the reduced elements becomes ``ReduceMean``
(ORT's ReduceMean is its ReduceSum divided by n, bit for bit, in float32 and float64). A fix that
stays becomes ``Sum(v, +0.0)``, one node where it was two (ORT drops an ``Add(v, +0.0)`` as a
no-op, but not a Sum).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m

# ops whose output is one of the input's values (moved, repeated or selected): -0.0 only from a -0.0
_MOVING = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Expand", "Identity", "Flatten", "Slice",
                     "Gather", "Concat", "Split", "MaxPool", "ReduceMax", "ReduceMin", "Sqrt", "Relu",
                     "Tile"})
# never -0.0 whatever the input (NaN aside)
_NON_NEGATIVE_ZERO = frozenset({"Abs", "Exp", "Softmax"})
# results the same for +0.0 and -0.0 inputs
_ERASING = frozenset({"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "IsNaN", "IsInf", "Abs",
                      "Exp", "Cos"})
# results differing at most in the sign of a zero when one input differs in the sign of a zero
_PROPAGATING = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Expand", "Identity", "Flatten",
                          "Slice", "Concat", "Split", "Neg", "Relu", "Sqrt", "Conv", "MatMul", "Gemm", "ReduceSum",
                          "ReduceMean", "MaxPool", "AveragePool", "Mul", "Tile"})
_DATA_FIRST = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Expand", "Slice", "Tile", "Gather"})
_FLOATS = (ir.DataType.FLOAT, ir.DataType.DOUBLE)
_MAX_DEPTH = 24
_MAX_VISITS = 256


def _const_no_neg_zero(arr: np.ndarray, droppable: bool) -> bool:
    """A constant has no -0.0 (and, where ORT would drop an Add/Sub of it, is not a one-element zero)."""
    if arr.dtype.kind != "f":
        return True
    zero = arr == 0
    if np.any(zero & np.signbit(arr)):
        return False
    return not (droppable and arr.size == 1 and bool(np.all(zero)))


def _is_fix(value: ir.Value) -> ir.Value | None:
    """``v`` when ``value`` is ``Where(Equal(v, 0), +0.0, v)`` or ``Abs(v)`` with ``v = Relu(x)``."""
    v = m.through_zero_sign_fix(value)
    if v is not value:
        return v
    node = m.producer(value, "Abs")
    if node is not None and m.producer(node.inputs[0], "Relu") is not None:
        return node.inputs[0]
    return None


class _Budget:
    def __init__(self) -> None:
        self.left = _MAX_VISITS

    def spend(self) -> bool:
        self.left -= 1
        return self.left >= 0


def no_neg_zero(value: ir.Value | None, droppable: bool = True, depth: int = 0,
                budget: _Budget | None = None) -> bool:
    """True when ``value`` can never be -0.0 in ONNX Runtime.

    Args:
        value: The value.
        droppable: Whether ``value`` is the constant operand of an Add/Sub ORT may drop (then an
            all-zero constant proves nothing).
        depth: Recursion depth (internal).
        budget: Visits left (internal).
    """
    budget = budget or _Budget()
    if value is None or depth > _MAX_DEPTH or not budget.spend():
        return False
    arr = m.folded(value)
    if arr is not None:
        return _const_no_neg_zero(arr, droppable)
    if value.dtype is not None and not value.dtype.is_floating_point():
        return True
    node = m.producer(value)
    if node is None:
        return False
    op = node.op_type
    rec = lambda v, drop=False: no_neg_zero(v, drop, depth + 1, budget)  # noqa: E731
    if op in _NON_NEGATIVE_ZERO or _is_fix(value) is not None:
        return True
    if op == "Cast":
        src = node.inputs[0]
        return src is not None and src.dtype is not None and not src.dtype.is_floating_point()
    if op == "Mul":
        return node.inputs[0] is node.inputs[1]
    if op in _MOVING:
        firsts = node.inputs if op == "Concat" else node.inputs[:1]
        return all(rec(v) for v in firsts)
    if op == "Where" and len(node.inputs) == 3:
        return rec(node.inputs[1]) and rec(node.inputs[2])
    if op == "ReduceSum":
        return rec(node.inputs[0])
    if op == "Add" and len(node.inputs) == 2:
        return any(rec(v, True) for v in node.inputs)
    if op == "Sub" and len(node.inputs) == 2:
        sub = m.folded(node.inputs[1])
        return rec(node.inputs[0]) or (sub is not None and sub.dtype.kind == "f" and not np.any(sub == 0))
    return False


def sign_unseen(value: ir.Value, depth: int = 0, budget: _Budget | None = None) -> bool:
    """True when no graph output can differ for ``value`` = +0.0 and ``value`` = -0.0 (elementwise)."""
    budget = budget or _Budget()
    if depth > _MAX_DEPTH or value.is_graph_output() or not budget.spend():
        return False
    for use in value.uses():
        node, idx = use.node, use.idx
        if node.domain != "" or not _use_unseen(node, idx, value, depth, budget):
            return False
    return True


def _use_unseen(node: ir.Node, idx: int, value: ir.Value, depth: int, budget: _Budget) -> bool:
    op = node.op_type
    rec = lambda: all(sign_unseen(o, depth + 1, budget) for o in node.outputs)  # noqa: E731
    if op in _ERASING:
        return True
    if op == "Cast":
        to = m.attr(node, "to")
        return to is not None and not ir.DataType(to).is_floating_point()
    if op == "Mul" and node.inputs[0] is node.inputs[1]:
        return True
    if op in ("Add", "Sub") and len(node.inputs) == 2:
        other = node.inputs[1 - idx]
        if node.inputs[0] is node.inputs[1]:
            return rec()
        # v + w and w - v equal for v = +-0 unless w is -0; v - c equals -c for a nonzero constant c
        if op == "Add" or idx == 1:
            if no_neg_zero(other, True, depth + 1, budget):
                return True
        else:
            c = m.folded(other)
            if c is not None and c.dtype.kind == "f" and not np.any(c == 0):
                return True
        return rec()
    if op == "Div":
        return idx == 0 and rec()
    if op == "Where":
        return idx > 0 and rec()
    if op in _DATA_FIRST and idx > 0:
        return False
    if op in _PROPAGATING:
        return rec()
    return False


def _drop_fixes(graph: ir.Graph, subgraph: bool) -> int:
    count = 0
    for node in list(graph):
        if node.graph is not graph or node.domain != "" or node.op_type not in ("Where", "Abs"):
            continue
        out = node.outputs[0]
        v = _is_fix(out)
        if v is None:
            continue
        if out.is_graph_output():
            if _hand_output(graph, out, v, subgraph):
                graph.remove(node, safe=True)
                count += 1
            continue
        if no_neg_zero(v) or sign_unseen(out):
            out.replace_all_uses_with(v)
            cond = node.inputs[0] if node.op_type == "Where" else None
            graph.remove(node, safe=True)
            if cond is not None and not cond.uses() and not cond.is_graph_output() \
                    and cond.producer() is not None and cond.producer().graph is graph:
                graph.remove(cond.producer(), safe=True)
            count += 1
    return count


def _hand_output(graph: ir.Graph, out: ir.Value, v: ir.Value, subgraph: bool) -> bool:
    """A loop body's output ``out`` (a carry: its sign is seen) fixing a ``v`` that cannot be -0.0
    becomes ``v`` (a model's outputs keep their names and stay). Not where ``v`` is an output already:
    ONNX Runtime 1.32 returns wrong values for a Scan whose body lists one value twice."""
    positions = [k for k, o in enumerate(graph.outputs) if o is out]
    if not subgraph or len(positions) != 1 or v.is_graph_output() or v.is_graph_input() or not no_neg_zero(v):
        return False
    out.replace_all_uses_with(v, replace_graph_outputs=True)
    return True


def _live(node: ir.Node, depth: int = 0) -> bool:
    """Whether an output of ``node`` reaches a graph output or a node with a side (other rules leave dead
    nodes behind until the clean-up)."""
    if depth > 8:
        return True
    for out in node.outputs:
        if out.is_graph_output() or any(_live(u.node, depth + 1) for u in out.uses()):
            return True
    return not node.outputs or node.graph is None or node.graph.outputs is None


def _mean_rewrite(graph: ir.Graph, div: ir.Node, opset: int) -> bool:
    pair = m.binary(div, "Div")
    if pair is None:
        return False
    total, n = pair
    red = m.producer(total, "ReduceSum")
    if red is None or total.is_graph_output() or total.dtype not in _FLOATS \
            or any(u.node is not div and _live(u.node) for u in total.uses()):
        return False
    count = m.folded(n)
    x = red.inputs[0]
    rank = m.rank(x)
    if count is None or count.size != 1 or rank is None or m.rank(total) is None \
            or count.ndim > m.rank(total):
        return False  # one count, not broadcasting the sum
    axes = m.reduce_axes(red)
    if axes is None or m.attr(red, "noop_with_empty_axes", 0):
        return False
    axes = m.normalize_axes(axes, rank) if axes else tuple(range(rank))
    dims = [x.shape[a] for a in axes]
    if not all(isinstance(d, int) for d in dims) or float(np.prod(dims)) != float(count.flat[0]):
        return False
    attrs = {"keepdims": int(m.attr(red, "keepdims", 1))}
    if opset >= 18:
        inputs = list(red.inputs)
    else:
        inputs = [x]
        attrs["axes"] = list(axes)
    m.replace(graph, div.outputs[0], ir.node("ReduceMean", inputs, attrs), div)
    return True


def _one_node_fix(graph: ir.Graph, node: ir.Node) -> bool:
    """``Where(Equal(v, 0), +0.0, v)`` as ``Sum(v, +0.0)``: one pass, and ORT keeps it (NoopElimination
    drops an Add or Sub of zero, not a Sum)."""
    out = node.outputs[0]
    v = m.through_zero_sign_fix(out)
    zero = node.inputs[1]
    arr = m.const(zero)
    if v is out or arr is None or arr.size != 1 or out.dtype not in _FLOATS or v.dtype != out.dtype:
        return False
    m.replace(graph, out, ir.node("Sum", [v, zero]), node)
    return True


def rewrite(graph: ir.Graph, opset: int, subgraph: bool = False) -> int:
    """Drop provably redundant signed-zero fixes in ``graph`` (a loop body's when ``subgraph``), fuse
    sums over counts, and make the other fixes one node; returns how many rewrites."""
    count = _drop_fixes(graph, subgraph)
    for node in list(graph):
        if node.graph is graph and node.domain == "" and node.op_type == "Div":
            count += _mean_rewrite(graph, node, opset)
    for node in list(graph):
        if node.graph is graph and node.domain == "" and node.op_type == "Where" and len(node.inputs) == 3:
            count += _one_node_fix(graph, node)
    return count
