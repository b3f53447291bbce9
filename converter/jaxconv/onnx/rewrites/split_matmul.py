"""A MatMul by a constant whose result is only split along its columns, as one MatMul per part.

A fused query/key/value projection (``jnp.split(x @ w_qkv, 3, axis=-1)``, GPT-2's ``c_attn``) is one
MatMul and a Split that copies the whole result into three new tensors. Multiplying by the three
column blocks of the weight gives the parts directly: the same products, no copy. Each element is
the same dot product over the same K; in ONNX Runtime the outputs are bit for bit those of the
MatMul and Split (tested). On the benchmark transformer (one thread, one process, alternating;
load 8-9) the projection MatMul + Split of a layer took 4.64 ms of CPU time, the three MatMuls 4.23.

A constant bias added to the product (``x @ w + b``, as trained checkpoints have) is split with it:
each part adds its own columns of the bias, the same Add on the same elements. A projection split per
head (GPT-NeoX and BLOOM reshape ``x @ w_qkv + b`` to ``[b, t, h, 3 * dh]`` and split the last axis)
takes, for each part, the columns of every head that the part reads (``j * 3 dh + offset ...``) and
reshapes the part's product to ``[b, t, h, dh]``: again one dot product per element, no Split.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m


@dataclass
class _Projection:
    """``x @ weight (+ bias)``, reshaped to ``[..., heads, width]`` when ``target`` is set."""

    x: ir.Value
    weight: np.ndarray  # [K, N]
    name: str
    bias: np.ndarray | None = None  # [N] or [1, ..., 1, N]
    target: np.ndarray | None = None  # the Reshape's int64 target: 0 (the product's dims), then heads, width
    heads: int = 1


def rewrite(graph: ir.Graph) -> int:
    """Split the MatMuls by constants in ``graph`` whose only reader splits their columns; returns how many.

    A part split again (a rotary embedding's columns of q, GPT-NeoX's) keeps its one MatMul: more and
    narrower products measured no faster (0.99-1.00x)."""
    made: set[int] = set()  # the MatMuls made here
    return sum(_split(graph, node, made) for node in m.each_node(graph, "Split"))


def _sizes(split: ir.Node, width: int) -> list[int] | None:
    """The Split's part sizes along an axis of ``width`` (sizes input, or equal parts)."""
    if len(split.inputs) > 1 and split.inputs[1] is not None:
        arr = m.const(split.inputs[1])
        return None if arr is None else [int(v) for v in np.atleast_1d(arr)]
    n = len(split.outputs)
    if n == 0 or width % n:
        return None  # num_outputs with a smaller last part: left alone
    return [width // n] * n


def _only_reader(value: ir.Value | None, graph: ir.Graph) -> bool:
    return value is not None and m.sole_use(value) \
        and (value.producer() is None or value.producer().graph is graph)


def _projection(graph: ir.Graph, y: ir.Value, made: set[int]) -> _Projection | None:
    """``y`` as ``x @ w (+ b)``, or that product reshaped to split its last axis into heads."""
    if not _only_reader(y, graph):
        return None
    reshape = m.producer(y, "Reshape")
    if reshape is not None:
        inner = _projection(graph, reshape.inputs[0], made)
        if inner is None or inner.target is not None:
            return None
        out, lead = y.shape, inner.x.shape  # a 2-D weight keeps x's leading dims
        if out is None or lead is None or len(out) != len(lead) + 1 or len(out) < 3 \
                or not all(isinstance(d, int) or d.value is not None for d in lead[:-1]) \
                or list(out[:-2]) != list(lead[:-1]) \
                or not all(isinstance(d, int) and d > 0 for d in out[-2:]) \
                or out[-2] * out[-1] != inner.weight.shape[1]:
            return None  # not a split of the last axis alone (its target may be computed: a symbolic batch)
        heads, width = int(out[-2]), int(out[-1])
        inner.target = np.array([0] * (len(out) - 2) + [heads, width], np.int64)  # 0: the product's dimension
        inner.heads = heads
        return inner
    bias = None
    biased = m.product_plus(y)
    if biased is not None:
        product, other = biased
        bias = m.const(other)
        if bias is None or not _only_reader(product, graph):
            return None
        y = product
    mm = m.producer(y, "MatMul")
    if mm is None or mm.graph is not graph or id(mm) in made:
        return None
    x, w = mm.inputs
    arr = m.const(w)
    rank = m.rank(x)
    if x is None or arr is None or arr.ndim != 2 or arr.dtype.kind != "f" or rank is None or rank < 2:
        return None
    if bias is not None and (bias.dtype != arr.dtype or bias.ndim > rank or bias.shape[-1:] != arr.shape[1:]
                             or any(d != 1 for d in bias.shape[:-1])):
        return None  # a bias that broadcasts along more than the columns
    return _Projection(x, arr, w.name or "w", bias)


def _split(graph: ir.Graph, split: ir.Node, made: set[int]) -> int:
    y = split.inputs[0]
    found = _projection(graph, y, made)
    rank = m.rank(y)
    if found is None or rank is None or int(m.attr(split, "axis", 0)) % rank != rank - 1:
        return 0
    width = found.weight.shape[1] // found.heads
    sizes = _sizes(split, width)
    if sizes is None or len(sizes) != len(split.outputs) or sum(sizes) != width or min(sizes) <= 0:
        return 0
    start = 0
    for size, part in zip(sizes, split.outputs):
        columns = (np.arange(found.heads)[:, None] * width + np.arange(start, start + size)).reshape(-1)
        weight = m.new_initializer(graph, np.ascontiguousarray(found.weight[:, columns]),
                                   f"{found.name}_cols{start}")
        nodes = [ir.node("MatMul", [found.x, weight])]
        made.add(id(nodes[0]))
        if found.bias is not None:
            bias = m.new_initializer(graph, np.ascontiguousarray(found.bias[..., columns]),
                                     f"{found.name}_bias{start}")
            nodes.append(ir.node("Add", [nodes[-1].outputs[0], bias]))
        if found.target is not None:
            target = found.target.copy()
            target[-1] = size
            shape = m.new_initializer(graph, target, "heads_shape")
            nodes.append(ir.node("Reshape", [nodes[-1].outputs[0], shape]))
        start += size
        m.replace(graph, part, nodes, split)
    return 1
