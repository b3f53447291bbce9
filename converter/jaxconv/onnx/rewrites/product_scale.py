"""A product's scale after a Reshape moved next to the product, where ONNX Runtime takes it into the MatMul.

Attention scales q (``q * d ** -0.5`` once the projection is split into heads) or the scores
(keras-hub GPT-NeoX's ``einsum(...) * norm_factor`` over a group axis of 1): the lowering writes
``MatMul -> Reshape -> Mul(c)``. ORT's MatMulScaleFusion folds a Mul by a one-element constant into a
FusedMatMul's ``alpha``, but only next to the MatMul, so the Reshape between leaves the Mul as a pass of
its own over the product. A one-element constant scales every element alike, so ``Reshape(p) * c`` and
``Reshape(p * c)`` are the same elements; and ``alpha * p`` is ``p * c`` bit for bit (MLAS multiplies its
float32 accumulator by ``alpha`` as it stores, which rounds once, as the Mul does on the stored product).

Only float32 products (the FusedMatMul kernel's alpha is float32's path) and Muls (ORT folds a Div as a
product by ``1 / c``, which rounds differently) are moved.
"""

from __future__ import annotations

import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m


def rewrite(graph: ir.Graph) -> int:
    """Move the scalar Muls after a Reshape of a MatMul (in ``graph`` and its subgraphs) before the Reshape."""
    return m.count_everywhere(graph, "Mul", _one)


def _one(graph: ir.Graph, mul: ir.Node) -> int:
    if mul.domain not in ("", "ai.onnx") or len(mul.inputs) != 2 or mul.outputs[0].dtype != ir.DataType.FLOAT:
        return 0
    for k in (0, 1):
        reshaped, scale = mul.inputs[k], mul.inputs[1 - k]
        c = m.const(scale)
        reshape = m.producer(reshaped, "Reshape")
        if c is None or c.size != 1 or reshape is None or scale is None or reshaped is None:
            continue
        product = reshape.inputs[0]
        matmul = m.producer(product, "MatMul")
        if matmul is None or product is None or not m.sole_use(reshaped) or not m.sole_use(product) \
                or reshaped.is_graph_output() or product.is_graph_output():
            continue
        if m.rank(scale) is None or m.rank(reshaped) is None or m.rank(scale) > m.rank(reshaped):
            continue  # the constant would add axes to the result
        scalar = m.new_initializer(graph, c.reshape(()), "product_scale")
        scaled = ir.node("Mul", [product, scalar] if k == 0 else [scalar, product])
        scaled.outputs[0].type, scaled.outputs[0].shape = product.type, product.shape
        again = ir.node("Reshape", [scaled.outputs[0], *reshape.inputs[1:]], attributes=reshape.attributes)
        m.replace(graph, mul.outputs[0], [scaled, again], mul)
        return 1
    return 0
