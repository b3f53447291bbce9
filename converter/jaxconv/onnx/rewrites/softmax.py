"""jax.nn.softmax / log_softmax as the Softmax / LogSoftmax ops.

jax computes ``e = exp(x - max(x))`` then ``e / sum(e)`` (or ``(x - m) - log(sum(e))``); the lowering
turns that into a dozen nodes (the max carries a NaN guard and an ``initial=-inf``). ORT's kernels
subtract the max too, and give the same NaN rows for NaN, +inf and all -inf inputs, except float64
LogSoftmax, which stays as jax wrote it (see ``_LOG_SOFTMAX_DTYPES``).

The scores may be reshaped or transposed between the max and the sum, where that only adds, drops or
moves axes of size 1 (keras' attention takes its max over ``[b, h, q, 1, k]`` scores and subtracts it from,
and sums, ``[1, b, h, q, k]`` ones): the Softmax then runs in the max's layout, over the axis the sum's
maps to, and a Reshape gives the division's layout (a Squeeze and an Unsqueeze where a size is symbolic: a
batch ``b``).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m

# ORT's float64 LogSoftmax is not the NaN row jax gives where a row holds NaN (a log clamped at 1e-20:
# [1, NaN, 2] -> [45.05, NaN, 46.05]) or +inf ([inf, 1, 0] -> [NaN, -inf, -inf]); its float16 and
# float32 kernels, and Softmax in all three, give jax's NaN rows.
_LOG_SOFTMAX_DTYPES = frozenset({ir.DataType.FLOAT16, ir.DataType.FLOAT})

# ops allowed between x and the max that is subtracted (the NaN guard and initial=-inf)
_MAX_CHAIN = frozenset({"ReduceMax", "IsNaN", "Cast", "Where", "Max", "Not", "Or"}) | m.SHAPE_OPS


def _is_max_of(value: ir.Value, x: ir.Value, axes: tuple[int, ...]) -> bool:
    """True when ``value`` is computed from ``x`` by ops that only take its max over ``axes``.

    Every leaf of the chain must be ``x`` or a constant, and there must be a ReduceMax of ``x``
    over ``axes``; the result then differs from the plain max only for NaN/inf rows, where
    softmax gives NaN either way.
    """
    seen_max = False
    stack, visited = [value], set()
    while stack:
        v = stack.pop()
        if v is x or id(v) in visited:
            continue
        visited.add(id(v))
        if m.const(v) is not None:
            continue
        node = m.producer(v)
        if node is None or (node.op_type not in _MAX_CHAIN and not _moves_unit_axes(node)):
            return False
        if node.op_type == "ReduceMax":
            if node.inputs[0] is x and m.normalize_axes(m.reduce_axes(node) or (), m.rank(x)) == axes:
                seen_max = True
            stack.append(node.inputs[0])
            continue
        if node.op_type in m.SHAPE_OPS or node.op_type == "Transpose":
            stack.append(node.inputs[0])  # the shape operand is not data
            continue
        stack.extend(i for i in node.inputs if i is not None)
    return seen_max


def _shifted(e_or_s: ir.Value, want_exp: bool):
    """(x, s, exp node) for ``exp(s)`` / ``s`` with ``s = x - max(x)``, or None."""
    exp = None
    s = e_or_s
    if want_exp:
        exp = m.producer(e_or_s, "Exp")
        if exp is None:
            return None
        s = exp.inputs[0]
    sub = m.binary(m.producer(s), "Sub")
    if sub is None:
        return None
    return sub[0], sub[1], s, exp


def _sum_axes(value: ir.Value, e: ir.Value, x: ir.Value) -> tuple[int, ...] | None:
    """Axes when ``value`` is ``sum(e)`` over them (through shape ops), else None."""
    # the sum may carry the lowering's -0 -> +0 fix; e / (+-0) and log(+-0) are the same either way
    red = m.producer(m.through_zero_sign_fix(m.through_shape_ops(value)), "ReduceSum")
    if red is None or red.inputs[0] is not e:
        return None
    axes = m.reduce_axes(red)
    return None if axes is None else m.normalize_axes(axes, m.rank(x))


def _moves_unit_axes(node: ir.Node) -> bool:
    """True for a shape op, or a Transpose that moves only axes of size 1 (a reshape in effect)."""
    if node.op_type in m.SHAPE_OPS:
        return True
    if node.op_type != "Transpose":
        return False
    dims = m.named_dims(node.inputs[0])
    perm = m.transpose_perm(node, len(dims)) if dims is not None else None
    if perm is None:
        return False
    wide = [a for a in perm if dims[a] != 1]
    return wide == sorted(wide)


def _unit_source(value: ir.Value) -> ir.Value | None:
    """What ``value`` is made from by ops that only add, drop or move axes of size 1 (``value`` when no such op
    makes it); None where a shape op on the way changes more than that or a shape is not static."""
    source = value
    while (node := m.producer(source, "Reshape", "Unsqueeze", "Squeeze", "Identity", "Transpose")) is not None \
            and _moves_unit_axes(node):
        source = node.inputs[0]
    if source is value:
        return source
    return source if _same_wide_dims(m.named_dims(value), m.named_dims(source)) else None


def _same_wide_dims(a: list[int | str] | None, b: list[int | str] | None) -> bool:
    return a is not None and b is not None and [d for d in a if d != 1] == [d for d in b if d != 1]


def _moved_axis(axis: int, dims: list[int | str], to: list[int | str]) -> int | None:
    """The axis of ``to`` that axis ``axis`` of ``dims`` is, the two differing only in axes of size 1."""
    if dims[axis] == 1:
        return None
    k = sum(1 for d in dims[:axis] if d != 1)
    return [i for i, d in enumerate(to) if d != 1][k]


def _rewrite_softmax(graph: ir.Graph, div: ir.Node) -> bool:
    e, d = div.inputs[0], div.inputs[1]
    got = _shifted(e, want_exp=True)
    if got is not None:  # the layout jax writes
        x, mx, _, _ = got
        axes = _sum_axes(d, e, x)
        if axes is not None and len(axes) == 1 and _is_max_of(mx, x, axes):
            m.replace(graph, div.outputs[0], ir.node("Softmax", [x], {"axis": axes[0]}), div)
            return True
    return _rewrite_moved_softmax(graph, div)


def _rewrite_moved_softmax(graph: ir.Graph, div: ir.Node) -> bool:
    """The softmax whose scores move axes of size 1 between the max and the sum (the module docstring)."""
    e, d = div.inputs[0], div.inputs[1]
    e_made = _unit_source(e)
    got = None if e_made is None else _shifted(e_made, want_exp=True)
    x0 = None if got is None else _unit_source(got[0])
    if x0 is None or (e is e_made and x0 is got[0]):
        return False
    dims, dims0 = m.named_dims(e), m.named_dims(x0)
    axes = _sum_axes(d, e, e)
    if axes is None or len(axes) != 1 or not _same_wide_dims(dims, dims0):
        return False
    axis = _moved_axis(axes[0], dims, dims0)
    if axis is None or not _is_max_of(got[1], x0, (axis,)) or m.named_dims(div.outputs[0]) not in (None, dims):
        return False  # (a sum that broadcasts the quotient wider than the exponentials)
    nodes = [ir.node("Softmax", [x0], {"axis": axis})]
    if all(isinstance(n, int) for n in dims):
        moves = [("Reshape", dims)]
    else:  # the axes of size 1 out of one layout, into the other
        moves = [(op, [k for k, n in enumerate(layout) if n == 1]) for op, layout in (("Squeeze", dims0),
                                                                                      ("Unsqueeze", dims))]
    for op, arg in moves:
        if arg or op == "Reshape":
            arg_value = ir.node("Constant", [], {"value": ir.tensor(np.array(arg, np.int64))})
            nodes += [arg_value, ir.node(op, [nodes[-1].outputs[0], arg_value.outputs[0]])]
    m.replace(graph, div.outputs[0], nodes, div)
    return True


def _rewrite_log_softmax(graph: ir.Graph, sub: ir.Node) -> bool:
    s, lse = sub.inputs[0], sub.inputs[1]
    got = _shifted(s, want_exp=False)
    if got is None:
        return False
    x, mx, _, _ = got
    log = m.producer(m.through_shape_ops(lse), "Log")
    if log is None:
        return False
    total = m.through_zero_sign_fix(m.through_shape_ops(log.inputs[0]))
    red = m.producer(total, "ReduceSum")
    if red is None:
        return False
    exp = m.producer(red.inputs[0], "Exp")
    if exp is None or exp.inputs[0] is not s:
        return False
    axes = m.normalize_axes(m.reduce_axes(red) or (), m.rank(x))
    if not axes or len(axes) != 1 or not _is_max_of(mx, x, axes) or x.dtype not in _LOG_SOFTMAX_DTYPES:
        return False
    m.replace(graph, sub.outputs[0], ir.node("LogSoftmax", [x], {"axis": axes[0]}), sub)
    return True


def rewrite(graph: ir.Graph) -> int:
    """Replace softmax and log-softmax patterns in ``graph``; returns how many."""
    count = 0
    for node in list(graph):
        if node.graph is None:
            continue
        if node.op_type == "Div" and node.domain == "":
            count += _rewrite_softmax(graph, node)
        elif node.op_type == "Sub" and node.domain == "":
            count += _rewrite_log_softmax(graph, node)
    return count
