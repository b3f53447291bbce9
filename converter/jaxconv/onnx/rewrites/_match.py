"""Small helpers the rewrite rules share: constants, producers, attributes, replacing a value."""

from __future__ import annotations

import hashlib
import math
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import onnx_ir as ir

# ops that only move or repeat values: a chain of them keeps a value's content
SHAPE_OPS = frozenset({"Unsqueeze", "Expand", "Reshape", "Identity", "Squeeze"})


def const(value: ir.Value | None) -> np.ndarray | None:
    """The value's constant content (initializer or Constant node), else None."""
    if value is None:
        return None
    tensor = value.const_value
    if tensor is None:
        try:
            tensor = ir.convenience.get_const_tensor(value)
        except Exception:
            return None
    if tensor is None:
        return None
    try:
        return tensor.numpy()
    except Exception:
        return None


def repeated_const(value: ir.Value | None) -> np.ndarray | None:
    """The constant ``value`` repeats: itself, or the constant an Expand/Unsqueeze/Reshape chain copies.

    Its shape may differ from ``value``'s; use it for element values only.
    """
    while value is not None:
        arr = const(value)
        if arr is not None:
            return arr
        node = producer(value, *SHAPE_OPS)
        if node is None:
            return None
        value = node.inputs[0]
    return None


def is_scalar_const(value: ir.Value | None, expected: float, rtol: float = 1e-6) -> bool:
    """True when ``value`` is a constant whose elements all equal ``expected`` (within ``rtol``)."""
    arr = repeated_const(value)
    if arr is None or arr.size == 0 or arr.dtype.kind not in "fiu":
        return False
    arr = arr.astype(np.float64)
    if expected == 0.0 or not np.isfinite(expected):
        return bool(np.all(arr == expected))
    return bool(np.all(np.abs(arr - expected) <= rtol * abs(expected)))


def producer(value: ir.Value | None, *op_types: str) -> ir.Node | None:
    """The node producing ``value`` when it is one of ``op_types`` (default domain)."""
    if value is None:
        return None
    node = value.producer()
    if node is None or node.domain not in ("", "ai.onnx") or (op_types and node.op_type not in op_types):
        return None
    return node


def through_shape_ops(value: ir.Value | None) -> ir.Value | None:
    """Follow Unsqueeze/Expand/Reshape/Identity producers back to the value they repeat."""
    while value is not None:
        node = producer(value, *SHAPE_OPS)
        if node is None:
            return value
        value = node.inputs[0]
    return value


def through_zero_sign_fix(value: ir.Value | None) -> ir.Value | None:
    """``v`` for ``value = Where(Equal(v, 0), +0.0, v)`` (the lowering's -0 -> +0 fix of a sum), else ``value``."""
    node = producer(value, "Where")
    if node is None or len(node.inputs) != 3:
        return value
    cond, zero, v = node.inputs
    eq = binary(producer(cond), "Equal")
    arr = repeated_const(zero)
    if eq is None or arr is None or not np.all(arr == 0) or np.any(np.signbit(arr)):
        return value
    if not ((eq[0] is v and is_scalar_const(eq[1], 0.0)) or (eq[1] is v and is_scalar_const(eq[0], 0.0))):
        return value
    return v


def attr(node: ir.Node, name: str, default: Any = None) -> Any:
    a = node.attributes.get(name)
    return default if a is None else a.value


def reduce_axes(node: ir.Node) -> tuple[int, ...] | None:
    """A Reduce* node's axes (input 1 from opset 18 on, else the attribute); None when not constant."""
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        arr = const(node.inputs[1])
        return None if arr is None else tuple(int(a) for a in np.atleast_1d(arr))
    axes = attr(node, "axes")
    return None if axes is None else tuple(int(a) for a in axes)


def normalize_axes(axes: tuple[int, ...], rank: int | None) -> tuple[int, ...] | None:
    if any(a < 0 for a in axes):
        if rank is None:
            return None
        axes = tuple(a + rank if a < 0 else a for a in axes)
    return tuple(sorted(axes))


def static_dims(value: ir.Value | None) -> list[int] | None:
    """The value's dimensions when all are known integers, else None."""
    if value is None or value.shape is None or not value.shape.is_static():
        return None
    return [int(d) for d in value.shape]


def named_dims(value: ir.Value | None) -> list[int | str] | None:
    """The value's dimensions: numbers, or the names of symbolic sizes (``64*b``: the same name, the same
    size); None where one is unknown."""
    if value is None or value.shape is None:
        return None
    out: list[int | str] = []
    for d in value.shape:
        if isinstance(d, int):
            out.append(d)
        elif isinstance(d, ir.SymbolicDim) and d.value is not None:
            out.append(d.value)
        else:
            return None
    return out


CONTROL_OPS = frozenset({"If", "Loop", "Scan"})


def sweep(graph: ir.Graph, keep: frozenset[str] = frozenset()) -> None:
    """Remove the nodes whose outputs nothing reads (earlier rules leave them for the final clean-up), so
    that only live readers count when a rule checks a value's readers; op types in ``keep`` stay."""
    changed = True
    while changed:
        changed = False
        for node in reversed(list(graph)):
            if node.outputs and all(not o.uses() and not o.is_graph_output() for o in node.outputs) \
                    and node.op_type not in keep:
                graph.remove(node, safe=True)
                changed = True


def is_const_expr(value: ir.Value | None, depth: int = 0) -> bool:
    """True when ``value`` is computed from constants only (folded by the clean-up after the rules)."""
    if value is None or const(value) is not None:
        return value is not None
    node = value.producer()
    if node is None or depth > 8 or node.domain != "" or not node.inputs or node.op_type in CONTROL_OPS:
        return False
    if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values()):
        return False
    return all(i is None or is_const_expr(i, depth + 1) for i in node.inputs)


def from_constants(value: ir.Value | None, limit: int = 256) -> bool:
    """``is_const_expr`` over a cone of up to ``limit`` nodes however deep (a resize's weights: a few dozen
    ops from the scale to the matrix)."""
    seen: set[int] = set()
    todo = [value]
    while todo:
        v = todo.pop()
        if v is None or const(v) is not None or id(v) in seen:
            continue
        seen.add(id(v))
        node = v.producer()
        if node is None or len(seen) > limit or node.domain != "" or not node.inputs or node.op_type in CONTROL_OPS \
                or any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values()):
            return False
        todo.extend(node.inputs)
    return value is not None


def rank(value: ir.Value | None) -> int | None:
    return None if value is None or value.shape is None else len(value.shape)


def elements(dims: Any, symbolic_size: int) -> int:
    """How many elements a shape of ``dims`` holds, each symbolic dimension counted as ``symbolic_size``."""
    return math.prod(d if isinstance(d, int) else symbolic_size for d in dims)


def other_input(node: ir.Node, value: ir.Value) -> ir.Value | None:
    """For a binary node with ``value`` as one input, the other input."""
    a, b = node.inputs[0], node.inputs[1]
    if a is value:
        return b
    if b is value:
        return a
    return None


def each_node(graph: ir.Graph, op_type: str) -> Iterator[ir.Node]:
    """The ``op_type`` nodes (default domain) of ``graph`` itself, not of its subgraphs; a node is yielded only
    if it is still in the graph then, so the caller may rewrite and remove nodes as it goes."""
    for node in list(graph):
        if node.domain in ("", "ai.onnx") and node.op_type == op_type and node.graph is graph:
            yield node


def count_everywhere(graph: ir.Graph, op_type: str, one: Callable[[ir.Graph, ir.Node], int]) -> int:
    """The sum of ``one(g, node)`` over the ``op_type`` nodes of ``graph`` and of every subgraph in it."""
    return sum(one(g, node) for g in list(all_graphs(graph)) for node in each_node(g, op_type))


def binary(node: ir.Node | None, op_type: str) -> tuple[ir.Value, ir.Value] | None:
    if node is None or node.op_type != op_type or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
        return None
    return node.inputs[0], node.inputs[1]


def product_plus(value: ir.Value | None) -> tuple[ir.Value, ir.Value] | None:
    """For ``value = Add(p, c)`` (or ``Add(c, p)``) with ``p`` a MatMul's output (``x @ w + b``):
    ``(p, c)``."""
    pair = binary(producer(value, "Add"), "Add")
    if pair is None:
        return None
    product, other = pair
    return (product, other) if producer(product, "MatMul") is not None else (other, product)


def replace(graph: ir.Graph, old: ir.Value, new_nodes: ir.Node | list[ir.Node], before: ir.Node) -> None:
    """Insert ``new_nodes`` before ``before`` and make every use of ``old`` read the last one's output.

    The new value takes ``old``'s name, type and shape (so graph outputs keep their names).
    """
    nodes = new_nodes if isinstance(new_nodes, list) else [new_nodes]
    graph.insert_before(before, nodes)
    new = nodes[-1].outputs[0]
    new.type = old.type if old.type is not None else new.type
    new.shape = old.shape if old.shape is not None else new.shape
    take_over(old, new)


def take_over(old: ir.Value, new: ir.Value) -> None:
    """Every use of ``old`` (graph outputs included) reads ``new``, which takes ``old``'s name."""
    old.replace_all_uses_with(new, replace_graph_outputs=True)
    name = old.name
    old.name = None
    new.name = name


def all_graphs(graph: ir.Graph) -> Iterator[ir.Graph]:
    """``graph`` and every subgraph nested in it (Loop/If/Scan bodies)."""
    yield graph
    for node in list(graph.all_nodes()):
        for a in node.attributes.values():
            if a.type == ir.AttributeType.GRAPH:
                yield a.value
            elif a.type == ir.AttributeType.GRAPHS:
                yield from a.value


def folded(value: ir.Value | None, limit: int = 1 << 16) -> np.ndarray | None:
    """``value``'s content when it is a constant or an Unsqueeze/Reshape/Expand/Identity chain on one
    (constant folding has not run yet when the rules do); None otherwise or above ``limit`` elements."""
    arr = const(value)
    if arr is not None or value is None:
        return arr
    node = producer(value, *SHAPE_OPS)
    if node is None or node.op_type == "Squeeze":
        return None
    src = folded(node.inputs[0], limit)
    if src is None:
        return None
    if node.op_type == "Identity":
        return src
    arg = const(node.inputs[1]) if len(node.inputs) > 1 else None
    if arg is None:
        return None
    arg = [int(a) for a in np.atleast_1d(arg)]
    try:
        if node.op_type == "Unsqueeze":
            rank = src.ndim + len(arg)
            out = src
            for a in sorted(a % rank for a in arg):
                out = np.expand_dims(out, a)
            return out
        if node.op_type == "Reshape":
            if any(d == 0 for d in arg):
                return None
            return src.reshape(arg)
        shape = np.broadcast_shapes(src.shape, tuple(arg))
        if int(np.prod(shape)) > limit:
            return None
        return np.broadcast_to(src, shape)
    except ValueError:
        return None


def same_value(a: ir.Value | None, b: ir.Value | None, depth: int = 6) -> bool:
    """Whether ``a`` and ``b`` are the same value, equal constants, or computed by nodes of one op type,
    attributes and output index from inputs that are the same in this sense (``depth`` nodes deep): two copies
    of one expression that the clean-up has not merged yet (a mask built twice)."""
    if a is b:
        return True
    if a is None or b is None or depth == 0:
        return False
    ca, cb = const(a), const(b)
    if ca is not None or cb is not None:
        return ca is not None and cb is not None and ca.dtype == cb.dtype and ca.shape == cb.shape \
            and ca.tobytes() == cb.tobytes()
    pa, pb = a.producer(), b.producer()
    if pa is None or pb is None or pa.op_type != pb.op_type or pa.domain != pb.domain \
            or len(pa.inputs) != len(pb.inputs) or a.index() != b.index():
        return False
    if pa.attributes.keys() != pb.attributes.keys() or pa.attributes.keys() & {"body", "then_branch", "else_branch"}:
        return False
    if any(pa.attributes[k].value != pb.attributes[k].value for k in pa.attributes):
        return False
    return all(same_value(x, y, depth - 1) for x, y in zip(pa.inputs, pb.inputs))


def negation(node: ir.Node) -> ir.Value | None:
    """The value ``node`` negates: Not's input, or Xor's other input where one is a constant true."""
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "Not":
        return node.inputs[0]
    if node.op_type == "Xor" and len(node.inputs) == 2:
        for mine, other in (node.inputs, node.inputs[::-1]):
            arr = const(mine)
            if arr is not None and arr.size == 1 and arr.dtype == bool and bool(arr.reshape(())):
                return other
    return None


def unnegated(value: ir.Value, limit: int | None = None) -> tuple[ir.Value, int]:
    """``value`` with its negations (``negation``: Not, Xor with true) taken off, at most ``limit`` of them:
    the value under them, and how many there were, modulo 2."""
    flips, taken = 0, 0
    while limit is None or taken < limit:
        node = value.producer()
        under = None if node is None else negation(node)
        if under is None:
            break
        value, flips, taken = under, flips ^ 1, taken + 1
    return value, flips


def clone(nodes: list[ir.Node], mapping: dict[int, ir.Value]) -> list[ir.Node]:
    """Copies of ``nodes`` (a topological order) reading ``mapping``'s values for the originals'."""
    copies = []
    for node in nodes:
        inputs = [None if v is None else mapping.get(id(v), v) for v in node.inputs]
        copy = ir.node(node.op_type, inputs, {a.name: a for a in node.attributes.values()}, domain=node.domain,
                       num_outputs=len(node.outputs))
        for old, new in zip(node.outputs, copy.outputs):
            new.type, new.shape = old.type, old.shape
            mapping[id(old)] = new
        copies.append(copy)
    return copies


def non_finite_test(x: ir.Value) -> list[ir.Node]:
    """Nodes whose last output is true when ``x`` holds a NaN or an infinity: ``IsNaN(s - s)``,
    ``s = ReduceSum(x)`` (also true when a finite sum overflows, where the caller's exact branch runs)."""
    total = ir.node("ReduceSum", [x], {"keepdims": 0})
    diff = ir.node("Sub", [total.outputs[0], total.outputs[0]])
    return [total, diff, ir.node("IsNaN", [diff.outputs[0]])]


def branch_on(graph: ir.Graph, test: ir.Value, result: ir.Value, exact: list[ir.Node],
              fast: ir.Node | list[ir.Node], after: ir.Node, names: tuple[str, str], exact_if: bool = True) -> ir.Value:
    """``result``, computed by ``exact`` (nodes of ``graph``), as ``If(test, exact, fast)`` after ``after``
    (``If(test, fast, exact)`` with ``exact_if`` false).

    ``exact`` moves into the then-branch; ``fast`` (a node, or nodes in order) is the else-branch, its
    last node's first output the branch's (same values where ``test`` is false); ``exact_if`` false swaps
    the branches (a test that is true where the fast nodes give the same values). Every reader of
    ``result`` outside the branch, and the graph's outputs, read the If's output, which takes
    ``result``'s name. Returns the If's output.
    """
    fast_nodes = fast if isinstance(fast, list) else [fast]
    fast_out = fast_nodes[-1].outputs[0]
    out_index = next((i for i, v in enumerate(graph.outputs) if v is result), None)
    if out_index is not None:  # the then-branch's output now; the If's takes its place below
        graph.outputs.pop(out_index)
    for node in exact:
        graph.remove(node)
    then_branch = ir.Graph([], [result], nodes=exact, name=names[0])
    else_branch = ir.Graph([], [fast_out], nodes=fast_nodes, name=names[1])
    if not exact_if:
        then_branch, else_branch = else_branch, then_branch
    branch = ir.node("If", [test], {"then_branch": then_branch, "else_branch": else_branch})
    graph.insert_after(after, branch)
    new = branch.outputs[0]
    for v in (new, fast_out):
        v.type, v.shape = result.type, result.shape
    name = result.name
    for use in list(result.uses()):
        if use.node.graph is not then_branch:
            use.node.replace_input_with(use.idx, new)
    if out_index is not None:
        graph.outputs.insert(out_index, new)
    result.name = f"{name}_{names[0]}" if name else None
    new.name = name
    return new


_MADE = "jaxconv.made_initializers"  # graph.meta: (dtype, shape, digest) -> the initializer made for it


def new_initializer(graph: ir.Graph, arr: np.ndarray, name: str) -> ir.Value:
    """``arr`` as an initializer of ``graph`` named ``name`` (``name_1``, ... when taken).

    An array equal to one made here before (same dtype, shape and bytes) is that initializer again: a rule
    that slices a weight for each of its uses (the column blocks of an RNN cell's gates, once per step of
    an unrolled loop) stores each slice once. Callers never change an initializer they were given.
    """
    # np.ascontiguousarray makes a 0-d array 1-d: keep the shape.
    data = np.ascontiguousarray(arr).reshape(arr.shape)
    key = (data.dtype.name, data.shape, hashlib.sha256(data.tobytes()).hexdigest())
    made: dict[tuple[str, tuple[int, ...], str], ir.Value] = graph.meta.setdefault(_MADE, {})
    earlier = made.get(key)
    if earlier is not None and earlier.name is not None and graph.initializers.get(earlier.name) is earlier:
        return earlier
    taken = graph.initializers
    k, fresh = 0, name
    while fresh in taken:
        k += 1
        fresh = f"{name}_{k}"
    value = ir.Value(name=fresh, const_value=ir.tensor(data))
    value.type = ir.TensorType(ir.DataType.from_numpy(arr.dtype))
    value.shape = ir.Shape(arr.shape)
    graph.register_initializer(value)
    made[key] = value
    return value


def moved_pads(pads: np.ndarray, to: Sequence[int], rank: int) -> np.ndarray:
    """A Pad's ``pads`` (begins then ends, one per padded axis) with padded axis ``k`` taken to axis ``to[k]``
    of a tensor of ``rank`` axes (a Transpose moved across the Pad); axes not in ``to`` take no padding."""
    moved = np.zeros(2 * rank, np.int64)
    n = len(to)
    for k, j in enumerate(to):
        moved[j], moved[rank + j] = pads[k], pads[n + k]
    return moved


def live_uses(value: ir.Value) -> list[Any]:
    """The uses of ``value`` whose node is live (``is_live``): other rules leave dead readers until the clean-up."""
    return [u for u in value.uses() if is_live(u.node)]


def is_live(node: ir.Node, depth: int = 0) -> bool:
    """Whether an output of ``node`` reaches a graph output (other rules leave dead nodes behind until the
    clean-up); True past a few levels."""
    if depth > 8:
        return True
    return any(o.is_graph_output() or any(is_live(u.node, depth + 1) for u in o.uses()) for o in node.outputs)


def transpose_perm(node: ir.Node | None, rank: int) -> list[int] | None:
    """The permutation of ``node`` when it is a Transpose with an explicit one of ``rank`` axes, else None."""
    if node is None or node.domain not in ("", "ai.onnx") or node.op_type != "Transpose":
        return None
    perm = attr(node, "perm")
    return [int(p) for p in perm] if perm is not None and len(perm) == rank else None


def is_identity(perm: Any) -> bool:
    """Whether the permutation ``perm`` keeps every axis in place."""
    return list(perm) == list(range(len(perm)))


def sole_use(value: ir.Value) -> bool:
    """Whether one node reads ``value`` and it is no graph output."""
    return len(value.uses()) == 1 and not value.is_graph_output()


def sole_live_use(value: ir.Value) -> bool:
    """Whether one live node reads ``value`` and it is no graph output: a rule may replace that reader and
    drop the value (other rules leave dead readers behind until the clean-up)."""
    return len(live_uses(value)) == 1 and not value.is_graph_output()
