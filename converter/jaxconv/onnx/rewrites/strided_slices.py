"""The even and odd elements of a last axis (``x[..., ::2]`` and ``x[..., 1::2]``) as one Split of pairs.

Interleaved rotary embeddings (RoFormer, GPT-J) take both halves of every pair with two stride-2
Slices; ORT copies those element by element (two Slices on [2, 64, 4, 32]: about 16 µs of kernels,
one thread). Viewed as ``[..., n/2, 2]``, the same elements are the two outputs of one Split of the
last axis (about 6 µs), squeezed back to ``[..., n/2]``. Values only move: the numbers cannot change.
The last axis must be a known even size; the others may be symbolic (a model exported for any batch):
the Reshape to pairs copies them (a 0 in its shape).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _dim_products as dp
from jaxconv.onnx.rewrites import _match as m


def rewrite(graph: ir.Graph) -> int:
    """Replace the pairs of even/odd stride-2 Slices of ``graph`` and its subgraphs; returns how many pairs."""
    count = 0
    for g in list(m.all_graphs(graph)):
        groups: dict[int, dict[int, list[ir.Node]]] = {}
        for node in m.each_node(g, "Slice"):
            parity = _parity(node)
            if parity is not None:
                groups.setdefault(id(node.inputs[0]), {}).setdefault(parity, []).append(node)
        for found in groups.values():
            if 0 in found and 1 in found:
                count += _split(g, found)
    return count


def _parity(node: ir.Node) -> int | None:
    """0 or 1 when ``node`` is ``x[..., k::2]`` over the whole even last axis of ``x`` (its other axes read
    whole), else None."""
    x = node.inputs[0] if node.inputs else None
    if x is None or x.shape is None or len(node.inputs) < 3:
        return None
    shape = list(x.shape)
    rank = len(shape)
    if rank == 0 or not isinstance(shape[-1], int) or shape[-1] % 2 or shape[-1] < 2:
        return None
    args = [m.const(v) if v is not None else None for v in node.inputs[1:]]
    starts, ends = args[0], args[1]
    axes = args[2] if len(args) > 2 and node.inputs[3] is not None else np.arange(len(np.atleast_1d(starts)))
    steps = args[3] if len(args) > 3 and node.inputs[4] is not None else np.ones(len(np.atleast_1d(starts)), np.int64)
    if any(a is None for a in (starts, ends, axes, steps)):
        return None
    parity = None
    for s, e, a, st in zip(*(np.atleast_1d(v).tolist() for v in (starts, ends, axes, steps))):
        a = int(a) % rank
        if a == rank - 1:
            if st != 2 or s not in (0, 1) or e < shape[a] or parity is not None:
                return None
            parity = int(s)
        elif st != 1 or dp.axis_cut(shape[a] if isinstance(shape[a], int) else "?", s, e) != "whole":
            return None
    return parity


def _split(graph: ir.Graph, found: dict[int, list[ir.Node]]) -> int:
    first = found[0][0]
    x = first.inputs[0]
    shape = [d if isinstance(d, int) else 0 for d in x.shape]  # 0: the Reshape copies the symbolic size
    pairs = ir.node("Constant", [], {"value": ir.tensor(np.asarray([*shape[:-1], shape[-1] // 2, 2], np.int64))})
    last = ir.node("Constant", [], {"value": ir.tensor(np.asarray([len(shape)], np.int64))})
    sizes = ir.node("Constant", [], {"value": ir.tensor(np.asarray([1, 1], np.int64))})
    viewed = ir.node("Reshape", [x, pairs.outputs[0]])
    split = ir.node("Split", [viewed.outputs[0], sizes.outputs[0]], {"axis": ir.AttrInt64("axis", -1)}, num_outputs=2)
    for value, tail in ((viewed.outputs[0], [shape[-1] // 2, 2]), *((half, [shape[-1] // 2, 1]) for half in split.outputs)):
        value.type, value.shape = x.type, ir.Shape([*list(x.shape)[:-1], *tail])  # for the rules after this one
    nodes = [pairs, last, sizes, viewed, split]
    earliest = min((n for group in found.values() for n in group), key=lambda n: list(graph).index(n))
    graph.insert_before(earliest, nodes)
    for parity in (0, 1):
        for node in found[parity]:
            m.replace(graph, node.outputs[0], ir.node("Squeeze", [split.outputs[parity], last.outputs[0]]), node)
    return 1
