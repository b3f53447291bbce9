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
no obstacle; one symbolic size after the head axis (a model exported for any length) is the target's -1,
and where there are two (the scores, ``[b, h, s, s]``) the target's tail is the Shape of the Reshape's own
input from the axis after the heads on (a Shape and a Concat at run time). Each output element is the same dot
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

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites._dim_products import Dim
from jaxconv.onnx.rewrites._repeats import Repeat, expanded, gathered, single_reader, without_unit_axis
from jaxconv.onnx.rewrites._repeats import dims as _dims

Dims = list[Dim]


def rewrite(graph: ir.Graph) -> int:
    """Let the MatMuls of ``graph`` broadcast repeated key/value heads; returns how many copies went."""
    fired = 0
    for gather in list(m.each_node(graph, "Gather")):
        found = gathered(gather)
        fired += found is not None and _one(graph, found)
    for expand in list(m.each_node(graph, "Expand")):
        found = expanded(expand)
        fired += found is not None and _one(graph, found)
    return fired


def _reshaped(graph: ir.Graph, x: ir.Value, dims: Dims, p: int, kept: int, name: str) -> list[ir.Node]:
    """A Reshape of ``x`` to ``dims`` that splits or merges the head axis ``p`` (``x`` keeps its axes after
    ``p + kept - 1`` as ``dims`` keeps those after its head axes): a constant target, symbolic sizes before
    ``p`` as 0 ("keep") and one after as -1; with two or more after, the target's tail is ``x``'s Shape from
    axis ``p + kept`` on, at run time."""
    rank = m.rank(x)
    assert rank is not None
    after = rank - p - kept  # x's axes after the head axes, kept as they are
    head = [d if isinstance(d, int) else 0 for d in dims[:p]]
    tail = dims[len(dims) - after:]
    middle = dims[p:len(dims) - len(tail)]
    nodes = []
    if sum(not isinstance(d, int) for d in tail) <= 1:
        target = m.new_initializer(graph, np.array(head + middle + [d if isinstance(d, int) else -1 for d in tail],
                                                   np.int64), name)
    else:
        shape = ir.node("Shape", [x], {"start": p + kept})
        joined = ir.node("Concat", [m.new_initializer(graph, np.array(head + middle, np.int64), name),
                                    shape.outputs[0]], {"axis": 0})
        for made, size in ((shape, after), (joined, len(dims))):
            made.outputs[0].type, made.outputs[0].shape = ir.TensorType(ir.DataType.INT64), ir.Shape([size])
        nodes, target = [shape, joined], joined.outputs[0]
    node = ir.node("Reshape", [x, target])
    node.outputs[0].type, node.outputs[0].shape = x.type, ir.Shape(dims)
    return [*nodes, node]


def _one(graph: ir.Graph, found: Repeat) -> int:
    y, value, axis, n, g = found.source, found.copies, found.axis, found.n, found.g
    shape, y_dims = _dims(value), _dims(y)
    if y_dims is not None and found.unit_axis is not None:
        y_dims = y_dims[:found.unit_axis] + y_dims[found.unit_axis + 1:]
    reader = single_reader(value)
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
        if n > 1 and not all(isinstance(d, int) for d in (dims[p], out[p], y_shape[p])):
            return 0
        outs.append(out)
    if found.unit_axis is not None:
        y = without_unit_axis(graph, y, found.unit_axis, y_dims, ("kv_heads_shape", "kv_axes"))
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
        kv = _reshaped(graph, source, y_shape[:p] + [n, 1] + y_shape[p + 1:], p, 1, "kv_groups_shape")
        q = _reshaped(graph, other, dims[:p] + [n, g] + dims[p + 1:], p, 1, "query_groups_shape")
        pair = [q[-1].outputs[0], kv[-1].outputs[0]] if u.idx == 1 else [kv[-1].outputs[0], q[-1].outputs[0]]
        grouped = ir.node("MatMul", pair)
        grouped.outputs[0].type = product.outputs[0].type
        grouped.outputs[0].shape = ir.Shape(out[:p] + [n, g] + out[p + 1:])
        back = _reshaped(graph, grouped.outputs[0], out, p, 2, "heads_shape")
        back[-1].outputs[0].type = product.outputs[0].type
        m.replace(graph, product.outputs[0], [*kv, *q, grouped, *back], product)
    return 1
