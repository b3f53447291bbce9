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
0.33 for the Softmax, [8, 4, 128, 128], one thread), and each masked place saves about 4.6 ns on that
Intel CPU: nothing on a CPU that handles subnormals at full speed (an AMD EPYC), where the rule only costs.
So it runs only where a constant mask fills at least ``MIN_SHARE`` of the places (a causal mask), not for
a padding mask (computed from the inputs, or a constant that fills a few columns): ORT alone, one thread,
on that Intel CPU: HF Flax Llama 0.89x, the benchmark's Flax BERT with a padding mask 1.06x before this
limit.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _constants as constants
from jaxconv.onnx.rewrites import _match as m

FLOOR = -64.0  # below the row's max: exp(FLOOR) over a row's sum is a normal float32 up to 10**10 places
MIN_SHARE = 0.4  # of the places masked: a causal mask's 0.5 (t = 64: 0.49) qualifies, a padding mask not
_FILL = 87.0  # |c| at or above which a constant near the Softmax reads as a mask's fill
_DEPTH = 4
_THROUGH = frozenset({"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Expand", "Cast", "Trilu"})


def rewrite(graph: ir.Graph) -> int:
    """Rewrite every masked float32 Softmax in ``graph`` and its subgraphs; returns how many."""
    return m.count_everywhere(graph, "Softmax", _one)


def _filled(arr: np.ndarray, sign: int) -> np.ndarray | None:
    """Where ``arr`` is at or below -87 (``sign`` -1: at or above 87, a subtrahend); None unless a float array."""
    if arr.size == 0 or arr.dtype.kind != "f":
        return None
    return sign * arr.astype(np.float64) <= -_FILL  # NaN compares false


def _masked_share(value: ir.Value | None, sign: int = 1, depth: int = 0) -> float:
    """The share of ``value``'s places that a constant mask fills within a few ops: a constant at or below
    -87 added or taken as the min, one chosen by a Where on a constant condition (at or above 87 where it
    is subtracted); 0 where no such mask is found.

    A mask computed from constants only (a causal triangle, a padding mask of ones, folded after the
    rules) is evaluated, so an attention over every key counts 0; a mask computed from the inputs (a
    padding mask) counts 0 too: how much of it is filled is not known."""
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
        choice = constants.evaluate(node.inputs[0])
        if choice is None:
            return 0.0
        shares = []
        for operand, chosen in ((node.inputs[1], choice.astype(bool)), (node.inputs[2], ~choice.astype(bool))):
            arr = constants.evaluate(operand)
            if arr is None:
                shares.append(_masked_share(operand, sign, depth + 1))
                continue
            places = _filled(arr, sign)
            if places is not None:
                shares.append(float(np.mean(chosen & places)))
        return max(shares, default=0.0)
    if op in ("Add", "Sum", "Min", "Mul"):
        return max((_operand_share(v, sign, depth, count_constant=op != "Mul") for v in node.inputs), default=0.0)
    if op == "Sub" and len(node.inputs) == 2:
        return max(_operand_share(node.inputs[0], sign, depth), _operand_share(node.inputs[1], -sign, depth))
    return 0.0


def _operand_share(value: ir.Value | None, sign: int, depth: int, count_constant: bool = True) -> float:
    if value is None:
        return 0.0
    arr = constants.evaluate(value)
    if arr is not None:
        places = _filled(arr, sign) if count_constant else None
        return 0.0 if places is None else float(np.mean(places))
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
