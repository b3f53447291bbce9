"""``W @ x`` vmapped (Equinox's Linear) computed as ``x @ Wᵀ``, without the Transposes around it.

``eqx.nn.Linear`` computes ``weight @ x`` for one example; under ``jax.vmap`` over a batch and a
sequence the dot_general puts the weight's rows first, and the lowering writes
``Transpose(x, [2, 0, 1]) -> Reshape [k, b*s] -> MatMul(W, .) -> Reshape [o, b, s] ->
Transpose([1, 2, 0])``: two passes over the activations per layer, which ORT's transpose optimizer
then merges with the attention's own into general permutations on its slow path (eqx attention:
154 µs of Transposes against 29 µs for jax2onnx's graph). ``(W @ Xᵀ)ᵀ = X @ Wᵀ`` with ``Wᵀ`` a
constant: one MatMul on the activations as they are. Every output is the same dot product of the
same row and column, summed over the same ``k`` in ORT's GEMM.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _dim_products as dp
from jaxconv.onnx.rewrites import _match as m

MAX_WEIGHT_ELEMENTS = 1 << 24


def rewrite(graph: ir.Graph) -> int:
    """Rewrite the transposed weight-first MatMuls of ``graph``; returns how many."""
    count = 0
    for node in m.each_node(graph, "Transpose"):
        count += _one(graph, node)
    return count


def _perm(node: ir.Node) -> list[int] | None:
    perm = m.attr(node, "perm")
    return None if perm is None else [int(p) for p in perm]


def _weight(value: ir.Value | None) -> np.ndarray | None:
    arr = m.const(value)
    if arr is None:
        arr = m.folded(value)
    return arr if arr is not None and arr.ndim == 2 and arr.size <= MAX_WEIGHT_ELEMENTS else None


def _one(graph: ir.Graph, t2: ir.Node) -> int:
    out = t2.outputs[0]
    if not out.uses() and not out.is_graph_output():
        return 0
    r2 = m.producer(t2.inputs[0], "Reshape")
    mm = m.producer(r2.inputs[0], "MatMul") if r2 is not None else None
    if mm is None or len(mm.inputs) != 2 or len(mm.outputs[0].uses()) != 1:
        return 0
    w = _weight(mm.inputs[0])
    r1 = m.producer(mm.inputs[1], "Reshape")
    t1 = m.producer(r1.inputs[0], "Transpose") if r1 is not None else None
    if w is None or t1 is None:
        return 0
    x = t1.inputs[0]
    shape_x = dp.dims(x)  # sizes as products of named ones: a symbolic batch too
    if shape_x is None or len(shape_x) < 2 or x.dtype is None or w.dtype != x.dtype.numpy():
        return 0
    rank, (o, k) = len(shape_x), w.shape
    rest = list(shape_x[:-1])
    if _perm(t1) != [rank - 1, *range(rank - 1)] or shape_x[-1] != dp.Size(k):
        return 0
    if dp.dims(mm.inputs[1]) != [dp.Size(k), dp.product(rest)] or dp.dims(r2.outputs[0]) != [dp.Size(o), *rest]:
        return 0
    if _perm(t2) != [*range(1, rank), 0]:
        return 0
    wt = ir.node("Constant", [], {"value": ir.tensor(np.ascontiguousarray(w.T))})
    m.replace(graph, out, [wt, ir.node("MatMul", [x, wt.outputs[0]])], t2)
    return 1
