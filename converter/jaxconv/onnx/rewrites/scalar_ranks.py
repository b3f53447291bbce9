"""A one-element operand of an elementwise op whose output ends in an axis of 1 (or has one next to its
last), given the output's rank.

ONNX Runtime's elementwise kernels broadcast a scalar (rank 0, or rank 1 of one element) against an
operand whose last axis is 1 on their slowest path: one call of the op per element. With the scalar
reshaped to ``[1, ..., 1]`` of the output's rank, the same op runs as one long run; every element is the
same op on the same two numbers (bit for bit). One thread, medians (scripts/bench_kernels.py's way): ``[64,
64, 1] + c`` 57 us with ``c`` of shape ``[]``, 81 us with ``[1]``, 5.6 us with ``[1, 1, 1]``; ``[256, 256, 1]``
926 us against 12-19 us; ``[8, 64, 64, 1]`` 402 against 12-15 us; ``Xor`` and ``And`` of ``[64, 64, 1]`` and
a scalar 47 against 5.3 us; ``Where([64, 64, 1], c, x)`` 73 against 17 us. Other last axes (2 to 64) ran
as fast either way. Such shapes come from a mask or a statistic kept with ``keepdims`` (``[b, s, 1]``),
T5's relative positions (``[s, s, 1]``: mT5's ``Xor`` of one took 75 us a call), a one-channel image.
An axis of 1 next to the last one (attention scores ``[b, h, q, 1, k]``: keras-hub's grouped heads) is
a slower path too, at rank 3 and more: ``Mul`` by a scalar of ``[2, 4, 64, 1, 64]`` 12.4 against 6.9 us,
``[16, 128, 1, 64]`` 37.8 against 16.6, ``[8, 64, 1, 128]`` 13.7 against 9.3 (an Intel Xeon, one thread);
an axis of 1 further in is not (``[8, 1, 128, 128]``: 15.1 against 18.4 us) and is left alone.

The rule fires on the elementwise ops of ``_OPS`` whose output rank is known and whose last axis is
the number 1 (or, at rank 3 and more, the axis before it), for each operand of one element (known from its
shape) and a lower rank: a constant becomes a constant of the full rank; a computed value is reshaped (ORT's
Reshape reuses the buffer).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m

_OPS = ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "Equal", "Less", "Greater", "LessOrEqual",
        "GreaterOrEqual", "And", "Or", "Xor", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Where")


def rewrite(graph: ir.Graph) -> int:
    """Give the scalar operands of ``graph``'s (and its subgraphs') elementwise ops with a last axis of 1 (or
    one next to it) the output's rank; returns how many operands."""
    return sum(m.count_everywhere(graph, op, _one) for op in _OPS)


def _one(graph: ir.Graph, node: ir.Node) -> int:
    if node.domain not in ("", "ai.onnx"):
        return 0
    out = node.outputs[0].shape
    if out is None or len(out) < 2 or not (_is_one(out[-1]) or (len(out) >= 3 and _is_one(out[-2]))):
        return 0
    rank = len(out)
    count = 0
    for k, operand in enumerate(node.inputs):
        if operand is None or operand.shape is None or len(operand.shape) >= rank:
            continue
        if not all(isinstance(d, int) and d == 1 for d in operand.shape):
            continue
        full = [1] * rank
        arr = m.const(operand)
        if arr is not None:
            value = m.new_initializer(graph, arr.reshape(full), f"{operand.name or 'c'}_rank{rank}")
        else:
            shape = m.new_initializer(graph, np.array(full, np.int64), f"rank{rank}_ones")
            reshape = ir.node("Reshape", [operand, shape])
            reshape.outputs[0].type = operand.type
            reshape.outputs[0].shape = ir.Shape(full)
            graph.insert_before(node, reshape)
            value = reshape.outputs[0]
        node.replace_input_with(k, value)
        count += 1
    return count


def _is_one(dim: object) -> bool:
    return isinstance(dim, int) and dim == 1
