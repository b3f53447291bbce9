"""A Transpose that reorders the axes a Reshape then merges into a MatMul's contracted axis: the weight's
rows reordered instead, so the activations move only as far as the leading axes need.

keras-hub Llama's attention output is ``[b, h, d, q]`` transposed by ``[0, 3, 2, 1]`` to ``[b, q, d, h]``,
reshaped to ``[b, q, d*h]`` and multiplied by the output projection: ORT runs that permutation on its
element-by-element path (62 µs on [2, 4, 32, 64], one thread; 10% of the model). The merged axes may
come in any order if the weight's rows come in the same order: ``Transpose(x, [0, 3, 1, 2])`` (one axis
moved, ORT's fast copy) to ``[b, q, h, d]`` and the rows ``W[d*h + ...]`` taken in ``(h, d)`` order give
the same products. The MatMul then sums them in another order (within the converter's tolerance, as any
GEMM's blocking; NaN and infinities stay where they were). The leading axes may have symbolic sizes (a
batch exported as ``f32[b, ...]``: a CNN's NHWC flatten before its classifier), the merged ones not.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _constants as constants
from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites.transposes import is_one_axis_move

MAX_WEIGHT_ELEMENTS = constants.MAX_ELEMENTS


def rewrite(graph: ir.Graph) -> int:
    """Rewrite the Transpose -> Reshape -> MatMul(weight) chains of ``graph`` and its subgraphs."""
    return m.count_everywhere(graph, "MatMul", _one)



def _one(graph: ir.Graph, mm: ir.Node) -> int:
    if len(mm.inputs) != 2:
        return 0
    reshape = m.producer(mm.inputs[0], "Reshape")
    w = constants.evaluate(mm.inputs[1])  # a constant, or one transposed and reshaped (not folded yet)
    if reshape is None or w is None or w.ndim != 2 or w.size > MAX_WEIGHT_ELEMENTS:
        return 0
    t = m.producer(reshape.inputs[0], "Transpose")
    if t is None or len(reshape.outputs[0].uses()) != 1 or len(t.outputs[0].uses()) != 1:
        return 0
    x = t.inputs[0]
    xs, ts, rs = m.named_dims(x), m.named_dims(t.outputs[0]), m.named_dims(reshape.outputs[0])
    perm = m.attr(t, "perm")
    if xs is None or ts is None or rs is None or perm is None or len(rs) < 2:
        return 0
    perm = [int(p) for p in perm]
    j = len(rs) - 1  # the Reshape keeps the leading axes and merges the rest into the last
    merged = ts[j:]
    if ts[:j] != rs[:j] or len(ts) <= j + 1 or not all(isinstance(d, int) for d in merged) \
            or int(np.prod(merged)) != rs[-1] or rs[-1] != w.shape[0]:
        return 0
    group = perm[j:]
    ordered = sorted(group)
    new_perm = perm[:j] + ordered
    if group == ordered or not is_one_axis_move(new_perm):
        return 0  # nothing to gain, or a permutation as slow as the old one
    rows = np.arange(rs[-1]).reshape([xs[a] for a in group])
    rows = np.transpose(rows, [group.index(a) for a in ordered]).reshape(-1)
    weight = ir.node("Constant", [], {"value": ir.tensor(np.ascontiguousarray(w[rows]))})
    nodes = [weight]
    if new_perm == sorted(new_perm):
        moved = x
    else:
        nodes.append(ir.node("Transpose", [x], {"perm": new_perm}))
        moved = nodes[-1].outputs[0]
    target = [d if isinstance(d, int) else 0 for d in rs]  # 0: a symbolic leading size, copied
    shape = ir.node("Constant", [], {"value": ir.tensor(np.asarray(target, np.int64))})
    nodes += [shape, ir.node("Reshape", [moved, shape.outputs[0]])]
    nodes.append(ir.node("MatMul", [nodes[-1].outputs[0], weight.outputs[0]]))
    m.replace(graph, mm.outputs[0], nodes, mm)
    return 1
