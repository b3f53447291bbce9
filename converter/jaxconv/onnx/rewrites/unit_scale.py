"""A float Mul by a constant of ones that only broadcasts, dropped where its readers broadcast anyway.

``x * 1`` is ``x`` for every float (NaN, infinities and -0 included); onnxscript drops such a Mul
when the shapes agree and the ones are a scalar, this rule for ones of any shape that does not
broadcast ``x``, computed from constants too (Hugging Face BERT's head mask of ones, [h, 1, 1, 1],
between two Transposes of its probabilities). A LayerNorm whose scale is all ones (Flax's initial
``scale``, or a norm with ``use_scale`` folded to ones) multiplies ``rsqrt(var)`` of shape ``[..., 1]`` by a ``[d]``
constant, so the Mul also broadcasts; it goes when each reader is an elementwise op whose result
keeps its shape with ``x`` in its place.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _constants as constants
from jaxconv.onnx.rewrites import _match as m

_BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div"})


def rewrite(graph: ir.Graph) -> int:
    """Drop Muls by ones in ``graph`` whose broadcast their readers repeat; returns how many."""
    return sum(_drop(node) for node in m.each_node(graph, "Mul"))


def _drop(mul: ir.Node) -> int:
    out = mul.outputs[0]
    if len(mul.inputs) != 2 or out.is_graph_output() or not out.uses():
        return 0
    for k in (0, 1):
        x, ones = mul.inputs[k], mul.inputs[1 - k]
        arr = constants.evaluate(ones)  # a constant, or ones computed from constants (a head mask)
        if x is None or arr is None or arr.dtype.kind != "f" or not np.all(arr == 1):
            continue
        if x.type is None or out.type is None or x.type != out.type:
            continue
        same = m.static_dims(x) is not None and m.static_dims(x) == m.static_dims(out)  # no broadcast at all
        if same or all(_keeps_shape(use.node, use.idx, x) for use in out.uses()):
            out.replace_all_uses_with(x)
            return 1
    return 0


def _keeps_shape(reader: ir.Node, idx: int, x: ir.Value) -> bool:
    """Does ``reader`` (an elementwise op) give a result of the same shape with ``x`` at input ``idx``?"""
    if reader.domain not in ("", "ai.onnx") or reader.op_type not in _BROADCASTING or len(reader.inputs) != 2:
        return False
    if reader.inputs[1 - idx] is reader.inputs[idx]:
        return False  # both inputs would become x
    other = m.static_dims(reader.inputs[1 - idx])
    shape, result = m.static_dims(x), m.static_dims(reader.outputs[0])
    if other is None or shape is None or result is None:
        return False
    try:
        return list(np.broadcast_shapes(shape, other)) == result
    except ValueError:
        return False
