"""A 1x1 convolution to fewer than 16 channels as a MatMul over the pixels.

ORT runs a Conv in its blocked NCHWc layout, whose output channels come in blocks of 8 (AVX2) or 16
(AVX-512): a 1x1 Conv to one channel (a segmentation mask, a decoder's last layer) computes 16 and keeps
one. As ``W [Cout, C] @ X [N, C, H * W]`` it computes what it keeps (one thread, medians, the Conv and a
Relu after it): ``[2, 8, 128, 128] -> 1`` channel 0.37 ms against 0.05 ms, ``[2, 16, 64, 64] -> 1``
0.10 against 0.03, ``[2, 32, 64, 64] -> 3`` 0.14 against 0.08, ``[2, 16, 128, 128] -> 4`` 0.34 against 0.21,
``[2, 64, 32, 32] -> 10`` 0.10 against 0.08; at 16 channels the Conv is as fast or faster (0.32 against
0.35 ms), hence ``MAX_CHANNELS``. Each output is the same sum of products over the input channels, added in
another order than the Conv's (float32 rounding). A Conv whose input is an NHWC Transpose stays: ORT reads
NHWC into its blocked layout in the same step, and the product on NHWC data (``X [N, H * W, C] @ Wᵀ``, no
Transposes) took Flax's U-Net head (``[2, 64, 64, 16] -> 2``) from 0.66-0.77x ``jax.jit`` to 0.75-0.81x.
A Keras decoder's last layer, on an upsampled NCHW tensor: 0.90-0.94x -> 0.47-0.49x (load 3.9).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites._constants import evaluate
from jaxconv.onnx.rewrites._dim_products import named_dims

MAX_CHANNELS = 15  # output channels; at 16 ORT's blocked Conv wastes nothing


def rewrite(graph: ir.Graph) -> int:
    """Turn the narrow 1x1 Convs of ``graph`` (the main graph) into MatMuls; returns how many."""
    count = 0
    for conv in m.each_node(graph, "Conv"):
        count += _one(graph, conv)
    return count


def is_narrow_pointwise(conv: ir.Node, weight: np.ndarray) -> bool:
    """Whether ``conv`` with the float32 ``weight`` is a 1x1, stride-1, unpadded, ungrouped Conv to at most
    ``MAX_CHANNELS`` channels, which the rule makes a MatMul (unless its input is NHWC data)."""
    return weight.ndim == 4 and weight.shape[2:] == (1, 1) and weight.dtype == np.float32 \
        and 1 <= weight.shape[0] <= MAX_CHANNELS and m.attr(conv, "group", 1) == 1 \
        and all(int(v) == 1 for v in m.attr(conv, "strides", [1, 1]) or []) \
        and all(int(v) == 0 for v in m.attr(conv, "pads", [0, 0, 0, 0]) or []) \
        and m.attr(conv, "auto_pad", "NOTSET") in ("NOTSET", "VALID")


def _one(graph: ir.Graph, conv: ir.Node) -> int:
    x, w = conv.inputs[0], conv.inputs[1] if len(conv.inputs) > 1 else None
    b = conv.inputs[2] if len(conv.inputs) > 2 else None
    weight = evaluate(w) if w is not None else None  # a kernel transposed to OIHW: folded later
    bias = evaluate(b) if b is not None else None
    dims = named_dims(x) if x is not None else None
    if weight is None or x is None or x.dtype != ir.DataType.FLOAT or not is_narrow_pointwise(conv, weight):
        return 0
    if b is not None and (bias is None or bias.shape != (weight.shape[0],)):
        return 0
    if dims is None or len(dims) != 4 or dims[1] != weight.shape[1] or not all(isinstance(d, int) for d in dims[1:]):
        return 0  # a symbolic batch is kept by the Reshapes' 0
    n, c, h, wd = dims
    cout = weight.shape[0]
    w2 = np.ascontiguousarray(weight.reshape(cout, c))
    source = m.producer(x, "Transpose")
    if source is not None and list(m.attr(source, "perm", []) or []) == [0, 3, 1, 2]:
        return 0  # NHWC data: ORT reorders it into its blocked layout as it goes; a MatMul would not gain
    flat = _reshaped(graph, x, [n, c, h * wd], "pixels_shape")
    product = ir.node("MatMul", [m.new_initializer(graph, w2, "pointwise_w"), flat.outputs[0]])
    nodes = [flat, product, *_plus(graph, product, bias.reshape(cout, 1) if bias is not None else None)]
    nodes.append(_reshaped(graph, nodes[-1].outputs[0], [n, cout, h, wd], "image_shape"))
    for node in nodes[1:-1]:
        node.outputs[0].type, node.outputs[0].shape = x.type, ir.Shape([n, cout, h * wd])
    m.replace(graph, conv.outputs[0], nodes, conv)
    graph.remove(conv, safe=True)
    return 1


def _reshaped(graph: ir.Graph, x: ir.Value, dims: list, name: str) -> ir.Node:
    """``Reshape(x, dims)``, a symbolic batch (the first dim) kept by a 0."""
    target = [0, *(int(d) for d in dims[1:])]
    node = ir.node("Reshape", [x, m.new_initializer(graph, np.array(target, np.int64), name)])
    node.outputs[0].type, node.outputs[0].shape = ir.TensorType(ir.DataType.FLOAT), ir.Shape(dims)
    return node


def _plus(graph: ir.Graph, product: ir.Node, bias: np.ndarray | None) -> list[ir.Node]:
    """``[Add(product, bias)]``, or none without a bias."""
    if bias is None:
        return []
    return [ir.node("Add", [product.outputs[0], m.new_initializer(graph, np.ascontiguousarray(bias), "pointwise_b")])]
