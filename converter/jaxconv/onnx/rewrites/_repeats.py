"""``jnp.repeat`` as the lowering and the clean-up leave it, read back (``kv_broadcast``, ``nearest_resize``).

Two forms repeat each of the ``n`` entries of an axis ``g`` times: a Gather of the axis by the constant
indices ``[0] * g + [1] * g + ...`` (indexing, ``jax.image.resize``'s nearest mode, ``repeat_gathers``'
form), and an Expand of a unit axis inserted after it, merged back by a Reshape (``jnp.repeat`` itself).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites._constants import evaluate
from jaxconv.onnx.rewrites._dim_products import Dim, named_dims

Dims = list[Dim]


@dataclass(frozen=True)
class Repeat:
    """``copies`` is ``source`` with each of the ``n`` entries of its axis ``axis`` repeated ``g`` times,
    or, where ``unit_axis`` is set, ``source`` with that unit axis (right after ``axis``) squeezed out."""

    source: ir.Value
    copies: ir.Value
    axis: int
    n: int
    g: int
    unit_axis: int | None = None


def dims(value: ir.Value | None) -> Dims | None:
    return None if value is None else named_dims(value)


def gathered(gather: ir.Node) -> Repeat | None:
    """The repeat when ``gather`` repeats each of the ``n`` entries of a known axis of its source ``g > 1``
    times: indexing by constant indices (``k[:, :, [0, 0, 1, 1]]``), or ``repeat_gathers``' form of
    ``jnp.repeat`` read through the Reshapes around it back to the Gather's own shape."""
    if gather.domain != "" or len(gather.inputs) != 2 or gather.inputs[0] is None:
        return None
    src = dims(gather.inputs[0])
    idx = evaluate(gather.inputs[1])  # k[:, :, idx] clamps its indices: constants computed from constants
    if src is None or idx is None or idx.ndim != 1 or idx.dtype.kind not in "iu" or not len(src):
        return None
    axis = m.attr(gather, "axis", 0)
    axis = axis + len(src) if axis < 0 else axis
    if not 0 <= axis < len(src) or not isinstance(src[axis], int):
        return None
    n = src[axis]
    if n < 1 or len(idx) % n or len(idx) // n < 2:
        return None
    g = len(idx) // n
    if not np.array_equal(idx, np.repeat(np.arange(n), g)):
        return None
    value = gather.outputs[0]
    shape = dims(value)
    reader = single_reader(value)
    while reader is not None and reader.op_type == "Reshape" and reader.domain == "" \
            and dims(reader.outputs[0]) is not None:  # repeat_gathers' Reshapes back and forth
        value = reader.outputs[0]
        reader = single_reader(value)
        if dims(value) == shape:
            break
    if shape is None or dims(value) != shape:
        return None
    return Repeat(gather.inputs[0], value, axis, n, g)


def expanded(expand: ir.Node) -> Repeat | None:
    """The repeat when ``expand`` and the Reshape after it are ``jnp.repeat`` of the
    ``n`` entries of a known axis ``g > 1`` times: a unit axis after it (an Unsqueeze, or a Reshape the
    clean-up merged it into), an Expand of that axis to ``g``, a Reshape merging the two (a Squeeze
    where ``n`` is 1). This is the form ``repeat_gathers`` reads, and the one it leaves (a symbolic
    size, short rows). The source is the Unsqueeze's input, else the Expand's with its unit axis."""
    if expand.domain != "" or len(expand.inputs) != 2 or expand.inputs[0] is None:
        return None
    unit = expand.inputs[0]
    src, out = dims(unit), dims(expand.outputs[0])
    if src is None or out is None or len(out) != len(src) or len(src) < 2:
        return None
    grown = [k for k, (a, b) in enumerate(zip(src, out)) if a != b]
    if len(grown) != 1 or grown[0] == 0 or src[grown[0]] != 1:
        return None
    k = grown[0]
    g, n = out[k], src[k - 1]
    if not isinstance(g, int) or g < 2 or not isinstance(n, int):
        return None
    merge = single_reader(expand.outputs[0])
    if merge is None or merge.op_type not in ("Reshape", "Squeeze") or merge.domain != "" \
            or merge.inputs[0] is not expand.outputs[0]:  # a Squeeze where n is 1
        return None
    if dims(merge.outputs[0]) != src[:k - 1] + [n * g] + src[k + 1:]:
        return None
    unsqueeze = m.producer(unit, "Unsqueeze")
    axes = m.const(unsqueeze.inputs[1]) if unsqueeze is not None and len(unsqueeze.inputs) == 2 else None
    if unsqueeze is not None and axes is not None and axes.size == 1 and int(axes.reshape(-1)[0]) % len(src) == k:
        return Repeat(unsqueeze.inputs[0], merge.outputs[0], k - 1, n, g)  # type: ignore[arg-type]
    return Repeat(unit, merge.outputs[0], k - 1, n, g, unit_axis=k)


def single_reader(value: ir.Value) -> ir.Node | None:
    uses = m.live_uses(value)  # other rules leave dead readers until the clean-up
    if value.is_graph_output() or len(uses) != 1:
        return None
    return uses[0].node


def without_unit_axis(graph: ir.Graph, x: ir.Value, axis: int, dims: Dims, names: tuple[str, str]) -> ir.Value:
    """``x`` without its unit axis ``axis``: where ``x`` is a Reshape's, that Reshape's input reshaped
    straight to ``dims`` (a Reshape and a Squeeze would stay two nodes), else a Squeeze of ``x``; ``names``
    name the new initializer of either (the Reshape's shape, the Squeeze's axes)."""
    producer = x.producer()
    reshape = m.producer(x, "Reshape")
    target = m.const(reshape.inputs[1]) if reshape is not None and len(reshape.inputs) == 2 else None
    keep_zero = reshape is not None and m.attr(reshape, "allowzero", 0) == 1
    if reshape is not None and reshape.inputs[0] is not None and target is not None and target.ndim == 1 \
            and len(target) == len(dims) + 1 and target[axis] == 1 and (keep_zero or not (target[axis:] == 0).any()):
        node = ir.node("Reshape", [reshape.inputs[0], m.new_initializer(
            graph, np.delete(target, axis).astype(np.int64), names[0])], {"allowzero": 1} if keep_zero else None)
    else:
        node = ir.node("Squeeze", [x, m.new_initializer(graph, np.array([axis], np.int64), names[1])])
    node.outputs[0].type, node.outputs[0].shape = x.type, ir.Shape(dims)
    if producer is not None:
        graph.insert_after(producer, node)
    else:
        graph.insert_before(graph[0], node)
    return node.outputs[0]
