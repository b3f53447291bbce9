"""A MatMul between Transposes and regrouping Reshapes re-planned so the fewest elements are transposed.

``jnp.einsum`` with several free axes on one side (grouped-query attention's
``einsum("btkgh,bskh->bkgts", q, k)`` and ``einsum("bkgts,bskh->btkgh", probs, v)``) may trace the
dot_general with its operands in either order; its lowering then merges the free axes into one
(``Transpose`` -> ``Reshape``), multiplies, splits them back and transposes the result into the
einsum's order. keras-hub's Gemma gets the keys on the left: the scores come out as
``[b, kv, s, t, g]`` and a Transpose of the whole score tensor (and one of the probabilities before
``probs @ v``) puts them in order; its last axis is the group (2 here), the slow case of ONNX
Runtime's Transpose, and a mask Where or Softmax left on that layout (ORT's transpose optimizer
pushes the Transpose past a constant mask) runs on axes of length 2 too. Flax NNX's attention writes
the heads as ``[..., h, 1, d]`` (a group of one) and multiplies the values on the left as well:
``v[b, s, h, d]`` by ``probs[1, b, h, t, s]`` gives ``[b, h, d, 1, t]``, after a Transpose of the
whole probability tensor.

The chain is an einsum over labelled axes: each operand's source axes, the result's axes after the
split and the Transpose. This rule plans it again: either operand may go left, the batch, free and
contracted axes are taken in the result's order or in an operand's, and each operand gets one
Transpose (and Reshape) that lays it out as ``[batch, free, contracted]`` / ``[batch, contracted, free]``;
the plan that transposes the fewest elements (operands and result, counted by size) replaces the chain
when it transposes fewer than the chain does. Axes of length 1 carry no label: a Transpose that moves
only them moves no element, and the plan leaves them to Squeeze, Unsqueeze or the Reshapes. An operand's
swap of its last two axes costs nothing where ONNX Runtime folds it into the MatMul (a transposed operand;
static, ``transposes`` first drops the axes of length 1 such a Transpose also moves): keras-hub Llama and
Phi-3, whose probabilities come as ``[1, b, h, t, s]`` too, took 1.02-1.05x the CPU time re-planned.

Dimensions are products of the graph's named sizes (``_dim_products``): the Reshape targets that a
symbolic model computes at run time (``Concat`` of ``Shape`` slices) are read as such products, and the
new Reshapes take constant targets where ``0`` (copy) and one ``-1`` (infer) cover the named sizes, else
the named sizes from ``Shape`` slices of the chain's sources. Operands whose batch axes are equal (no
broadcast) and Reshapes that merge or split whole axes are handled; a chain without a Reshape on an
operand is ``matmul_order``'s.

A weight's gradient contracts a batch and a sequence: ``xᵀ @ dy`` with ``x`` of ``[b, t, f]``, which the
lowering computes as ``Transpose(x, [2, 0, 1])`` merged to ``[f, b*t]``; for a head-split weight
(Flax's DenseGeneral, ``[f, h, d]``) jax computes ``[h, d, f]`` and transposes it, and the lowering
broadcasts a ``[h, d, b*t]`` left operand over the ``[b*t, f]`` right one. An operand whose source is
already in ``[batch, contracted, free]`` order is merged into those two groups and swapped, a Transpose of
the last two axes that ORT's product reads in place (``FusedMatMul``), and a right operand of two axes
broadcast over the left's leading ones is planned as one with those axes among the rows (not where an
operand of such a product is computed from constants: ``axis_products`` and ``weight_first`` lay out a
product by a constant matrix, a resize's or a layer's weight, with the layers around it). A training step
of a small Flax transformer with AdamW: 41 Transposes -> 28, none of them left on the weights' gradients.

Numbers: each output element is the same dot product of the same two vectors, over the contracted
axis in the same order, so ORT's results do not change (the tests compare the bits), except where an
operand is merged and swapped: ORT's product, reading it transposed, blocks the sum differently (within
float32 rounding of jax.jit, tested: a dense layer's gradient over 256 rows, 87% of the elements differ in
the last bits, the largest error against float64 1.7e-5 where it was 2.8e-5, jax.jit's 2.8e-5); ``matmul_order``
(the same swap without the Reshapes) relies on the same property. A product of one row or one column
(a symbolic length of 1 at run time) may take ORT's vector kernel in one order and not the other, whose
sums round differently: within the float tolerance of jax.jit (tested).

keras-hub Gemma-2 (GQA, soft-caps, 2 layers, zoo2 ``kh_gemma2``, one ORT thread): the node medians of
ORT's profile sum to 1.45 ms a run, 2.82 before (Where 0.78 -> 0.10 ms, Transpose 0.44 -> 0.05,
Softmax 0.29 -> 0.04); CPU time over jax.jit's 1.10-1.11, 2.89 before. Flax NNX's encoder-decoder with
symbolic ``s``, ``t`` (zoo2 ``nnx_seq2seq``): 418 -> 370 nodes, ORT's Transpose kernels 1.19 -> 0.43
ms a run (the probabilities' ``[1, 2, 4, 0, 3]`` Transposes, 0.2 ms each at ``s`` = 64, gone); CPU time
with / without 0.77-0.81 on one thread, 0.81-0.84 on the default threads (load 3.2-3.5).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Union

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _dim_products as dp
from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites._dim_products import Size

Label = Union[int, None]  # an axis of length > 1, or None for one of length 1
# A Reshape target entry: an int (0 copies, -1 infers) or (source, axis): that source's dimension.
Piece = Union[int, tuple]
_SHAPE_ARITHMETIC = frozenset({"Shape", "Cast", "Concat", "ReduceProd", "Gather", "Slice", "Squeeze",
                               "Unsqueeze", "Reshape", "Mul", "Identity"})


def rewrite(graph: ir.Graph) -> int:
    """Re-plan the MatMul chains in ``graph`` where fewer elements are transposed; returns how many."""
    count = 0
    for node in m.each_node(graph, "MatMul"):
        plan = _plan(node)
        if plan is not None:
            _emit(graph, node, plan)
            count += 1
    return count


def _is(node: ir.Node, op_type: str) -> bool:
    return node.domain in ("", "ai.onnx") and node.op_type == op_type


def _sole(value: ir.Value) -> bool:
    return len(value.uses()) == 1 and not value.is_graph_output()


def _feeds_only(value: ir.Value, node: ir.Node, depth: int = 0) -> bool:
    """Whether ``value`` is read by ``node`` and otherwise only by shape arithmetic whose results go only
    into ``node``'s target (a run-time Reshape target computed from the value's own shape)."""
    if value.is_graph_output() or depth > 8:
        return False
    for use in value.uses():
        reader = use.node
        if reader is node:
            continue
        if reader.domain not in ("", "ai.onnx") or reader.op_type not in _SHAPE_ARITHMETIC:
            return False
        if depth == 0 and reader.op_type != "Shape":  # the tensor itself feeds only Shape
            return False
        if not all(_into_target(out, node, depth + 1) for out in reader.outputs):
            return False
    return any(use.node is node for use in value.uses())


def _into_target(value: ir.Value, node: ir.Node, depth: int) -> bool:
    if value.is_graph_output() or depth > 8 or not value.uses():
        return False
    for use in value.uses():
        if use.node is node and use.idx == 1 and node.op_type == "Reshape":
            continue
        if use.node.domain not in ("", "ai.onnx") or use.node.op_type not in _SHAPE_ARITHMETIC:
            return False
        if not all(_into_target(out, node, depth + 1) for out in use.node.outputs):
            return False
    return True


class _Side:
    """One operand: ``src`` -> (Transpose ``perm``) -> ``pre`` -> (Reshape) -> the MatMul's operand."""

    def __init__(self, value: ir.Value, mm: ir.Node) -> None:
        self.reshape: ir.Node | None = None
        self.pre = value
        node = m.producer(value, "Reshape")
        if node is not None and len(node.inputs) == 2 and _sole(value):
            self.reshape, self.pre = node, node.inputs[0]
        self.transpose: ir.Node | None = None
        self.src = self.pre
        node = m.producer(self.pre, "Transpose")
        reader = self.reshape or mm
        if node is not None and m.attr(node, "perm") is not None and _feeds_only(self.pre, reader):
            self.transpose, self.src = node, node.inputs[0]
        self.src_dims = dp.dims(self.src)
        self.perm: list[int] = []
        if self.src_dims is not None:
            self.perm = (list(range(len(self.src_dims))) if self.transpose is None
                         else [int(p) for p in m.attr(self.transpose, "perm")])
        self.pre_dims = None
        if self.src_dims is not None and sorted(self.perm) == list(range(len(self.src_dims))):
            self.pre_dims = [self.src_dims[p] for p in self.perm]
        self.labels: list[Label] = []  # of the source's axes, set once the chain is read


def _split(dims: Sequence[Size], batch: Sequence[Size], first: Size,
           second: Size) -> tuple[list, list] | None:
    """``dims`` as ``batch`` + a group of axes of product ``first`` + one of product ``second``."""
    nb = len(batch)
    if list(dims[:nb]) != list(batch):
        return None
    rest = list(dims[nb:])
    for j in range(len(rest) + 1):
        if dp.product(rest[:j]) == first and dp.product(rest[j:]) == second:
            return rest[:j], rest[j:]
    return None


def _long(labels: Sequence[Label]) -> list[int]:
    return [x for x in labels if x is not None]


def _long_sizes(dims: Sequence[Size]) -> list[Size]:
    return [d for d in dims if not d.unit]


@dataclass
class _Plan:
    """The new chain: operands laid out from their sources, the product, the result's regrouping."""

    left: _Side
    right: _Side
    left_steps: list
    right_steps: list
    out_steps: list
    last: ir.Value


def _plan(mm: ir.Node) -> _Plan | None:
    if len(mm.inputs) != 2 or mm.inputs[0] is None or mm.inputs[1] is None or mm.outputs[0].type is None:
        return None
    a, b = _Side(mm.inputs[0], mm), _Side(mm.inputs[1], mm)
    if a.reshape is None and b.reshape is None:  # no regrouping: matmul_order's case
        return None
    a_dims, b_dims = dp.dims(mm.inputs[0]), dp.dims(mm.inputs[1])
    if a.pre_dims is None or b.pre_dims is None or a_dims is None or b_dims is None:
        return None
    if any(d.static == 0 for d in (*a.pre_dims, *b.pre_dims)):
        return None
    product_dims = a_dims[:-1] + b_dims[-1:]  # the product as the graph has it
    if len(a_dims) > 2 and len(b_dims) == 2:  # a matrix on the right, broadcast: the left's leading axes are rows
        a_dims = [dp.product(a_dims[:-1]), a_dims[-1]]
    if len(b_dims) == 2 and (m.from_constants(a.src) or m.from_constants(b.src)):
        return None  # a product by a constant matrix: axis_products and weight_first lay those out
    r = len(a_dims)
    if r < 2 or len(b_dims) != r or a_dims[:-2] != b_dims[:-2] or a_dims[-1] != b_dims[-2]:
        return None
    batch, rows, cols = a_dims[:-2], a_dims[-2], b_dims[-1]
    a_groups = _split(a.pre_dims, batch, rows, a_dims[-1])
    b_groups = _split(b.pre_dims, batch, a_dims[-1], cols)
    if a_groups is None or b_groups is None or _long_sizes(a_groups[1]) != _long_sizes(b_groups[0]):
        return None
    # Labels: every axis of length > 1 one, shared where two tensors hold the same axis.
    fresh = itertools.count()
    size: dict[int, Size] = {}

    def name(dims: Sequence[Size]) -> list[Label]:
        out: list[Label] = []
        for d in dims:
            label = None if d.unit else next(fresh)
            if label is not None:
                size[label] = d
            out.append(label)
        return out

    def again(dims: Sequence[Size], labels: list[int]) -> list[Label]:
        rest = iter(labels)
        return [None if d.unit else next(rest) for d in dims]

    bat, lab_m, lab_k = name(batch), name(a_groups[0]), name(a_groups[1])
    lab_n = name(b_groups[1])
    long_m, long_k, long_n = _long(lab_m), _long(lab_k), _long(lab_n)
    a.labels = _source_labels(bat + lab_m + lab_k, a.perm)
    b.labels = _source_labels(bat + again(b_groups[0], long_k) + lab_n, b.perm)
    # The result: an optional Reshape that splits rows and columns into those axes, an optional Transpose.
    out = mm.outputs[0]
    out_dims = batch + [rows, cols]
    split = _split(product_dims, batch, rows, cols)
    if split is None:
        return None
    last, post_dims, (post_m, post_n) = out, product_dims, split
    post = next((u.node for u in out.uses() if _is(u.node, "Reshape") and u.idx == 0), None)
    if post is not None and _feeds_only(out, post):
        got = dp.reshaped(post, product_dims)
        groups = None if got is None else _split(got, batch, rows, cols)
        if groups is not None:
            last, post_dims, (post_m, post_n) = post.outputs[0], got, groups
    if _long_sizes(post_m) != [size[x] for x in long_m] or _long_sizes(post_n) != [size[x] for x in long_n]:
        return None
    post_labels = bat + again(post_m, long_m) + again(post_n, long_n)
    order, last_dims = post_labels, post_dims
    while True:  # the Transposes after it (jnp's einsum may leave two in a row), composed
        readers = [u.node for u in last.uses()]
        perm = m.attr(readers[0], "perm") if len(readers) == 1 and _is(readers[0], "Transpose") else None
        if perm is None or last.is_graph_output() or sorted(int(p) for p in perm) != list(range(len(order))):
            break
        order, last_dims = [order[int(p)] for p in perm], [last_dims[int(p)] for p in perm]
        last = readers[0].outputs[0]
    if any(d.static == 0 for d in last_dims):
        return None
    want = _long(order)
    now = (_laid(a, _long(bat), long_m, long_k, False) + _laid(b, _long(bat), long_k, long_n, False)
           + _moved(post_labels, want) * dp.estimate(out_dims))
    best: tuple | None = None
    for left, right, free_l, free_r in ((a, b, long_m, long_n), (b, a, long_n, long_m)):
        src_l, src_r = _long(left.labels), _long(right.labels)
        # Each group of axes in the result's order or in an operand's: whichever moves fewer elements.
        for bt in _orders(_long(bat), want, src_l, src_r):
            for fl in _orders(free_l, want, src_l):
                for fr in _orders(free_r, want, src_r):
                    for kk in _orders(long_k, src_l, src_r):
                        cost = (_laid(left, bt, fl, kk) + _laid(right, bt, kk, fr)
                                + _moved(bt + fl + fr, want) * dp.estimate(out_dims))
                        if best is None or cost < best[0]:
                            best = (cost, left, right, bt, fl, fr, kk)
    if best is None or best[0] >= now:
        return None
    _, left, right, bt, fl, fr, kk = best
    sources = [left.src_dims, right.src_dims]

    def dims_of(labels: Sequence[int]) -> list[Size]:
        return [size[x] for x in labels]

    def merged(groups: Sequence[Sequence[int]]) -> list[Size]:
        return [dp.product(dims_of(g)) for g in groups]

    left_steps = _lay(left, bt, fl, kk, size, sources)
    right_steps = _lay(right, bt, kk, fr, size, sources)
    mm_dims = merged([[x] for x in bt] + [fl, fr])
    res = bt + fl + fr
    if res == want:
        out_steps = [_regroup(mm_dims, last_dims, sources)]
    else:
        out_steps = [_regroup(mm_dims, dims_of(res), sources), ("transpose", [res.index(x) for x in want]),
                     _regroup(dims_of(want), last_dims, sources)]
    if any(s is None for s in (*left_steps, *right_steps, *out_steps)):
        return None
    return _Plan(left, right, left_steps, right_steps, out_steps, last)


def _lay(side: _Side, batch: list[int], first: list[int], second: list[int], size: dict[int, Size],
         sources: list[list[Size]]) -> list:
    """The steps from ``side``'s source to the MatMul operand: its long axes as ``batch + first + second``,
    each of the last two groups merged; a source in ``batch + second + first`` order with a group of more
    than one axis is merged first and its two groups swapped, which ORT's product does in place."""
    assert side.src_dims is not None
    src = _long(side.labels)
    layout = batch + first + second
    operand = [size[x] for x in batch] + [dp.product([size[x] for x in g]) for g in (first, second)]
    if src == layout:
        return [_regroup(side.src_dims, operand, sources)]
    nb = len(batch)
    if src == batch + second + first and max(len(first), len(second)) > 1:
        return [_regroup(side.src_dims, operand[:nb] + operand[nb:][::-1], sources),
                ("transpose", list(range(nb)) + [nb + 1, nb]), ("same",)]
    return [_regroup(side.src_dims, [size[x] for x in src], sources),
            ("transpose", [src.index(x) for x in layout]),
            _regroup([size[x] for x in layout], operand, sources)]


def _regroup(now: list[Size], want: list[Size], sources: list[list[Size]]) -> tuple | None:
    """How a tensor of dimensions ``now`` becomes one of ``want`` (the same elements in the same order):
    nothing, a Reshape (``("reshape", pieces, want)``) or a Squeeze and an Unsqueeze of axes of length 1;
    None where no target can be written."""
    if now == want:
        return ("same",)
    if dp.product(now) != dp.product(want):
        return None
    pieces: list[Piece | None] = []
    for j, d in enumerate(want):
        if d.static is not None:
            pieces.append(d.static)
        elif j < len(now) and now[j] == d:
            pieces.append(0)
        else:
            pieces.append(None)
    unknown = [j for j, p in enumerate(pieces) if p is None]
    if len(unknown) <= 1:
        return ("reshape", [-1 if p is None else p for p in pieces], want)
    if _long_sizes(now) == _long_sizes(want):
        gone, added = [j for j, d in enumerate(now) if d.unit], [j for j, d in enumerate(want) if d.unit]
        return ("squeeze", gone, added, want)
    found = {j: next(((s, k) for s, dims in enumerate(sources) for k, d in enumerate(dims) if d == want[j]),
                     None) for j in unknown}
    inferred = [j for j in unknown if found[j] is None]
    if len(inferred) > 1:
        return None
    minus = inferred[0] if inferred else unknown[0]
    for j in unknown:
        pieces[j] = -1 if j == minus else found[j]
    return ("reshape", pieces, want)


def _emit(graph: ir.Graph, mm: ir.Node, plan: _Plan) -> None:
    nodes: list[ir.Node] = []
    float_type = mm.outputs[0].type
    sources = [plan.left.src, plan.right.src]

    def node(op: str, inputs: list[ir.Value], shape: list[Size] | None, **attrs) -> ir.Value:
        """A new node; its output a float tensor of dimensions ``shape``, or an int64 one (None)."""
        made = ir.node(op, inputs, attributes=attrs or None)
        value = made.outputs[0]
        value.type = ir.TensorType(ir.DataType.INT64) if shape is None else float_type
        if shape is not None:
            value.shape = ir.Shape([d.static if d.static is not None else _dim_name(d) for d in shape])
        nodes.append(made)
        return value

    def run(value: ir.Value, dims: list[Size], steps: list) -> tuple[ir.Value, list[Size]]:
        for step in steps:
            if step[0] == "transpose":
                dims = [dims[p] for p in step[1]]
                value = node("Transpose", [value], dims, perm=step[1])
            elif step[0] == "reshape":
                dims = step[2]
                value = node("Reshape", [value, _target(graph, step[1], sources, node)], dims)
            elif step[0] == "squeeze":
                _, gone, added, dims = step
                if gone:
                    axes = m.new_initializer(graph, np.array(gone, np.int64), "einsum_axes")
                    value = node("Squeeze", [value, axes], _long_sizes(dims))
                if added:
                    axes = m.new_initializer(graph, np.array(added, np.int64), "einsum_axes")
                    value = node("Unsqueeze", [value, axes], dims)
        return value, dims

    assert plan.left.src_dims is not None and plan.right.src_dims is not None
    left, left_dims = run(plan.left.src, plan.left.src_dims, plan.left_steps)
    right, right_dims = run(plan.right.src, plan.right.src_dims, plan.right_steps)
    mm_dims = left_dims[:-1] + right_dims[-1:]
    run(node("MatMul", [left, right], mm_dims), mm_dims, plan.out_steps)
    m.replace(graph, plan.last, nodes, mm)  # the last node made computes the chain's result


def _target(graph: ir.Graph, pieces: list[Piece], sources: list[ir.Value], node) -> ir.Value:
    """The Reshape target ``pieces`` as an int64 tensor: each run of ints one constant, each source's
    dimension a Shape slice."""
    if all(isinstance(p, int) for p in pieces):
        return m.new_initializer(graph, np.array(pieces, np.int64), "einsum_shape")
    parts: list[ir.Value] = []
    run: list[int] = []
    for p in pieces + [None]:
        if isinstance(p, int):
            run.append(p)
            continue
        if run:
            parts.append(m.new_initializer(graph, np.array(run, np.int64), "einsum_shape"))
            run = []
        if p is not None:
            source, axis = p
            parts.append(node("Shape", [sources[source]], None, start=axis, end=axis + 1))
    return node("Concat", parts, None, axis=0)


def _dim_name(d: Size) -> str | None:
    return d.names[0] if d.coef == 1 and len(d.names) == 1 else None


def _orders(labels: list[int], *orders: list[int]) -> list[list[int]]:
    """``labels`` in the order each of ``orders`` gives them (distinct orders only)."""
    found: list[list[int]] = []
    for order in orders:
        got = [x for x in order if x in labels]
        if got not in found:
            found.append(got)
    return found


def _source_labels(pre_labels: list[Label], perm: list[int]) -> list[Label]:
    """The labels of the source's axes, given the labels after its Transpose ``perm``."""
    src: list[Label] = [None] * len(perm)
    for i, p in enumerate(perm):
        src[p] = pre_labels[i]
    return src


def _laid(side: _Side, batch: list[int], first: list[int], second: list[int], planned: bool = True) -> int:
    """The elements moved to lay ``side``'s source out as ``batch + first + second`` (the MatMul operand's
    axes before its merge). None where ONNX Runtime does it inside the product: a swap of the last two
    axes, each a whole group, is its MatMul's transposed operand (``transposes`` first makes a static
    Transpose that also moves axes of length 1 that swap; a symbolic one stays a general Transpose). A
    source already in ``batch + second + first`` order (a weight's gradient contracting a batch and a
    sequence: ``xᵀ @ dy``) is merged into those two groups and then swapped (``_lay``) in a new plan; the chain
    as it is (``planned`` False) transposes it element by element."""
    assert side.src_dims is not None
    if not _moved(side.labels, batch + first + second):
        return 0
    single = len(first) == len(second) == 1
    swap = not _moved(side.labels, batch + second + first) and (planned or single)
    if swap and (all(d.static is not None for d in side.src_dims) or not any(d.unit for d in side.src_dims)):
        return 0 if single else 1  # the merge and swap: a node more, so a plan without it wins a tie
    return dp.estimate(side.src_dims)


def _moved(labels: Sequence[Label], layout: Sequence[int]) -> bool:
    """Whether laying out the axes labelled ``labels`` as ``layout`` moves elements (length-1 axes do not)."""
    return _long(labels) != list(layout)
