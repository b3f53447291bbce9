"""A Scan body's gates made by separate projections (flax's GRUCell and LSTMCell) that share their pointwise nodes, as one.

Runs from ``scan_rows`` on the Scan ``loops.to_scan`` writes, after ``scan_gates``.

Two gates made by separate sums of one form (flax's GRUCell and LSTMCell: a Dense per gate) that
go through the same pointwise nodes run them once over both gates' columns side by side, then a
Split (``merge_pairs``): the sums' terms joined along their last axis (two products of one value
as one product by the joined weights, two projections of one sequence before the Scan as one,
one scan input, constants side by side). The same ops on each element in the same order: the
same bits with ONNX Runtime's graph optimizations off; on, ORT fuses ``r * (1 / y)`` into ``r / y``
where ``r`` is not cut by a Split, so the graph before differs there, both within the converter's
tolerance of jax.jit (2.7e-7 and 3.1e-7 on the GRU below). flax GRUCell (T64 B16 I64 H128):
28 nodes -> 22 (main 6 -> 5), body kernels 18 -> 15; LSTMCell's exact Scan (behind the LSTM op's
finiteness guard) 40 -> 28 nodes. One thread's CPU time per call within the load's noise: 0.97-1.03x
(load 3.5-5, medians of 50 alternating rounds): the step's time is its products' and ORT's, not
these kernels'.

The two gates may be neighbouring parts of one Split of the last axis (nnx's, Equinox's and Keras'
GRUCell cut r, z and n from one product): they become one part of a Split that keeps them together
(the zoo's ``nnx_gru``: 22 nodes a step -> 19; see ``_scan_body`` for its time). Two gates may add one constant (flax's
zero biases, one initializer after deduplication): it joins with itself. The zoo's ``linen_gru``
(GRUCell(128), B2 T64): body 22 -> 17 nodes, time over jax.jit's 1.37 -> 1.30, CPU time 1.38 -> 1.32
(load 7, alternating in one process).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _constants
from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites._scan_body import (
    chain_once,
    hand_over,
    last_axis_split,
    n_state,
    only_use,
    pointwise_chain,
    until_unchanged,
)
from jaxconv.onnx.rewrites._scan_columns import constant


def merge_pairs(main: ir.Graph, scan: ir.Node) -> int:
    """Two gates made by separate sums of one form (flax's GRUCell: a Dense per gate) that go through
    the same pointwise nodes (r's and z's sigmoids), as one sum over both gates' columns side by
    side, the pointwise nodes once, and a Split. The sums' terms are joined along their last axis:
    the rows of two projections of one sequence before the Scan as one projection by the joined
    weights (one scan input), two products of one value by constant weights as one product,
    constants side by side. Each element meets the same ops in the same order: the same bits."""
    body = scan.attributes["body"].value

    def step(shapes: dict[int, tuple[int, ...]]) -> bool:
        starts: dict[tuple, list[tuple[ir.Value, list]]] = {}
        for node in body:
            dims = shapes.get(id(node.outputs[0])) if node.op_type in _SUM_OPS and len(node.outputs) == 1 else None
            chain = pointwise_chain(node.outputs[0], len(dims)) if dims and node.domain == "" else []
            if chain:
                starts.setdefault((tuple(k for _, k in chain), dims[:-1]), []).append((node.outputs[0], chain))
        pairs = [(a, b) for group in starts.values() for i, a in enumerate(group) for b in group[i + 1:]]
        return any(_merge_pair(main, scan, a, b, shapes) for a, b in pairs)
    return until_unchanged(scan, step)


_SUM_OPS = ("Add", "Sub", "Mul", "Div")
_Build = Callable[[list[ir.Node], list[ir.Node]], ir.Value]  # (new nodes, replaced nodes) -> joined value
_Dims = Callable[[ir.Value], "tuple[int, ...] | list[int] | None"]


def _merge_pair(main: ir.Graph, scan: ir.Node, first: tuple[ir.Value, list], second: tuple[ir.Value, list],
                shapes: dict[int, tuple[int, ...]]) -> bool:
    (a, chain_a), (b, chain_b) = first, second
    dims = shapes[id(a)]
    widths = [dims[-1], shapes[id(b)][-1]]
    body = scan.attributes["body"].value
    join = _Join(main, scan, body, widths, len(dims), lambda v: shapes.get(id(v)))
    build = _joined(join, a, b, chain_a[0][0], chain_b[0][0])
    if build is None:
        return False
    nodes: list[ir.Node] = []
    old: list[ir.Node] = []
    value = build(nodes, old)
    nodes += chain_once(main, chain_a, value, widths, len(dims) - 1)
    body.insert_before(chain_a[0][0], nodes)
    hand_over(nodes[-1], [chain_a, chain_b])
    for node in [n for n, _ in reversed(chain_a)] + [n for n, _ in reversed(chain_b)] + old[::-1]:
        body.remove(node, safe=True)
    body.sort()
    return True


class _Join:
    """Where two gates' terms are joined: the graph (the body, or the one the Scan is in), the
    gates' widths, the rank of their values, their dims."""

    def __init__(self, main: ir.Graph, scan: ir.Node, graph: ir.Graph, widths: list[int], rank: int, dims: _Dims):
        self.main, self.scan, self.graph, self.widths, self.rank, self.dims = main, scan, graph, widths, rank, dims


def _joined(j: _Join, a: ir.Value, b: ir.Value, reader_a: ir.Node, reader_b: ir.Node) -> _Build | None:
    """How to make the value whose last axis holds ``a``'s columns then ``b``'s, each computed as
    ``a`` and ``b`` are (read only by ``reader_a`` and ``reader_b``); None where the two are not of
    one form."""
    ca, cb = constant(a), constant(b)
    if ca is not None or cb is not None:  # one constant for both (flax's zero biases, deduplicated) too
        return _joined_constants(j, ca, cb)
    if a is b:
        return None
    if only_use(a) is not reader_a or only_use(b) is not reader_b or a.dtype != b.dtype:
        return None
    if any(not j.dims(v) or j.dims(v)[-1] != w for v, w in zip((a, b), j.widths)):  # type: ignore[index]
        return None
    body = j.scan.attributes["body"].value
    if j.graph is body and any(a is v for v in body.inputs) and any(b is v for v in body.inputs):
        ins = list(body.inputs)
        return _joined_rows(j, ins.index(a), ins.index(b))
    na, nb = a.producer(), b.producer()
    if na is not None and na is nb and na.op_type == "Split" and na.domain == "" and na.graph is j.graph:
        return _joined_parts(j, na, a, b)
    if na is None or nb is None or na.op_type != nb.op_type or na.domain != "" or nb.domain != "" \
            or na.graph is not j.graph or nb.graph is not j.graph or na.attributes or nb.attributes:
        return None
    if na.op_type == "MatMul":
        wa, wb = (_constants.evaluate(n.inputs[1]) for n in (na, nb))
        if na.inputs[0] is not nb.inputs[0] or not _joinable_weights(wa, wb, j.widths):
            return None

        def product(nodes: list[ir.Node], old: list[ir.Node]) -> ir.Value:
            w = m.new_initializer(j.main, np.concatenate([wa, wb], axis=-1), "gate_pair_w")
            nodes.append(ir.node("MatMul", [na.inputs[0], w]))
            _typed(j, nodes[-1].outputs[0], a)
            old.extend((na, nb))
            return nodes[-1].outputs[0]
        return product
    if na.op_type not in _SUM_OPS or len(na.inputs) != 2 or len(nb.inputs) != 2:
        return None
    left, right = (_joined(j, na.inputs[k], nb.inputs[k], na, nb) for k in (0, 1))
    if left is None or right is None:
        return None

    def binary(nodes: list[ir.Node], old: list[ir.Node]) -> ir.Value:
        node = ir.node(na.op_type, [left(nodes, old), right(nodes, old)])
        _typed(j, node.outputs[0], a)
        nodes.append(node)
        old.extend((na, nb))
        return node.outputs[0]
    return binary


def _joined_parts(j: _Join, split: ir.Node, a: ir.Value, b: ir.Value) -> _Build | None:
    """Two neighbouring parts of one Split of the last axis (nnx's and Equinox's GRUCell cut r, z and n
    from one product) as one part of a Split that keeps them together."""
    outs = list(split.outputs)
    k = outs.index(a)
    rank = j.rank
    dims = j.dims(split.inputs[0])
    if k + 1 >= len(outs) or outs[k + 1] is not b or not dims or len(dims) != rank:
        return None
    sizes = last_axis_split(split, dims[-1], rank)
    if sizes is None or len(sizes) != len(outs) or sizes[k:k + 2] != j.widths:
        return None

    def parts(nodes: list[ir.Node], old: list[ir.Node]) -> ir.Value:
        joined = [*sizes[:k], sizes[k] + sizes[k + 1], *sizes[k + 2:]]
        cut = ir.node("Split", [split.inputs[0], m.new_initializer(j.main, np.array(joined, np.int64), "gate_sizes")],
                      {"axis": rank - 1}, num_outputs=len(joined))
        for before, after in zip([*outs[:k], None, *outs[k + 2:]], cut.outputs):
            if before is not None:  # the other parts: read from the new Split
                after.type, after.shape = before.type, before.shape
                before.replace_all_uses_with(after)
        _typed(j, cut.outputs[k], a)
        nodes.append(cut)
        old.append(split)
        return cut.outputs[k]
    return parts


def _typed(j: _Join, new: ir.Value, a: ir.Value) -> None:
    """``new`` typed as ``a``, its shape ``a``'s with both gates' columns."""
    new.type = a.type
    dims = j.dims(a)
    if dims:
        new.shape = ir.Shape([*dims[:-1], sum(j.widths)])


def _joinable_weights(wa: np.ndarray | None, wb: np.ndarray | None, widths: list[int]) -> bool:
    return wa is not None and wb is not None and wa.dtype == wb.dtype and wa.dtype.kind == "f" \
        and wa.ndim == wb.ndim == 2 and wa.shape[0] == wb.shape[0] and [wa.shape[1], wb.shape[1]] == widths


def _joined_constants(j: _Join, ca: np.ndarray | None, cb: np.ndarray | None) -> _Build | None:
    """Two constants side by side (each broadcast to its gate's columns first: the same numbers)."""
    if ca is None or cb is None or ca.dtype != cb.dtype or ca.dtype.kind != "f" or max(ca.ndim, cb.ndim) > j.rank:
        return None
    full = []
    for c, w in zip((ca, cb), j.widths):
        c = c.reshape((1,) * (j.rank - c.ndim) + c.shape)
        if c.shape[-1] not in (1, w):
            return None
        full.append(np.broadcast_to(c, c.shape[:-1] + (w,)))
    if full[0].shape[:-1] != full[1].shape[:-1]:
        return None
    joined = np.concatenate(full, axis=-1)

    def constant(nodes: list[ir.Node], old: list[ir.Node]) -> ir.Value:
        return m.new_initializer(j.main, joined, "gate_pair_c")
    return constant


def _joined_rows(j: _Join, ka: int, kb: int) -> _Build | None:
    """Two scan inputs' rows, each input the Scan's alone and made before the Scan by sums of the
    same form of products ``xs @ w`` of one ``xs`` and constants (a hoisted bias), as the rows of one
    input: those sums over the joined columns."""
    scan = j.scan
    if ka == kb or min(ka, kb) < n_state(scan):
        return None
    xa, xb = scan.inputs[ka], scan.inputs[kb]
    dims = m.static_dims(xa)
    if not dims:
        return None
    outer = _joined(_Join(j.main, scan, scan.graph, j.widths, len(dims), m.static_dims), xa, xb, scan, scan)
    if outer is None:
        return None
    body = scan.attributes["body"].value

    def rows(nodes: list[ir.Node], old: list[ir.Node]) -> ir.Value:
        before: list[ir.Node] = []
        replaced: list[ir.Node] = []
        joined = outer(before, replaced)
        joined.shape = ir.Shape([*dims[:-1], sum(j.widths)])
        scan.graph.insert_before(scan, before)
        scans = int(scan.attributes["num_scan_inputs"].value) - 1
        inputs = list(scan.inputs)
        inputs[ka] = joined
        del inputs[kb]
        for k in range(min(ka, kb), len(inputs)):
            scan.replace_input_with(k, inputs[k])
        scan.resize_inputs(len(inputs))
        scan.attributes["num_scan_inputs"] = ir.AttrInt64("num_scan_inputs", scans)
        for node in replaced[::-1]:
            scan.graph.remove(node, safe=True)
        row = body.inputs[ka]
        if row.shape is not None:
            row.shape = ir.Shape([*row.shape[:-1], sum(j.widths)])
        body.inputs.pop(kb)
        return row
    return rows
