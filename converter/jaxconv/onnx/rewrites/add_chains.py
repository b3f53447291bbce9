"""A chain of float additions, ``((a + b) + x) + c``, as one ``Sum(a, b, x, c)``.

A pre-norm transformer layer ends in ``x + (h @ w2) + c2``; with the feed-forward product in column
blocks (``k_blocks``) that is ``Sum(p0, p1)``, an ``Add`` of the residual and an ``Add`` of the bias:
three kernels over ``[b, t, d]``, each waking ONNX Runtime's pool thread for some tens of microseconds of
work. ORT's ``Sum`` of n operands adds them in order, ``((i0 + i1) + i2) + ...``, into one output
(each operand broadcast to it), so the one node computes every element by the same float additions
in the same order: bit for bit the same (tested, NaN, infinities and -0.0 included). The addition
of two values is commutative, so an accumulator read as the second operand of an ``Add`` (or of a
two-operand ``Sum``) continues the chain too.

The ops alone (``Sum(p0, p1)``, ``+ x``, ``+ c`` on ``[8, 128, 256]`` against the one Sum; one process,
alternating, load 3.6-3.9, four runs): one thread 0.94-1.02x the CPU time, two threads 0.86-0.94x the
wall time (one wake-up of the pool's thread instead of three). On the benchmark transformer (8 Adds
go, nodes 129 -> 121; the outputs bit for bit the same) that is a few tenths of a millisecond of ~80:
within the load's noise of whole-model timings (one thread 0.99-1.04x, two threads 0.87-1.04x in five
runs). The benchmark BERT: 3 Sums go.

An accumulator is folded only where it is read by the next addition alone, and no Add that ORT fuses
with a product goes: ``MatMul + constant`` (into ``Gemm`` or a bias-taking activation), an Add to a
product of rank 2 (``Gemm``'s C operand), an addition to a ``Conv``'s or ``Gemm``'s output (a residual
fused into the convolution). The main graph only: ``scan_rows`` sums in loop bodies. float32 and
float64 (ORT's ``Sum`` kernel types).
"""

from __future__ import annotations

import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m

_FLOATS = (ir.DataType.FLOAT, ir.DataType.DOUBLE)
_FUSED = frozenset({"Conv", "ConvTranspose", "Gemm", "QLinearConv"})  # ORT fuses an Add after these


def rewrite(graph: ir.Graph) -> int:
    """Fold the float addition chains of ``graph`` (not of its loop bodies: ``scan_rows`` sums there) into
    Sums; returns how many additions went."""
    folded = 0
    for node in list(graph):
        if node.graph is graph and node.domain in ("", "ai.onnx") and node.op_type in ("Add", "Sum"):
            folded += _fold(graph, node)
    return folded


def _accumulator(graph: ir.Graph, value: ir.Value | None) -> ir.Node | None:
    """The Add or Sum producing ``value`` where it can be folded into its one reader."""
    node = m.producer(value, "Add", "Sum")
    if value is None or node is None or node.graph is not graph or value.is_graph_output() \
            or len(list(value.uses())) != 1 or value.dtype not in _FLOATS or len(node.inputs) < 2:
        return None
    if any(v is None or v.dtype not in _FLOATS for v in node.inputs):
        return None
    if node.op_type == "Add" and _fusable(node):
        return None
    return node


def _fusable(add: ir.Node) -> bool:
    """Whether ORT fuses the Add with a product before it: a convolution's or Gemm's output, a MatMul's with a
    constant (a bias), or with anything where the product is of rank 2 (into Gemm)."""
    a, b = add.inputs
    if m.producer(a, *_FUSED) is not None or m.producer(b, *_FUSED) is not None:
        return True
    for p, c in ((a, b), (b, a)):
        if m.producer(p, "MatMul") is not None and (m.const(c) is not None or m.rank(p) in (None, 2)):
            return True
    return False


def _fold(graph: ir.Graph, node: ir.Node) -> int:
    out = node.outputs[0]
    if out.dtype not in _FLOATS or any(v is None for v in node.inputs) or len(node.inputs) < 2 \
            or (node.op_type == "Add" and _fusable(node)):
        return 0
    inputs = list(node.inputs)
    # ((i0 + i1) + i2) ...: i0 may be expanded; i1 too where i0 is not (i0 + i1 = i1 + i0)
    first = _accumulator(graph, inputs[0])
    if first is None:
        first = _accumulator(graph, inputs[1])
        if first is None:
            return 0
        inputs[0], inputs[1] = inputs[1], inputs[0]
    merged = list(first.inputs) + inputs[1:]
    total = ir.node("Sum", merged)
    m.replace(graph, out, total, node)
    graph.remove(node, safe=True)
    graph.remove(first, safe=True)
    return 1
