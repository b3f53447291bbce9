"""Constant operands of a Where cut back to the shape that carries their values.

An attention mask's fill value is broadcast to the scores' shape; after the layout rule moves a
Transpose through the Where it is a full-size initializer (nnx.MultiHeadAttention: [2, 4, 64, 1, 64];
keras-hub Llama: an Expand of one not folded yet), and ORT's Where reads it whole on every run.
Each constant operand of a Where (an initializer, or an Expand/Reshape of one) is cut to size 1
along every axis where its values repeat, when a computed operand has every element of the output,
so that broadcasting gives the same result with the same shape: values only, the numbers cannot
change. (The mask itself is still a computation here; onnxscript folds it later, full size.)

A Where whose condition is one constant everywhere (jnp.var's guard for ``ddof``, in every keras-hub
layer norm; keras-hub's attention mask from a padding mask of ones) is the operand it chooses; with a
symbolic length too, where the other operands have only axes of length 1 (Haiku's ``hk.LayerNorm``).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _constants as constants
from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites.broadcasts import MIN_ELEMENTS, _shrunk
from jaxconv.onnx.rewrites.reshape_scale import same_bits


def rewrite(graph: ir.Graph) -> int:
    """Shrink the constant operands of every Where in ``graph`` and its subgraphs; returns how many."""
    count = 0
    for g in list(m.all_graphs(graph)):
        for node in list(g):
            if node.op_type == "Where" and node.domain in ("", "ai.onnx") and len(node.inputs) == 3:
                count += _one(g, node)
    return count


def _one(graph: ir.Graph, node: ir.Node) -> int:
    if not node.outputs[0].uses() and not node.outputs[0].is_graph_output():
        return 0
    shapes = [static_shape(v) for v in node.inputs]
    if _constant_choice(node, shapes):
        return 1
    if any(s is None for s in shapes):
        return 0
    try:
        out = np.broadcast_shapes(*shapes)
    except ValueError:
        return 0
    size = int(np.prod(out))
    full = [(v, s) for v, s in zip(node.inputs, shapes) if m.folded(v) is None and int(np.prod(s)) == size]
    if not full:  # a computed operand with every element of the output (leading 1s aside)
        return 0
    reference = ir.Value(shape=ir.Shape(out))  # what the computed operand covers, leading 1s included
    count = 0
    for k, value in enumerate(node.inputs):
        arr = m.folded(value)  # an initializer, or an Expand/Reshape of one not folded yet
        if arr is None or arr.size < MIN_ELEMENTS or value.is_graph_input():
            continue
        small = _shrunk(arr, reference)
        if small is None:
            continue
        others = [shape for j, shape in enumerate(shapes) if j != k]
        if np.broadcast_shapes(small.shape, *others) != out:  # the output's rank must not change
            small = small.reshape((1,) * (len(out) - small.ndim) + small.shape)
        if np.broadcast_shapes(small.shape, *others) != out:
            continue
        if not same_bits(np.broadcast_to(small, arr.shape), arr):
            continue  # a -0 among +0s: the cut would change a sign
        new = ir.Value(name=_fresh(graph, f"{value.name or 'c'}_cut"), const_value=ir.tensor(small))
        new.type = value.type
        new.shape = ir.Shape(small.shape)
        graph.register_initializer(new)
        node.replace_input_with(k, new)
        count += 1
    return count


def _constant_choice(node: ir.Node, shapes: list) -> bool:
    """A Where whose condition is a constant of one value everywhere (jnp.var's ``ddof`` guard: ``False``)
    is the operand it chooses, where that operand has the output's shape (and its type: ONNX's Where
    takes one type for both): the same elements, no kernel."""
    cond = constants.evaluate(node.inputs[0])  # a constant, or a whole mask from constants (keras-hub's padding of ones)
    out = node.outputs[0]
    if cond is None or cond.size == 0 or cond.dtype != np.bool_ or out.is_graph_output():
        return False
    if not (cond.all() or not cond.any()):
        return False
    k = 1 if cond.all() else 2
    if not _keeps_shape(shapes, k, m.rank(node.inputs[k])):
        return False
    out.replace_all_uses_with(node.inputs[k])
    return True


def _keeps_shape(shapes: list, k: int, rank: int | None) -> bool:
    """Whether broadcasting the Where's operands of ``shapes`` gives operand ``k``'s shape: the static
    shapes agree, or (a symbolic length: ``[2, s, 1]``) every other operand has only size-1 axes and
    no more of them than operand ``k``."""
    if all(s is not None for s in shapes):
        try:
            return tuple(np.broadcast_shapes(*shapes)) == shapes[k]
        except ValueError:
            return False
    others = [s for j, s in enumerate(shapes) if j != k]
    return rank is not None and all(s is not None and len(s) <= rank and all(d == 1 for d in s)
                                    for s in others)


_ELEMENTWISE = frozenset(
    {
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Where",
        "Max",
        "Min",
        "Pow",
        "Relu",
        "Neg",
        "Abs",
        "Exp",
        "Equal",
        "Less",
        "Greater",
        "And",
        "Or",
        "Xor",
        "Not",
        "Cast",
        "Sqrt",
        "Tanh",
        "Erf",
    }
)


def static_shape(value: ir.Value | None, depth: int = 0) -> tuple[int, ...] | None:
    """``value``'s static shape: its own, or worked out through elementwise ops, Transposes and Reshapes
    (values that earlier rules made have no shape yet)."""
    if value is None:
        return None
    if value.shape is not None and value.shape.is_static():
        return tuple(int(d) for d in value.shape)
    arr = m.const(value)
    if arr is not None:
        return tuple(arr.shape)
    node = value.producer()
    if node is None or depth > 8 or node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "Transpose":
        src = static_shape(node.inputs[0], depth + 1)
        perm = m.attr(node, "perm")
        if src is None:
            return None
        return tuple(src[int(p)] for p in perm) if perm is not None else src[::-1]
    if node.op_type == "Reshape":
        target = m.const(node.inputs[1]) if len(node.inputs) > 1 else None
        if target is None or any(int(d) <= 0 for d in target):
            return None
        return tuple(int(d) for d in target)
    if node.op_type in _ELEMENTWISE:
        shapes = [static_shape(v, depth + 1) for v in node.inputs if v is not None]
        if not shapes or any(s is None for s in shapes):
            return None
        try:
            return tuple(np.broadcast_shapes(*shapes))
        except ValueError:
            return None
    return None


def _fresh(graph: ir.Graph, name: str) -> str:
    k, fresh = 0, name
    while fresh in graph.initializers:
        k += 1
        fresh = f"{name}_{k}"
    return fresh
