"""A MatMul by a constant whose left operand has rows a multiple of 4 KiB long, computed in column blocks.

ONNX Runtime's GEMM (MLAS) reads the left operand's rows in place. When each row is a multiple of
4 KiB long (float32 with ``K % 1024 == 0``: a transformer's feed-forward down-projection from a
hidden width of 1024, 2048, 3072 or 4096) the rows it reads together map to the same L1 cache
sets and the product slows down: one thread, ``[1024, K] x [K, 256]``, 63-67 GFLOP/s for K = 1024,
2048 and 3072 against 89-97 for K = 256 ... 1536 (2-core AMD EPYC, ORT 1.32; jax.jit runs the
K = 1024 product at 95, its GEMM packs the operand). The benchmark transformer's four such
products took 8.6 ms each of its 105 ms per call on one thread, against 5.5 ms for the up-projection
of the same FLOPs.

When that operand is built by elementwise ops from products by constants (``gelu(x @ w1 + b1)``,
``silu(x @ wg) * (x @ wu)``), each column block of it can be built on its own from the same column
block of every constant, and multiplied by the matching row block of the weight:

    y = a @ w = a[:, :K/2] @ w[:K/2] + a[:, K/2:] @ w[K/2:]

so no block's rows are 4 KiB apart and nothing is copied. Every element of each block is computed
by the same ops from the same inputs as before (bit for bit); only the sum over K is associated
differently (two partial sums added), which moves the result by rounding, as any GEMM's blocking
does. Measured on the benchmark's feed-forward block ``[8, 128, 256] -> 1024 -> 256`` (one
process, alternating, load 0.6): one thread 14.5 -> 12.9 ms, two threads 8.3 -> 6.8 ms.

Where the operand is built otherwise (a LayerNormalization's output, when the model's width is
1024 and every projection reads it), a Split copies it into the blocks first; the copy costs less
than it saves from ``SPLIT_MIN_ROWS`` rows: one thread, process CPU time against the plain MatMul
(load 4.6-5.7, medians of 9 alternating runs) [1024, 1024] x [1024, 1024] 0.83, x [1024, 4096] 0.88,
[256, 1024] x [1024, 1024] 0.93, [128, 1024] x [1024, 768] 0.82, x [1024, 3072] 0.90; fewer rows
gain little: [64, 1024] x [1024, 3072] 0.94-0.96, [32, ...] 0.99. (At 128 rows jax.jit ran these
products 1.12-1.23x faster than ORT, while ORT was faster for every K < 1024.)

The blocks are two: halves, or where a half is itself a multiple of 1024 columns, halves 512
apart (K = 1024: 512 + 512; 2048: 512 + 1536; 3072: 1536 + 1536; 4096: 1536 + 2560). Measured on the
products alone (one thread, [512, K] x [K, 768], load 4.6): K = 2048 as 512 + 1536 0.88x the CPU
time, as four blocks of 512 0.94x; K = 4096 as 1536 + 2560 0.81x, as eight of 512 0.78x.
The rule fires only where the rows are many (at least
``MIN_ROWS``, or not known when converting): a few rows do not slow down and would only pay for
the extra kernels. float32 only (MLAS's single-precision GEMM).
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m

ALIASED_FLOATS = 1024  # a float32 row of a multiple of this many elements is a multiple of 4 KiB
MIN_ROWS = 64  # fewer rows do not slow down: the blocks would only add kernels
SPLIT_MIN_ROWS = 128  # the same for the blocks copied out by a Split
MAX_TREE_NODES = 32  # each block copies the tree: a longer one takes the Split (and bounds the walk's depth)
ELEMENTWISE = frozenset({
    "Abs", "Add", "Ceil", "Cos", "Div", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish",
    "Identity", "LeakyRelu", "Log", "Max", "Min", "Mish", "Mul", "Neg", "Pow", "Reciprocal", "Relu", "Round",
    "Selu", "Sigmoid", "Sign", "Sin", "Softplus", "Softsign", "Sqrt", "Sub", "Sum", "Tanh", "Where",
})


def rewrite(graph: ir.Graph) -> int:
    """Compute in column blocks the MatMuls by constants in ``graph`` (and its subgraphs) whose left operand
    has 4 KiB rows and is built elementwise from products by constants; returns how many."""
    return m.count_everywhere(graph, "MatMul", _blocks)


def block_widths(k: int) -> list[int] | None:
    """Two column blocks of ``k`` whose widths are not multiples of ``ALIASED_FLOATS`` (halves, or halves
    512 apart where a half is one), or None when ``k`` itself is not one (nothing to gain)."""
    if k <= 0 or k % ALIASED_FLOATS:
        return None
    half = k // 2
    if half % ALIASED_FLOATS:
        return [half, half]
    return [half - ALIASED_FLOATS // 2, half + ALIASED_FLOATS // 2]


def _many_rows(value: ir.Value, least: int) -> bool:
    shape = value.shape
    if shape is None or len(shape) < 2:
        return False
    dims = [d for d in shape[:-1]]
    if all(isinstance(d, int) for d in dims):
        return math.prod(dims) >= least
    return True  # a symbolic dimension: a batch or a sequence, sized when run


def _blocks(graph: ir.Graph, matmul: ir.Node) -> int:
    a, w = matmul.inputs
    weight = m.const(w)
    if a is None or weight is None or weight.ndim != 2 or weight.dtype != np.float32:
        return 0
    k = weight.shape[0]
    widths = block_widths(k)
    if widths is None or not _many_rows(a, MIN_ROWS):
        return 0
    tree = _producer_tree(a, matmul, k)
    if tree is None:
        if not _many_rows(a, SPLIT_MIN_ROWS):
            return 0
        sizes = m.new_initializer(graph, np.array(widths, np.int64), "k_block_widths")
        split = ir.node("Split", [a, sizes], {"axis": -1}, num_outputs=len(widths))
        blocks, nodes = list(split.outputs), [split]
    else:
        blocks, nodes = [], []
    partial_products = []
    for part, width in enumerate(widths):
        start = sum(widths[:part])
        if tree is not None:
            copies: dict[int, ir.Value] = {}
            for node in tree:
                nodes.append(_block_copy(graph, node, copies, start, width, k))
            blocks.append(copies[id(a)])
        else:
            _like(blocks[part], a, width)
        rows = m.new_initializer(graph, weight[start:start + width], f"{w.name or 'w'}_rows{start}")
        product = ir.node("MatMul", [blocks[part], rows])
        _like(product.outputs[0], matmul.outputs[0], None)
        nodes.append(product)
        partial_products.append(product.outputs[0])
    nodes.append(ir.node("Sum", partial_products))
    m.replace(graph, matmul.outputs[0], nodes, matmul)
    return 1


def _producer_tree(a: ir.Value, matmul: ir.Node, k: int) -> list[ir.Node] | None:
    """The nodes that build ``a`` elementwise from products by constants, producers first; None when
    ``a`` is built otherwise or a value on the way is read outside them (or is a graph output)."""
    tree: list[ir.Node] = []
    visited: dict[int, bool | None] = {}  # None: being visited

    def visit(value: ir.Value) -> bool:
        if id(value) not in visited:
            visited[id(value)] = None
            visited[id(value)] = len(visited) <= MAX_TREE_NODES and _visit_new(value)
        return bool(visited[id(value)])

    def _visit_new(value: ir.Value) -> bool:
        node = value.producer()
        if node is None or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
            return False
        if node.op_type == "MatMul":
            x, w = node.inputs
            weight = m.const(w)
            if x is None or m.const(x) is not None or weight is None or weight.ndim != 2 \
                    or weight.shape[1] != k:
                return False
        elif node.op_type in ELEMENTWISE:
            for operand in node.inputs:
                kind = _operand_kind(operand, k)
                if kind is None or (kind == "built" and not visit(operand)):
                    return False
        else:
            return False
        tree.append(node)
        return True

    if not visit(a):
        return None
    members = {id(node) for node in tree} | {id(matmul)}
    for node in tree:
        out = node.outputs[0]
        if out.is_graph_output() or any(id(user) not in members for user, _ in out.uses()):
            return None
    return tree


def _operand_kind(value: ir.Value | None, k: int) -> str | None:
    """How a column block reads an elementwise node's operand: ``"whole"`` (absent, a scalar, or last
    dimension 1: it broadcasts along the columns), ``"sliced"`` (a constant with ``k`` columns),
    ``"built"`` (a value to build in blocks itself), or None (a constant of another width)."""
    if value is None:
        return "whole"
    arr = m.const(value)
    shape = arr.shape if arr is not None else value.shape
    if shape is not None and (len(shape) == 0 or shape[-1] == 1):
        return "whole"
    if arr is not None:
        return "sliced" if shape[-1] == k else None
    return "built"


def _block_copy(graph: ir.Graph, node: ir.Node, copies: dict[int, ir.Value], start: int, width: int,
                k: int) -> ir.Node:
    """A copy of ``node`` computing columns ``start:start+width`` of its output; ``copies`` maps the
    tree's values (by id) to their blocks and gets this node's output."""
    inputs: list[ir.Value | None] = []
    if node.op_type == "MatMul":
        x, w = node.inputs
        weight = m.const(w)
        assert weight is not None
        inputs = [x, m.new_initializer(graph, weight[:, start:start + width], f"{w.name or 'w'}_cols{start}")]
    else:
        for operand in node.inputs:
            kind = _operand_kind(operand, k)
            if kind == "whole":
                inputs.append(operand)
            elif kind == "built":
                inputs.append(copies[id(operand)])
            else:
                arr = m.const(operand)
                assert operand is not None and arr is not None
                inputs.append(m.new_initializer(graph, arr[..., start:start + width],
                                                f"{operand.name or 'c'}_cols{start}"))
    copy = ir.Node(node.domain, node.op_type, inputs, attributes=list(node.attributes.values()))
    _like(copy.outputs[0], node.outputs[0], width)
    copies[id(node.outputs[0])] = copy.outputs[0]
    return copy


def _like(new: ir.Value, old: ir.Value, width: int | None) -> None:
    """Give ``new`` the type of ``old`` and its shape (last dimension ``width`` when given)."""
    new.type = old.type
    if old.shape is not None:
        dims = list(old.shape)
        if width is not None and dims:
            dims[-1] = width
        new.shape = ir.Shape(dims)
