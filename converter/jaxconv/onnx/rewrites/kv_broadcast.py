"""Grouped-query attention's repeated key/value heads as a broadcast of the product, not a copy.

Multi-query and grouped-query attention (Gemma, Mistral, Llama 2/3, Qwen: ``n`` key/value heads shared
by groups of ``g`` query heads) repeat each key/value head ``g`` times (``jnp.repeat``, which the
``repeat_gathers`` rule turns into a Gather of the head axis with indices ``[0]*g + [1]*g + ...``),
Transpose the copies to head-major and multiply. The copies and the larger Transposes are work that
the product does not need: ONNX MatMul broadcasts its batch axes. With one key/value head the rule
Transposes the unrepeated heads (an axis of 1) and lets the MatMul broadcast them; with ``n > 1`` the
query side's head axis splits into ``[n, g]`` (a Reshape), the key/value side's into ``[n, 1]``, and
the product's result merges back. Each output element is the same dot product of the same rows in
the same order (every batch a GEMM of the same M, N, K): bit for bit. One difference in form: with
groups, a scale after the product (``q @ k^T / sqrt(d)``) follows a Reshape, and ORT no longer fuses
it into the product as FusedMatMul's alpha (a product by ``1/sqrt(d)``): it divides, as jax.jit does.

Per layer two Gathers of [2, 64, 4, 32] go, and the Transposes move a quarter (Gemma) or half
(Mistral) of the elements. Zoo models ([2, 64] tokens, width 128, two layers), one thread, process
CPU time, median of 61 alternating pairs of 10 calls, twice (load 3.4): HF Flax Gemma (one key/value
head of four) 0.956x and 0.955x, Mistral (two of four) 0.973x and 0.969x; outputs bit for bit.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m


def rewrite(graph: ir.Graph) -> int:
    """Let the MatMuls of ``graph`` broadcast repeated key/value heads; returns how many Gathers went."""
    return sum(_one(graph, node) for node in list(m.each_node(graph, "Gather")))


def _groups(gather: ir.Node) -> tuple[int, int, int] | None:
    """(axis, n, g) when ``gather`` repeats each of the ``n`` entries of a static axis ``g > 1`` times."""
    if gather.domain != "" or len(gather.inputs) != 2:
        return None
    src = m.static_dims(gather.inputs[0])
    idx = m.const(gather.inputs[1])
    if src is None or idx is None or idx.ndim != 1 or idx.dtype.kind not in "iu" or not len(src):
        return None
    axis = m.attr(gather, "axis", 0)
    axis = axis + len(src) if axis < 0 else axis
    if not 0 <= axis < len(src):
        return None
    n = src[axis]
    if n < 1 or len(idx) % n or len(idx) // n < 2:
        return None
    g = len(idx) // n
    if not np.array_equal(idx, np.repeat(np.arange(n), g)):
        return None
    return axis, n, g


def _single_reader(value: ir.Value) -> ir.Node | None:
    uses = m.live_uses(value)  # other rules leave dead readers until the clean-up
    if value.is_graph_output() or len(uses) != 1:
        return None
    return uses[0].node


def _one(graph: ir.Graph, gather: ir.Node) -> int:
    found = _groups(gather)
    if found is None:
        return 0
    axis, n, g = found
    y = gather.inputs[0]
    assert y is not None
    shape = m.static_dims(gather.outputs[0])
    if shape is None:
        return 0
    value = gather.outputs[0]
    reader = _single_reader(value)
    while reader is not None and reader.op_type == "Reshape" and reader.domain == "" \
            and m.static_dims(reader.outputs[0]) is not None:  # repeat_gathers' Reshapes back and forth
        value = reader.outputs[0]
        reader = _single_reader(value)
        if m.static_dims(value) == shape:
            break
    if m.static_dims(value) != shape or reader is None:
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
    outs = []
    for u in products:
        dims = m.static_dims(u.node.inputs[1 - u.idx])
        if dims is None or len(dims) != rank or dims[:-2] != heads[:-2]:  # no broadcast of their own
            return 0
        outs.append(dims[:-1] + heads[-1:] if u.idx == 1 else heads[:-1] + dims[-1:])
    y_shape = [m.static_dims(y)[k] for k in perm]  # type: ignore[index]
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
        dims = m.static_dims(other)
        assert dims is not None
        kv = ir.node("Reshape", [source, m.new_initializer(
            graph, np.array(y_shape[:p] + [n, 1] + y_shape[p + 1:], np.int64), "kv_groups_shape")])
        q = ir.node("Reshape", [other, m.new_initializer(
            graph, np.array(dims[:p] + [n, g] + dims[p + 1:], np.int64), "query_groups_shape")])
        kv.outputs[0].type, kv.outputs[0].shape = y.type, ir.Shape(y_shape[:p] + [n, 1] + y_shape[p + 1:])
        q.outputs[0].type, q.outputs[0].shape = other.type, ir.Shape(dims[:p] + [n, g] + dims[p + 1:])
        pair = [q.outputs[0], kv.outputs[0]] if u.idx == 1 else [kv.outputs[0], q.outputs[0]]
        grouped = ir.node("MatMul", pair)
        grouped.outputs[0].type = product.outputs[0].type
        grouped.outputs[0].shape = ir.Shape(out[:p] + [n, g] + out[p + 1:])
        back = ir.node("Reshape", [grouped.outputs[0], m.new_initializer(
            graph, np.array(out, np.int64), "heads_shape")])
        back.outputs[0].type, back.outputs[0].shape = product.outputs[0].type, ir.Shape(out)
        m.replace(graph, product.outputs[0], [kv, q, grouped, back], product)
    return 1
