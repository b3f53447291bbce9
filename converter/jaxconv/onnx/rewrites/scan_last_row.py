"""A Scan's stacked output read only at its last row, where each row is the step's new carry, as the
Scan's final carry.

``hk.dynamic_unroll(core, xs, state)[0][-1]`` and ``nn.RNN(cell)(x)[:, -1]`` (a classifier over an RNN's
last output) scan a cell whose output is its new state, stack every step's output, and read one row.
The last row is the final carry, value for value: the Scan then writes no stacked output (no Identity
and no copy in every step), and the Slice or Gather of the row becomes the carry (``Unsqueeze``d where
the reader kept the row axis). Forward Scans stacking along axis 0 only (the form ``loops.to_scan``
writes); a Scan's step count is static.

Figures (ORT 1.32, one thread, medians of alternating runs): Haiku's VanillaRNN (B 2, H 64, T 64,
``ys[-1]``) 0.83x the wall time of the Scan that stacked every row.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _dim_products, loops
from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites._scan_body import n_state, one_axis_cut, plain


def rewrite(main: ir.Graph) -> int:
    """Read the last rows of every Scan in ``main`` (nested ones too) from its carries; returns how many
    reads changed."""
    count = 0
    scans = [n for n in ir.traversal.RecursiveGraphIterator(main) if n.op_type == "Scan" and n.domain == ""]
    for scan in scans:
        if not plain(scan):
            continue
        changed = _last_rows(scan)
        if changed:
            loops.without_unread_rows(scan)
        count += changed
    return count


def _last_rows(scan: ir.Node) -> int:
    body = scan.attributes["body"].value
    n = n_state(scan)
    steps = _steps(scan)
    count = 0
    for j, ys in enumerate(scan.outputs[n:]):
        carry = _carry_of(body, body.outputs[n + j], n)
        dims = m.static_dims(ys) or _dim_products.named_dims(ys)
        if carry is None or steps is None or not dims:
            continue
        final = scan.outputs[carry]
        for use in list(ys.uses()):
            node = use.node
            if use.idx != 0 or node.domain != "" or node.graph is not scan.graph:
                continue
            kept_axis = _last_row_read(node, steps, tuple(dims))
            if kept_axis is None:
                continue
            out = node.outputs[0]
            if kept_axis:
                _read_row(scan.graph, node, out, final)
            elif not (out.is_graph_output() and final.is_graph_output()):  # one value, two outputs
                m.replace(scan.graph, out, ir.node("Identity", [final]), node)
                scan.graph.remove(node, safe=True)
            else:
                continue
            count += 1
    return count


def _read_row(graph: ir.Graph, node: ir.Node, out: ir.Value, final: ir.Value) -> None:
    """``out`` (the row with its axis of one) as ``final``: the end of the views after it that keep the
    elements' order (a Reshape to ``[B, H]``, a Transpose that moves only the axis of one) reads ``final``
    or a Reshape of it, else an Unsqueeze of ``final`` stands for ``out``."""
    end = _through_views(out)
    dims = m.static_dims(end)
    if end is not out and dims is not None and not (end.is_graph_output() and final.is_graph_output()):
        if dims == m.static_dims(final):
            m.replace(graph, end, ir.node("Identity", [final]), node)
        else:
            target = m.new_initializer(graph, np.array(dims, np.int64), "row_shape")
            m.replace(graph, end, ir.node("Reshape", [final, target]), node)
        while end is not out:  # the views, last first, then the read
            view = end.producer()
            end = view.inputs[0]
            graph.remove(view, safe=True)
    else:
        axis = m.new_initializer(graph, np.array([0], np.int64), "row_axis")
        m.replace(graph, out, ir.node("Unsqueeze", [final, axis]), node)
    graph.remove(node, safe=True)


def _through_views(value: ir.Value) -> ir.Value:
    """The last value of the chain of single readers after ``value`` that only view its elements in their
    order: Reshape, Squeeze, Unsqueeze, a Transpose whose axes longer than one keep their order."""
    while not value.is_graph_output() and len(value.uses()) == 1:
        use = next(iter(value.uses()))
        node = use.node
        if use.idx != 0 or node.domain != "" or node.op_type not in ("Reshape", "Squeeze", "Unsqueeze", "Transpose"):
            break
        if node.op_type == "Transpose":
            dims, perm = m.static_dims(value), m.attr(node, "perm")
            if dims is None or perm is None:
                break
            moved = [int(p) for p in perm if dims[int(p)] != 1]
            if moved != sorted(moved):
                break
        value = node.outputs[0]
    return value


def _carry_of(body: ir.Graph, row: ir.Value, n: int) -> int | None:
    """The index of the carry whose new value ``row`` is (itself or an Identity of it), else None."""
    source = m.producer(row, "Identity")
    candidates = (row,) if source is None else (row, source.inputs[0])
    for k in range(n):
        if body.outputs[k] in candidates:
            return k
    return None


def _steps(scan: ir.Node) -> int | None:
    n = n_state(scan)
    for xs in scan.inputs[n:]:
        dims = m.static_dims(xs)
        if dims:
            return dims[0]
    return None


def _last_row_read(node: ir.Node, steps: int, dims: tuple) -> bool | None:
    """For a read of row ``steps - 1`` alone along axis 0 of a value of shape ``dims``: whether the row
    axis is kept (a Slice, a Gather of a one-element index list), or not (a Gather of a scalar index);
    None for any other read."""
    if node.op_type == "Gather" and len(node.inputs) == 2 and int(m.attr(node, "axis", 0)) == 0:
        index = m.const(node.inputs[1])
        if index is None or index.size != 1 or index.ndim > 1 or int(index.flat[0]) not in (-1, steps - 1):
            return None
        return index.ndim == 1
    if node.op_type != "Slice":
        return None
    return True if one_axis_cut(node, dims) == (0, steps - 1, steps) else None
