"""A MatMul by a constant whose result is only split along its columns, as one MatMul per part.

A fused query/key/value projection (``jnp.split(x @ w_qkv, 3, axis=-1)``, GPT-2's ``c_attn``) is one
MatMul and a Split that copies the whole result into three new tensors. Multiplying by the three
column blocks of the weight gives the parts directly: the same products, no copy. Each element is
the same dot product over the same K; in ONNX Runtime the outputs are bit for bit those of the
MatMul and Split (tested). On the benchmark transformer (one thread, one process, alternating;
load 8-9) the projection MatMul + Split of a layer took 4.64 ms of CPU time, the three MatMuls 4.23.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m


def rewrite(graph: ir.Graph) -> int:
    """Split the MatMuls by constants in ``graph`` whose only reader splits their columns; returns how many."""
    return sum(_split(graph, node) for node in m.each_node(graph, "Split"))


def _sizes(split: ir.Node, width: int) -> list[int] | None:
    """The Split's part sizes along an axis of ``width`` (sizes input, or equal parts)."""
    if len(split.inputs) > 1 and split.inputs[1] is not None:
        arr = m.const(split.inputs[1])
        return None if arr is None else [int(v) for v in np.atleast_1d(arr)]
    n = len(split.outputs)
    if n == 0 or width % n:
        return None  # num_outputs with a smaller last part: left alone
    return [width // n] * n


def _split(graph: ir.Graph, split: ir.Node) -> int:
    y = split.inputs[0]
    mm = m.producer(y, "MatMul")
    if mm is None or mm.graph is not graph or y.is_graph_output() or len(list(y.uses())) != 1:
        return 0
    x, w = mm.inputs
    arr = m.const(w)
    rank = m.rank(y)
    if x is None or arr is None or arr.ndim != 2 or arr.dtype.kind != "f" or rank is None or rank < 2 \
            or m.rank(x) is None or m.rank(x) < 2:
        return 0
    axis = int(m.attr(split, "axis", 0))
    if axis % rank != rank - 1:
        return 0
    sizes = _sizes(split, arr.shape[1])
    if sizes is None or len(sizes) != len(split.outputs) or sum(sizes) != arr.shape[1] or min(sizes) <= 0:
        return 0
    start = 0
    for size, part in zip(sizes, split.outputs):
        block = np.ascontiguousarray(arr[:, start:start + size])
        start += size
        weight = m.new_initializer(graph, block, f"{w.name or 'w'}_cols{start - size}")
        m.replace(graph, part, ir.node("MatMul", [x, weight]), split)
    return 1
