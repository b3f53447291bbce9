"""Integer shape and index arithmetic in fewer nodes (a causal mask over a symbolic length).

StableHLO computes a symbolic dimension in int32 and packs dimensions into shape vectors that are
unpacked again; iota and comparisons build masks that are broadcast explicitly. Each rule here is
exact:

- ``Gather(v, k)`` of a scalar index ``k`` from a vector built by ``Concat`` of one-element pieces
  (through a ``Cast``) is the piece's scalar, so two gathers of the same dimension become one value
  (common-subexpression elimination then merges what follows them);
- ``Cast(Range(a, Cast(n32, int64), d), int32)`` is ``Range(a, n32, d)`` in int32 (every element lies
  between ``a`` and ``n32``, both int32);
- ``x + 0`` for integers is ``x`` (for floats it is not: -0 + 0 is +0);
- ``Cast(Where(c, 1, 0), bool)`` is ``c``; ``Equal(Cast(b), 0)`` of a bool is ``Not(b)``, and
  ``Not(Not(b))`` and ``Xor(Not(b), True)`` are ``b`` (an attention mask given as numbers);
- an ``Unsqueeze`` of leading axes in front of broadcasting pointwise ops whose other operands
  already have the rank is dropped (ONNX broadcasting aligns trailing axes);
- ``Max(Min(a, x), b)`` with constants ``a <= b`` is ``b`` (and ``Min(Max(a, x), b)`` with ``a >= b``):
  a dynamic slice's start 0 clamped to ``[0, s - 1]`` (``x[:, 0]`` of a symbolic length) is 0;
- a Slice's bounds computed from constants only become constants (``row_slices`` reads them), also
  through the Concat that stacks a dynamic slice's start indices and the sums that give its ends;
- ``Concat`` of every output of a ``Split``, in order, is the Split's input.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _constants as constants
from jaxconv.onnx.rewrites import _match as m

_BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div", "Where", "Xor", "And", "Or", "Equal", "Less",
                           "Greater", "LessOrEqual", "GreaterOrEqual", "Max", "Min", "Not", "Cast", "Neg", "Abs"})
_INTS = frozenset({ir.DataType.INT8, ir.DataType.INT16, ir.DataType.INT32, ir.DataType.INT64,
                   ir.DataType.UINT8, ir.DataType.UINT16, ir.DataType.UINT32, ir.DataType.UINT64})
_I32 = np.iinfo(np.int32)


def _scalar_int(value: ir.Value | None) -> int | None:
    arr = m.const(value)
    if arr is None or arr.ndim != 0 or arr.dtype.kind not in "iu":
        return None
    return int(arr)


def _element(graph: ir.Graph, value: ir.Value, k: int, before: ir.Node, depth: int = 0) -> ir.Value | None:
    """Element ``k`` of the 1-D ``value`` as a scalar value, when ``value`` is built from scalars."""
    node = m.producer(value)
    if node is None or depth > 4:
        return None
    if node.op_type == "Cast":
        inner = _element(graph, node.inputs[0], k, before, depth + 1)
        if inner is None:
            return None
        cast = ir.node("Cast", [inner], {"to": m.attr(node, "to")})
        graph.insert_before(before, cast)
        cast.outputs[0].dtype = value.dtype
        cast.outputs[0].shape = ir.Shape([])
        return cast.outputs[0]
    if node.op_type == "Concat" and m.attr(node, "axis") in (0, -1):
        sizes = [i.shape[0] if i is not None and i.shape is not None and len(i.shape) == 1 else None
                 for i in node.inputs]
        if any(s != 1 for s in sizes):
            return None
        k = k + len(sizes) if k < 0 else k
        return _element(graph, node.inputs[k], 0, before, depth + 1) if 0 <= k < len(sizes) else None
    if node.op_type in ("Reshape", "Unsqueeze") and k in (0, -1):
        src = node.inputs[0]
        if src is not None and src.shape is not None and len(src.shape) == 0:
            return src
    return None


def _gather(graph: ir.Graph, node: ir.Node) -> bool:
    k = _scalar_int(node.inputs[1]) if len(node.inputs) == 2 else None
    if k is None or m.attr(node, "axis", 0) != 0 or node.outputs[0].is_graph_output():
        return False
    found = _element(graph, node.inputs[0], k, node)
    if found is None:
        return False
    node.outputs[0].replace_all_uses_with(found)
    return True


def _range_cast(graph: ir.Graph, node: ir.Node) -> bool:
    """``Cast(Range(a, Cast(n32, int64), d), int32)`` as ``Range(a, n32, d)`` in int32."""
    if m.attr(node, "to") != ir.DataType.INT32.value:
        return False
    rng = m.producer(node.inputs[0], "Range")
    if rng is None or len(rng.inputs) != 3:
        return False
    start, limit, delta = rng.inputs
    widen = m.producer(limit, "Cast")
    a, d = _scalar_int(start), _scalar_int(delta)
    if widen is None or a is None or d is None \
            or not (_I32.min <= a <= _I32.max and _I32.min <= d <= _I32.max):
        return False
    n32 = widen.inputs[0]
    if n32 is None or n32.dtype != ir.DataType.INT32 or n32.shape is None or len(n32.shape) != 0:
        return False
    consts = [ir.node("Constant", [], {"value": ir.tensor(np.array(v, np.int32))}) for v in (a, d)]
    new = ir.node("Range", [consts[0].outputs[0], n32, consts[1].outputs[0]])
    m.replace(graph, node.outputs[0], [*consts, new], node)
    return True


def _add_zero(node: ir.Node) -> bool:
    """``x + 0`` (integers, the zero not broadcasting ``x``) as ``x``."""
    out = node.outputs[0]
    if out.dtype not in _INTS or out.is_graph_output():
        return False
    for x, zero in (node.inputs, node.inputs[::-1]):
        arr = m.folded(zero)
        if arr is None or np.any(arr != 0) or x is None or x.dtype != out.dtype or m.rank(x) is None:
            continue
        if arr.ndim <= m.rank(x) and (arr.size == 1 or (x.shape is not None and x.shape == out.shape)):
            out.replace_all_uses_with(x)
            return True
    return False


def _folded(value: ir.Value | None) -> np.ndarray | None:
    """``value``'s constant content, also through a Cast of a constant (the rules run before folding)."""
    arr = m.folded(value)
    cast = m.producer(value, "Cast") if arr is None else None
    if cast is None:
        return arr
    src = m.folded(cast.inputs[0])
    try:
        return None if src is None else src.astype(ir.DataType(m.attr(cast, "to")).numpy())
    except (TypeError, ValueError):
        return None


def _cast_of_select(node: ir.Node) -> bool:
    """``Cast(Where(c, nonzero, 0), bool)`` (constants not broadcasting ``c``) as ``c``."""
    if m.attr(node, "to") != ir.DataType.BOOL.value or node.outputs[0].is_graph_output():
        return False
    where = m.producer(node.inputs[0], "Where")
    if where is None or len(where.inputs) != 3:
        return False
    c, a, b = where.inputs
    ta, tb = _folded(a), _folded(b)
    if ta is None or tb is None or ta.size != 1 or tb.size != 1 or m.rank(c) is None:
        return False
    if ta.ndim > m.rank(c) or tb.ndim > m.rank(c) or not ta.item() or tb.item():
        return False
    node.outputs[0].replace_all_uses_with(c)
    return True


def _bool_const(value: ir.Value | None, truth: bool, rank: int | None) -> bool:
    """``value`` is a one-element constant equal to ``truth`` of a rank that does not broadcast ``rank``."""
    arr = _folded(value)
    return (arr is not None and arr.size == 1 and rank is not None and arr.ndim <= rank
            and bool(arr.item()) == truth)


def _equal_zero_of_bool(graph: ir.Graph, node: ir.Node) -> bool:
    """``Equal(Cast(b), 0)`` of a bool ``b`` as ``Not(b)`` (also with Unsqueeze/Reshape/Expand after the
    Cast)."""
    for v, zero in (node.inputs, node.inputs[::-1]):
        moves: list[ir.Node] = []
        src = v
        while len(moves) < 4 and m.producer(src, "Unsqueeze", "Reshape", "Expand", "Squeeze") is not None:
            moves.append(src.producer())
            src = moves[-1].inputs[0]
        cast = m.producer(src, "Cast")
        b = cast.inputs[0] if cast is not None else None
        if b is None or b.dtype != ir.DataType.BOOL or not _bool_const(zero, False, m.rank(v)):
            continue
        if any(len(n.outputs[0].uses()) != 1 for n in moves):
            continue  # the chain is read elsewhere too: a copy on the bools would add nodes
        nodes: list[ir.Node] = []
        for move in reversed(moves):
            nodes.append(ir.node(move.op_type, [nodes[-1].outputs[0] if nodes else b, *move.inputs[1:]],
                                 dict(move.attributes)))
        nodes.append(ir.node("Not", [nodes[-1].outputs[0] if nodes else b]))
        m.replace(graph, node.outputs[0], nodes, node)
        return True
    return False


def _not_not(node: ir.Node) -> bool:
    """``Not(Not(x))`` as ``x``; ``Xor(Not(x), True)`` as ``x``."""
    if node.op_type == "Not":
        inner = m.producer(node.inputs[0], "Not")
    else:
        a, b = node.inputs
        inner = m.producer(a, "Not") if _bool_const(b, True, m.rank(a)) else None
    if inner is None or node.outputs[0].is_graph_output():
        return False
    node.outputs[0].replace_all_uses_with(inner.inputs[0])
    return True


def _settled_clamp(node: ir.Node) -> bool:
    """``Max(Min(a, x), b)`` of integers with constants ``a <= b`` is ``b`` (and ``Min(Max(a, x), b)``
    with ``a >= b``), where ``x`` broadcasts nothing: a start index ``a`` clamped to ``[b, x]``, as the
    lowering of StableHLO's dynamic_slice clamps ``x[:, 0]`` or ``pos[:s]`` (``x`` is ``dim - size``)."""
    out = node.outputs[0]
    if out.dtype not in _INTS or out.is_graph_output() or len(node.inputs) != 2:
        return False
    inner_op = "Min" if node.op_type == "Max" else "Max"
    for inner_value, b in (node.inputs, node.inputs[::-1]):
        inner = m.producer(inner_value, inner_op)
        bound = _known_scalar(b)
        if inner is None or len(inner.inputs) != 2 or bound is None or bound.size != 1:
            continue
        for a, x in (inner.inputs, inner.inputs[::-1]):
            first = _known_scalar(a)
            if first is None or first.size != 1 or x is None or b.dtype != out.dtype:
                continue
            settled = first.item() <= bound.item() if node.op_type == "Max" else first.item() >= bound.item()
            dims = m.static_dims(x)
            if settled and dims is not None and all(d == 1 for d in dims) \
                    and max(len(dims), first.ndim) <= bound.ndim:
                out.replace_all_uses_with(b)
                return True
    return False


def _known_scalar(value: ir.Value | None, depth: int = 0) -> np.ndarray | None:
    """An integer scalar's value computed from constants, also through a Where whose condition is a
    constant (jnp's negative-index wrap of a constant index: ``Where(0 < 0, i + n, i)``) and Casts."""
    arr = constants.evaluate(value)
    if arr is not None or depth > 4 or m.rank(value) != 0:
        return arr if arr is not None and arr.dtype.kind in "iu" else None
    node = m.producer(value, "Where", "Cast")
    if node is None:
        return None
    if node.op_type == "Cast":
        inner = _known_scalar(node.inputs[0], depth + 1)
        return None if inner is None else inner.astype(ir.DataType(m.attr(node, "to")).numpy())
    cond = constants.evaluate(node.inputs[0])
    if cond is None or cond.size != 1 or len(node.inputs) != 3:
        return None
    return _known_scalar(node.inputs[1] if cond.item() else node.inputs[2], depth + 1)


def _concat_of_split(node: ir.Node) -> bool:
    """``Concat`` of every output of a ``Split``, in order and along its axis, is the Split's input (a shape
    vector cut into its entries and stacked again, as the lowering of a dynamic slice does)."""
    split = m.producer(node.inputs[0]) if node.inputs else None
    out = node.outputs[0]
    if split is None or split.op_type != "Split" or split.domain != "" or out.is_graph_output():
        return False
    if list(node.inputs) != list(split.outputs) or split.inputs[0] is None:
        return False
    rank = m.rank(out)
    if rank is None or m.rank(split.inputs[0]) != rank or split.inputs[0].dtype != out.dtype:
        return False
    if m.attr(node, "axis") % rank != m.attr(split, "axis", 0) % rank:
        return False
    out.replace_all_uses_with(split.inputs[0])
    return True


def _constant_bounds(graph: ir.Graph, node: ir.Node) -> int:
    """A Slice's starts, ends, axes or steps computed from constants only given as constants, so that the
    rules after this one (``row_slices``) read them."""
    count = 0
    for k in range(1, min(len(node.inputs), 5)):
        value = node.inputs[k]
        if value is None or m.const(value) is not None or value.producer() is None:
            continue
        arr = _known_vector(value)
        if arr is None or arr.ndim != 1 or arr.dtype.kind not in "iu" or arr.size > 16:
            continue
        node.replace_input_with(k, m.new_initializer(graph, arr, "slice_bounds"))
        count += 1
    return count


def _known_vector(value: ir.Value | None) -> np.ndarray | None:
    """An integer vector's value computed from constants (``constants.evaluate``, through a ``Concat`` and
    integer arithmetic too): the lowering of a dynamic slice stacks its start indices (``Unsqueeze`` of each
    clamped scalar, settled to constants by ``_settled_clamp``) and adds the sizes for the ends, all of
    which the constant folding only sees after the rules. Integer sums wrap in numpy as in ONNX Runtime."""
    arr = constants.evaluate(value)
    return arr if arr is not None and arr.dtype.kind in "iu" else None


def _other_rank(node: ir.Node, value: ir.Value) -> int:
    """The largest rank ``node``'s other operands keep whatever other leading Unsqueezes are removed too (two
    of them feeding one Where, directly or through broadcasting ops, must not vouch for each other)."""
    ranks = [_kept_rank(i) for i in node.inputs if i is not None and i is not value]
    return -1 if any(r is None for r in ranks) else max(ranks, default=-1)


def _kept_rank(value: ir.Value, depth: int = 0) -> int | None:
    """A lower bound of ``value``'s rank after this rule: an Unsqueeze counts at its input's rank, a
    broadcasting op at its operands' largest; None when unknown (or too deep to follow)."""
    p = value.producer()
    if p is None or p.domain != "" or (p.op_type != "Unsqueeze" and p.op_type not in _BROADCASTING):
        return m.rank(value)
    if depth >= 8:
        return None
    if p.op_type == "Unsqueeze":
        return _kept_rank(p.inputs[0], depth + 1)
    ranks = [_kept_rank(i, depth + 1) for i in p.inputs if i is not None]
    return None if any(r is None for r in ranks) else max(ranks, default=0)


def _restores_rank(node: ir.Node, value: ir.Value, rank: int, changed: list[ir.Value],
                   depth: int = 0) -> bool:
    """Whether ``node``'s results keep their values with ``value`` given fewer leading axes (it broadcasts,
    and another operand, or every consumer of its result in turn, has ``rank`` axes)."""
    if node.domain != "" or node.op_type not in _BROADCASTING or len(node.outputs) != 1:
        return False
    if _other_rank(node, value) >= rank:
        return True
    out = node.outputs[0]
    if depth >= 3 or out.is_graph_output() or not out.uses():
        return False
    changed.append(out)
    return all(_restores_rank(u.node, out, rank, changed, depth + 1) for u in out.uses())


def _leading_unsqueeze(node: ir.Node) -> bool:
    x, out = node.inputs[0], node.outputs[0]
    axes = m.const(node.inputs[1]) if len(node.inputs) == 2 else None
    r = m.rank(x)
    if axes is None or r is None or out.is_graph_output() or not out.uses():
        return False
    k = int(np.asarray(axes).size)
    if sorted(int(a) % (r + k) for a in np.atleast_1d(axes)) != list(range(k)):
        return False
    changed: list[ir.Value] = []
    if not all(_restores_rank(u.node, out, r + k, changed) for u in out.uses()):
        return False
    for v in changed:
        v.shape = None  # fewer axes now; shape inference fills them in again
    out.replace_all_uses_with(x)
    return True


def rewrite(graph: ir.Graph) -> int:
    """Apply the rules above to ``graph``; returns how many fired."""
    count = 0
    for node in list(graph):
        if node.graph is not graph or node.domain != "":
            continue
        op = node.op_type
        if op == "Gather":
            count += _gather(graph, node)
        elif op == "Cast":
            count += _range_cast(graph, node) or _cast_of_select(node)
        elif op == "Add" and len(node.inputs) == 2:
            count += _add_zero(node)
        elif op == "Unsqueeze":
            count += _leading_unsqueeze(node)
        elif op == "Equal" and len(node.inputs) == 2:
            count += _equal_zero_of_bool(graph, node)
        elif op == "Not" or (op == "Xor" and len(node.inputs) == 2):
            count += _not_not(node)
        elif op in ("Max", "Min"):
            count += _settled_clamp(node)
        elif op == "Slice":
            count += _constant_bounds(graph, node)
        elif op == "Concat":
            count += _concat_of_split(node)
    return count
