"""Sum pooling as a depthwise Conv over the channels, instead of a one-channel Conv over every plane.

The lowering sums a reduce_window (``nn.avg_pool``'s sum) with a Conv of ones over the input
reshaped to ``[N*C, 1, H, W]``. ORT runs that one-channel Conv 2.3-2.6x slower than the same sums
as a depthwise Conv (``group=C``, ones ``[C, 1, kh, kw]``) on ``[N, C, H, W]``, which its blocked
NCHWc layout also keeps between the convolutions around it (42 -> 17 µs on [2, 32, 28, 28], one
thread). Every plane gets the same window sums either way; the Reshape after the pool reads the
depthwise result, whose elements are in the same order.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m


def rewrite(graph: ir.Graph) -> int:
    """Turn the one-channel ones-kernel Convs of ``graph`` and its subgraphs depthwise; returns how many."""
    return m.count_everywhere(graph, "Conv", _one)


def _channels(conv: ir.Node, planes: int) -> int | None:
    """The channel count C with N * C == ``planes``: from the Reshape after the Conv, else before it."""
    uses = conv.outputs[0].uses()
    candidates = []
    if len(uses) == 1 and uses[0].node.op_type == "Reshape" and uses[0].idx == 0:
        candidates.append(uses[0].node.outputs[0].shape)
    reshape = m.producer(conv.inputs[0], "Reshape")
    if reshape is not None:
        candidates.append(reshape.inputs[0].shape if reshape.inputs[0] is not None else None)
    for shape in candidates:
        if shape is not None and len(shape) >= 2 and all(isinstance(d, int) for d in shape[:2]):
            if shape[0] * shape[1] == planes and shape[1] > 1:
                return int(shape[1])
    return None


def _one(graph: ir.Graph, conv: ir.Node) -> int:
    if len(conv.inputs) != 2 or m.attr(conv, "group", 1) != 1 or not conv.outputs[0].uses():
        return 0
    x, w = conv.inputs
    kernel = m.const(w)
    if (
        x is None
        or kernel is None
        or kernel.ndim < 3
        or kernel.shape[:2] != (1, 1)
        or not np.all(kernel == 1)
    ):
        return 0
    if x.shape is None or len(x.shape) != kernel.ndim or not all(isinstance(d, int) for d in x.shape):
        return 0
    planes, spatial = int(x.shape[0]), [int(d) for d in x.shape[2:]]
    channels = _channels(conv, planes)
    out_shape = conv.outputs[0].shape
    if channels is None or out_shape is None or not all(isinstance(d, int) for d in out_shape):
        return 0
    shape = ir.node(
        "Constant", [], {"value": ir.tensor(np.array([planes // channels, channels, *spatial], np.int64))}
    )
    ones = ir.node(
        "Constant", [], {"value": ir.tensor(np.ones((channels, 1, *kernel.shape[2:]), kernel.dtype))}
    )
    grouped = ir.node("Reshape", [x, shape.outputs[0]])
    attrs = {k: v for k, v in conv.attributes.items() if k != "group"}
    attrs["group"] = ir.AttrInt64("group", channels)
    depthwise = ir.node("Conv", [grouped.outputs[0], ones.outputs[0]], attributes=attrs)
    back = ir.node("Constant", [], {"value": ir.tensor(np.array([int(d) for d in out_shape], np.int64))})
    restore = ir.node("Reshape", [depthwise.outputs[0], back.outputs[0]])
    m.replace(graph, conv.outputs[0], [shape, ones, grouped, depthwise, back, restore], conv)
    return 1
