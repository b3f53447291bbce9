"""An Add of a constant of zeros (or a Sub of one) dropped where it does not broadcast, as XLA does.

XLA's algebraic simplifier replaces ``x + 0`` and ``x - 0`` by ``x`` when the zeros are a constant,
so ``jax.jit`` of a Dense or LayerNorm layer with an all-zero bias (Flax's and Hugging Face's initial
biases, or a bias a model does not train) adds nothing, nor does an optimizer's first step add its zero
state (``b1 * m`` with ``m`` zeros, which XLA folds first); the StableHLO still adds it. In ONNX Runtime
the Add is a full pass over the activations, and it turns -0.0 into +0.0 where ``jax.jit`` keeps
-0.0. ORT's own NoopElimination drops only a one-element zero. So the Add goes where its result has
its operand's type and shape: every other value is unchanged (NaN, infinities, +0.0), and -0.0 stays
-0.0, as in ``jax.jit``. An Add that broadcasts its operand stays (its result is a bigger tensor).

It runs before ``zeros``, whose proofs that a value is never -0.0 count such an Add as a fix.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _constants as constants
from jaxconv.onnx.rewrites import _match as m


def rewrite(graph: ir.Graph) -> int:
    """Drop the Adds and Subs of zero constants in ``graph`` that keep their operand's shape; returns how many."""
    return sum(_drop(node) for op in ("Add", "Sub") for node in m.each_node(graph, op))


def _drop(node: ir.Node) -> int:
    out = node.outputs[0]
    if len(node.inputs) != 2:
        return 0
    for k in ((0, 1) if node.op_type == "Add" else (0,)):
        x, zeros = node.inputs[k], node.inputs[1 - k]
        if x is None or x is zeros:
            continue
        arr = m.folded(zeros)
        if arr is None and not m.is_const_expr(x):  # zeros computed from constants (an optimizer's state:
            arr = constants.evaluate(zeros)  # b1 * m, m zeros), folded later; constants alone fold anyway
        if arr is None or arr.size == 0 or arr.dtype.kind not in "fiu" or np.any(arr != 0):
            continue
        if not _same_type(x, out):
            continue
        if out.is_graph_output() or x.is_graph_input() and not out.uses():
            m.replace(node.graph, out, ir.node("Identity", [x]), node)  # the output keeps its name
        else:
            out.replace_all_uses_with(x)
        return 1
    return 0


def _same_type(x: ir.Value, out: ir.Value) -> bool:
    """``x`` and ``out`` have one dtype and one shape (static, or the same symbolic dimensions)."""
    if x.dtype is None or x.dtype != out.dtype or x.shape is None or out.shape is None:
        return False
    if len(x.shape) != len(out.shape):
        return False
    for a, b in zip(x.shape, out.shape):
        if isinstance(a, int) and isinstance(b, int):
            if a != b:
                return False
        elif isinstance(a, int) or isinstance(b, int) or a.value is None or a.value != b.value:
            return False
    return True
