"""A batched MatMul by a stack of constant weights as one 2-D MatMul per weight, on few rows.

The experts' second product in a mixture of experts, ``einsum('etm,emh->eth', a, w)``, multiplies each
expert's rows [t, m] by its own constant [m, h]. ONNX Runtime prepacks a MatMul's constant right
operand only when it is 2-D: the 3-D weight is packed again at every run. Split along the experts,
each part's MatMul reads a 2-D initializer (prepacked once) and a Concat joins the products; the Split
and the Concat move ``e * t * (m + h)`` elements, so the rule fires where the rows are few against
the packing and each product is big enough to share between threads: ``8 t <= m`` and ``t * m * h``
at least ``2 ** 22`` (static sizes). Kernel CPU time against the 3-D MatMul, one and two intra-op
threads, load 8-10 (t, m, h, e): 8, 1024, 512, 8: 0.46, 0.45; 16, 1024, 512, 8: 0.52, 0.45; 32, 1024,
512, 8: 0.68, 0.59; 32, 512, 256, 8: 0.82, 0.82; 64, 512, 256, 4: 0.93, 0.92; 64, 1024, 512, 8: 0.81,
0.77; 64, 2048, 1024, 8: 0.65, 0.81; 128, 2048, 1024, 8: 0.77, 0.90. Where it does not fire:
16, 256, 128, 4: 0.88, 1.10; 32, 256, 128, 4: 0.92, 1.10; 128, 256, 128, 4 (the zoo's Mixtral): 1.01,
1.04; 128, 512, 256, 8: 0.99, 0.98; 256, 1024, 512, 8: 0.91, 1.14. A keras-hub style block (gate, up,
SiLU, down, top-2 routing) with this rule and ``expert_columns`` against neither (t, h, m, e): 16, 512,
1024, 8: 0.50, 0.53; 32, 256, 512, 8: 0.72, 0.70; 64, 512, 1024, 8: 0.70, 0.77. Each output element is the same dot
product of the same two vectors; ORT's prepacked kernel sums it in other blocks than its 3-D path where
``m`` exceeds 128, so the last bits can differ there (the same bits at 128, tested).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m

MIN_PRODUCT = 1 << 22  # t * m * h below this: the parts are too small to share between two threads


def rewrite(graph: ir.Graph) -> int:
    """Split the MatMuls in ``graph`` by stacked constant weights into one per weight where it pays."""
    return sum(_split(graph, node) for node in m.each_node(graph, "MatMul"))


def _split(graph: ir.Graph, mm: ir.Node) -> int:
    a, w = mm.inputs[0], mm.inputs[1]
    out = mm.outputs[0]
    weight = m.const(w) if w is not None and m.sole_live_use(w) else None
    dims = m.static_dims(a)
    if weight is None or weight.ndim != 3 or weight.dtype.kind != "f" or dims is None or len(dims) != 3:
        return 0
    e, t, k = dims
    if weight.shape[0] != e or weight.shape[1] != k or e < 2 or t <= 0:
        return 0
    if 8 * t > k or t * k * weight.shape[2] < MIN_PRODUCT:
        return 0
    ones = m.new_initializer(graph, np.ones(e, np.int64), "expert_split_sizes")
    split = ir.node("Split", [a, ones], attributes={"axis": 0}, num_outputs=e)
    nodes = [split]
    for i, part in enumerate(split.outputs):  # [1, t, m] @ [m, h] -> [1, t, h]
        own = m.new_initializer(graph, weight[i], f"{w.name or 'w'}_expert{i}")
        nodes.append(ir.node("MatMul", [part, own]))
    nodes.append(ir.node("Concat", [n.outputs[0] for n in nodes[1:]], attributes={"axis": 0}))
    m.replace(graph, out, nodes, mm)
    return 1
