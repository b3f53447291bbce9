"""A masked Softmax computed without subnormal exponentials: its input raised to ``max - 64`` where lower,
and the outputs there set to zero.

An attention mask puts a huge negative number (-inf, ``finfo.min``, -1e9) where a key is masked, and
``exp`` of it relative to the row's max underflows. ORT's exp (MLAS) clamps its input at -103.97 and
builds the result down into the subnormals, then sums and scales those subnormals: on an Intel CPU
each such operation takes a microcode assist. A causal ``[2, 4, 64, 64]`` Softmax took 102 us there
against 16 us with no masked place (one thread, Xeon with AVX-512); XLA's CPU code flushes
subnormals to zero and never pays that. So, with ``m`` the row's max and ``lo = m - 64``:

    y = Softmax(Max(x, lo)) * Cast(x >= lo)

Places at or above ``lo`` keep their exponentials; the places raised to ``lo`` add ``exp(-64)``
(1.6e-28) each to a sum of at least 1 (the max's own term), which no float32 sum of fewer than
2**40 of them can move, so the kept outputs have the same bits as before. The raised places give
0, which is ``jax.jit``'s value wherever ``x - m`` is below -87.3 (its exp underflows and XLA flushes
it: every masked place); between -87.3 and -64 jax.jit has at most 1.6e-28 there. A row holding NaN
or +inf is NaN throughout, as before: ORT's Max propagates the NaN (and ``x >= NaN`` is false, so
``NaN * 0`` keeps it), and with ``m = +inf`` every place becomes +inf. A row that is all -inf keeps
ORT's NaN row. On a CPU that handles subnormals at full speed the rule costs its three passes
(about twice the Softmax's time, 21 against 20 us on the shape above); it runs only where a
constant of magnitude 87 or more (a mask's fill) feeds the Softmax's input within a few ops.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _constants as constants
from jaxconv.onnx.rewrites import _match as m

FLOOR = -64.0  # below the row's max: exp(FLOOR) is a normal float32 even divided by 2**40
_FILL = 87.0  # |c| at or above which a constant near the Softmax reads as a mask's fill
_DEPTH = 4
_THROUGH = frozenset({"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Expand", "Cast", "Trilu"})


def rewrite(graph: ir.Graph) -> int:
    """Rewrite every masked float32 Softmax in ``graph`` and its subgraphs; returns how many."""
    return m.count_everywhere(graph, "Softmax", _one)


def _holds_fill(arr: np.ndarray, sign: int) -> bool:
    """True when ``arr`` holds a value at or below -87 (``sign`` -1: at or above 87, a subtrahend)."""
    if arr.size == 0 or arr.dtype.kind != "f":
        return False
    return bool(np.any(sign * arr.astype(np.float64) <= -_FILL))  # NaN compares false


def _masked(value: ir.Value | None, sign: int = 1, depth: int = 0) -> bool:
    """True when a mask's fill reaches ``value`` within a few ops: a constant at or below -87 added, taken
    as the min, chosen by a Where or multiplying a mask (at or above 87 where it is subtracted).

    A mask computed from constants only (a padding mask of ones, folded after the rules) is evaluated:
    it counts only where its fill is chosen somewhere, so an attention over every key is left alone."""
    node = m.producer(value)
    if node is None or depth > _DEPTH:
        return False
    op = node.op_type
    if op in _THROUGH:
        return _masked(node.inputs[0], sign, depth + 1)
    if op == "If":
        return any(_masked(out, sign, depth + 1) for branch in _branches(node) for out in branch.outputs)
    if op == "Where":
        choice = constants.evaluate(node.inputs[0])
        operands = [(node.inputs[1], choice is None or bool(np.any(choice))),
                    (node.inputs[2], choice is None or not bool(np.all(choice)))]
        return any(chosen and _carries_fill(v, sign, depth) for v, chosen in operands)
    if op in ("Add", "Sum", "Min", "Mul"):
        return any(_carries_fill(v, sign, depth) for v in node.inputs)
    if op == "Sub" and len(node.inputs) == 2:
        return _carries_fill(node.inputs[0], sign, depth) or _carries_fill(node.inputs[1], -sign, depth)
    return False


def _carries_fill(value: ir.Value | None, sign: int, depth: int) -> bool:
    if value is None:
        return False
    arr = constants.evaluate(value)
    return _holds_fill(arr, sign) if arr is not None else _masked(value, sign, depth + 1)


def _one(graph: ir.Graph, softmax: ir.Node) -> int:
    x = softmax.inputs[0] if softmax.inputs else None
    rank = m.rank(x)
    if x is None or x.dtype != ir.DataType.FLOAT or rank is None or rank == 0 or not _masked(x):
        return 0
    axis = int(m.attr(softmax, "axis", -1)) % rank
    axes = m.new_initializer(graph, np.array([axis], np.int64), "masked_softmax_axis")
    floor = m.new_initializer(graph, np.array(FLOOR, np.float32), "masked_softmax_floor")
    lowest = m.new_initializer(graph, np.array(-np.inf, np.float32), "masked_softmax_none")
    top = ir.node("ReduceMax", [x, axes], {"keepdims": 1})
    shifted = ir.node("Add", [top.outputs[0], floor])
    # where m - 64 rounds to m (|m| >= 2**31: a row of fills only), or m is NaN or infinite: raise nothing
    below = ir.node("Less", [shifted.outputs[0], top.outputs[0]])
    lo = ir.node("Where", [below.outputs[0], shifted.outputs[0], lowest])
    raised = ir.node("Max", [x, lo.outputs[0]])
    kept = ir.node("GreaterOrEqual", [x, lo.outputs[0]])
    ones = ir.node("Cast", [kept.outputs[0]], {"to": ir.DataType.FLOAT})
    new_softmax = ir.node("Softmax", [raised.outputs[0]], {"axis": axis})
    zeroed = ir.node("Mul", [new_softmax.outputs[0], ones.outputs[0]])
    # shapes where x's is known: scalar_ranks (after this rule) gives the scalars the row max's rank
    row_shape = None if x.shape is None else ir.Shape([1 if k == axis else d for k, d in enumerate(x.shape)])
    f32, boolean = ir.TensorType(ir.DataType.FLOAT), ir.TensorType(ir.DataType.BOOL)
    # named: onnx_ir names unnamed values per graph, and inside an If's branch they could meet the outer ones
    base = softmax.outputs[0].name or f"softmax_{id(softmax)}"
    for node, kind, shape in ((top, f32, row_shape), (shifted, f32, row_shape), (below, boolean, row_shape),
                              (lo, f32, row_shape), (raised, f32, x.shape), (kept, boolean, x.shape),
                              (ones, f32, x.shape), (new_softmax, f32, x.shape)):
        node.outputs[0].type = kind
        node.outputs[0].shape = shape
        node.outputs[0].name = f"{base}_masked_{node.op_type}"  # one node of each type
    new_nodes = [top, shifted, below, lo, raised, kept, ones, new_softmax, zeroed]
    m.replace(graph, softmax.outputs[0], new_nodes, softmax)
    graph.remove(softmax, safe=True)
    return 1


def _branches(node: ir.Node) -> list[ir.Graph]:
    return [a.value for a in node.attributes.values() if a.type == ir.AttributeType.GRAPH]
