"""An elementwise op between a Reshape and the Reshape back, as the op alone.

A function that regroups axes to scale them and ungroups them again (``(x.reshape(b, s, h * d) *
w[:, None]).reshape(b, s, h, d)``) gives ``Reshape`` -> ``Mul`` by a broadcast operand -> ``Reshape``
back. The Reshapes stop the layout rule and ORT's transpose optimizer from moving the Transposes
around them, and cost a kernel each. The lowering once wrote this form for every batch-only
dot_general (RoFormer's rotary ``einsum("bslh,...sh->bslh")``: 12 Transposes on ORT's slow general
path, 28% of its time); it now writes those as a broadcast Mul without Reshapes
(``ops/linalg.py``), so what reaches this rule is such code. The Reshapes only regroup the elements:
when the other operand, group by group, either covers the regrouped axes or broadcasts over all of
them, the op on the original shape with that operand reshaped to match gives every element the same
operands, so the numbers cannot change.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m

_BINARY = frozenset({"Add", "Sub", "Mul", "Div"})


def rewrite(graph: ir.Graph) -> int:
    """Drop Reshape pairs around an elementwise op in ``graph``; returns how many."""
    count = 0
    for node in m.each_node(graph, "Reshape"):
        count += _one(graph, node)
    return count


def _one(graph: ir.Graph, back: ir.Node) -> int:
    mid = back.inputs[0]
    op = m.producer(mid)
    if op is None or op.op_type not in _BINARY or op.domain not in ("", "ai.onnx") or len(op.inputs) != 2:
        return 0
    if len(mid.uses()) != 1 or mid.is_graph_output():
        return 0
    for k in (0, 1):
        grouped, other = op.inputs[k], op.inputs[1 - k]
        first = m.producer(grouped, "Reshape")
        if first is None or other is None or len(grouped.uses()) != 1 or grouped.is_graph_output():
            continue
        x = first.inputs[0]
        shape_x, shape_y, shape_w = m.static_dims(x), m.static_dims(grouped), m.static_dims(other)
        if shape_x is None or shape_y is None or shape_w is None or len(shape_w) > len(shape_y):
            continue
        if m.static_dims(back.outputs[0]) != shape_x or m.static_dims(mid) != shape_y:
            continue
        target = _regrouped(shape_x, shape_y, shape_w)
        if target is None:
            continue
        shape = ir.node("Constant", [], {"value": ir.tensor(np.array(target, np.int64))})
        laid = ir.node("Reshape", [other, shape.outputs[0]])
        inputs = [x, laid.outputs[0]] if k == 0 else [laid.outputs[0], x]
        m.replace(graph, back.outputs[0], [shape, laid, ir.node(op.op_type, inputs)], back)
        return 1
    return 0


def _groups(x: list[int], y: list[int]) -> list[tuple[list[int], list[int]]] | None:
    """The axes of ``x`` and ``y`` in groups of equal element counts (a Reshape from one to the other
    only regroups within each), or None."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(x) and j < len(y):
        gi, gj, px, py = [i], [j], x[i], y[j]
        i, j = i + 1, j + 1
        while px != py:
            if px < py and i < len(x):
                gi.append(i)
                px, i = px * x[i], i + 1
            elif py < px and j < len(y):
                gj.append(j)
                py, j = py * y[j], j + 1
            else:
                return None
        groups.append((gi, gj))
    rest_x, rest_y = list(range(i, len(x))), list(range(j, len(y)))
    if any(x[a] != 1 for a in rest_x) or any(y[a] != 1 for a in rest_y) or not groups:
        return None
    groups[-1][0].extend(rest_x)
    groups[-1][1].extend(rest_y)
    return groups


def _regrouped(x: list[int], y: list[int], w: list[int]) -> list[int] | None:
    """The shape that lays ``w`` (broadcasting against ``y``) out against ``x`` element for element: each
    group of axes either has all of ``y``'s dimensions in ``w`` (it takes ``x``'s) or only 1s (1s)."""
    groups = _groups(x, y)
    if groups is None:
        return None
    w = [1] * (len(y) - len(w)) + w
    out: list[int] = []
    for gi, gj in groups:
        if all(w[a] == y[a] for a in gj):
            out += [x[a] for a in gi]
        elif all(w[a] == 1 for a in gj):
            out += [1] * len(gi)
        else:
            return None
    return out


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays of one dtype and shape hold the same bits (-0 is not +0; NaNs by payload)."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()
