"""Squeezes and Unsqueezes of the same axes that cancel, and Unsqueezes moved to where they merge.

StableHLO keeps a gather's index vector and a reduction over a size-1 axis as explicit shape
steps, so ``jnp.take`` (``nn.Embed``) lowers to ``Unsqueeze`` the indices, test them, ``Squeeze``
the test, ``Unsqueeze`` it again for the select; and the gather lowering squeezes a Cast of the
same Unsqueeze. Three rules, each moving values only (the numbers cannot change):

- ``Unsqueeze(Squeeze(y, axes), axes)`` is ``y``;
- ``Squeeze(Cast(Unsqueeze(x, axes)), axes)`` is ``Cast(x)`` (no Cast: ``x``);
- ``Unsqueeze(op(Unsqueeze(a), Unsqueeze(b)), axes)`` for an elementwise ``op`` on inputs of one rank
  (``nn.make_attention_mask``) puts ``axes`` on both inputs, where onnxscript merges the Unsqueezes.

``reshape_chains`` (run after the layout rule) reads a Reshape of an Unsqueeze, Squeeze or Reshape
from the value before them, and drops it where the shape comes back to that value's.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m

_ELEMENTWISE = frozenset({"And", "Or", "Xor", "Add", "Sub", "Mul", "Div", "Max", "Min", "Equal", "Less",
                          "Greater", "LessOrEqual", "GreaterOrEqual"})


def rewrite(graph: ir.Graph) -> int:
    """Cancel Squeeze/Unsqueeze pairs in ``graph`` and lift Unsqueezes onto operands; returns how many."""
    count = 0
    for node in list(graph):
        if node.domain not in ("", "ai.onnx") or node.graph is not graph:
            continue
        if node.op_type == "Unsqueeze":
            count += _unsqueeze_of_squeeze(node) or _lift(graph, node)
        elif node.op_type == "Squeeze":
            count += _squeeze_of_unsqueeze(graph, node)
    return count


def _axes(node: ir.Node, rank: int | None) -> tuple[int, ...] | None:
    """A Squeeze/Unsqueeze's constant axes, normalized against ``rank`` (the larger of its two ranks)."""
    if len(node.inputs) < 2 or node.inputs[1] is None or rank is None:
        return None
    arr = m.const(node.inputs[1])
    if arr is None:
        return None
    axes = m.normalize_axes(tuple(int(a) for a in np.atleast_1d(arr)), rank)
    return axes if axes is not None and len(set(axes)) == len(axes) else None


def _producer(value: ir.Value | None, op_type: str) -> ir.Node | None:
    node = m.producer(value, op_type)
    return node if node is not None and node.domain in ("", "ai.onnx") else None


def _unsqueeze_of_squeeze(unsqueeze: ir.Node) -> int:
    out = unsqueeze.outputs[0]
    squeeze = _producer(unsqueeze.inputs[0], "Squeeze")
    if squeeze is None or out.is_graph_output() or squeeze.inputs[0] is None:
        return 0
    y = squeeze.inputs[0]
    axes = _axes(unsqueeze, m.rank(out))
    if axes is None or axes != _axes(squeeze, m.rank(y)) or m.rank(y) != m.rank(out):
        return 0
    out.replace_all_uses_with(y)
    return 1


def _squeeze_of_unsqueeze(graph: ir.Graph, squeeze: ir.Node) -> int:
    value = squeeze.inputs[0]
    cast = _producer(value, "Cast")
    if cast is not None and len(value.uses()) != 1:
        return 0  # the Cast stays for its other readers: a new one would save nothing
    unsqueeze = _producer(cast.inputs[0] if cast is not None else value, "Unsqueeze")
    if unsqueeze is None or unsqueeze.inputs[0] is None:
        return 0
    x = unsqueeze.inputs[0]
    axes = _axes(squeeze, m.rank(value))
    if axes is None or axes != _axes(unsqueeze, m.rank(unsqueeze.outputs[0])):
        return 0
    out = squeeze.outputs[0]
    if m.rank(x) is None or m.rank(x) != m.rank(out):
        return 0
    if cast is None:
        if out.is_graph_output():
            return 0
        out.replace_all_uses_with(x)
        return 1
    m.replace(graph, out, ir.node("Cast", [x], attributes={"to": m.attr(cast, "to")}), squeeze)
    return 1


def _through_noop_expand(value: ir.Value | None) -> ir.Value | None:
    """``value``, or the input of the Expand making it when that Expand keeps a static shape (sole use)."""
    expand = _producer(value, "Expand")
    if expand is None or expand.inputs[0] is None or len(expand.inputs[0].uses()) != 1:
        return value
    shape, same = value.shape, expand.inputs[0].shape
    return expand.inputs[0] if shape is not None and shape.is_static() and shape == same else value


def _lift(graph: ir.Graph, unsqueeze: ir.Node) -> int:
    op = m.producer(_through_noop_expand(unsqueeze.inputs[0]))
    if op is None or op.domain not in ("", "ai.onnx") or op.op_type not in _ELEMENTWISE:
        return 0
    if len(op.inputs) != 2:
        return 0
    if len(op.outputs[0].uses()) != 1 or op.outputs[0].is_graph_output():
        return 0
    if len(unsqueeze.inputs[0].uses()) != 1 or unsqueeze.inputs[0].is_graph_output():
        return 0
    a, b = op.inputs
    rank = m.rank(op.outputs[0])
    if rank is None or m.rank(a) != rank or m.rank(b) != rank:
        return 0
    if any(_producer(x, "Unsqueeze") is None or len(x.uses()) != 1 for x in (a, b)):
        return 0  # only where both new Unsqueezes merge into the ones already there
    axes_value = unsqueeze.inputs[1]
    new_a = ir.node("Unsqueeze", [a, axes_value])
    new_b = ir.node("Unsqueeze", [b, axes_value])
    new_op = ir.node(op.op_type, [new_a.outputs[0], new_b.outputs[0]], domain=op.domain)
    m.replace(graph, unsqueeze.outputs[0], [new_a, new_b, new_op], unsqueeze)
    return 1


def reshape_chains(graph: ir.Graph) -> int:
    """``Reshape(Unsqueeze|Squeeze|Reshape(x))`` as one ``Reshape(x)``, and as ``x`` itself where the shape
    comes back to ``x``'s (a vmapped layer's added batch axis, once the layout rule has moved the
    Transposes that stood between them); an Unsqueeze or Squeeze of a known shape the same, and a
    unary op between two such steps run on ``x`` (a rotary embedding's Neg); in ``graph`` and its
    subgraphs. Returns how many."""
    return m.count_everywhere(graph, "Reshape", _stacked_concat) \
        + sum(m.count_everywhere(graph, op, _reshape_chain) for op in ("Reshape", "Unsqueeze", "Squeeze")) \
        + m.count_everywhere(graph, "Unsqueeze", _unsqueeze_of_unary_squeeze)


def _stacked_concat(graph: ir.Graph, reshape: ir.Node) -> int:
    """``Reshape(Concat(Unsqueeze(a, k), Unsqueeze(b, k), ..., axis=k))`` that merges the new axis ``k`` into
    the next as ``Concat(a, b, ..., axis=k)``: the same elements in the same order. keras-hub's rotary
    embeddings write ``rotate_half`` so (``stack((-x2, x1), axis=-2)`` reshaped back): three nodes fewer on q
    and on k."""
    out, concat = reshape.outputs[0], m.producer(reshape.inputs[0], "Concat")
    if concat is None or out.shape is None or not out.shape.is_static() or not concat.inputs:
        return 0
    pieces: list[ir.Value] = []
    axis = int(m.attr(concat, "axis", 0))
    for stacked in concat.inputs:
        unsqueeze = _producer(stacked, "Unsqueeze")
        piece = unsqueeze.inputs[0] if unsqueeze is not None else None
        if piece is None or piece.shape is None or not piece.shape.is_static():
            return 0
        rank = len(piece.shape) + 1
        if _axes(unsqueeze, rank) != (axis % rank,):
            return 0
        pieces.append(piece)
    shape = [int(d) for d in pieces[0].shape.numpy()]
    axis %= len(shape) + 1
    if axis == len(shape) or any([int(d) for d in p.shape.numpy()] != shape for p in pieces):
        return 0
    shape[axis] *= len(pieces)
    if [int(d) for d in out.shape.numpy()] != shape:
        return 0
    m.replace(graph, out, ir.node("Concat", pieces, {"axis": axis}), reshape)
    dead = [reshape, concat, *[v.producer() for v in concat.inputs]]  # (a rule after reads the pieces' uses)
    for node in dead:
        if node is not None and node.graph is graph \
                and not any(v.uses() or v.is_graph_output() for v in node.outputs):
            graph.remove(node, safe=True)
    return 1


def _unsqueeze_of_unary_squeeze(graph: ir.Graph, unsqueeze: ir.Node) -> int:
    """``Unsqueeze(op(Squeeze(y)))`` of the same axes, ``op`` unary, as ``op(y)``, and ``Unsqueeze(Squeeze(y))``
    as ``y``: any sizes, symbolic ones included (the chains above need known shapes; the halves of a Split of
    pairs in an interleaved rotary embedding, one of them negated)."""
    out = unsqueeze.outputs[0]
    between = m.producer(unsqueeze.inputs[0], *_UNARY)
    if between is None:
        return _unsqueeze_of_squeeze(unsqueeze)
    if len(between.inputs) != 1 or len(between.outputs[0].uses()) != 1 or between.outputs[0].is_graph_output():
        return 0
    squeeze = _producer(between.inputs[0], "Squeeze")
    if squeeze is None or squeeze.inputs[0] is None or out.is_graph_output():
        return 0
    y = squeeze.inputs[0]
    axes = _axes(unsqueeze, m.rank(out))
    if axes is None or axes != _axes(squeeze, m.rank(y)) or m.rank(y) != m.rank(out):
        return 0
    m.replace(graph, out, ir.node(between.op_type, [y], dict(between.attributes)), unsqueeze)
    return 1


_UNARY = frozenset({"Neg", "Abs", "Relu", "Exp", "Log", "Sqrt", "Tanh", "Sigmoid", "Erf", "Not", "Identity"})


def _reshape_chain(graph: ir.Graph, node: ir.Node) -> int:
    out = node.outputs[0]
    static = out.shape is not None and out.shape.is_static()
    between = m.producer(node.inputs[0], *_UNARY)
    if between is not None:
        if not static or len(between.outputs[0].uses()) != 1 or between.outputs[0].is_graph_output():
            return 0
        inner = m.producer(between.inputs[0], "Unsqueeze", "Squeeze", "Reshape")
        if inner is None or inner.inputs[0] is None or len(between.inputs) != 1:
            return 0
        dims = np.asarray(out.shape.numpy(), np.int64)
        shape = ir.node("Constant", [], {"value": ir.tensor(dims)})
        reshaped = ir.node("Reshape", [inner.inputs[0], shape.outputs[0]], _allowzero(dims))
        op = ir.node(between.op_type, [reshaped.outputs[0]], dict(between.attributes))
        m.replace(graph, out, [shape, reshaped, op], node)
        return 1
    inner = m.producer(node.inputs[0], "Unsqueeze", "Squeeze", "Reshape")
    if inner is None or inner.inputs[0] is None:
        return 0
    x = inner.inputs[0]
    shape = m.const(node.inputs[1]) if node.op_type == "Reshape" and len(node.inputs) > 1 else None
    if shape is not None and (m.attr(node, "allowzero", 0) == 1 or not np.any(shape == 0)):
        target, dims = node.inputs[1], shape  # no dimension copied from the input: the same shape from ``x``
    elif static:
        dims = np.asarray(out.shape.numpy(), np.int64)
        c = ir.node("Constant", [], {"value": ir.tensor(dims)})
        graph.insert_before(node, c)
        target = c.outputs[0]
    else:
        return 0
    if x.shape is not None and x.shape.is_static() and x.shape == out.shape and not out.is_graph_output():
        out.replace_all_uses_with(x)
        return 1
    m.replace(graph, out, ir.node("Reshape", [x, target], _allowzero(dims)), node)
    return 1


def _allowzero(dims: np.ndarray) -> dict[str, int]:
    """A Reshape's attributes: a 0 in its shape is a size 0, not "copy the input's dimension", only with allowzero."""
    return {"allowzero": 1} if bool(np.any(np.asarray(dims) == 0)) else {}
