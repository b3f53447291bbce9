"""Attention heads projected head-major: ``x @ W`` split into heads by a Reshape and a Transpose as one
MatMul by the weight laid out per head.

q, k and v are ``Transpose(Reshape(x @ W [+ c], [b, t, h, dh]), [0, 2, 1, 3])`` (k's ``[0, 2, 3, 1]``)
with ``W`` a constant ``[d, h * dh]``. ``Unsqueeze(x, 1) @ W'`` with ``W'`` the weight as ``[h, d, dh]``
gives the ``[b, h, t, dh]`` result directly: each element is the same dot product of a row of ``x`` and
a column of ``W``; a bias ``c`` is added as ``[h, 1, dh]``. k keeps a ``[0, 1, 3, 2]`` Transpose, which
ONNX Runtime folds into the product with q (FusedMatMul), so three of the four Transposes of a layer go;
ORT ran them on one thread. The batched product is a little less efficient than the one product: on the
benchmark transformer (one process alternating, load 5.5-5.7) CPU time per call 0.96x on two threads,
0.98x on one, wall 0.95x and 0.98x; outputs bit for bit the same.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m

_PERMS = ([0, 2, 1, 3], [0, 2, 3, 1])


def rewrite(graph: ir.Graph) -> int:
    """Rewrite the head splits of ``graph`` (not its subgraphs); returns how many."""
    unsqueezed: dict[int, ir.Value] = {}
    return sum(_rewrite(graph, node, unsqueezed) for node in m.each_node(graph, "Transpose"))


def _single(value: ir.Value | None) -> bool:
    return value is not None and len(list(value.uses())) == 1 and not value.is_graph_output()


def _rewrite(graph: ir.Graph, transpose: ir.Node, unsqueezed: dict[int, ir.Value]) -> int:
    perm = list(m.attr(transpose, "perm", []) or [])
    split = m.producer(transpose.inputs[0], "Reshape")
    if perm not in _PERMS or split is None or not _single(split.outputs[0]):
        return 0
    heads = split.outputs[0]
    if heads.shape is None or len(heads.shape) != 4 or heads.dtype != ir.DataType.FLOAT:
        return 0
    h, dh = heads.shape[2], heads.shape[3]
    y = split.inputs[0]
    if not isinstance(h, int) or not isinstance(dh, int) or h < 1 or dh < 1 or not _single(y):
        return 0
    bias = None
    add = m.producer(y, "Add")
    if add is not None:
        product, other = add.inputs
        if m.producer(product, "MatMul") is None:
            product, other = other, product
        bias = m.const(other)
        if bias is None or bias.dtype != np.float32 or bias.size != h * dh or bias.shape[-1:] != (h * dh,) \
                or not _single(product):
            return 0
        y = product
    matmul = m.producer(y, "MatMul")
    if matmul is None:
        return 0
    x, w_value = matmul.inputs
    w = m.const(w_value)
    if x is None or x.shape is None or len(x.shape) != 3 or w is None or w.dtype != np.float32 \
            or w.shape != (x.shape[2], h * dh) or tuple(heads.shape[:2]) != tuple(x.shape[:2]):
        return 0
    x4 = unsqueezed.get(id(x))
    if x4 is None or x4.producer() is None or x4.producer().graph is not graph:
        axis = m.new_initializer(graph, np.array([1], np.int64), "heads_axis")
        node = ir.node("Unsqueeze", [x, axis])
        graph.insert_before(transpose, node)
        x4 = unsqueezed[id(x)] = node.outputs[0]
    per_head = m.new_initializer(graph, w.reshape(w.shape[0], h, dh).transpose(1, 0, 2).copy(), "w_heads")
    nodes = [ir.node("MatMul", [x4, per_head])]
    if bias is not None:
        c = m.new_initializer(graph, bias.reshape(h, 1, dh).copy(), "b_heads")
        nodes.append(ir.node("Add", [nodes[-1].outputs[0], c]))
    if perm == [0, 2, 3, 1]:
        nodes.append(ir.node("Transpose", [nodes[-1].outputs[0]], {"perm": [0, 1, 3, 2]}))
    m.replace(graph, transpose.outputs[0], nodes, transpose)
    return 1
