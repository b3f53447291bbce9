"""A MatMul by a constant matrix that maps one axis of a tensor, computed on that axis where it lies.

``jax.image.resize(..., "bilinear")`` (any method but nearest, ``scale_and_translate``, an antialiased
downsampling) multiplies each spatial axis by a constant weight matrix in one einsum. Its lowering lays the
image out so that the axis comes first or last, multiplies, and transposes the result back: between two
NCHW convolutions the [n, h, w, c] image of a Flax U-Net took three Transposes of its own besides the
convolutions'. The product ``y[..., j, ...] = sum_k x[..., k, ...] w[k, j]`` needs none: ``MatMul(x, w)``
for the last axis, ``MatMul(wᵀ, x)`` (the matrix broadcast over the leading axes) for the one before, and
``MatMul(wᵀ, Reshape(x, [a, k, b]))`` reshaped back for any other.

``read`` reads such a chain (source, an optional Transpose and a Reshape that merges axes, the MatMul, an
optional Reshape that splits them back, Transposes) as the product on one axis of its source followed by
one permutation. ``rewrite`` computes each chain so where that moves fewer elements than its Transposes do;
``layout`` moves a Transpose through such a product (``emit`` on the Transpose's input) where it then meets
its inverse, so that a resize between NCHW convolutions runs in NCHW.

Numbers: each output element is the same dot product of the same two vectors, over the mapped axis in the
same order; ORT's GEMM kernels may round differently in the other form (within float tolerance: tested).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.passes import FOLD_MAX_ELEMENTS
from jaxconv.onnx.rewrites import _dim_products as dp
from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites._dim_products import named_dims


@dataclass
class AxisProduct:
    """``last`` = ``Transpose(P, order)`` where ``P`` is ``source`` with its axis ``axis`` mapped by ``matrix``."""

    source: ir.Value
    axis: int
    matrix: ir.Value  # as the MatMul reads it: [n, k] on the left, [k, n] on the right
    matrix_left: bool
    order: list[int]  # the result's axis i is P's axis order[i]
    last: ir.Value
    mm: ir.Node
    chain: list[ir.Node]  # the nodes the product replaces, in order
    moved: int  # elements the chain's Transposes move

    @property
    def mapped(self) -> int:
        """The size of the mapped axis after the product."""
        shape = self.matrix.shape
        assert shape is not None
        return int(shape[0] if self.matrix_left else shape[1])


def rewrite(graph: ir.Graph) -> int:
    """Compute each axis product of ``graph`` on its source's axis where fewer elements are transposed."""
    count = 0
    for node in list(graph):
        if node.graph is not graph or node.op_type != "MatMul" or node.domain != "":
            continue
        found = read(node)
        if found is None or not found.moved:
            continue
        dims = dp.dims(found.source)
        assert dims is not None
        kept = 0 if found.order == sorted(found.order) else dp.estimate(dims)
        if kept < found.moved and emit(graph, found, found.source, found.axis, found.order):
            count += 1
    return count


def read(mm: ir.Node, start: ir.Value | None = None) -> AxisProduct | None:
    """The MatMul ``mm`` and the Transposes and Reshapes around it as one axis product of a source (of
    ``start`` where given: the chain then must begin there); None where it is not one. The Reshape before
    the MatMul may belong to the product before (one that splits axes back): the chain then starts after it."""
    return _read(mm, start, merge=True) or _read(mm, start, merge=False)


def _read(mm: ir.Node, start: ir.Value | None, merge: bool) -> AxisProduct | None:
    if mm.op_type != "MatMul" or mm.domain != "" or len(mm.inputs) != 2 or None in mm.inputs:
        return None
    a, b = mm.inputs
    assert a is not None and b is not None
    left = _matrix(a)
    if left == _matrix(b):
        return None
    matrix, operand = (a, b) if left else (b, a)
    chain: list[ir.Node] = []
    pre = operand
    reshape = m.producer(operand, "Reshape") if merge else None
    if reshape is not None and operand is not start and m.sole_use(operand):
        chain.append(reshape)
        pre = reshape.inputs[0]
    src, perm = pre, None
    transpose = m.producer(pre, "Transpose")
    if transpose is not None and pre is not start and pre is not None and m.sole_use(pre):
        perm = m.transpose_perm(transpose, m.rank(pre) or 0)
        if perm is not None:
            chain.insert(0, transpose)
            src = transpose.inputs[0]
    if src is None or (start is not None and src is not start):
        return None
    dims, op_dims = dp.dims(src), dp.dims(operand)
    if dims is None or op_dims is None or len(op_dims) < 2:
        return None
    perm = perm or list(range(len(dims)))
    labels = _merged([dims[p] for p in perm], perm, op_dims)
    contracted = len(op_dims) - (2 if left else 1)
    k, n = (matrix.shape[1], matrix.shape[0]) if left else (matrix.shape[0], matrix.shape[1])  # type: ignore[index]
    if labels is None or len(labels[contracted]) != 1 or dims[labels[contracted][0]] != dp.Size(k) or k == 1:
        return None
    axis = labels[contracted][0]
    chain.append(mm)
    moved = dp.estimate(dims) if perm != sorted(perm) else 0
    sizes = [dp.Size(n) if j == axis else d for j, d in enumerate(dims)]  # of each label after the product
    last = mm.outputs[0]
    post = next(iter(last.uses())).node if m.sole_use(last) else None
    if post is not None and post.op_type == "Reshape" and post.domain == "":
        new_dims = dp.dims(post.outputs[0])
        split = None if new_dims is None else _split([x for g in labels for x in g], sizes, new_dims)
        if split is not None:  # else it may merge axes for the next product
            labels = split
            chain.append(post)
            last = post.outputs[0]
    if any(len(g) != 1 for g in labels):
        return None
    order = [g[0] for g in labels]
    while m.sole_use(last):
        after = next(iter(last.uses())).node
        q = m.transpose_perm(after, len(order))
        if q is None:
            break
        moved += dp.estimate(sizes)
        order = [order[i] for i in q]
        chain.append(after)
        last = after.outputs[0]
    if sorted(order) != list(range(len(dims))):
        return None
    return AxisProduct(src, axis, matrix, left, order, last, mm, chain, moved)


_MATRICES = "jaxconv.axis_products.matrices"  # graph.meta: value -> whether it is a constant matrix


def _matrix(value: ir.Value) -> bool:
    """Whether ``value`` is a 2-D matrix computed from constants alone, of static shape (remembered per graph:
    ``layout`` asks again every round)."""
    if m.rank(value) != 2 or m.static_dims(value) is None:
        return False
    graph = value.graph
    known: dict[ir.Value, bool] = graph.meta.setdefault(_MATRICES, {}) if graph is not None else {}
    if value not in known:
        known[value] = m.from_constants(value)
    return known[value]


def _merged(dims: list[dp.Size], labels: list[int], into: list[dp.Size]) -> list[list[int]] | None:
    """The labels of the axes of ``dims`` that each axis of ``into`` holds, for a Reshape (row-major) that
    merges runs of them: an axis of size 1 it inserts holds none; None where it splits one."""
    out: list[list[int]] = []
    i = 0
    for size in into:
        group: list[int] = []
        if size.unit:
            if i < len(dims) and dims[i].unit:
                group.append(labels[i])
                i += 1
            out.append(group)
            continue
        held = dp.ONE
        while held != size:
            if i >= len(dims) or size.over(held * dims[i]) is None:
                return None
            held = held * dims[i]
            group.append(labels[i])
            i += 1
        out.append(group)
    while i < len(dims) and out and dims[i].unit:  # axes of size 1 at the end join the last axis
        out[-1].append(labels[i])
        i += 1
    return out if i == len(dims) else None


def _split(labels: list[int], sizes: list[dp.Size], into: list[dp.Size]) -> list[list[int]] | None:
    """One label for each axis of ``into``, in row-major order, for a Reshape of a tensor whose axes are
    ``labels`` (row-major, of ``sizes``): None where an axis is not one of them whole."""
    pending = list(labels)
    out: list[list[int]] = []
    for size in into:
        if not pending or sizes[pending[0]] != size:
            return None
        out.append([pending.pop(0)])
    return None if pending else out


def _oriented(graph: ir.Graph, found: AxisProduct, left: bool, before: ir.Node) -> ir.Value | None:
    """The product's matrix as the ``left`` ([n, k]) or right ([k, n]) operand: a constant transposed here,
    or a Transpose of a constant expression the clean-up folds; None where it would not fold."""
    if left == found.matrix_left:
        return found.matrix
    arr = m.const(found.matrix)
    if arr is not None:
        return m.new_initializer(graph, arr.T, f"{found.matrix.name or 'matrix'}_t")
    shape = m.static_dims(found.matrix)
    if shape is None or int(np.prod(shape)) > FOLD_MAX_ELEMENTS:
        return None
    node = ir.node("Transpose", [found.matrix], {"perm": [1, 0]})
    node.outputs[0].type = found.matrix.type
    node.outputs[0].shape = ir.Shape(shape[::-1])
    graph.insert_before(before, node)
    return node.outputs[0]


def emit(graph: ir.Graph, found: AxisProduct, source: ir.Value, axis: int, order: list[int]) -> bool:
    """Replace ``found``'s chain by the product on axis ``axis`` of ``source`` and ``Transpose(order)``
    after it (none for the identity); False where no constant Reshape target says it."""
    dims = named_dims(source)
    if dims is None:
        return False
    rank, n = len(dims), found.mapped
    out_dims = [n if j == axis else d for j, d in enumerate(dims)]
    trailing = dims[axis + 1:]
    named = [d for d in trailing if isinstance(d, str)]
    if axis < rank - 2 and (len(named) > 1 or named and any(isinstance(d, str) for d in dims[:axis])):
        return False  # no constant target merges them (-1 beside a copied 0 would read 0 / 0)
    matrix = _oriented(graph, found, axis != rank - 1, found.mm)
    if matrix is None:
        return False
    nodes: list[ir.Node] = []

    def add(op: str, inputs: list, shape: list | None, **attrs) -> ir.Value:
        node = ir.node(op, inputs, attributes=attrs or None)
        nodes.append(node)
        node.outputs[0].type = found.last.type
        if shape is not None:
            node.outputs[0].shape = ir.Shape(shape)
        return node.outputs[0]

    if axis == rank - 1:
        value = add("MatMul", [source, matrix], out_dims)
    elif axis == rank - 2:
        value = add("MatMul", [matrix, source], out_dims)
    else:  # the axes after it merged: the matrix broadcast over the leading ones
        lead = [0 if isinstance(d, str) else d for d in dims[:axis]]
        width = -1 if named else int(np.prod(trailing, dtype=np.int64))
        merged_dims = [*dims[:axis], dims[axis], None if named else width]
        into = m.new_initializer(graph, np.array([*lead, dims[axis], width], np.int64), "axis_product_shape")
        merged = add("Reshape", [source, into], merged_dims)
        product = add("MatMul", [matrix, merged], [*merged_dims[:-2], n, merged_dims[-1]])
        back = [*lead, n, *[-1 if isinstance(d, str) else d for d in trailing]]
        value = add("Reshape", [product, m.new_initializer(graph, np.array(back, np.int64), "axis_product_shape")],
                    out_dims)
    if order != sorted(order):
        add("Transpose", [value], [out_dims[j] for j in order], perm=order)
    m.replace(graph, found.last, nodes, found.mm)
    for node in reversed(found.chain):
        if node.graph is graph and not any(o.uses() or o.is_graph_output() for o in node.outputs):
            graph.remove(node, safe=True)
    return True

