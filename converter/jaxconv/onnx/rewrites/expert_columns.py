"""A MatMul of the same rows by a stack of constant weights as one MatMul by those weights side by side.

A mixture of experts that runs every expert on every token, ``einsum('th,ehm->etm', x, w)`` (keras-hub's
Mixtral, after ``broadcast_matmul_order``), is a MatMul of ``x`` [t, h] broadcast against ``w``
[e, h, m]. ONNX Runtime prepacks a MatMul's constant right operand only when it is 2-D: the 3-D weight
is packed again at every run, ``h * e * m`` elements. Laid side by side as one [h, e * m] matrix,
prepacked once, the product is one MatMul; a Reshape to [t, e, m] and a Transpose to [e, t, m] give the
same tensor, at the cost of moving its ``t * e * m`` elements. So the rule fires where that costs less
than the packing: at most half as many rows as the weights have (``2 t <= h``, static sizes). Kernel CPU
time against the 3-D MatMul, one and two intra-op threads, load 8-10 (t, h, m, e): 16, 512, 1024, 8:
0.40, 0.40; 32, 128, 256, 4: 0.89, 0.89; 64, 512, 1024, 8: 0.74, 0.74; 64, 1024, 2048, 8: 0.67, 0.66;
128, 256, 512, 8: 0.91, 0.92; 128, 512, 256, 4: 0.92, 0.92; 256, 512, 1024, 8: 0.92, 0.91. Where it does
not fire: 128, 128, 256, 4 (the zoo's Mixtral) 1.02, 1.02; 512, 128, 256, 4: 1.22, 1.22. A keras-hub
style block (gate, up, SiLU, down, top-2 routing), with/without: 32, 256, 512, 8: 0.79, 0.78; 64, 512,
1024, 8: 0.83, 0.79; 100, 128, 256, 4 (t < h, 2 t > h) 0.99, 1.01. Each output element is the same dot
product of the same two vectors; ORT's prepacked kernel sums it in other blocks than its 3-D path where
``h`` exceeds 128, so the last bits can differ there (the same bits at 128 and below, tested).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m


def rewrite(graph: ir.Graph) -> int:
    """Put the stacked constant weights of the MatMuls in ``graph`` side by side where it pays; how many."""
    return sum(_side_by_side(graph, node) for node in m.each_node(graph, "MatMul"))


def _side_by_side(graph: ir.Graph, mm: ir.Node) -> int:
    x, w = mm.inputs[0], mm.inputs[1]
    out = mm.outputs[0]
    # one live reader (earlier rules leave dead ones until the clean-up): stored side by side, not twice
    weight = m.const(w) if w is not None and m.sole_live_use(w) else None
    rows = m.static_dims(x)
    if weight is None or weight.ndim < 3 or weight.dtype.kind != "f" or rows is None or len(rows) != 2:
        return 0
    t, h = rows
    if t <= 0 or 2 * t > h or weight.shape[-2] != h:
        return 0
    stacks = list(weight.shape[:-2])  # e..., each expert's [h, m] matrix
    m_cols = weight.shape[-1]
    lead = len(stacks)
    # [e..., h, m] -> [h, e..., m] -> [h, e * ... * m]: expert i's columns are block i of the row
    columns = np.moveaxis(weight, lead, 0).reshape(h, -1)
    side = m.new_initializer(graph, columns, f"{w.name or 'w'}_side_by_side")
    shape = m.new_initializer(graph, np.array([t, *stacks, m_cols], np.int64), f"{w.name or 'w'}_experts_shape")
    product = ir.node("MatMul", [x, side])
    per_expert = ir.node("Reshape", [product.outputs[0], shape])
    perm = [*range(1, lead + 1), 0, lead + 1]  # [t, e..., m] -> [e..., t, m]
    back = ir.node("Transpose", [per_expert.outputs[0]], attributes={"perm": perm})
    m.replace(graph, out, [product, per_expert, back], mm)
    return 1
