"""A mixture of experts' sum over its experts' products as MatMuls by the experts' weights side by side.

A mixture of experts that runs every expert on every token (keras-hub's Mixtral) computes each expert's
hidden units from the same tokens, ``act(x @ gate[e]) * (x @ up[e])`` ([e, t, m], ``x`` [t, h]), each
expert's output ``hidden[e] @ down[e]`` ([e, t, h]), scales it by the token's routing weight for that
expert ([e, t, 1]) and sums over the experts. ONNX Runtime runs those products batched over the experts,
packing the 3-D constant weights again at every run, and the weighting and the sum are two more passes
over [e, t, h]. With the weights side by side (``gate`` and ``up`` as [h, e * m], ``down`` as
[e * m, h]) the same work is three 2-D products whose weights ORT prepacks: the hidden units come out as
[t, e * m], the elementwise ops between the products run on them as they are, each expert's block of
``m`` columns is scaled by its routing weight, and the last product sums over the experts and their
units in one contraction of ``e * m``. Nothing is transposed.

The sum is reassociated: ``sum_e r[e] * (hidden[e] @ down[e])`` becomes ``sum_{e, m} (r[e] * hidden[e, m])
* down[e, m]``, so the last bits differ from ``jax.jit``'s (keras-hub Mixtral, 2 layers, 4 experts: 2.4e-6
at most, on outputs of about 1; a NaN or an infinity in the tokens or the weights gives NaN where jax.jit
does). ONNX Runtime alone, new/old, medians of 300 alternating runs (load 0.3-0.5): the zoo's
Mixtral (t 128, h 128, m 256, e 4) 0.913 on one thread, 0.926 on two.

Matched: a ReduceSum over axis 0 (keepdims 0) of ``MatMul(hidden, down)`` (``down`` a constant [e, m, h]),
possibly multiplied first by a value of shape [e, t, 1]; ``hidden`` [e, t, m] made by elementwise ops whose
every operand is a scalar constant or ``MatMul(x, w)`` with the same 2-D ``x`` and a constant [e, h, m]
``w``, every value on the way read only there; the number of tokens may be symbolic (a model exported for
any batch: ``64*b``), the experts' sizes are numbers. Runs after ``broadcast_matmul_order``
(which gives the products their ``MatMul(x, w)`` form) and before ``expert_columns`` and ``expert_split``,
which lay out what this rule leaves.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m

# elementwise ops the hidden units may pass through (their operands: the products, scalars, each other)
_WIDE = (np.dtype(np.float32), np.dtype(np.float64))  # a half-precision sum reassociated moves further
MAX_RELAID = 1 << 20  # elements of a constant operand laid out again as [t, e * m]
_ELEMENTWISE = frozenset({"Mul", "Add", "Sub", "Div", "Neg", "Exp", "Sigmoid", "Tanh", "Erf", "Gelu", "Relu",
                          "Reciprocal", "Abs", "Max", "Min", "Where", "Sqrt", "Log", "Softplus", "LeakyRelu"})


def rewrite(graph: ir.Graph) -> int:
    """Compute the experts' weighted sums in ``graph`` through side-by-side weights; returns how many."""
    return sum(_reduced(graph, node) for node in m.each_node(graph, "ReduceSum")) \
        + sum(_contracted(graph, node) for node in m.each_node(graph, "Reshape"))


def _reduced(graph: ir.Graph, reduce: ir.Node) -> int:
    """``ReduceSum(MatMul(hidden, down) [* routing [e, t, 1]], axes=[0], keepdims=0)``."""
    if m.attr(reduce, "keepdims", 1) != 0 or m.reduce_axes(reduce) not in ((0,), (-3,)):
        return 0
    scaled = reduce.inputs[0]
    weighting = m.producer(scaled, "Mul")
    down_mm, routing = m.producer(scaled, "MatMul"), None
    if weighting is not None and m.sole_live_use(scaled):
        for k in (0, 1):
            product = m.producer(weighting.inputs[k], "MatMul")
            if product is not None:
                down_mm, routing = product, weighting.inputs[1 - k]
                break
    if down_mm is None or not m.sole_live_use(down_mm.outputs[0]):
        return 0
    dims = m.named_dims(down_mm.inputs[0])
    swap = False
    if routing is not None:
        back = m.producer(routing, "Transpose")  # the weights were [t, e, 1]: read them so
        if dims is None or m.named_dims(routing) != [dims[0], dims[1], 1]:
            return 0
        if back is not None and m.transpose_perm(back, 3) == [1, 0, 2] and back.inputs[0] is not None:
            routing = back.inputs[0]
        else:
            swap = True
    return _build(graph, down_mm, routing, reduce, swap)


def _contracted(graph: ir.Graph, reshape: ir.Node) -> int:
    """``einsum('eth,te->th', hidden @ down, routing)``: ``Reshape(MatMul(Transpose(hidden @ down, [1, 2, 0]),
    routing [t, e, 1]), [t, h])``."""
    contraction = m.producer(reshape.inputs[0], "MatMul")
    if contraction is None or not m.sole_live_use(contraction.outputs[0]):
        return 0
    moved, routing = contraction.inputs
    back = m.producer(moved, "Transpose")
    down_mm = m.producer(back.inputs[0], "MatMul") if back is not None else None
    if down_mm is None or m.transpose_perm(back, 3) != [1, 2, 0] or not m.sole_live_use(moved) \
            or not m.sole_live_use(down_mm.outputs[0]):
        return 0
    dims, out = m.named_dims(down_mm.outputs[0]), m.named_dims(reshape.outputs[0])
    if dims is None or out != [dims[1], dims[2]] or m.named_dims(routing) != [dims[1], dims[0], 1]:
        return 0
    return _build(graph, down_mm, routing, reshape)


def _build(graph: ir.Graph, down_mm: ir.Node, per_token: ir.Value | None, last: ir.Node,
           swap: bool = False) -> int:
    """Replace ``last``'s output, the experts' outputs ``down_mm`` [e, t, h] summed over the experts (each
    weighted by ``per_token`` [t, e, 1] when given; [e, t, 1] to be transposed with ``swap``), by the
    products through side-by-side weights."""
    hidden, down = down_mm.inputs
    down_w = m.const(down)
    dims = m.named_dims(hidden)
    if down_w is None or down_w.ndim != 3 or down_w.dtype not in _WIDE or dims is None or len(dims) != 3:
        return 0
    e, t, units = dims
    if not isinstance(e, int) or not isinstance(units, int) or list(down_w.shape[:2]) != [e, units] \
            or not m.sole_live_use(hidden):
        return 0
    found = _chain(hidden, dims)
    if found is None:
        return 0
    nodes, products, x = found
    width = down_w.shape[2]
    tokens = hidden.shape[1] if hidden.shape is not None else None  # a number, or the symbolic size
    new: list[ir.Node] = []

    def add(node: ir.Node, *shape: Any) -> ir.Value:
        """Append ``node``; its output of ``hidden``'s type and ``[tokens, *shape]`` (for the rules after and
        the thread record: a symbolic number of tokens kept)."""
        new.append(node)
        out = node.outputs[0]
        out.type, out.shape = hidden.type, ir.Shape([tokens, *shape])
        return out

    remap: dict[int, ir.Value] = {}
    for product in products:
        w = m.const(product.inputs[1])
        assert w is not None
        side = m.new_initializer(graph, np.moveaxis(w, 0, 1).reshape(w.shape[1], e * units),
                                 f"{product.inputs[1].name or 'w'}_side_by_side")
        remap[id(product.outputs[0])] = add(ir.node("MatMul", [x, side]), e * units)
    for node in nodes:  # in graph order: each one's operands are remapped before it
        inputs = [_operand(graph, v, remap, dims) for v in node.inputs]
        copy = ir.node(node.op_type, inputs, dict(node.attributes), domain=node.domain)
        remap[id(node.outputs[0])] = add(copy, e * units)
    flat = remap[id(hidden)]
    if per_token is not None:
        if swap:
            per_token = add(ir.node("Transpose", [per_token], {"perm": [1, 0, 2]}), e, 1)
        per_expert = m.new_initializer(graph, np.array([-1, e, units], np.int64), "expert_units_shape")
        rows = m.new_initializer(graph, np.array([-1, e * units], np.int64), "expert_rows_shape")
        blocks = add(ir.node("Reshape", [flat, per_expert]), e, units)
        weighted = add(ir.node("Mul", [blocks, per_token]), e, units)
        flat = add(ir.node("Reshape", [weighted, rows]), e * units)
    stacked = m.new_initializer(graph, down_w.reshape(e * units, width), f"{down.name or 'w'}_stacked")
    new.append(ir.node("MatMul", [flat, stacked]))
    m.replace(graph, last.outputs[0], new, last)
    return 1


def _operand(graph: ir.Graph, value: ir.Value | None, remap: dict[int, ir.Value],
             dims: list[int | str]) -> ir.Value | None:
    """A chain node's operand in the [t, e * m] layout: a value the chain made, a scalar as it is, a constant
    that broadcasts to [e, t, m] (a bias per expert and unit, [e, 1, m]) laid out again."""
    if value is None or id(value) in remap:
        return None if value is None else remap[id(value)]
    arr = m.const(value)
    if arr is None or arr.ndim == 0:
        return value
    e, units = int(dims[0]), int(dims[2])
    padded = arr.reshape((1,) * (3 - arr.ndim) + arr.shape)
    full = np.broadcast_to(padded, [e, padded.shape[1], units])
    rows = np.moveaxis(full, 1, 0).reshape(full.shape[1], e * units)
    return m.new_initializer(graph, rows, f"{value.name or 'c'}_side_by_side")


def _chain(hidden: ir.Value, dims: list[int | str]) -> tuple[list[ir.Node], list[ir.Node], ir.Value] | None:
    """(the elementwise nodes that make ``hidden``, in graph order; the ``MatMul(x, w)`` products they read;
    ``x``), where every operand is a scalar constant, such a product or such a node's output, each of shape
    ``dims`` and read only by the chain (``hidden`` by the down product); else None."""
    nodes: dict[int, ir.Node] = {}
    products: dict[int, ir.Node] = {}
    values: list[ir.Value] = []
    x: ir.Value | None = None
    todo = [hidden]
    while todo:
        value = todo.pop()
        node = value.producer()
        if node is None or node.domain not in ("", "ai.onnx") or m.named_dims(value) != dims:
            return None
        if id(node) in nodes or id(node) in products:
            continue
        values.append(value)
        if node.op_type == "MatMul":
            a, w = node.inputs
            weight, rows = m.const(w), m.named_dims(a)
            if weight is None or weight.ndim != 3 or weight.dtype not in _WIDE or rows is None \
                    or rows != [dims[1], weight.shape[1]] \
                    or list(weight.shape) != [dims[0], rows[1], dims[2]] or (x is not None and a is not x):
                return None
            x = a
            products[id(node)] = node
            continue
        if node.op_type not in _ELEMENTWISE or len(node.outputs) != 1:
            return None
        nodes[id(node)] = node
        for operand in node.inputs:
            arr = m.const(operand)
            if arr is not None and (arr.ndim == 0 or _broadcasts(arr.shape, dims)):
                continue
            if operand is not None:
                todo.append(operand)
    if x is None or any(v is not hidden and not _read_in(v, nodes) for v in values):
        return None
    graph = hidden.producer().graph  # type: ignore[union-attr]
    order = {id(n): k for k, n in enumerate(graph)} if graph is not None else {}
    if any(id(n) not in order for n in [*nodes.values(), *products.values()]):
        return None
    return sorted(nodes.values(), key=lambda n: order[id(n)]), list(products.values()), x


def _read_in(value: ir.Value, nodes: dict[int, ir.Node]) -> bool:
    """Whether only chain nodes read ``value`` (live readers; it is no graph output)."""
    return not value.is_graph_output() and all(id(u.node) in nodes for u in m.live_uses(value))


def _broadcasts(shape: tuple[int, ...], dims: list[int | str]) -> bool:
    """Whether a constant of ``shape`` broadcasts to ``dims`` ([e, t, m]) without growing it, at most
    ``MAX_RELAID`` elements once laid out again."""
    padded = [1] * (3 - len(shape)) + list(shape)
    return len(shape) <= 3 and all(s in (1, d) for s, d in zip(padded, dims)) \
        and int(dims[0]) * int(dims[2]) * padded[1] <= MAX_RELAID
