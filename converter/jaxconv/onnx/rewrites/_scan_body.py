"""What the rules on a Scan's body read of it: the form of the Scan, its values' shapes, the Splits of a last axis.

The Scan is the one ``loops.to_scan`` writes (``plain``); its body's inputs often carry no shape,
so ``body_shapes`` takes them from the Scan's inputs and follows them through the body, Slices with
constant bounds included: in a body of several steps (``lax.scan(unroll=4)``, nnx.RNN's ``unroll``)
the gates of steps 2-4 are Slices of a product of the step before's state, which the gate rules of
``scan_rows`` reached only once these shapes were known (the zoo's ``nnx_gru``, B4 T64 H128: every
step's gates one Split and their negations in the weights, 217 -> 193 nodes with the bodies; with
``scan_gate_pairs``' Split parts, 169). Time over jax.jit's 2.39 -> 2.06 (CPU 2.40 -> 2.02) with the
shapes alone, 2.95 -> 2.26 (CPU 2.50 -> 2.08) with both (ORT 1.32, 2 cores, alternating in one process,
load 4.5-5.5). The shapes may hold named sizes (a symbolic batch: ``('b', 128)``); a named size broadcasts
only with 1 or itself, and Slices and Splits read it whole, so the gate rules see the same columns as on a
static batch (the NNX GRU exported ``f32[b,64,32]``: 62 -> 54 nodes).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _dim_products
from jaxconv.onnx.rewrites import _match as m

Dims = tuple  # tuple[int | str, ...]: a shape, named sizes (a symbolic batch) as their names


def plain(scan: ir.Node) -> bool:
    """A forward Scan over axis 0 of every input, stacking along axis 0 (the form ``to_scan`` writes)."""
    for name in ("scan_input_axes", "scan_input_directions", "scan_output_axes", "scan_output_directions"):
        attr = scan.attributes.get(name)
        if attr is not None and any(int(v) != 0 for v in attr.value):
            return False
    body = scan.attributes["body"].value
    return len(body.inputs) == len(scan.inputs) and all(v is not None for v in scan.inputs)


def n_state(scan: ir.Node) -> int:
    """How many of the Scan's inputs are states (carried); the rest are scan inputs."""
    return len(scan.inputs) - int(scan.attributes["num_scan_inputs"].value)


def only_use(value: ir.Value) -> ir.Node | None:
    """The one node that reads ``value``, which is no graph output; else None."""
    uses = list(value.uses())
    if len(uses) != 1 or value.is_graph_output():
        return None
    return uses[0].node


def split_sizes(split: ir.Node, width: int) -> list[int] | None:
    """The part sizes of ``split`` along an axis of ``width``: its attribute, its constant input, or equal parts."""
    if "split" in split.attributes:  # opset < 13: the sizes as an attribute
        return [int(v) for v in split.attributes["split"].value]
    if len(split.inputs) > 1 and split.inputs[1] is not None:
        arr = m.const(split.inputs[1])
        return None if arr is None else [int(v) for v in np.atleast_1d(arr)]
    n = len(split.outputs)
    return [width // n] * n if n and width % n == 0 else None


def last_axis_split(split: ir.Node | None, width: int | None, rank: int) -> list[int] | None:
    """The part widths of ``split`` when it cuts the last of ``rank`` axes (of ``width``) whole."""
    if split is None or split.op_type != "Split" or split.domain != "" or width is None or rank < 1:
        return None
    if int(m.attr(split, "axis", 0)) % rank != rank - 1:
        return None
    sizes = split_sizes(split, width)
    if sizes is None or len(sizes) != len(split.outputs) or sum(sizes) != width or min(sizes, default=0) <= 0:
        return None
    return sizes


def split_reader(value: ir.Value) -> ir.Node | None:
    """The Split that alone reads ``value``, along its last axis."""
    split = only_use(value)
    dims = m.static_dims(value)
    if split is None or not dims or last_axis_split(split, dims[-1], len(dims)) is None:
        return None
    return split


_UNARY = frozenset({"Exp", "Neg", "Tanh", "Sigmoid", "Identity", "Relu", "Abs", "Log", "Sqrt", "Reciprocal",
                    "Erf", "Sin", "Cos", "Floor", "Ceil", "Sign"})
_BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"})


def body_shapes(scan: ir.Node) -> dict[int, Dims]:
    """Shapes of the Scan body's values (by id), static or with named sizes (a symbolic batch): the
    inputs' from the Scan's inputs (a state as its initial value, a row as the scan input less its first
    axis), followed through elementwise ops and MatMul."""
    body = scan.attributes["body"].value
    states = n_state(scan)
    shapes: dict[int, Dims] = {}
    for k, v in enumerate(body.inputs):
        outer = _dim_products.named_dims(scan.inputs[k]) if scan.inputs[k] is not None else None
        known = _dim_products.named_dims(v) or (None if outer is None else outer if k < states else outer[1:])
        if known is not None:
            shapes[id(v)] = tuple(known)

    def shape(v: ir.Value | None) -> Dims | None:
        if v is None:
            return None
        if id(v) in shapes:
            return shapes[id(v)]
        known = _dim_products.named_dims(v)
        if known is None:
            arr = m.folded(v)
            known = None if arr is None else list(arr.shape)
        return None if known is None else tuple(known)

    for node in body:
        ins = [shape(v) for v in node.inputs]
        out: tuple[int, ...] | None = None
        try:
            if node.op_type in _UNARY and len(ins) == 1:
                out = ins[0]
            elif node.op_type in _BINARY and len(ins) == 2 and ins[0] is not None and ins[1] is not None:
                out = _broadcast(ins[0], ins[1])
            elif node.op_type == "MatMul" and len(ins) == 2 and ins[0] is not None and ins[1] is not None:
                a, b = ins
                batch = _broadcast(a[:-2], b[:-2]) if len(a) >= 2 and len(b) >= 2 and a[-1] == b[-2] else None
                out = None if batch is None else (*batch, a[-2], b[-1])
            elif node.op_type in ("Sum", "Max", "Min", "Mean") and ins and all(d is not None for d in ins):
                out = _broadcast(*ins)  # type: ignore[arg-type]
            elif node.op_type == "Slice" and ins and ins[0] is not None and 3 <= len(node.inputs) <= 5:
                out = _sliced_shape(node, ins[0])  # the gates cut from a product of a value made in the step
            elif node.op_type == "Split" and ins and ins[0] is not None and node.domain == "":
                dims = ins[0]
                axis = int(m.attr(node, "axis", 0))
                whole = dims[axis] if -len(dims) <= axis < len(dims) else None
                sizes = split_sizes(node, whole) if isinstance(whole, int) else None
                if sizes is not None and len(sizes) == len(node.outputs) and sum(sizes) == whole:
                    for o, size in zip(node.outputs, sizes):
                        shapes[id(o)] = tuple(size if a == axis % len(dims) else d for a, d in enumerate(dims))
        except ValueError:
            out = None
        if out is not None and node.domain == "" and len(node.outputs) == 1:
            shapes[id(node.outputs[0])] = tuple(int(d) if isinstance(d, (int, np.integer)) else d for d in out)
    return shapes


def _broadcast(*shapes: Dims) -> Dims | None:
    """The shape the ``shapes`` broadcast to; a named size broadcasts only with 1 or itself (None: unknown)."""
    rank = max(len(s) for s in shapes)
    out = []
    for k in range(1, rank + 1):
        sizes = {s[-k] for s in shapes if len(s) >= k} - {1}
        if len(sizes) > 1:
            if all(isinstance(d, int) for d in sizes):
                raise ValueError(f"shapes {shapes} do not broadcast")
            return None
        out.append(sizes.pop() if sizes else 1)
    return tuple(reversed(out))


def _sliced_shape(node: ir.Node, dims: Dims) -> Dims | None:
    """The shape of a Slice of a value of shape ``dims`` with constant starts, ends, axes and steps (a named
    size read whole or not at all)."""
    args = [m.const(v) if v is not None else None for v in node.inputs[1:]]
    if any(a is None for a, v in zip(args, node.inputs[1:]) if v is not None):
        return None
    starts, ends = (np.atleast_1d(a).astype(np.int64) for a in args[:2])
    axes = np.atleast_1d(args[2]).astype(np.int64) if len(args) > 2 and args[2] is not None else np.arange(starts.size)
    steps = np.ones(starts.size, np.int64)
    if len(args) > 3 and args[3] is not None:
        steps = np.atleast_1d(args[3]).astype(np.int64)
    if not starts.size == ends.size == axes.size == steps.size or np.any(steps == 0):
        return None
    out = list(dims)
    for s, e, a, st in zip(starts.tolist(), ends.tolist(), axes.tolist(), steps.tolist()):
        if not -len(dims) <= a < len(dims):
            return None
        d = dims[a % len(dims)]
        if not isinstance(d, int):
            if st != 1 or _dim_products.axis_cut(d, s, e) != "whole":
                return None
            continue
        out[a % len(dims)] = len(range(*slice(s, e, st).indices(d)))
    return tuple(out)


# elementwise ops whose result for an element does not depend on where it lies in the tensor (ONNX
# Runtime 1.32, one thread and two: Log's does, by an ulp at the vector loop's tail)
_POINTWISE_UNARY = frozenset({"Exp", "Tanh", "Sigmoid", "Reciprocal", "Sqrt", "Abs", "Neg", "Relu", "Erf"})
_POINTWISE_BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min"})


def pointwise_chain(value: ir.Value, rank: int) -> list[tuple[ir.Node, tuple]]:
    """The pointwise nodes that read ``value`` one after the other (each alone reading the one before,
    a binary one with a constant that repeats one element), each with what it computes."""
    chain: list[tuple[ir.Node, tuple]] = []
    while True:
        node = only_use(value)
        if node is None or node.domain != "" or len(node.outputs) != 1 or node.attributes:
            return chain
        if node.op_type in _POINTWISE_UNARY and len(node.inputs) == 1:
            key: tuple = (node.op_type,)
        elif node.op_type in _POINTWISE_BINARY and len(node.inputs) == 2:
            side = 0 if node.inputs[0] is value else 1
            other = node.inputs[1 - side]
            arr = m.repeated_const(other)
            dims = m.static_dims(other)
            if other is value or arr is None or arr.size != 1 or dims is None or len(dims) > rank or any(
                    d != 1 for d in dims):
                return chain
            key = (node.op_type, side, arr.dtype.str, arr.reshape(-1)[:1].tobytes())
        else:
            return chain
        chain.append((node, key))
        value = node.outputs[0]


def is_chain_input(node: ir.Node, value: ir.Value | None, chain: list) -> bool:
    """True when ``value`` is what ``node`` reads from the chain (the part, or the node before)."""
    k = [n for n, _ in chain].index(node)
    prev = chain[k - 1][0].outputs[0] if k else None
    if prev is not None:
        return value is prev
    return value is not None and m.const(value) is None


def chain_once(main: ir.Graph, chain: list[tuple[ir.Node, tuple]], value: ir.Value, sizes: list[int], axis: int,
               fallback: ir.TypeProtocol | None = None) -> list[ir.Node]:
    """New nodes that run ``chain`` (``pointwise_chain``) once over ``value``, gates side by side along
    ``axis``, then cut the result into the gates' ``sizes``: the Split last."""
    nodes: list[ir.Node] = []
    for node, _ in chain:
        ins = [value if is_chain_input(node, v, chain) else v for v in node.inputs]
        twin = ir.node(node.op_type, ins)
        twin.outputs[0].type = node.outputs[0].type or fallback
        nodes.append(twin)
        value = twin.outputs[0]
    sizes_value = m.new_initializer(main, np.array(sizes, np.int64), "gate_sizes")
    nodes.append(ir.node("Split", [value, sizes_value], {"axis": axis}, num_outputs=len(sizes)))
    return nodes


def hand_over(split: ir.Node, chains: list[list[tuple[ir.Node, tuple]]], fallback: ir.TypeProtocol | None = None) -> None:
    """Each of ``split``'s parts takes the place (readers, name, type, shape) of one chain's last value."""
    for chain, out in zip(chains, split.outputs):
        last = chain[-1][0].outputs[0]
        out.type, out.shape = last.type or fallback, last.shape
        m.take_over(last, out)


def until_unchanged(scan: ir.Node, step: Callable[[dict[int, tuple[int, ...]]], bool]) -> int:
    """Run ``step`` on the body's shapes (worked out afresh each time) until it changes nothing;
    returns how many times it changed the body."""
    count = 0
    while step(body_shapes(scan)):
        count += 1
    return count


def one_axis_cut(node: ir.Node, dims: tuple[int, ...]) -> tuple[int, int, int] | None:
    """(axis, start, end) of a Slice of a non-constant value of shape ``dims`` that keeps every axis
    whole but one, with constant bounds and steps of 1."""
    if node.domain != "" or not 3 <= len(node.inputs) <= 5 or m.const(node.inputs[0]) is not None:
        return None
    consts = [m.const(v) if v is not None else None for v in node.inputs[1:]]
    if any(c is None for c, v in zip(consts, node.inputs[1:]) if v is not None):
        return None
    starts, ends = np.atleast_1d(consts[0]), np.atleast_1d(consts[1])
    axes = np.atleast_1d(consts[2]) if len(consts) > 2 and consts[2] is not None else np.arange(len(starts))
    if len(consts) > 3 and consts[3] is not None and np.any(consts[3] != 1):
        return None
    if not len(starts) == len(ends) == len(axes):
        return None
    cut = None
    for s, e, a in zip(starts, ends, axes):
        if not -len(dims) <= int(a) < len(dims):
            return None
        axis = int(a) % len(dims)
        got = _dim_products.axis_cut(dims[axis], int(s), int(e))
        if got == "whole":
            continue
        if got is None or cut is not None or not got[0] < got[1]:
            return None
        cut = (axis, got[0], got[1])
    return cut
