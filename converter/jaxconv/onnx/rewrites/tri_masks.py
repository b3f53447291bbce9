"""A Where that fills a triangle (a causal attention mask) as Trilu, and a Sub for a fill that is not +0.

A decoder's masked scores are ``Where(mask, scores, fill)`` with a mask that is a triangle of the last
two axes, the same for every batch and head; keras-hub then zeroes the masked probabilities after the
Softmax with a second Where. ORT's Where costs about three Adds (one-thread CPU on [2, 4, 64, 64]:
28 µs against 4 µs for Trilu and 8 µs for Trilu and a Sub, run overhead aside). ``Trilu`` keeps the
triangle and writes +0 elsewhere, bit for bit; for another fill ``f``, ``Trilu(x) - C`` with ``C``
+0 in the triangle and ``-f`` outside gives ``x - 0 = x`` (every x: -0, NaN, ±inf) and ``0 - (-f) = f``
(NaN, ±inf and any finite ``f``; not -0.0, which a Sub cannot make from +0, so that fill is left).

The mask is often computed from constants at run time (keras-hub: a padding mask of ones broadcast by
an Expand the folding leaves, Min with the causal triangle, a comparison); the rule evaluates such an
expression here (a few ops, at most ``_constants.MAX_ELEMENTS`` elements), and the clean-up then drops it.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _constants as constants
from jaxconv.onnx.rewrites import _dim_products
from jaxconv.onnx.rewrites import _match as m


def rewrite(graph: ir.Graph) -> int:
    """Rewrite the triangle-filling Wheres of ``graph`` and its subgraphs; returns how many."""
    return m.count_everywhere(graph, "Where", _one)


def _triangle(keep: np.ndarray) -> tuple[int, int] | None:
    """``(k, upper)`` when the [Q, K] boolean ``keep`` is the pattern ``Trilu(ones, k, upper)`` keeps and
    neither all nor nothing (a row kept in part gives ``k``; the whole pattern is then compared)."""
    q, width = keep.shape
    counts = keep.sum(axis=1)
    partial = np.flatnonzero((counts > 0) & (counts < width))
    if partial.size == 0:
        return None
    i, count = int(partial[0]), int(counts[partial[0]])
    ones = np.ones((q, width), bool)
    if np.array_equal(np.tril(ones, count - 1 - i), keep):
        return count - 1 - i, 0
    if np.array_equal(np.triu(ones, width - count - i), keep):
        return width - count - i, 1
    return None


def _broadcasts_into(have: tuple[int, ...], shape: list[int | str]) -> bool:
    """Whether an array of shape ``have`` broadcasts to ``shape`` (named sizes: only a 1 broadcasts to them)."""
    if len(have) > len(shape):
        return False
    return all(h == 1 or h == d for h, d in zip(have[::-1], shape[::-1]))


def _target(dims: list[int | str]) -> np.ndarray:
    """A Reshape target for ``dims``: a named size (at most one) as -1."""
    return np.asarray([-1 if isinstance(d, str) else d for d in dims], np.int64)


def _one(graph: ir.Graph, node: ir.Node) -> int:
    out = node.outputs[0]
    if len(node.inputs) != 3 or (not out.uses() and not out.is_graph_output()):
        return 0
    cond, a, b = node.inputs
    fa, fb = m.folded(a), m.folded(b)
    if (fa is None) == (fb is None):
        return 0
    x, fill, keep_when = (a, fb, True) if fb is not None else (b, fa, False)
    shape = _dim_products.named_dims(x)  # the leading (batch, head) dims may be named sizes
    if shape is None or len(shape) < 2 or fill.size == 0 or x.dtype is None or fill.dtype != x.dtype.numpy():
        return 0
    flat = fill.reshape(-1)
    bits = flat.view(f"u{flat.itemsize}")
    if x.dtype not in (ir.DataType.FLOAT, ir.DataType.DOUBLE) or not (bits == bits[0]).all():
        return 0  # one fill value, bit for bit (a broadcast scalar)
    scalar = flat[0]
    if scalar == 0 and np.signbit(scalar):
        return 0
    mask = constants.evaluate(cond)
    if mask is None or mask.dtype != np.bool_ or mask.ndim > len(shape):
        return 0
    if not (_broadcasts_into(mask.shape, shape) and _broadcasts_into(fill.shape, shape)):
        return 0
    keep = mask if keep_when else np.logical_not(mask)
    keep = keep.reshape((1,) * (len(shape) - keep.ndim) + keep.shape)
    axes = [i for i, d in enumerate(shape) if d != 1]
    if len(axes) < 2:
        return 0
    rows, cols = axes[-2], axes[-1]  # the matrix: the last two axes of x that are not 1
    height, width = shape[rows], shape[cols]
    if not isinstance(height, int) or not isinstance(width, int) or 0 in shape:
        return 0  # (an empty plane has no triangle to find)
    if keep.shape[rows] != height or keep.shape[cols] != width:
        return 0
    plane = np.moveaxis(keep, (rows, cols), (-2, -1)).reshape(-1, height, width)
    if not (plane == plane[:1]).all():
        return 0  # the same triangle for every batch and head
    found = _triangle(plane[0])
    if found is None:
        return 0
    off, upper = found
    core = [shape[i] for i in axes]
    named = sum(isinstance(d, str) for d in shape)
    if len(core) != len(shape) and named > 1:
        return 0  # size-1 axes reshaped away: one named size can be a Reshape's -1, not two
    nodes: list[ir.Node] = []
    value = x
    if len(core) != len(shape):  # size-1 axes around the matrix (nnx attention's [b, h, q, 1, k]): reshaped away
        nodes.append(ir.node("Constant", [], {"value": ir.tensor(_target(core))}))
        nodes.append(ir.node("Reshape", [x, nodes[-1].outputs[0]]))
        value = nodes[-1].outputs[0]
    nodes.append(ir.node("Constant", [], {"value": ir.tensor(np.asarray(off, np.int64))}))
    nodes.append(ir.node("Trilu", [value, nodes[-1].outputs[0]], {"upper": ir.AttrInt64("upper", upper)}))
    if scalar != 0 or np.isnan(scalar):
        c = np.where(plane[0], np.zeros((), fill.dtype), -scalar).astype(fill.dtype)
        nodes.append(ir.node("Constant", [], {"value": ir.tensor(c)}))
        nodes.append(ir.node("Sub", [nodes[-2].outputs[0], nodes[-1].outputs[0]]))
    if len(core) != len(shape):
        nodes.append(ir.node("Constant", [], {"value": ir.tensor(_target(shape))}))
        nodes.append(ir.node("Reshape", [nodes[-2].outputs[0], nodes[-1].outputs[0]]))
    m.replace(graph, out, nodes, node)
    return 1
