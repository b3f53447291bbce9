"""A Scan body's gates in fewer nodes: a sigmoid's negation in the weights' columns, the gates of a Split
that share their pointwise nodes run them once.

Runs from ``scan_rows`` on the Scan ``loops.to_scan`` writes. Each change exact:

- ``Exp(-a)``, ``a`` a sum of the step's row, constants and products ``h @ w`` by a constant ``w`` (or
  one computed from constants in the body: haiku's GRU slices its weights and bias there; its Neg
  folded: 0.97x one thread's CPU time per call, T64 B16 I64 H128, load 3.4), or
  a gate cut from such a sum by a Split, is computed as ``Exp(a')`` with ``a'`` the same sum of the
  negated terms (of the gate's columns only): ``w``'s columns negated in the body, the row's
  producer before the Scan negated in its constants (``x @ -w``, ``-b``), or, for a whole row of
  another producer, one Neg over the whole input. Negating every term negates each product and each
  rounded sum exactly (round to nearest is symmetric); only the sign of a zero, which Exp does not
  read, and the sign of a NaN, which nothing defines, can differ.
- The gates of a Split that go through the same pointwise nodes (an LSTM's three sigmoids) run
  them once: the columns of every term of the Split's input are permuted the same way (weights,
  biases, the projection before the Scan), so those gates lie side by side, then one Split cuts
  the result. Each element meets the same ops; the ops taken are those whose result does not
  depend on where an element lies in its tensor (ONNX Runtime's Log does, by an ulp at the end of
  its vector loop: it is not taken).

The columns move where the terms are made (``_scan_columns.plan``).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites._scan_body import (
    body_shapes,
    chain_once,
    hand_over,
    last_axis_split,
    pointwise_chain,
    until_unchanged,
)
from jaxconv.onnx.rewrites._scan_columns import Cols, plan


def fold_negations(main: ir.Graph, scan: ir.Node) -> int:
    """``Exp(-a)`` as ``Exp(a')``, ``a'`` the same sum with every term negated (``plan``). Exp does
    not read the sign of a zero."""
    body = scan.attributes["body"].value
    count = 0
    for neg in [n for n in body if n.op_type == "Neg" and n.domain == ""]:
        out, a = neg.outputs[0], neg.inputs[0]
        uses = list(out.uses())
        if not uses or out.is_graph_output() or any(u.node.op_type != "Exp" or u.node.domain != "" for u in uses):
            continue
        dims = body_shapes(scan).get(id(a))
        if not dims:
            continue
        edits = plan(main, scan, a, Cols.negation(dims[-1]), neg, body_shapes(scan))
        if edits is None:
            continue
        for edit in edits:
            edit()
        out.replace_all_uses_with(a)
        body.remove(neg, safe=True)
        count += 1
    return count


def group_chains(main: ir.Graph, scan: ir.Node) -> int:
    """The parts of a Split that go through the same pointwise nodes (the LSTM's three sigmoids) as
    one run of those nodes over their columns put side by side, then a Split of its result: the
    columns of the Split's input are permuted where its terms are made (``plan``), so the parts
    that share a chain are contiguous. Each element goes through the same ops; only where it lies
    changes."""
    body = scan.attributes["body"].value

    def step(shapes: dict[int, tuple[int, ...]]) -> bool:
        for split in [n for n in body if n.op_type == "Split" and n.domain == ""]:
            dims = shapes.get(id(split.inputs[0])) if split.inputs else None
            sizes = last_axis_split(split, dims[-1] if dims else None, len(dims or ()))
            if sizes is None or any(o.is_graph_output() for o in split.outputs):
                continue
            chains = [pointwise_chain(o, len(dims)) for o in split.outputs]
            keys = [tuple(k for _, k in c) for c in chains]
            group = next((g for g in ([j for j, k in enumerate(keys) if k == key] for key in keys if key)
                          if len(g) > 1), None)
            if group is not None and _group(main, scan, split, sizes, chains, group, shapes):
                return True
        return False
    return until_unchanged(scan, step)


def _group(main: ir.Graph, scan: ir.Node, split: ir.Node, sizes: list[int], chains: list,
           group: list[int], shapes: dict[int, tuple[int, ...]]) -> bool:
    """Rewrite one group (``group_chains``); False, changing nothing, when the columns cannot move."""
    body = scan.attributes["body"].value
    first = group[0]
    order = [j for j in range(first) if j not in group] + group + [j for j in range(first, len(sizes)) if j not in group]
    starts = np.cumsum([0, *sizes])
    perm = np.concatenate([np.arange(starts[j], starts[j + 1]) for j in order])
    src = split.inputs[0]
    whole = len(group) == len(sizes)
    if not whole:
        edits = plan(main, scan, src, Cols(perm, np.ones(len(perm), np.int8)), split, shapes)
        if edits is None:
            return False
        for edit in edits:
            edit()
    # the Split in the new order, the group's parts as one
    rank = len(shapes[id(src)])
    nodes: list[ir.Node] = []
    if whole:
        block = src
    else:
        merged = [j for j in order if j not in group[1:]]
        new_sizes = [sum(sizes[j] for j in group) if j == first else sizes[j] for j in merged]
        outer = ir.node("Split", [src, m.new_initializer(main, np.array(new_sizes, np.int64), "gate_sizes")],
                        {"axis": rank - 1}, num_outputs=len(merged))
        nodes.append(outer)
        for j, out in zip(merged, outer.outputs):
            out.type = split.outputs[j].type or src.type
            if j != first:
                out.shape = split.outputs[j].shape
                split.outputs[j].replace_all_uses_with(out)
        block = outer.outputs[merged.index(first)]
    nodes += chain_once(main, chains[first], block, [sizes[j] for j in group], rank - 1, src.type)
    body.insert_before(split, nodes)
    hand_over(nodes[-1], [chains[j] for j in group], src.type)
    for j in group:
        for node, _ in reversed(chains[j]):
            body.remove(node, safe=True)
    body.remove(split, safe=True)
    return True
