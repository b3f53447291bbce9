"""A MatMul between Transposes and regrouping Reshapes re-planned so the fewest elements are transposed.

``jnp.einsum`` with several free axes on one side (grouped-query attention's
``einsum("btkgh,bskh->bkgts", q, k)`` and ``einsum("bkgts,bskh->btkgh", probs, v)``) may trace the
dot_general with its operands in either order; its lowering then merges the free axes into one
(``Transpose`` -> ``Reshape``), multiplies, splits them back and transposes the result into the
einsum's order. keras-hub's Gemma gets the keys on the left: the scores come out as
``[b, kv, s, t, g]`` and a Transpose of the whole score tensor (and one of the probabilities before
``probs @ v``) puts them in order; its last axis is the group (2 here), the slow case of ONNX
Runtime's Transpose, and a mask Where or Softmax left on that layout (ORT's transpose optimizer
pushes the Transpose past a constant mask) runs on axes of length 2 too.

The chain is an einsum over labelled axes: each operand's source axes, the result's axes after the
split and the Transpose. This rule plans it again: either operand may go left, the batch and free
axes of each side are taken in the result's order or in their operand's, and each operand gets one
Transpose (and Reshape) that lays it out as ``[batch, free, contracted]`` / ``[batch, contracted, free]``; the plan
that transposes the fewest elements (operands and result, counted by size) replaces the chain when
it transposes fewer than the chain does. Only static shapes, operands whose batch axes are equal
(no broadcast) and Reshapes that merge or split whole axes are handled; a chain without a Reshape on
an operand is ``matmul_order``'s.

Numbers: each output element is the same dot product of the same two vectors, over the contracted
axis in the same order, so ORT's results do not change (the test compares the bits); ``matmul_order``
(the same swap without the Reshapes) relies on the same property.

keras-hub Gemma-2 (GQA, soft-caps, 2 layers, zoo2 ``kh_gemma2``, one ORT thread): the node medians of
ORT's profile sum to 1.45 ms a run, 2.82 before (Where 0.78 -> 0.10 ms, Transpose 0.44 -> 0.05,
Softmax 0.29 -> 0.04); CPU time over jax.jit's 1.10-1.11, 2.89 before. Symbolic sizes (NNX's grouped
attention with ``s``, ``t``) are not handled yet: the Reshapes' targets are computed there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m


def rewrite(graph: ir.Graph) -> int:
    """Re-plan the MatMul chains in ``graph`` where fewer elements are transposed; returns how many."""
    return sum(_one(graph, node) for node in m.each_node(graph, "MatMul"))


def _op(node: ir.Node | None, op_type: str) -> bool:
    return node is not None and node.domain in ("", "ai.onnx") and node.op_type == op_type


def _sole(value: ir.Value) -> bool:
    return len(value.uses()) == 1 and not value.is_graph_output()


def _shape_const(node: ir.Node) -> list[int] | None:
    if len(node.inputs) < 2 or m.attr(node, "allowzero", 0):
        return None
    shape = m.const(node.inputs[1])
    return None if shape is None else [int(d) for d in np.asarray(shape).reshape(-1)]


class _Side:
    """One operand: ``src`` -> (Transpose ``perm``) -> ``pre`` -> (Reshape) -> the MatMul's operand."""

    def __init__(self, value: ir.Value) -> None:
        self.reshape = None
        self.pre = value
        producer = value.producer()
        if _op(producer, "Reshape") and _sole(value) and _shape_const(producer) is not None:
            self.reshape, self.pre = producer, producer.inputs[0]
        self.transpose = None
        self.src = self.pre
        producer = self.pre.producer()
        if _op(producer, "Transpose") and _sole(self.pre):
            perm = m.attr(producer, "perm")
            if perm is not None:
                self.transpose, self.src = producer, producer.inputs[0]
        self.src_dims = m.static_dims(self.src)
        self.pre_dims = m.static_dims(self.pre)
        self.perm = ([] if self.pre_dims is None else list(range(len(self.pre_dims))) if self.transpose is None
                     else [int(p) for p in m.attr(self.transpose, "perm")])


def _split(dims: Sequence[int], batch: Sequence[int], first: int, second: int) -> tuple[list, list] | None:
    """``dims`` as ``batch`` + a group of axes of product ``first`` + one of product ``second``."""
    nb = len(batch)
    if list(dims[:nb]) != list(batch):
        return None
    rest = list(dims[nb:])
    for j in range(1, len(rest)):
        if math.prod(rest[:j]) == first and math.prod(rest[j:]) == second:
            return rest[:j], rest[j:]
    return None


def _one(graph: ir.Graph, mm: ir.Node) -> int:
    out = mm.outputs[0]
    dims = m.static_dims(out)
    if dims is None or len(dims) < 3 or mm.inputs[0] is None or mm.inputs[1] is None:
        return 0
    r = len(dims)
    batch, rows, cols = dims[:r - 2], dims[-2], dims[-1]
    a, b = _Side(mm.inputs[0]), _Side(mm.inputs[1])
    a_dims, b_dims = m.static_dims(mm.inputs[0]), m.static_dims(mm.inputs[1])
    if a.src_dims is None or b.src_dims is None or a.pre_dims is None or b.pre_dims is None:
        return 0
    if a.reshape is None and b.reshape is None:  # no regrouping: matmul_order's case
        return 0
    if len(a.perm) != len(a.pre_dims) or len(b.perm) != len(b.pre_dims):
        return 0
    if a_dims is None or b_dims is None or a_dims[:r - 2] != batch or b_dims[:r - 2] != batch:
        return 0
    contracted = a_dims[-1]
    a_groups = _split(a.pre_dims, batch, rows, contracted)
    b_groups = _split(b.pre_dims, batch, contracted, cols)
    if a_groups is None or b_groups is None or a_groups[1] != b_groups[0]:
        return 0
    m_atoms, k_atoms, n_atoms = a_groups[0], a_groups[1], b_groups[1]
    # The result: an optional Reshape that splits rows and columns into those atoms, an optional Transpose.
    last, post_dims, final_perm = out, list(dims), None
    owned_out: list[ir.Node] = []
    readers = [u.node for u in out.uses()]
    if len(readers) == 1 and not out.is_graph_output() and _op(readers[0], "Reshape") and readers[0].inputs[0] is out:
        target = m.static_dims(readers[0].outputs[0])
        if target is not None and _shape_const(readers[0]) is not None:
            post_dims, last = target, readers[0].outputs[0]
            owned_out.append(readers[0])
    if owned_out:
        if _split(post_dims, batch, rows, cols) != (m_atoms, n_atoms):
            return 0
    elif len(m_atoms) != 1 or len(n_atoms) != 1:
        return 0
    readers = [u.node for u in last.uses()]
    if len(readers) == 1 and not last.is_graph_output() and _op(readers[0], "Transpose"):
        perm = m.attr(readers[0], "perm")
        if perm is not None and len(perm) == len(post_dims):
            final_perm = [int(p) for p in perm]
            last = readers[0].outputs[0]
    # Labels: batch 0.., then the atoms of rows, contracted and columns.
    nb = len(batch)
    lab_m = list(range(nb, nb + len(m_atoms)))
    lab_k = list(range(lab_m[-1] + 1, lab_m[-1] + 1 + len(k_atoms)))
    lab_n = list(range(lab_k[-1] + 1, lab_k[-1] + 1 + len(n_atoms)))
    size = dict(zip(range(nb), batch)) | dict(zip(lab_m, m_atoms)) | dict(zip(lab_k, k_atoms)) | dict(
        zip(lab_n, n_atoms))
    a_src = _source_labels(list(range(nb)) + lab_m + lab_k, a.perm)
    b_src = _source_labels(list(range(nb)) + lab_k + lab_n, b.perm)
    post = list(range(nb)) + lab_m + lab_n
    order = [post[p] for p in final_perm] if final_perm is not None else post
    elements = math.prod(dims)
    now = (_moved(a.perm) * math.prod(a.src_dims) + _moved(b.perm) * math.prod(b.src_dims)
           + (final_perm is not None and _moved(final_perm)) * elements)
    best = None
    for side_l, side_r, free_l, free_r, src_l, src_r in (
            (a, b, lab_m, lab_n, a_src, b_src), (b, a, lab_n, lab_m, b_src, a_src)):
        # Each group of axes in the result's order or in its operand's: whichever moves fewer elements.
        for bat in _orders(list(range(nb)), order, src_l, src_r):
            for fl in _orders(free_l, order, src_l):
                for fr in _orders(free_r, order, src_r):
                    perm_l = [src_l.index(x) for x in bat + fl + lab_k]
                    perm_r = [src_r.index(x) for x in bat + lab_k + fr]
                    res = bat + fl + fr
                    perm_o = [res.index(x) for x in order]
                    cost = (_moved(perm_l) * math.prod(side_l.src_dims)
                            + _moved(perm_r) * math.prod(side_r.src_dims) + _moved(perm_o) * elements)
                    if best is None or cost < best[0]:
                        best = (cost, side_l, side_r, bat, fl, fr, perm_l, perm_r, res, perm_o)
    cost, side_l, side_r, bat, fl, fr, perm_l, perm_r, res, perm_o = best
    if cost >= now or [size[x] for x in order] != m.static_dims(last) or out.type is None:
        return 0
    nodes: list[ir.Node] = []

    def emit(op: str, inputs: list[ir.Value], shape: list[int], **attrs) -> ir.Value:
        node = ir.node(op, inputs, attributes=attrs or None)
        node.outputs[0].shape = ir.Shape(shape)
        node.outputs[0].type = out.type
        nodes.append(node)
        return node.outputs[0]

    def lay(side: _Side, perm: list[int], groups: list[list[int]]) -> ir.Value:
        value = side.src
        laid = [side.src_dims[p] for p in perm]
        if _moved(perm):
            value = emit("Transpose", [value], laid, perm=perm)
        merged = [math.prod(size[x] for x in g) for g in groups]
        if merged != laid:
            shape = m.new_initializer(graph, np.array(merged, np.int64), "einsum_shape")
            value = emit("Reshape", [value, shape], merged)
        return value

    left = lay(side_l, perm_l, [[x] for x in bat] + [fl, lab_k])
    right = lay(side_r, perm_r, [[x] for x in bat] + [lab_k, fr])
    mm_dims = [size[x] for x in bat] + [math.prod(size[x] for x in fl), math.prod(size[x] for x in fr)]
    value = emit("MatMul", [left, right], mm_dims)
    res_dims = [size[x] for x in res]
    if res_dims != mm_dims:
        shape = m.new_initializer(graph, np.array(res_dims, np.int64), "einsum_shape")
        value = emit("Reshape", [value, shape], res_dims)
    if _moved(perm_o):
        value = emit("Transpose", [value], [size[x] for x in order], perm=perm_o)
    m.replace(graph, last, nodes, mm)
    return 1


def _orders(labels: list[int], *orders: list[int]) -> list[list[int]]:
    """``labels`` in the order each of ``orders`` gives them (distinct orders only)."""
    found: list[list[int]] = []
    for order in orders:
        got = [x for x in order if x in labels]
        if got not in found:
            found.append(got)
    return found


def _source_labels(pre_labels: list[int], perm: list[int]) -> list[int]:
    """The labels of the source's axes, given the labels after its Transpose ``perm``."""
    src = [0] * len(perm)
    for i, p in enumerate(perm):
        src[p] = pre_labels[i]
    return src


def _moved(perm: Sequence[int]) -> bool:
    return list(perm) != list(range(len(perm)))
