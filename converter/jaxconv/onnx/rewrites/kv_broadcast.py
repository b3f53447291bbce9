"""Grouped-query attention's repeated key/value heads as a broadcast of the product, not a copy.

Multi-query and grouped-query attention (Gemma, Mistral, Llama 2/3, Qwen: ``n`` key/value heads shared
by groups of ``g`` query heads) repeat each key/value head ``g`` times, Transpose the copies to
head-major and multiply. The repeat is ``jnp.repeat`` (an Unsqueeze after the head axis, an Expand of
the new axis to ``g``, a Reshape merging the two) or indexing by constant indices ``[0]*g + [1]*g + ...``
(a Gather of the head axis). The copies and the larger Transposes are work that the product does not
need: ONNX MatMul broadcasts its batch axes. With one key/value head the rule Transposes the
unrepeated heads (an axis of 1) and lets the MatMul broadcast them; with ``n > 1`` the query side's
head axis splits into ``[n, g]`` (a Reshape), the key/value side's into ``[n, 1]``, and the product's
result merges back. Those Reshapes keep the axes before the head axis by a 0, so a symbolic batch is
no obstacle (the sizes from the head axis on must be numbers). Each output element is the same dot
product of the same rows in the same order (every batch a GEMM of the same M, N, K): bit for bit. One
difference in form: with groups, a scale after the product (``q @ k^T / sqrt(d)``) follows a Reshape,
and ORT no longer fuses it into the product as FusedMatMul's alpha (a product by ``1/sqrt(d)``): it
divides, as jax.jit does.

Per layer two Gathers of [2, 64, 4, 32] go, and the Transposes move a quarter (Gemma) or half
(Mistral) of the elements. Zoo models ([2, 64] tokens, width 128, two layers), one thread, process
CPU time, median of 61 alternating pairs of 10 calls, twice (load 3.4): HF Flax Gemma (one key/value
head of four) 0.956x and 0.955x, Mistral (two of four) 0.973x and 0.969x; outputs bit for bit.

The rule runs before ``repeat_gathers``, which would turn the repeat's Expand into a Gather between
Reshapes and leave an Unsqueeze and a Reshape per operand behind once this rule took the copy out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites._constants import evaluate
from jaxconv.onnx.rewrites._dim_products import Dim, named_dims

Dims = list[Dim]


def rewrite(graph: ir.Graph) -> int:
    """Let the MatMuls of ``graph`` broadcast repeated key/value heads; returns how many copies went."""
    fired = 0
    for gather in list(m.each_node(graph, "Gather")):
        found = _gathered(gather)
        fired += found is not None and _one(graph, found)
    for expand in list(m.each_node(graph, "Expand")):
        found = _expanded(expand)
        fired += found is not None and _one(graph, found)
    return fired


@dataclass(frozen=True)
class _Repeat:
    """``copies`` is ``source`` with each of the ``n`` entries of its axis ``axis`` repeated ``g`` times,
    or, where ``unit_axis`` is set, ``source`` with that unit axis (right after ``axis``) squeezed out."""

    source: ir.Value
    copies: ir.Value
    axis: int
    n: int
    g: int
    unit_axis: int | None = None


def _dims(value: ir.Value | None) -> Dims | None:
    return None if value is None else named_dims(value)


def _gathered(gather: ir.Node) -> _Repeat | None:
    """The repeat when ``gather`` repeats each of the ``n`` entries of a known axis of its source ``g > 1``
    times: indexing by constant indices (``k[:, :, [0, 0, 1, 1]]``), or ``repeat_gathers``' form of
    ``jnp.repeat`` read through the Reshapes around it back to the Gather's own shape."""
    if gather.domain != "" or len(gather.inputs) != 2 or gather.inputs[0] is None:
        return None
    src = _dims(gather.inputs[0])
    idx = evaluate(gather.inputs[1])  # k[:, :, idx] clamps its indices: constants computed from constants
    if src is None or idx is None or idx.ndim != 1 or idx.dtype.kind not in "iu" or not len(src):
        return None
    axis = m.attr(gather, "axis", 0)
    axis = axis + len(src) if axis < 0 else axis
    if not 0 <= axis < len(src) or not isinstance(src[axis], int):
        return None
    n = src[axis]
    if n < 1 or len(idx) % n or len(idx) // n < 2:
        return None
    g = len(idx) // n
    if not np.array_equal(idx, np.repeat(np.arange(n), g)):
        return None
    value = gather.outputs[0]
    shape = _dims(value)
    reader = _single_reader(value)
    while reader is not None and reader.op_type == "Reshape" and reader.domain == "" \
            and _dims(reader.outputs[0]) is not None:  # repeat_gathers' Reshapes back and forth
        value = reader.outputs[0]
        reader = _single_reader(value)
        if _dims(value) == shape:
            break
    if shape is None or _dims(value) != shape:
        return None
    return _Repeat(gather.inputs[0], value, axis, n, g)


def _expanded(expand: ir.Node) -> _Repeat | None:
    """The repeat when ``expand`` and the Reshape after it are ``jnp.repeat`` of the
    ``n`` entries of a known axis ``g > 1`` times: a unit axis after it (an Unsqueeze, or a Reshape the
    clean-up merged it into), an Expand of that axis to ``g``, a Reshape merging the two (a Squeeze
    where ``n`` is 1). This is the form ``repeat_gathers`` reads, and the one it leaves (a symbolic
    size, short rows). The source is the Unsqueeze's input, else the Expand's with its unit axis."""
    if expand.domain != "" or len(expand.inputs) != 2 or expand.inputs[0] is None:
        return None
    unit = expand.inputs[0]
    src, out = _dims(unit), _dims(expand.outputs[0])
    if src is None or out is None or len(out) != len(src) or len(src) < 2:
        return None
    grown = [k for k, (a, b) in enumerate(zip(src, out)) if a != b]
    if len(grown) != 1 or grown[0] == 0 or src[grown[0]] != 1:
        return None
    k = grown[0]
    g, n = out[k], src[k - 1]
    if not isinstance(g, int) or g < 2 or not isinstance(n, int):
        return None
    merge = _single_reader(expand.outputs[0])
    if merge is None or merge.op_type not in ("Reshape", "Squeeze") or merge.domain != "" \
            or merge.inputs[0] is not expand.outputs[0]:  # a Squeeze where n is 1
        return None
    if _dims(merge.outputs[0]) != src[:k - 1] + [n * g] + src[k + 1:]:
        return None
    unsqueeze = m.producer(unit, "Unsqueeze")
    axes = m.const(unsqueeze.inputs[1]) if unsqueeze is not None and len(unsqueeze.inputs) == 2 else None
    if unsqueeze is not None and axes is not None and axes.size == 1 and int(axes.reshape(-1)[0]) % len(src) == k:
        return _Repeat(unsqueeze.inputs[0], merge.outputs[0], k - 1, n, g)  # type: ignore[arg-type]
    return _Repeat(unit, merge.outputs[0], k - 1, n, g, unit_axis=k)


def _single_reader(value: ir.Value) -> ir.Node | None:
    uses = m.live_uses(value)  # other rules leave dead readers until the clean-up
    if value.is_graph_output() or len(uses) != 1:
        return None
    return uses[0].node


def _known_from(dims: Dims, p: int) -> bool:
    """Whether ``dims`` from axis ``p`` on are numbers: a Reshape that splits or merges axis ``p`` keeps
    the axes before it by 0 (whatever their sizes), those after it only by their numbers."""
    return all(isinstance(d, int) for d in dims[p:])


def _target(graph: ir.Graph, dims: Dims, name: str) -> ir.Value:
    """A Reshape target of ``dims``: a symbolic size (before the split or merged axis) as 0, "keep"."""
    return m.new_initializer(graph, np.array([d if isinstance(d, int) else 0 for d in dims], np.int64), name)


def _reshaped(graph: ir.Graph, x: ir.Value, dims: Dims, name: str) -> ir.Node:
    node = ir.node("Reshape", [x, _target(graph, dims, name)])
    node.outputs[0].type, node.outputs[0].shape = x.type, ir.Shape(dims)
    return node


def _without_unit_axis(graph: ir.Graph, x: ir.Value, axis: int, dims: Dims) -> ir.Value:
    """``x`` without its unit axis ``axis``: where ``x`` is a Reshape's, that Reshape's input reshaped
    straight to ``dims`` (a Reshape and a Squeeze would stay two nodes), else a Squeeze of ``x``."""
    producer = x.producer()
    reshape = m.producer(x, "Reshape")
    target = m.const(reshape.inputs[1]) if reshape is not None and len(reshape.inputs) == 2 else None
    keep_zero = reshape is not None and m.attr(reshape, "allowzero", 0) == 1
    if reshape is not None and reshape.inputs[0] is not None and target is not None and target.ndim == 1 \
            and len(target) == len(dims) + 1 and target[axis] == 1 and (keep_zero or not (target[axis:] == 0).any()):
        node = ir.node("Reshape", [reshape.inputs[0], m.new_initializer(
            graph, np.delete(target, axis).astype(np.int64), "kv_heads_shape")], {"allowzero": 1} if keep_zero else None)
    else:
        node = ir.node("Squeeze", [x, m.new_initializer(graph, np.array([axis], np.int64), "kv_axes")])
    node.outputs[0].type, node.outputs[0].shape = x.type, ir.Shape(dims)
    if producer is not None:
        graph.insert_after(producer, node)
    else:
        graph.insert_before(graph[0], node)
    return node.outputs[0]


def _one(graph: ir.Graph, found: _Repeat) -> int:
    y, value, axis, n, g = found.source, found.copies, found.axis, found.n, found.g
    shape, y_dims = _dims(value), _dims(y)
    if y_dims is not None and found.unit_axis is not None:
        y_dims = y_dims[:found.unit_axis] + y_dims[found.unit_axis + 1:]
    reader = _single_reader(value)
    if shape is None or y_dims is None or reader is None:
        return 0
    perm = list(range(len(shape)))
    transpose = None
    if reader.op_type == "Transpose" and reader.domain == "":
        transpose = reader
        perm = list(m.attr(reader, "perm", list(reversed(perm))))
        value = reader.outputs[0]
        if value.is_graph_output():
            return 0
    rank = len(shape)
    p = perm.index(axis)
    if p >= rank - 2:
        return 0
    products = m.live_uses(value)
    if not products or any(u.node.op_type != "MatMul" or u.node.domain != "" for u in products):
        return 0
    heads = [shape[k] for k in perm]  # the repeated operand as the products read it
    y_shape = [y_dims[k] for k in perm]
    outs = []
    for u in products:
        dims = _dims(u.node.inputs[1 - u.idx])
        if dims is None or len(dims) != rank or dims[:-2] != heads[:-2]:  # no broadcast of their own
            return 0
        out = dims[:-1] + heads[-1:] if u.idx == 1 else heads[:-1] + dims[-1:]
        if n > 1 and not (_known_from(dims, p) and _known_from(out, p) and _known_from(y_shape, p)):
            return 0
        outs.append(out)
    if found.unit_axis is not None:
        y = _without_unit_axis(graph, y, found.unit_axis, y_dims)
    source = y
    if transpose is not None:
        t = ir.node("Transpose", [y], {"perm": perm})
        t.outputs[0].type, t.outputs[0].shape = y.type, ir.Shape(y_shape)
        graph.insert_before(transpose, t)
        source = t.outputs[0]
    for u, out in zip(products, outs):
        product = u.node
        if n == 1:
            product.replace_input_with(u.idx, source)
            continue
        other = product.inputs[1 - u.idx]
        assert other is not None
        dims = _dims(other)
        assert dims is not None
        kv = _reshaped(graph, source, y_shape[:p] + [n, 1] + y_shape[p + 1:], "kv_groups_shape")
        q = _reshaped(graph, other, dims[:p] + [n, g] + dims[p + 1:], "query_groups_shape")
        pair = [q.outputs[0], kv.outputs[0]] if u.idx == 1 else [kv.outputs[0], q.outputs[0]]
        grouped = ir.node("MatMul", pair)
        grouped.outputs[0].type = product.outputs[0].type
        grouped.outputs[0].shape = ir.Shape(out[:p] + [n, g] + out[p + 1:])
        back = _reshaped(graph, grouped.outputs[0], out, "heads_shape")
        back.outputs[0].type = product.outputs[0].type
        m.replace(graph, product.outputs[0], [kv, q, grouped, back], product)
    return 1
