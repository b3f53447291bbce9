"""Nearest-neighbour upsampling by whole factors (``jnp.repeat`` of spatial axes) as one Resize.

Keras' ``UpSampling2D``, ``x.repeat(2, 1).repeat(2, 2)`` in Flax or Haiku code and
``jax.image.resize(..., "nearest")`` by whole factors repeat each row and column ``g`` times: an Expand
of a unit axis merged back by a Reshape, or a Gather of repeated indices (``_repeats``). In a CNN they
sit between convolutions on NHWC data, so ORT reorders layouts around them, and its Expand copies
runs of the channels only (``[2, 64, 64, 8]`` upsampled 2x: 0.50 ms for the Expand alone, one thread).
``Resize(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")`` with
scale ``g`` on an axis reads input index ``floor(o / g)`` for output index ``o``: the same copies, bit
for bit. ``rewrite`` turns each repeat of static axes of a float32 tensor into such a Resize (one Resize
for repeats of several axes of one tensor); ``layout`` then moves the NHWC Transposes through it (its
scales permuted), so that it runs in NCHW between the convolutions and their Transposes cancel.

A symbolic batch (``f32[b, 64, 64, 3]``) is carried through the repeat's shape ops as a leading axis of
scale 1, the ops checked on the static axes after it (a Gather's repeat and ``spread`` keep it the same
way). There ``layout`` has already moved the NHWC Transpose onto the first repeat's unit axis (``[b, 8,
1, 64, 64] -> [b, 64, 1, 64, 8]``), so the run of shape ops read includes Transposes: from the NCHW
tensor to the NCHW Transpose after the last repeat it is the NCHW repeat itself, the static export's
Resize. Before, the zoo's Keras decoder (``keras_upsample``) exported with a symbolic batch kept two
Expands, two Unsqueezes and two Transposes, and its 1x1 head stayed a Conv (``pointwise_conv`` leaves a
Conv of NHWC data): ORT (the model's own session options, medians of 200 calls, load 1.1-2.2) 1.07-1.12
ms against the static export's 0.29-0.35 ms; now the static export's graph, 0.27-0.30 ms (0.98-0.99x),
its outputs bit for bit the static export's.

ORT's Resize is fast on trailing axes and slower than a Gather where a long unscaled axis follows
(one thread, medians): NCHW ``[4, 64, 56, 56]`` 2x 1.04 ms against 24.9 ms for two Gathers, ``[2, 8, 64,
64]`` 0.04 ms against 2.05 ms (1.79 ms as one Expand); NHWC ``[4, 56, 56, 64]`` 3.25 ms against 1.99 ms,
``[2, 20, 20, 16]`` 3x 0.14 against 0.08 ms. So ``spread``, after ``layout``, turns a Resize that still
scales an axis with unscaled ones after it back into one Gather per scaled axis.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites._repeats import Repeat, dims, gathered, single_reader, without_unit_axis

NEAREST = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}


def rewrite(graph: ir.Graph) -> int:
    """Turn the float32 repeats of ``graph`` (the main graph) into Resizes; returns how many went."""
    fired = 0
    for node in list(graph):
        if node.graph is not graph or node.domain != "" or not any(m.live_uses(o) for o in node.outputs):
            continue
        if node.op_type == "Gather":
            found = gathered(node)
            fired += found is not None and _one(graph, found)
        elif node.op_type == "Expand":
            fired += _chain(graph, node)
    return fired


_SHAPE_OPS = ("Reshape", "Unsqueeze", "Squeeze", "Expand", "Transpose")
MAX_ELEMENTS = 1 << 24  # the chain is checked on an index array of the result's size (per leading index)


def _chain(graph: ir.Graph, expand: ir.Node) -> int:
    """The Reshapes, Unsqueezes, Squeezes, Expands and Transposes around ``expand`` (each the only reader of
    the one before) as one Resize where a run of them repeats entries of its first input's axes: Keras'
    UpSampling2D repeats H, then W, and the clean-up merges the first repeat's Reshape with the second's
    unit axis (``[2, 64, 2, 64, 8] -> [2, 128, 64, 1, 8]``). The longest run that repeats goes: with a
    symbolic batch, ``layout`` leaves the NHWC Transpose on the first repeat's unit axis (``[b, 8, 1, 64, 64]
    -> [b, 64, 1, 64, 8]``), and the run from the Unsqueeze before it to the NCHW Transpose after the last
    Reshape is the repeat of the NCHW tensor itself, as the static export's. Checked by running the run on
    the indices of the input."""
    nodes = [expand]
    while (prev := m.producer(nodes[0].inputs[0])) is not None and prev.op_type in _SHAPE_OPS and prev.domain == "" \
            and single_reader(prev.outputs[0]) is nodes[0]:
        nodes.insert(0, prev)
    while (reader := single_reader(nodes[-1].outputs[0])) is not None and reader.op_type in _SHAPE_OPS \
            and reader.domain == "" and reader.inputs[0] is nodes[-1].outputs[0]:
        nodes.append(reader)
    at = nodes.index(expand)
    runs = sorted(((first, last) for first in range(at + 1) for last in range(at, len(nodes))),
                  key=lambda run: run[0] - run[1])  # the longest first
    for first, last in runs:
        factors = _factors(nodes[first:last + 1])
        if factors is not None:
            return _resize(graph, nodes[first].inputs[0], nodes[last].outputs[0], factors)
    return 0


def _factors(nodes: list[ir.Node]) -> np.ndarray | None:
    """The factors by which ``nodes`` repeat their first input's axes, where they do; None elsewhere. The
    axes up to the last symbolic one (a symbolic batch) must be those of every output: the ops then act on
    each leading index alike, and are checked on the static axes after them."""
    source = nodes[0].inputs[0]
    shape = _known_dims(source)
    if source is None or ir.DataType.FLOAT not in (source.dtype, nodes[0].outputs[0].dtype) or shape is None \
            or not 1 <= len(shape) <= 5:
        return None
    lead = _carried(shape)
    out = _known_dims(nodes[-1].outputs[0])
    if out is None or len(out) != len(shape) or out[:lead] != shape[:lead] \
            or not all(isinstance(d, int) and d > 0 for d in (*shape[lead:], *out[lead:])) \
            or any(o % s for o, s in zip(out[lead:], shape[lead:])) or int(np.prod(out[lead:])) > MAX_ELEMENTS:
        return None
    factors = [1] * lead + [o // s for o, s in zip(out[lead:], shape[lead:])]
    if all(f == 1 for f in factors) or any(f > 1 and s == 1 for f, s in zip(factors, shape)) \
            or not _repeats(nodes, shape, factors, lead):  # an axis of one grown is a broadcast
        return None
    return np.array(factors, np.float32)


def _carried(shape: list) -> int:
    """How many leading axes of ``shape`` run up to its last symbolic size (0 where all are numbers)."""
    return max((k + 1 for k, d in enumerate(shape) if not isinstance(d, int)), default=0)


def _known_dims(value: ir.Value | None, depth: int = 4) -> list | None:
    """``value``'s dims, or where other rules left them unset, those of a Transpose's input permuted or a
    Reshape's constant target (its 0s and -1 resolved from its input's)."""
    found = dims(value)
    node = value.producer() if value is not None and found is None and depth > 0 else None
    if node is None or node.domain != "" or node.op_type not in ("Transpose", "Reshape") or node.inputs[0] is None:
        return found
    inner = _known_dims(node.inputs[0], depth - 1)
    if node.op_type == "Transpose":
        perm = m.attr(node, "perm", None)
        return None if inner is None or perm is None or sorted(perm) != list(range(len(inner))) \
            else [inner[p] for p in perm]
    target = m.const(node.inputs[1]) if len(node.inputs) > 1 else None
    if target is None or target.ndim != 1 or m.attr(node, "allowzero", 0):
        return None
    out = [int(t) for t in target]
    if any(t == 0 for t in out):
        if inner is None or len(inner) < len(out):
            return None
        out = [inner[k] if t == 0 else t for k, t in enumerate(out)]
    if -1 in out:
        if inner is None or not all(isinstance(d, int) for d in (*inner, *out)):
            return None
        rest = int(np.prod([t for t in out if t != -1]))
        out[out.index(-1)] = int(np.prod(inner)) // rest if rest else 0
    return out


def _repeats(nodes: list[ir.Node], shape: list, factors: list[int], lead: int = 0) -> bool:
    """True when ``nodes`` (shape ops, known output shapes) turn an array of ``shape`` into its entries
    repeated ``factors[k]`` times along each axis ``k``; every output keeps the ``lead`` axes of ``shape``
    (symbolic sizes), which do not move, and the ops are run on the static axes after them."""
    index = np.arange(int(np.prod(shape[lead:])), dtype=np.int32).reshape(shape[lead:])
    value = index
    for node in nodes:
        out = _known_dims(node.outputs[0])
        if out is None or out[:lead] != shape[:lead] or not all(isinstance(d, int) for d in out[lead:]):
            return False
        out = out[lead:]
        try:
            if node.op_type == "Expand":
                value = np.broadcast_to(value, out)
            elif node.op_type == "Transpose":
                perm = m.attr(node, "perm", None)
                if perm is None or list(perm[:lead]) != list(range(lead)):
                    return False
                value = value.transpose([int(p) - lead for p in perm[lead:]])
            else:
                value = value.reshape(out)
        except ValueError:
            return False
        if list(value.shape) != out:
            return False
    want = index
    for k, f in enumerate(factors[lead:]):
        want = np.repeat(want, f, axis=k)
    return value.shape == want.shape and bool(np.array_equal(value, want))


def is_nearest(node: ir.Node) -> bool:
    """True for a Resize this rule writes: nearest, asymmetric, floor, constant whole scales, no roi."""
    if node.op_type != "Resize" or node.domain != "" or len(node.inputs) != 3 or node.inputs[1] is not None:
        return False
    if any(m.attr(node, k, None) != v for k, v in NEAREST.items()) or m.attr(node, "axes", None) is not None:
        return False
    scales = m.const(node.inputs[2])
    return scales is not None and scales.ndim == 1 and bool(np.all(scales == np.round(scales))) and bool(np.all(scales >= 1))


def _one(graph: ir.Graph, found: Repeat) -> int:
    source, copies = found.source, found.copies
    source_dims = dims(source)
    if source_dims is not None and found.unit_axis is not None:
        source_dims = source_dims[:found.unit_axis] + source_dims[found.unit_axis + 1:]
    out_dims = dims(copies)
    if source_dims is None or out_dims is None or len(out_dims) != len(source_dims) \
            or any(s != o for k, (s, o) in enumerate(zip(source_dims, out_dims)) if k != found.axis):
        return 0  # the repeated axis is a number (``gathered``); others may be symbolic (a batch): scale 1
    if source.dtype != ir.DataType.FLOAT or not 1 <= len(source_dims) <= 5 or found.n < 2:
        return 0  # an axis of one repeated is a broadcast
    if found.unit_axis is not None:
        source = without_unit_axis(graph, source, found.unit_axis, source_dims, ("resize_source_shape", "resize_axes"))
    scales = np.ones(len(source_dims), np.float32)
    scales[found.axis] = found.g
    return _resize(graph, source, copies, scales)


def _resize(graph: ir.Graph, source: ir.Value, copies: ir.Value, scales: np.ndarray) -> int:
    """``copies`` (``source`` repeated ``scales`` times along each axis) as a Resize of ``source``, or of the
    input of the Resize making ``source`` (one Resize for every repeat of a tensor)."""
    inner = m.producer(source, "Resize")
    if inner is not None and is_nearest(inner) and single_reader(source) is not None and not source.is_graph_output():
        scales = scales * m.const(inner.inputs[2]).astype(np.float32)
        source = inner.inputs[0]
    resize = ir.node("Resize", [source, None, m.new_initializer(graph, scales, "nearest_scales")], dict(NEAREST))
    resize.outputs[0].type, resize.outputs[0].shape = copies.type, copies.shape
    m.replace(graph, copies, [resize], copies.producer() or graph[0])
    return 1


def spread(graph: ir.Graph) -> int:
    """Resizes of ``rewrite``'s form that scale an axis followed by an unscaled one of more than one entry
    (NHWC that ``layout`` left) as one Gather per scaled axis; returns how many Resizes went."""
    count = 0
    for node in m.each_node(graph, "Resize"):
        if not is_nearest(node):
            continue
        scales = [int(s) for s in m.const(node.inputs[2])]
        shape = dims(node.inputs[0])  # a symbolic size (a batch) on an unscaled axis is kept as it is
        if shape is None or len(shape) != len(scales) \
                or not all(isinstance(d, int) for d, s in zip(shape, scales) if s > 1):
            continue
        scaled = [k for k, s in enumerate(scales) if s > 1]
        if not scaled or all(scales[k] > 1 or shape[k] == 1 for k in range(scaled[0], len(shape))):
            continue
        nodes, value, current = [], node.inputs[0], list(shape)
        for k in scaled:
            idx = m.new_initializer(graph, np.repeat(np.arange(shape[k], dtype=np.int64), scales[k]), "repeat_rows")
            gather = ir.node("Gather", [value, idx], {"axis": k})
            current[k] *= scales[k]
            gather.outputs[0].type, gather.outputs[0].shape = node.outputs[0].type, ir.Shape(current)
            nodes.append(gather)
            value = gather.outputs[0]
        m.replace(graph, node.outputs[0], nodes, node)
        graph.remove(node, safe=True)
        count += 1
    return count
