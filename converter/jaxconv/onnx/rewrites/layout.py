"""Keep NCHW between consecutive conv, pool and elementwise layers.

The lowering gives every Conv and pooling its own NHWC->NCHW Transpose in front and NCHW->NHWC
behind, so ORT converts layouts around every layer and cannot fuse a bias Add or Relu into the
Conv. This pass pushes each Transpose down through the ops that do not care about layout
(elementwise ops, with constants transposed to match; sums over axes), where it meets the next
layer's inverse Transpose and both go. A model then keeps one transpose at its input and one at its
output. A Transpose also moves through an Unsqueeze, Squeeze or Reshape that only inserts or drops
size-1 axes (a vmapped pooling's added axis: Equinox's CNN kept two Transpose pairs around its pool),
as that op done first and a Transpose of the new rank after it, through a Concat whose every operand is
the same Transpose, and through a nearest-neighbour Resize
(``nearest_resize``: an upsampling between convolutions), its scales permuted. Only moves that do not add
transposes are made. A constant operand (or one computed from constants, as batch norm's scale) is
transposed to match; the clean-up folds it.

A move through a binary op whose other operand no Transpose makes (a residual stream that starts at the
model's input: ``x + conv(x)``, WaveNet's layers) adds a Transpose of that operand; it is tried on a copy
of the graph and made where the Transposes left after every move that follows move fewer elements (a
WaveNet of 12 layers over NWC audio: 24 Transposes of [8, 2048, 64] -> 2, ORT/jax.jit 1.46 -> 1.06).
The activations other rules make before this one (Gelu, LeakyRelu, HardSwish) are layout-blind too.

A Transpose read by several nodes moves into all of them where they are elementwise ops whose results meet
again in one node (a SiLU's ``x * sigmoid(x)``: still one Transpose, after it), or where every reader's
output reaches the inverse Transpose (a DenseNet's features, read by the next layer and by the next
Concat). It moves through a Split where each part meets its inverse (a cross-stage block's halves; not a
projection's q, k, v, which would take three), through a reduction that keeps its axes (a squeeze-excite
scale), and, by the forced move above, through a Concat of transposed and plain operands. keras-hub's
EfficientNet went from 70 Transposes to 2 (ORT 0.94x the time), CSPDarknet 36 to 2, DenseNet 32 to 4.

A Transpose moves through a Reshape that splits axes, or merges axes lying in the same order before it (a
group norm's channels split into groups and merged back), as that Reshape of its input and another
Transpose after it; a Transpose whose result a Reshape merges and then only sums (a group's statistics,
summed in blocks over the spatial axes and the group's channels) gives way to the Reshape of its input
(the sums' order moves by rounding only); and an operand at least ``SMALL_SHARE`` times smaller than the
transposed one (the group's [n, 1, 1, c] mean and scale) is transposed to match where the result can meet
the inverse. A Flax U-Net of GroupNorm + swish blocks went from 45 Transposes to 10 (those left: the
bilinear resize's products, its skip Concat), ORT 0.82x its old time. A Reshape into a long sum's blocks
is left to ``column_sums``, which sums them in place. A Transpose after a Reshape that moves whole runs of
the axes the Reshape makes joins the one before it (``Reshape(Transpose(x))``, one Transpose); with the
move through the split tried on a copy, a ShuffleNet channel shuffle between NCHW convolutions (the
conv's Transpose, the shuffle's and the next conv's) takes one Transpose instead of three.

A Transpose moves through a product by a constant matrix on one axis (``axis_products``: a bilinear
resize's weights) as that product on the matching axis of its input, where it then meets its inverse: the
Flax U-Net's resizes between NCHW convolutions kept 8 Transposes and now none (10 -> 2 in all).

A ``Sub`` of a constant after a Conv (batch norm's mean) becomes an ``Add`` of its negation, the same
IEEE operation: ORT then folds the whole batch-norm affine into the Conv and keeps its blocked
layout between layers (ResNet-18's optimized graph: 41 nodes instead of 151, no layout reorders
around each Conv).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.passes import FOLD_MAX_ELEMENTS
from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites import _regroup as rg
from jaxconv.onnx.rewrites import axis_products, nearest_resize
from jaxconv.onnx.rewrites._dim_products import named_dims, reshape_entries
from jaxconv.onnx.rewrites.symbolic import broadcast

UNARY = frozenset({"Relu", "Neg", "Exp", "Log", "Tanh", "Sqrt", "Abs", "Reciprocal", "Erf", "Sigmoid",
                   "IsNaN", "IsInf", "Not", "Sign", "Floor", "Ceil", "Round", "Identity",
                   # the activations the rules make (jax.nn.gelu's tanh form, leaky_relu, hard_swish)
                   "Gelu", "LeakyRelu", "HardSwish", "HardSigmoid", "Elu", "Selu", "Softplus"})
_BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "Equal", "Less", "Greater",
                     "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"})
_REDUCE = frozenset({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"})
MAX_ROUNDS = 64
Dims = rg.Dims
_CONST_EXPRS = "jaxconv.layout.const_exprs"  # graph.meta: value -> whether constants alone compute it
MAX_CONE = 32  # elementwise nodes between a Transpose's readers and the node where they meet again
MAX_TRIALS = 8  # forced moves tried on copies of the graph that do not pay, per pass
MAX_FORCED = 64  # forced moves made, per pass
SMALL_SHARE = 16  # an operand this many times smaller than a transposed one is transposed to match it


def _perm(node: ir.Node | None) -> list[int] | None:
    if node is None or node.op_type != "Transpose" or node.domain != "":
        return None
    p = m.attr(node, "perm")
    return None if p is None else [int(i) for i in p]


def _transposed(value: ir.Value | None, perm: list[int]) -> ir.Value | None:
    """The input of a ``Transpose(perm)`` producing ``value``."""
    node = value.producer() if value is not None else None
    return node.inputs[0] if _perm(node) == perm else None


def _const_for(graph: ir.Graph, value: ir.Value, perm: list[int]) -> ir.Value | None:
    """``value`` (a constant broadcast against a transposed tensor) laid out for the untransposed one."""
    arr = m.folded(value)
    if arr is None or arr.ndim > len(perm):
        return None
    full = arr.reshape((1,) * (len(perm) - arr.ndim) + arr.shape)
    moved = np.ascontiguousarray(full.transpose(np.argsort(perm)))
    new = ir.Value(name=f"{value.name or 'c'}_{'_'.join(map(str, np.argsort(perm)))}", const_value=ir.tensor(moved))
    new.type = value.type
    new.shape = ir.Shape(moved.shape)
    while new.name in graph.initializers:
        new.name += "_"
    graph.register_initializer(new)
    return new


def _is_const_expr(graph: ir.Graph, value: ir.Value) -> bool:
    """``m.is_const_expr``, remembered per value for the graph (the moves ask again every round)."""
    known: dict[ir.Value, bool] = graph.meta.setdefault(_CONST_EXPRS, {})
    if value not in known:
        known[value] = m.is_const_expr(value)
    return known[value]


def _operand_for(graph: ir.Graph, use: ir.Node, value: ir.Value, perm: list[int], out: ir.Value) -> ir.Value | None:
    """``value`` (broadcast against ``out``, a Transpose's output, by ``use``) laid out for the untransposed
    tensor by an Unsqueeze and a Transpose: where constants alone compute it (the clean-up folds them), or
    where it is small beside ``out`` (a group norm's statistics, [n, 1, 1, c] against [n, h, w, c]) and the
    result of ``use`` can meet the inverse Transpose."""
    dims = _dims_through_elementwise(value)
    if dims is None or len(dims) > len(perm):
        return None
    rank = len(dims)
    if not (all(isinstance(d, int) for d in dims) and int(np.prod(dims)) <= FOLD_MAX_ELEMENTS
            and _is_const_expr(graph, value)):
        result = use.outputs[0].shape
        if out.shape is None or result is None or m.elements(dims, 1024) * SMALL_SHARE > m.elements(out.shape, 1024) \
                or m.elements(result, 1024) != m.elements(out.shape, 1024) or not _meets_transpose(use.outputs[0], perm):
            return None
    nodes = []
    if rank < len(perm):
        axes = ir.node("Constant", [], {"value": ir.tensor(np.arange(len(perm) - rank, dtype=np.int64))})
        nodes += [axes, ir.node("Unsqueeze", [value, axes.outputs[0]])]
        value = nodes[-1].outputs[0]
    nodes.append(ir.node("Transpose", [value], {"perm": [int(i) for i in np.argsort(perm)]}))
    graph.insert_before(use, nodes)
    return nodes[-1].outputs[0]


def _emit(graph: ir.Graph, node: ir.Node, new: ir.Node, perm: list[int] | None) -> None:
    """Replace ``node``'s output by ``new`` (followed by ``Transpose(perm)`` unless perm is None)."""
    old = node.outputs[0]
    if perm is not None:
        dims = list(old.shape) if old.shape is not None and len(old.shape) == len(perm) else [None] * len(perm)
        inner = [None] * len(perm)
        for i, d in enumerate(dims):
            inner[perm[i]] = d
        new.outputs[0].shape = ir.Shape(inner)
        new.outputs[0].type = old.type
    nodes = [new] if perm is None else [new, ir.node("Transpose", [new.outputs[0]], {"perm": perm})]
    m.replace(graph, old, nodes, node)
    graph.remove(node, safe=True)


def _sink_one(graph: ir.Graph, t: ir.Node, use: ir.Node, single: bool) -> bool:
    perm = _perm(t)
    x = t.inputs[0]
    out = t.outputs[0]
    op = use.op_type
    if use.domain != "" or (len(use.outputs) != 1 and op != "Split"):
        return False
    attrs = dict(use.attributes)
    if op == "Transpose":
        q = _perm(use)
        combined = [perm[i] for i in q]
        if combined == sorted(combined):
            end = use.outputs[0]
            if end.is_graph_output():
                return _output_as(graph, use, x)
            end.replace_all_uses_with(x)
            graph.remove(use, safe=True)
            return True
        _emit(graph, use, ir.node("Transpose", [x], {"perm": combined}), None)
        return True
    if op in UNARY and single and use.inputs[0] is out:
        _emit(graph, use, ir.node(op, [x], attrs), perm)
        return True
    if (op in _BINARY and len(use.inputs) == 2) or (op == "Where" and len(use.inputs) == 3) \
            or (op == "Sum" and len(use.inputs) == 2):  # Sum(v, +0.0): a zero-sign fix
        inputs = []
        for v in use.inputs:
            if v is out:
                inputs.append(x)
                continue
            source = _transposed(v, perm)
            if source is None and single and v is not None and m.folded(v) is not None:
                source = _const_for(graph, v, perm)
            elif source is None and single and v is not None:
                source = _operand_for(graph, use, v, perm, out)
            if source is None:
                return False
            inputs.append(source)
        _emit(graph, use, ir.node(op, inputs, attrs), perm)
        return True
    if op == "Concat" and single:
        return _sink_through_concat(graph, perm, use)
    if op == "Split" and single and use.inputs[0] is out and all(_meets_transpose(o, perm) for o in use.outputs):
        return _sink_through_split(graph, perm, use)  # one Transpose a part: only where each meets its inverse
    if op == "Pad" and single and use.inputs[0] is out:
        return _sink_through_pad(graph, t, use)
    if op == "Resize" and single and use.inputs[0] is out and nearest_resize.is_nearest(use):
        scales = m.const(use.inputs[2])
        moved = np.empty_like(scales)
        moved[perm] = scales  # the scale of the Transpose's axis i goes to x's axis perm[i]
        c = ir.node("Constant", [], {"value": ir.tensor(moved)})
        graph.insert_before(use, c)
        _emit(graph, use, ir.node("Resize", [x, None, c.outputs[0]], attrs), perm)
        return True
    if op in ("Reshape", "MatMul") and single and _through_axis_product(graph, t, use):
        return True
    if op == "Reshape" and use.inputs[0] is out and _drop_summed_perm(graph, t, use, single):
        return True
    if op in ("Unsqueeze", "Squeeze", "Reshape") and single and use.inputs[0] is out:
        return _sink_through_reshape(graph, t, use) or op == "Reshape" and _lift_through_reshape(graph, t, use)
    if op in _REDUCE and use.inputs[0] is out:
        keep = m.attr(use, "keepdims", 1) == 1
        axes = m.reduce_axes(use)
        if axes is None or not axes or (keep and not single):
            return False
        axes = tuple(a % len(perm) for a in axes)
        kept = [perm[i] for i in range(len(perm)) if i not in axes]
        if kept != sorted(kept) and not keep:
            return False
        new_axes = sorted(perm[a] for a in axes)
        inputs = [x, *use.inputs[1:]]
        if len(use.inputs) > 1 and use.inputs[1] is not None:
            c = ir.node("Constant", [], {"value": ir.tensor(np.asarray(new_axes, np.int64))})
            graph.insert_before(use, c)
            inputs[1] = c.outputs[0]
        else:
            attrs["axes"] = ir.AttrInt64s("axes", new_axes)
        _emit(graph, use, ir.node(op, inputs, attrs), perm if keep else None)  # kept axes: the same rank
        return True
    return False



def _sink_through_concat(graph: ir.Graph, perm: list[int], concat: ir.Node) -> bool:
    """``Concat(Transpose(a), Transpose(b), ...)``, every operand the same Transpose read only there, as
    ``Transpose(Concat(a, b, ..., axis=perm[axis]))``: one Transpose for many (the halves of a rotary
    embedding moved to heads-first one by one: Equinox's multi-head attention with RoPE)."""
    axis = m.attr(concat, "axis")
    sources = []
    for v in concat.inputs:
        source = _transposed(v, perm)
        if source is None or v is None or len(v.uses()) != 1 or v.is_graph_output():
            return False
        sources.append(source)
    if axis is None or not sources:
        return False
    moved = [v.producer() for v in concat.inputs if v is not None]
    _emit(graph, concat, ir.node("Concat", sources, {"axis": perm[int(axis) % len(perm)]}), perm)
    for node in moved:  # gone now: rules after count the readers of the values they transposed
        if node is not None and node.graph is graph and not node.outputs[0].uses():
            graph.remove(node, safe=True)
    return True


def _sink_through_split(graph: ir.Graph, perm: list[int], split: ir.Node) -> bool:
    """``Split(Transpose(x), axis)`` as ``Transpose`` of each part of ``Split(x, axis=perm[axis])`` (a
    cross-stage block's halves of the channels, CSPDarknet's)."""
    x = split.inputs[0].producer().inputs[0]  # type: ignore[union-attr]
    attrs = dict(split.attributes)
    axis = int(m.attr(split, "axis", 0)) % len(perm)
    attrs["axis"] = ir.AttrInt64("axis", perm[axis])
    new = ir.node("Split", [x, *split.inputs[1:]], attrs, num_outputs=len(split.outputs))
    graph.insert_before(split, new)
    for old, part in zip(split.outputs, new.outputs):
        part.type = old.type
        back = ir.node("Transpose", [part], {"perm": perm})
        graph.insert_before(split, back)
        back.outputs[0].type, back.outputs[0].shape = old.type, old.shape
        m.take_over(old, back.outputs[0])
    graph.remove(split, safe=True)
    return True


def _sink_through_pad(graph: ir.Graph, t: ir.Node, use: ir.Node) -> bool:
    """``Pad(Transpose(x))`` as ``Transpose(Pad(x))`` with the pads moved to x's axes (Keras'
    ZeroPadding2D before a Conv): any mode pads each axis on its own."""
    perm = _perm(t)
    assert perm is not None
    pads = m.const(use.inputs[1]) if len(use.inputs) > 1 else None
    if pads is None or pads.ndim != 1 or pads.size != 2 * len(perm) or (len(use.inputs) > 3 and use.inputs[3] is not None):
        return False  # pads of some axes only (opset 18's axes input): left alone
    c = ir.node("Constant", [], {"value": ir.tensor(m.moved_pads(pads, perm, len(perm)))})
    graph.insert_before(use, c)
    new = ir.node("Pad", [t.inputs[0], c.outputs[0], *use.inputs[2:]], dict(use.attributes))
    _emit(graph, use, new, perm)
    return True


def _output_as(graph: ir.Graph, back: ir.Node, x: ir.Value) -> bool:
    """The graph output made by ``back`` (a Transpose that undoes the one making its input) taken
    over by ``x``, under the output's name; False where ``x`` cannot be renamed (an input, an
    initializer, another output)."""
    end = back.outputs[0]
    node = x.producer()
    if node is None or node.graph is not graph or x.is_graph_output() or x.is_graph_input() \
            or x.is_initializer() or node.op_type in m.CONTROL_OPS:
        return False
    name = end.name
    end.replace_all_uses_with(x, replace_graph_outputs=True)
    graph.remove(back, safe=True)
    end.name = None
    x.name = name
    return True


def _dims_through_elementwise(value: ir.Value, depth: int = 0) -> Dims | None:
    """``named_dims(value)``, or where a rule left its shape unset, the broadcast of its elementwise producer's
    operands' (a mean's division by its count)."""
    dims = named_dims(value)
    node = value.producer()
    if dims is not None or node is None or not _blind(node) or depth > 4:
        return dims
    shape = broadcast(*[_dims_through_elementwise(v, depth + 1) if v is not None else None for v in node.inputs])
    return None if shape is None else list(shape)


def _drop_summed_perm(graph: ir.Graph, t: ir.Node, use: ir.Node, single: bool) -> bool:
    """``Reshape(Transpose(x, perm))`` whose output is only summed over a group of axes the Reshape merges
    (group norm's statistics over the spatial axes and a group's channels, summed in blocks) with the
    group's axes in ``x``'s order: the Reshape of ``x`` itself where nothing else is permuted."""
    perm = _perm(t)
    y_shape = named_dims(t.outputs[0])
    shape = m.const(use.inputs[1]) if len(use.inputs) > 1 else None
    if perm is None or y_shape is None or shape is None or m.attr(use, "allowzero", 0):
        return False
    new = rg.summed_perm(perm, y_shape, use.outputs[0])
    if new is None or (new != sorted(new) and not single) \
            or any(d == 0 and (j >= len(perm) or new[j] != perm[j]) for j, d in enumerate(shape.tolist())):
        return False  # a 0 in the shape copies the input's size there: only of an axis left in place
    source = t.inputs[0]
    if new != sorted(new):
        back = ir.node("Transpose", [source], {"perm": new})
        graph.insert_before(use, back)
        back.outputs[0].type = source.type  # type: ignore[union-attr]
        source = back.outputs[0]
    use.replace_input_with(0, source)
    return True


def _axis_product_at(node: ir.Node, value: ir.Value) -> axis_products.AxisProduct | None:
    """The axis product (``axis_products.read``) of ``value`` that ``node``, a MatMul or the Reshape before
    one, begins."""
    mm = node
    if node.op_type == "Reshape":
        readers = list(node.outputs[0].uses())
        mm = readers[0].node if len(readers) == 1 else None
    return None if mm is None else axis_products.read(mm, start=value)


def _through_axis_product(graph: ir.Graph, t: ir.Node, use: ir.Node) -> bool:
    """A product by a constant matrix on one axis of a Transpose's output (a bilinear resize's weights) as
    the product on that axis of the Transpose's input, the Transpose after it, where it meets its inverse."""
    perm = _perm(t)
    found = _axis_product_at(use, t.outputs[0])
    if perm is None or found is None:
        return False
    order = [perm[o] for o in found.order]
    if order != sorted(order) and not _meets_transpose(found.last, order):
        return False
    return axis_products.emit(graph, found, t.inputs[0], perm[found.axis], order)


def _lift_through_reshape(graph: ir.Graph, t: ir.Node, use: ir.Node) -> bool:
    """``Transpose(Reshape(Transpose(x, p)), q)`` where ``q`` moves whole runs of the axes the Reshape makes
    (``_regroup.lifted``): one Transpose of ``x`` and the Reshape after it (a channel shuffle between NCHW
    convolutions: the conv's Transpose, the shuffle's and the next conv's become one)."""
    z = use.outputs[0]
    readers = list(z.uses())
    if len(readers) != 1 or z.is_graph_output() or _perm(readers[0].node) is None:
        return False
    back = readers[0].node
    perm, q = _perm(t), _perm(back)
    x = t.inputs[0]
    y_dims, z_dims, x_dims = named_dims(t.outputs[0]), named_dims(z), named_dims(x)
    if perm is None or q is None or y_dims is None or z_dims is None or x_dims is None:
        return False
    lifted = rg.lifted(q, y_dims, z_dims)
    if lifted is None:
        return False
    combined = [perm[i] for i in lifted]
    target = reshape_entries([x_dims[i] for i in combined], [z_dims[i] for i in q])
    if target is None:
        return False
    nodes, source = [], x
    if combined != sorted(combined):
        nodes.append(ir.node("Transpose", [x], {"perm": combined}))
        source = nodes[0].outputs[0]
    c = ir.node("Constant", [], {"value": ir.tensor(np.asarray(target, np.int64))})
    nodes += [c, ir.node("Reshape", [source, c.outputs[0]])]
    m.replace(graph, back.outputs[0], nodes, back)
    graph.remove(back, safe=True)
    return True


def _sink_through_reshape(graph: ir.Graph, t: ir.Node, use: ir.Node, force: bool = False) -> bool:
    """``Unsqueeze``/``Squeeze``/``Reshape`` of a Transpose's output that only inserts or drops size-1
    axes (a vmapped pooling's added axis, say), or that splits axes or merges axes lying in the same order
    before the Transpose (group norm's channels split into groups), done first: ``Transpose(Reshape(x))``,
    so the Transpose moves on towards its inverse."""
    perm = _perm(t)
    assert perm is not None
    x, z = t.inputs[0], use.outputs[0]
    if use.op_type == "Unsqueeze":
        axes = m.const(use.inputs[1]) if len(use.inputs) > 1 else m.attr(use, "axes")
        if axes is None:
            return False
        rank_z = len(perm) + len(np.atleast_1d(axes))
        new_axes = sorted({int(a) % rank_z for a in np.atleast_1d(axes)})
        if len(new_axes) != rank_z - len(perm):
            return False
        places = [j for j in range(rank_z) if j not in new_axes]
        perm2 = list(range(rank_z))
        for i in range(len(perm)):
            perm2[places[i]] = places[perm[i]]
        new = ir.node("Unsqueeze", [x, *use.inputs[1:]], dict(use.attributes))
    else:
        y_shape, z_shape, x_dims = named_dims(t.outputs[0]), named_dims(z), named_dims(x)
        if y_shape is None or z_shape is None or x_dims is None or len(y_shape) != len(perm):
            return False
        found = rg.unit_axes_perm(perm, y_shape, z_shape)
        if found is None and not all(u.node.op_type in ("ReduceSum", "ReduceMean", "Pad") for u in z.uses()):
            found = rg.regrouped(perm, y_shape, z_shape)  # not a long sum's blocks: column_sums sums them in place
            if found is not None and not force and not _meets_transpose(z, found[1]):
                return False  # moved on, it would only trade places with another
        shape = None if found is None else reshape_entries(x_dims, found[0])
        if found is None or shape is None:
            return False
        perm2 = found[1]
        c = ir.node("Constant", [], {"value": ir.tensor(np.asarray(shape, np.int64))})
        graph.insert_before(use, c)
        new = ir.node("Reshape", [x, c.outputs[0]])
    _emit(graph, use, new, None if perm2 == sorted(perm2) else perm2)
    return True


def _sub_as_add(graph: ir.Graph) -> int:
    """``Sub(Conv(...), c)`` of a constant (batch norm's mean) as ``Add(Conv(...), -c)``: the same IEEE
    operation, and one ORT keeps in its blocked NCHWc layout and fuses into the Conv as a bias."""
    count = 0
    for node in list(graph):
        if node.op_type != "Sub" or node.domain != "" or len(node.inputs) != 2 or node.graph is not graph:
            continue
        x, c = node.inputs
        if m.producer(x, "Conv") is None or c is None or not m.is_const_expr(c):
            continue
        neg = ir.node("Neg", [c])
        m.replace(graph, node.outputs[0], [neg, ir.node("Add", [x, neg.outputs[0]])], node)
        graph.remove(node, safe=True)
        count += 1
    return count


def _transpose_cost(graph: ir.Graph) -> int:
    """How many elements the graph's distinct Transposes of data move (a symbolic dimension counted as
    1024; those of constants fold away)."""
    seen: set[tuple[int, tuple[int, ...]]] = set()
    cost = 0
    for node in graph:
        perm = _perm(node)
        x = node.inputs[0] if perm is not None else None
        if x is None or perm is None or (id(x), tuple(perm)) in seen or _is_const_expr(graph, x):
            continue
        seen.add((id(x), tuple(perm)))
        cost += m.elements(x.shape, 1024) if x.shape is not None else 1 << 40
    return cost


def _forcible(graph: ir.Graph) -> list[tuple[ir.Node, int]]:
    """(node, operand index) of the binary elementwise ops and Concats that read a Transpose's output
    (that operand) and values of the same rank that no Transpose of it makes and no constant is: the move
    through them adds Transposes (of the other operands) that later moves may cancel or share."""
    found = []
    for node in graph:
        binary = node.op_type in _BINARY and len(node.inputs) == 2
        if not (binary or node.op_type == "Concat") or node.domain != "" or len(node.outputs) != 1:
            continue
        moved = [k for k, v in enumerate(node.inputs) if v is not None and _perm(v.producer()) is not None]
        if not moved:
            continue
        k = moved[0]
        perm = _perm(node.inputs[k].producer())
        rest = [v for v in node.inputs if _transposed(v, perm) is None]  # type: ignore[arg-type]
        if perm is not None and rest and m.rank(node.inputs[k]) == len(perm) \
                and all(v is not None and m.rank(v) == len(perm) and not _is_const_expr(graph, v) for v in rest) \
                and _meets_transpose(node.outputs[0], perm, or_output=True):
            found.append((node, k))
    for node in graph:  # a Reshape that regroups a Transpose's output read by another Transpose (a shuffle)
        t = node.inputs[0].producer() if node.op_type == "Reshape" and node.inputs and node.inputs[0] is not None else None
        if _perm(t) is not None and len(node.inputs[0].uses()) == 1 \
                and any(_perm(u.node) is not None for u in node.outputs[0].uses()):
            found.append((node, -1))
    return found


def _meets_transpose(value: ir.Value, perm: list[int], or_output: bool = False) -> bool:
    """Whether a Transpose that undoes ``perm`` (or one that, joined with it, is then only summed: a group's
    statistics, transposed to sum its axes last) reads ``value`` or a value computed from it by ops a Transpose
    moves through (within ``MAX_CONE`` nodes; through a Reshape it moves through, as the Transpose after it):
    a move that puts ``Transpose(perm)`` on ``value`` can only pay where that Transpose goes, or
    (``or_output``, for moves tried on a copy) where it takes the place of several before the graph's output
    (not past a product by a matrix, where it would only trade places)."""
    seen: set[int] = set()
    frontier = [(value, perm, False)]  # past a product by a matrix: the output alone does not pay for the move
    while frontier and len(seen) <= MAX_CONE:
        v, p, past_product = frontier.pop()
        if or_output and v.is_graph_output() and not past_product:
            return True
        for use in v.uses():
            node = use.node
            if id(node) in seen:
                continue
            seen.add(id(node))
            if _cancels_or_sums(node, p):
                return True
            if _blind(node) or node.op_type in ("Pad", "Concat", "Sum") and len(node.outputs) == 1:
                frontier.append((node.outputs[0], p, past_product))
            elif node.op_type in ("Reshape", "MatMul") and (found := _axis_product_at(node, v)) is not None:
                after = [p[o] for o in found.order]  # the product's own Transposes may undo it
                if after == sorted(after):
                    return True
                frontier.append((found.last, after, True))
            elif node.op_type == "Reshape" and use.idx == 0:  # moved through, the Transpose after it is another
                y_shape, z_shape = named_dims(v), named_dims(node.outputs[0])
                found = None if y_shape is None or z_shape is None \
                    else rg.unit_axes_perm(p, y_shape, z_shape) or rg.regrouped(p, y_shape, z_shape)
                if found is not None:
                    frontier.append((node.outputs[0], found[1], past_product))
    return False


def _cancels_or_sums(node: ir.Node, perm: list[int]) -> bool:
    """Whether ``node`` is a Transpose that undoes ``perm``, or one that, joined with it, a Reshape merges and
    then only sums (``regroup.summed_perm`` drops it)."""
    q = _perm(node)
    if q is None:
        return False
    combined = [perm[i] for i in q]
    if combined == sorted(combined):
        return True
    dims = named_dims(node.outputs[0])
    uses = list(node.outputs[0].uses())
    return dims is not None and bool(uses) and all(
        u.node.op_type == "Reshape" and u.idx == 0 and rg.summed_perm(combined, dims, u.node.outputs[0]) == sorted(combined)
        for u in uses)


def _each_meets_transpose(uses: list, perm: list[int] | None) -> bool:
    """Whether each reader of a Transpose's output is an op it moves through whose output meets the inverse
    Transpose (``_meets_transpose``: a DenseNet's pooled features, read by the next layer's batch norm and by
    the next Concat; a group norm's differences from the mean, squared for the variance and scaled for the
    output): moved into every reader, the Transposes go on every path."""
    nodes = {id(u.node): u.node for u in uses}.values()
    return perm is not None and all((_blind(n) or n.op_type in ("Concat", "Pad") and len(n.outputs) == 1)
                                    and _meets_transpose(n.outputs[0], perm) for n in nodes)


def _force(graph: ir.Graph, node: ir.Node, k: int) -> None:
    """``op(Transpose(a, perm), b, ...)`` (operand ``k`` the Transpose) as
    ``Transpose(op(a, Transpose(b, perm⁻¹), ...), perm)``, a Concat's axis moved with it; for ``k`` -1,
    ``Reshape(Transpose(a))`` as ``Transpose(Reshape(a))`` where the Transpose after it meets no inverse."""
    if k < 0:
        _sink_through_reshape(graph, node.inputs[0].producer(), node, force=True)  # type: ignore[arg-type]
        return
    perm = _perm(node.inputs[k].producer())
    assert perm is not None
    inverse = [int(i) for i in np.argsort(perm)]
    inputs = []
    for v in node.inputs:
        source = _transposed(v, perm)
        if source is None:
            back = ir.node("Transpose", [v], {"perm": inverse})
            back.outputs[0].type = v.type  # type: ignore[union-attr]
            if v is not None and v.shape is not None:
                back.outputs[0].shape = ir.Shape([v.shape[i] for i in inverse])
            graph.insert_before(node, back)
            source = back.outputs[0]
        inputs.append(source)
    attrs = dict(node.attributes)
    if node.op_type == "Concat":
        attrs["axis"] = ir.AttrInt64("axis", perm[int(m.attr(node, "axis")) % len(perm)])
    _emit(graph, node, ir.node(node.op_type, inputs, attrs), perm)


def _forced_moves(graph: ir.Graph) -> int:
    """Moves through a binary op whose other operand is not transposed (a residual stream that starts at
    the model's input: x + conv(x)), each tried on a copy of the graph first and made where the
    Transposes left after every move that follows it move fewer elements. At most ``MAX_TRIALS`` moves
    that do not pay are tried, and ``MAX_FORCED`` made. Returns how many moves."""
    count = made = 0
    failed: set[ir.Node] = set()
    while len(failed) < MAX_TRIALS and made < MAX_FORCED:
        m.sweep(graph, keep=m.CONTROL_OPS)
        candidates = [c for c in _forcible(graph) if c[0] not in failed]
        if not candidates:
            break
        graph.sort()  # the copy is made node by node: an If's branch may read a value made after the If
        position = {id(n): i for i, n in enumerate(graph)}  # the copy's nodes come in this order
        candidates.sort(key=lambda c: position[id(c[0])])
        cost = _transpose_cost(graph)
        for node, k in candidates[:MAX_TRIALS - len(failed)]:
            try:
                trial = graph.clone()
            except RuntimeError:  # onnx_ir refuses to copy a loop body that reads some outer constants
                return count     # (jnp.linalg.inv's shape constants): no trials for this graph
            _force(trial, trial.node(position[id(node)]), k)
            _sink_all(trial)
            m.sweep(trial, keep=m.CONTROL_OPS)
            if _transpose_cost(trial) < cost:
                _force(graph, node, k)
                count += 1 + _sink_all(graph)
                made += 1
                break
            failed.add(node)
        else:
            break
    return count


def rewrite(graph: ir.Graph) -> int:
    """Push Transposes down through layout-blind ops until they cancel; returns how many moves."""
    m.sweep(graph, keep=m.CONTROL_OPS)
    count = _sink_all(graph)
    count += _forced_moves(graph)
    return count + _sub_as_add(graph)


def _blind(node: ir.Node) -> bool:
    """An elementwise op a Transpose moves through (the constants of a binary one transposed to match)."""
    if node.domain != "" or len(node.outputs) != 1:
        return False
    n = len(node.inputs)
    return (node.op_type in UNARY and n == 1) or (node.op_type in _BINARY and n == 2) \
        or (node.op_type == "Where" and n == 3)


def _rejoining(graph: ir.Graph, out: ir.Value) -> bool:
    """Whether the readers of ``out`` (a Transpose's output read by several nodes) are elementwise ops whose
    results meet again in one node before anything else reads them (a SiLU's ``x * sigmoid(x)``, a GELU's
    ``x * cdf(x)``): moved past all of them, the Transpose is still one, after that node."""
    members: dict[int, ir.Node] = {}
    inside = {id(out)}
    candidates = [u.node for u in out.uses()]
    progress = True
    while progress and len(members) <= MAX_CONE:
        progress = False
        for node in candidates:
            if id(node) in members or not _blind(node):
                continue
            if all(v is None or id(v) in inside or _is_const_expr(graph, v) for v in node.inputs):
                members[id(node)] = node
                inside.add(id(node.outputs[0]))
                candidates = candidates + [u.node for u in node.outputs[0].uses()]
                progress = True
    if len(members) > MAX_CONE or any(id(u.node) not in members for u in out.uses()):
        return False
    exits = [n for n in members.values()
             if n.outputs[0].is_graph_output() or any(id(u.node) not in members for u in n.outputs[0].uses())]
    return len(exits) == 1


def _sink_all(graph: ir.Graph) -> int:
    """Rounds of moves until none is left; returns how many moves."""
    count = 0
    for _ in range(MAX_ROUNDS):
        moved = False
        for t in list(graph):
            if t.graph is not graph or _perm(t) is None or t.inputs[0] is None:
                continue
            uses = list(t.outputs[0].uses())
            if t.outputs[0].is_graph_output() or not uses:
                continue
            single = len({id(u.node) for u in uses}) == 1 or _rejoining(graph, t.outputs[0]) \
                or _each_meets_transpose(uses, _perm(t))
            for use in {id(u.node): u.node for u in uses}.values():
                if use.graph is graph and _sink_one(graph, t, use, single):
                    count += 1
                    moved = True
                    break
        if not moved:
            break
    return count
