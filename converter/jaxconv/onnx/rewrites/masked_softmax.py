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
it: every masked place); between -87.3 and -64 jax.jit has at most 1.6e-28 there. Where the max is NaN
or infinite, or ``m - 64`` rounds to ``m`` (``|m| >= 2**31``: a row of fills), a guard raises nothing and
the row is ORT's Softmax as before; a NaN that ReduceMax skips (it does unless the NaN comes first) still
makes the row NaN: ORT's Max propagates it, and ``NaN * 0`` is NaN.

The three passes cost about what ORT's whole Softmax costs each (0.31 ns an element for the Max against
0.33 for the Softmax, [8, 4, 128, 128], one thread): nothing is saved on a CPU that handles subnormals at
full speed (an AMD EPYC), where the rule only costs. On the Intel CPU the penalty hardly depends on how
many places are masked, and it falls on the product by V too, whose left operand then holds subnormals:
``Softmax(x + mask) @ v`` on [2, 4, 64, 64], one thread, 49 us with nothing masked, 97-100 us with 1.6%
to 20% of the keys masked, 136 us with half; with the rule 83-88 us at every share (86 with none).

So it runs wherever a mask fills at least ``MIN_SHARE`` of the places whatever the inputs: a causal
mask, Swin's shifted windows (keras-hub Swin, ORT alone, one thread, 0.74x), and a causal mask combined
with a padding mask the model takes (keras-hub Falcon 0.88x): the places the padding fills are not known,
so a padding mask alone from the inputs leaves the Softmax as it is (the benchmark's Flax BERT took 1.06x
with the rule, its padding mask all ones).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx import thread_count
from jaxconv.onnx.rewrites import _intervals as intervals
from jaxconv.onnx.rewrites import _match as m

FLOOR = -64.0  # below the row's max: exp(FLOOR) over a row's sum is a normal float32 up to 10**10 places
MIN_SHARE = 0.01  # of the places masked whatever the inputs: a causal mask's 0.5, Swin's 0.23 (the first stage)
SYMBOLIC_SIZE = thread_count.RECORD_SIZES[-1]  # a symbolic length where a mask is built at run time (128:
# a causal mask fills 127/256); the size a model's thread record weighs it at
_FILL = 87.0  # |c| at or above which a constant near the Softmax reads as a mask's fill
_DEPTH = 4
_THROUGH = frozenset({"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Expand", "Cast", "Trilu"})


def rewrite(graph: ir.Graph) -> int:
    """Rewrite every masked float32 Softmax in ``graph`` and its subgraphs; returns how many."""
    return m.count_everywhere(graph, "Softmax", _one)


def _filled(value: ir.Value | None, sign: int) -> np.ndarray:
    """Where ``value`` is at or below -87 whatever the inputs (``sign`` -1: at or above 87, a subtrahend)."""
    lo, hi = intervals.evaluate(value, SYMBOLIC_SIZE)
    return hi <= -_FILL if sign > 0 else lo >= _FILL


def _masked_share(value: ir.Value | None, sign: int = 1, depth: int = 0) -> float:
    """The share of ``value``'s places that a mask fills whatever the inputs, within a few ops: a value at
    or below -87 added or taken as the min, one chosen by a Where where its condition picks it (at or above
    87 where it is subtracted); 0 where no such mask is found.

    A mask computed from constants (a causal triangle, Swin's shifted windows, a padding mask of ones) is
    evaluated, so an attention over every key counts 0; so is one combined with the inputs (a causal mask
    and a padding mask the model takes): its causal places count, its padding places do not, as for a
    padding mask alone: how much of it is filled is not known. A mask built at run time over a symbolic length
    (``Shape``, ``Range``) is counted with that length at ``SYMBOLIC_SIZE``: a causal mask's (n - 1) / 2n."""
    node = m.producer(value)
    if node is None or depth > _DEPTH:
        return 0.0
    op = node.op_type
    if op in _THROUGH:
        return _masked_share(node.inputs[0], sign, depth + 1)
    if op == "If":
        return max((_masked_share(out, sign, depth + 1) for branch in _branches(node) for out in branch.outputs),
                   default=0.0)
    if op == "Where" and len(node.inputs) == 3:
        lo, hi = intervals.evaluate(node.inputs[0], SYMBOLIC_SIZE)
        places, shares = np.zeros((), bool), []
        for operand, chosen in ((node.inputs[1], lo >= 1), (node.inputs[2], hi <= 0)):
            filled = _filled(operand, sign)
            if filled.any():
                places = places | (chosen & filled)
            elif chosen.any():
                shares.append(_masked_share(operand, sign, depth + 1))
        return max([float(np.mean(places)), *shares])
    if op in ("Add", "Sum", "Min", "Mul"):
        return max((_operand_share(v, sign, depth, count_fill=op != "Mul") for v in node.inputs), default=0.0)
    if op == "Sub" and len(node.inputs) == 2:
        return max(_operand_share(node.inputs[0], sign, depth), _operand_share(node.inputs[1], -sign, depth))
    return 0.0


def _operand_share(value: ir.Value | None, sign: int, depth: int, count_fill: bool = True) -> float:
    if value is None:
        return 0.0
    filled = _filled(value, sign) if count_fill else np.zeros((), bool)
    if filled.any():
        return float(np.mean(filled))
    return _masked_share(value, sign, depth + 1)


def _one(graph: ir.Graph, softmax: ir.Node) -> int:
    x = softmax.inputs[0] if softmax.inputs else None
    rank = m.rank(x)
    if x is None or x.dtype != ir.DataType.FLOAT or rank is None or rank == 0 \
            or _masked_share(x) < MIN_SHARE:
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
