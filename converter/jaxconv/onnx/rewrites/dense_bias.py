"""A dense layer's bias Add kept out of ORT's Gemm on models that run on more than one thread.

ORT fuses ``MatMul(x, w) + b`` (``b`` a vector over the last axis) into a Gemm, with Reshapes around it
when ``x`` has more than two axes, and a Relu after a 2-D one into that Gemm too. That Gemm broadcasts
the bias into its output and accumulates the product onto it; its activation then runs over the output
on one thread, while a separate Add and Relu are elementwise kernels ORT splits over its threads. On two
threads the fused form is the slower one (ORT alone, alternating, unfused ÷ fused wall time, load 0.5-1):
``[8, 128, 256] @ [256, 1024] + b``, Relu, ``@ [1024, 256] + b`` 0.92; batch 4 0.93; an MLP 4x1024 at
batch 32 0.94-0.97; ``[1024, 256] @ [256, 256] + b`` four times 0.87-0.88. On one thread it is the same
(0.99-1.01), and on small products the extra kernels cost (``[128, 128]`` 1.10, ``[8, 1024]`` 1.03,
``[16, 1024]`` and ``[64, 512]`` 1.00), hence ``MIN_ELEMENTS`` of the product and the thread condition.
With a Tanh or a Sigmoid after it: 2-D 0.98, 3-D 0.92; read by the next product directly: 3-D 0.94.

Only a sum read by such ops (``_READERS``) or by nothing in the graph: ORT fuses a bias Add before a Gelu
into its BiasGelu/FastGelu, and one before a residual Add and a LayerNormalization into a
SkipLayerNormalization, which that form would break (the benchmark transformer's FFN: 1.01-1.03x).

The fused Gemm also adds the bias first and the product's partial sums after it (ORT's GEMM sums K in
blocks of 256 onto its output), so past K = 256 its last bits differ from ``x @ w`` then ``+ b``, the
order ``jax.jit`` computes in; unfused they are the product's, then the Add's.

Kept out by the forms ORT's MatMul+Add fusion does not match: a 2-D product as a Gemm without C (the
same product), a product of more axes with its bias laid out at the product's rank (``[1, 1, n]``: the
same values, the same broadcast). float32 only (measured there). Runs last: no rule after it reads the products.
"""

from __future__ import annotations

import onnx_ir as ir

from jaxconv.onnx import thread_count
from jaxconv.onnx.rewrites import _match as m

MIN_ELEMENTS = 1 << 15  # of the product (its symbolic dimensions at SYMBOLIC_SIZE): [32, 1024] gains
SYMBOLIC_SIZE = thread_count.RECORD_SIZES[-1]  # the size a model's thread record weighs a symbolic one at
_READERS = frozenset({"Relu", "Tanh", "Sigmoid", "LeakyRelu", "MatMul", "Gemm", "Identity"})


def rewrite(graph: ir.Graph) -> int:
    """Keep the bias Adds after big products in ``graph`` (the main graph) out of ORT's Gemm; returns how many."""
    return sum(_one(graph, add) for add in list(m.each_node(graph, "Add")))


def _one(graph: ir.Graph, add: ir.Node) -> int:
    pair = m.product_plus(add.outputs[0])
    if pair is None:
        return 0
    product, bias = pair
    matmul = m.producer(product, "MatMul")
    if matmul is None or product.is_graph_output() or len(product.uses()) != 1 or product.dtype != ir.DataType.FLOAT:
        return 0
    rank = m.rank(product)
    if rank is None or rank < 2 or m.rank(matmul.inputs[1]) != 2 or m.rank(matmul.inputs[0]) != rank:
        return 0
    vector = m.const(bias)
    width = product.shape[-1]
    if vector is None or not isinstance(width, int) or vector.size != width or vector.ndim > rank:
        return 0
    if any(d != 1 for d in vector.shape[:-1]) or m.elements(product.shape, SYMBOLIC_SIZE) < MIN_ELEMENTS:
        return 0
    if any(node.op_type not in _READERS or node.domain not in ("", "ai.onnx") for node, _ in add.outputs[0].uses()):
        return 0
    if rank == 2:
        m.replace(graph, product, ir.node("Gemm", list(matmul.inputs)), matmul)
    else:
        laid_out = m.new_initializer(graph, vector.reshape((1,) * (rank - 1) + (width,)), f"{bias.name or 'bias'}_rank{rank}")
        add.replace_input_with(list(add.inputs).index(bias), laid_out)
    return 1


