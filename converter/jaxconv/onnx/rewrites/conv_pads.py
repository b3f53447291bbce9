"""A Conv's padding as an explicit Pad where its constant weights hold an infinity or a NaN.

ONNX Runtime runs a float Conv with constant weights in its blocked layout (the NCHWc transformer), whose
kernels skip the padded places instead of multiplying them: a padded zero times an infinite weight adds
nothing there, where ``jax.jit`` (and ORT's plain Conv, and the ONNX reference) add ``0 * inf``, NaN. A
gradient's full convolution (``pads`` of the kernel's size less one) meets every weight with padding. So a
Conv whose weights are not all finite reads its input through a Pad of zeros, and pads nothing itself; the
Pad names its axes (opset 18), which keeps ORT's PadFusion from folding it back into the Conv. Real weights
are finite: the rule costs nothing there.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _constants as constants
from jaxconv.onnx.rewrites import _match as m

PAD_AXES_OPSET = 18  # Pad's axes input


def rewrite(graph: ir.Graph, opset: int) -> int:
    """Move the padding of every Conv with non-finite constant weights into a Pad; returns how many."""
    if opset < PAD_AXES_OPSET:
        return 0
    return m.count_everywhere(graph, "Conv", _one)


def _one(graph: ir.Graph, conv: ir.Node) -> int:
    if conv.domain not in ("", "ai.onnx") or len(conv.inputs) < 2 or conv.inputs[0] is None:
        return 0
    pads = m.attr(conv, "pads")
    if m.attr(conv, "auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET") or not pads or not any(pads):
        return 0
    weight = constants.evaluate(conv.inputs[1])
    if weight is None or weight.dtype.kind != "f" or bool(np.isfinite(weight).all()):
        return 0
    spatial = len(pads) // 2
    x = conv.inputs[0]
    axes = list(range(2, 2 + spatial))
    pad = ir.node("Pad", [x, m.new_initializer(graph, np.array(pads, np.int64), "conv_pads"),
                          m.new_initializer(graph, np.zeros((), weight.dtype), "conv_pad_zero"),
                          m.new_initializer(graph, np.array(axes, np.int64), "conv_pad_axes")],
                  attributes={"mode": "constant"})
    graph.insert_before(conv, pad)
    conv.replace_input_with(0, pad.outputs[0])
    conv.attributes["pads"] = ir.AttrInt64s("pads", [0] * len(pads))
    return 1
