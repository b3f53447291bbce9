"""A long float sum over middle axes (spatial axes of NHWC) in blocks of rows, without moving them last.

The lowering sums more than ``LONG_LEADING_SUM`` float32 elements in blocks (``reduce.pairwise_sum``:
ONNX Runtime's ReduceSum accumulates almost sequentially); over axes that are not the last ones it
first Transposes them last, then Pads them to a multiple of ``SUM_BLOCK`` and sums blocks of it. For
``x.mean(axis=(1, 2))`` of an NHWC activation that is a full copy of the input in ORT's slowest
Transpose, and a second one in the Pad: ``[8, 56, 56, 64]`` took 1.68 ms in ORT (one thread) against
0.55 ms for jax.jit; a variance over the same axes (two such sums) 2.30 against 0.57.

The rule sums the same rows where they lie: ``x`` seen as ``[P, R, Q]`` (the kept axes before and
after the reduced ones), each block of ``BLOCK`` consecutive rows summed by one ReduceSum over the
middle axis of ``[P, R / BLOCK, BLOCK, Q]`` (ORT's strided reduction, which reads rows whole), then
the block sums the same way until one is left; only the block sums (``1 / BLOCK`` of the input)
are padded, with -0.0 (``s + -0.0 == s`` for every ``s``, a -0.0 included). The rounding error
still grows with the log of the length, as XLA's does; the sums are associated differently from
the lowering's, so the results move by rounding (measured against a float64 sum: as close or
closer). One thread, process CPU time, medians of 9 alternating, whole converted functions (load 5.9):
``x.mean(axis=(1, 2))`` of ``[8, 56, 56, 64]`` 2.63 -> 0.28 ms (jax.jit 0.25), of ``[16, 7, 7, 512]``
0.25 -> 0.13 ms (jax.jit 0.15); ``x.var(axis=(1, 2))`` of ``[8, 28, 28, 128]`` 2.35 -> 1.20 ms (jax.jit
0.36: the rest is the elementwise passes XLA fuses); a group norm's statistics over (H, W, channels of
a group), the group's channels summed first along the row, ``[8, 32, 32, 128]``, 32 groups, the whole
norm 12.3 -> 8.1 ms (jax.jit 3.0: ORT's broadcasts of the ``[8, 1, 1, 32, 1]`` statistics). Sums
whose reduced axes are already last, or short enough to have no blocks (the layout rules then drop
the Transpose), are left as they are.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m

SUM_BLOCK = 256  # the lowering's blocks (reduce.SUM_BLOCK)
BLOCK = 32  # rows per block: ORT's strided ReduceSum is sequential along the rows it sums
MAX_TRAILING = 256  # reduced axes after the kept ones, summed first along the row: at most this many elements


def rewrite(graph: ir.Graph) -> int:
    """Sum the transposed long float sums of ``graph`` and its subgraphs in place; returns how many."""
    return m.count_everywhere(graph, "Transpose", _one)



def _live(node: ir.Node, depth: int = 16) -> bool:
    """True unless every output of ``node`` is read only by dead nodes (an earlier rule's leftovers,
    removed after the rules); unsure past ``depth`` levels: live."""
    if depth == 0:
        return True
    return any(o.is_graph_output() or any(_live(u.node, depth - 1) for u in o.uses()) for o in node.outputs)


def _only_user(value: ir.Value) -> ir.Node | None:
    uses = [u for u in value.uses() if _live(u.node)]
    if len(uses) != 1 or value.is_graph_output() or uses[0].idx != 0:
        return None
    node = uses[0].node
    return node if node.domain == "" else None


def _last_axis_sum(node: ir.Node) -> bool:
    axes = m.const(node.inputs[1]) if len(node.inputs) > 1 else None
    return node.op_type == "ReduceSum" and m.attr(node, "keepdims", 1) == 0 and axes is not None \
        and axes.size == 1 and int(axes.reshape(-1)[0]) == -1 and not m.attr(node, "noop_with_empty_axes", 0)


def _chain(start: ir.Value, kept: int) -> list[ir.Node] | None:
    """The nodes of ``pairwise_sum`` after its first Reshape (``start``, rank ``kept + 1``): Pad of zeros,
    Reshape to blocks, ReduceSum of the last axis, repeated, then the last ReduceSum; None otherwise."""
    nodes: list[ir.Node] = []
    value = start
    while True:
        node = _only_user(value)
        if node is None:
            return None
        if node.op_type == "Pad":
            fill = m.const(node.inputs[2]) if len(node.inputs) > 2 else np.zeros(1)
            if fill is None or fill.size != 1 or fill.reshape(-1)[0] != 0 or len(node.inputs) > 3 \
                    or m.attr(node, "mode", "constant") != "constant":
                return None
            nodes.append(node)
            value = node.outputs[0]
            continue
        if node.op_type == "Reshape":
            summed = _only_user(node.outputs[0])
            if summed is None or not _last_axis_sum(summed) or m.rank(node.outputs[0]) != kept + 2:
                return None
            nodes += [node, summed]
            value = summed.outputs[0]
            continue
        if _last_axis_sum(node) and m.rank(value) == kept + 1:
            nodes.append(node)
            return nodes
        return None


def _one(graph: ir.Graph, transpose: ir.Node) -> int:
    x = transpose.inputs[0]
    shape = m.static_dims(x)
    perm = m.attr(transpose, "perm")
    if shape is None or perm is None or x is None or x.dtype != ir.DataType.FLOAT:
        return 0
    perm = list(perm)
    rank = len(shape)
    if sorted(perm) != list(range(rank)):
        return 0
    kept = next((k for k in range(1, rank) if perm[:k] == sorted(perm[:k]) and perm[k:] == sorted(perm[k:])), 0)
    if not kept:
        return 0
    reduced = perm[kept:]
    trailing = [a for a in reduced if a > max(perm[:kept])]  # after every kept axis: summed first
    middle = [a for a in reduced if a not in trailing]
    if not middle or middle != list(range(middle[0], middle[-1] + 1)):
        return 0
    first, last = middle[0], middle[-1]
    start = transpose.outputs[0]  # one reduced axis: the optimizer dropped the Reshape that kept its shape
    if len(reduced) > 1:
        reshape = _only_user(start)
        target = m.const(reshape.inputs[1]) if reshape is not None and reshape.op_type == "Reshape" else None
        n = math.prod(shape[a] for a in reduced)
        dims = list(target.reshape(-1)) if target is not None else []
        if len(dims) < kept or any(d not in (0, shape[a]) for d, a in zip(dims, perm[:kept])):
            return 0
        if dims[kept:] == [n]:
            start = reshape.outputs[0]
        elif dims[kept:] != [n // SUM_BLOCK, SUM_BLOCK] or n % SUM_BLOCK:  # (merged with the first blocks')
            return 0
    chain = _chain(start, kept)
    if chain is None:
        return 0
    t = math.prod(shape[a] for a in trailing)
    p, r = math.prod(shape[:first]), math.prod(shape[first:last + 1])
    q = math.prod(shape[last + 1:rank - len(trailing)])
    if r <= BLOCK or t > MAX_TRAILING:
        return 0
    nodes: list[ir.Node] = []

    def add(op: str, inputs: list[ir.Value], attrs: dict | None = None) -> ir.Value:
        node = ir.node(op, inputs, attrs or {})
        nodes.append(node)
        node.outputs[0].dtype = ir.DataType.FLOAT
        return node.outputs[0]

    def ints(values: list[int], name: str) -> ir.Value:
        return m.new_initializer(graph, np.array(values, np.int64), name)

    value, rows = x, r
    if trailing:  # a group norm's channels of a group: a short sum of contiguous elements first
        value = add("Reshape", [value, ints([p, r, q, t], "column_sums_groups")])
        value = add("ReduceSum", [value, ints([-1], "column_sums_group_axis")], {"keepdims": 0})
    while rows > BLOCK:
        blocks = -(-rows // BLOCK)
        if blocks * BLOCK != rows:
            value = add("Reshape", [value, ints([p, rows, q], "column_sums_rows")])
            value = add("Pad", [value, ints([0, 0, 0, 0, blocks * BLOCK - rows, 0], "column_sums_pads"),
                                m.new_initializer(graph, np.array(-0.0, np.float32), "column_sums_fill")])
        value = add("Reshape", [value, ints([p, blocks, BLOCK, q], "column_sums_blocks")])
        value = add("ReduceSum", [value, ints([2], "column_sums_axis")], {"keepdims": 0})
        rows = blocks
    value = add("ReduceSum", [value, ints([1], "column_sums_rows_axis")], {"keepdims": 0})
    end = chain[-1].outputs[0]
    add("Reshape", [value, ints([shape[a] for a in perm[:kept]], "column_sums_shape")])
    m.replace(graph, end, nodes, chain[-1])
    return 1
