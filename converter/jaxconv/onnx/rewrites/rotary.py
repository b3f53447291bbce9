"""Rotary embeddings: the negation of ``rotate_half`` folded into the sine table, the tables laid out whole.

A rotary embedding computes ``x * cos + rotate_half(x) * sin`` with ``rotate_half(x) = concat(-x2, x1)``
(Llama, Mistral, Gemma, keras-hub; GPT-J's interleaved form is a Split of pairs, ``strided_slices``).
The ``Neg`` is a kernel of its own on the queries and the keys of every layer, and the table is
``[b, t, 1, d]`` against ``[b, t, h, d]``: ORT's Mul broadcasts in runs of ``d`` elements (32 for
a head of 32: about 6.6 µs instead of 1.3 µs for a flat ``[2, 64, 4, 32]``, one thread).

``Mul(mover(..., Neg(b), ...), table)`` where ``mover`` only moves values (Concat, Unsqueeze,
Reshape, Squeeze) and ``table`` is a constant becomes ``Mul(mover(..., b, ...), table')``, ``table'``
the table with the elements that meet ``-b`` negated: ``(-b) * s`` and ``b * (-s)`` are the same
float (zeros' signs and infinities included; a NaN stays a NaN). The table is then laid out along
the axes after its first non-1 axis, as is the partner Mul's (``x * cos``, read by the same Add), so
that both broadcast along the leading axes only, at most ``MAX_TABLE`` elements: the values do not
change. A table computed at run time (keras-hub's ``sin(positions * frequencies)``) at most half the
size of the Mul (counted with symbolic sizes at 2 and 3: a table gathered or computed over a symbolic
length) is multiplied by a constant of +-1 instead (constant folding folds it where it can).
On a model exported for any batch the signs are worked out with each symbolic size at 2 and at 3; they
must agree and not change along those axes (a Neg of part of the batch axis keeps its Neg), and the
tables are laid out whole only along axes of known size.
Together with ``activations.negated_products`` (the SiLU's Neg), process CPU time per call on
one thread, medians of about 200 alternating runs (load 7.6-9.5): HF Flax Llama 0.97x, Mistral 0.96x,
Gemma 0.97x, keras-hub Llama 0.98x.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx import thread_count
from jaxconv.onnx.rewrites import _constants
from jaxconv.onnx.rewrites import _dim_products as dp
from jaxconv.onnx.rewrites import _match as m

MAX_TABLE = 1 << 16  # elements of a table laid out whole; a larger one keeps its broadcast shape
MAX_SIGNS = 1 << 22  # elements of a rotated value whose signs are worked out (a bool array of its shape)
MAX_EXPANDED = 1 << 15  # elements of a run-time table expanded over the heads (``_over_heads``)
LENGTH = thread_count.RECORD_SIZES[-1]  # a symbolic size, counted for MAX_EXPANDED (128), as a record weighs it
_MOVERS = ("Concat", "Unsqueeze", "Reshape", "Squeeze")


def rewrite(graph: ir.Graph) -> int:
    """Fold the Negs of ``graph``'s (and its subgraphs') rotary Muls into their tables; returns how many."""
    return m.count_everywhere(graph, "Mul", _fold)


def _fold(graph: ir.Graph, mul: ir.Node) -> int:
    named = dp.named_dims(mul.outputs[0])
    if named is None:
        return 0
    out: list[int | None] = [d if isinstance(d, int) else None for d in named]  # None: a symbolic size
    for k in (0, 1):
        moved, table = mul.inputs[k], mul.inputs[1 - k]
        if moved is None or table is None or moved is table or table.dtype is None:
            continue
        if not table.dtype.is_floating_point():
            continue
        found = _signs_over_sizes(moved, out)
        if found is None:
            continue
        negs, signs = found
        arr = _table(table)
        if arr is not None:
            try:
                flipped = _spread(np.where(signs, -arr, arr).astype(arr.dtype), out)
            except ValueError:
                continue
            new = m.new_initializer(graph, flipped, "rotary_table")
        else:  # a table computed at run time: negated where needed by a Mul by +-1 (the constant folding's)
            if not _small_beside(table, named):
                continue
            ones = np.where(signs, -1, 1).astype(table.dtype.numpy())
            flip = ir.node("Mul", [table, m.new_initializer(graph, ones, "rotary_signs")])
            flip.outputs[0].dtype = table.dtype
            lead = len(table.shape or ()) - ones.ndim
            if table.shape is not None and lead >= 0 and all(
                    n == 1 or table.shape[lead + a] == n for a, n in enumerate(ones.shape)):
                flip.outputs[0].shape = table.shape  # the signs do not broadcast the table
            graph.insert_before(mul, flip)
            new = _over_heads(graph, flip.outputs[0], named, mul)
        for neg in negs:  # the one live reader of each Neg is a mover of the chain
            use = m.live_uses(neg.outputs[0])[0]
            use.node.replace_input_with(use.idx, neg.inputs[0])
        mul.replace_input_with(1 - k, new)
        _spread_partner(graph, mul, named, out)
        return 1
    return 0


def _small_beside(table: ir.Value, named: list[int | str]) -> bool:
    """Whether ``table`` has at most half the elements of a value of dims ``named``, counted with every
    symbolic size at 2 and at 3 (a table ``[1, s, 1, d]`` against heads ``[b, s, h, d]``)."""
    dims = dp.named_dims(table)
    if dims is None:
        return False
    return all(np.prod([d if isinstance(d, int) else size for d in dims]) * 2
               <= np.prod([d if isinstance(d, int) else size for d in named]) for size in (2, 3))


def _signs_over_sizes(moved: ir.Value, out: list[int | None]) -> tuple[list[ir.Node], np.ndarray] | None:
    """(the Negs, the elements that come from them as a bool array narrowed to size 1 where it does not
    change) of ``moved``, the same whatever the symbolic sizes (None in ``out``): worked out with every
    named size at 2 and at 3, which must agree and not change along those axes."""
    symbolic = [a for a, d in enumerate(out) if d is None]
    found = None
    for sample in ((2, 3) if symbolic else (1,)):
        negs: list[ir.Node] = []
        source = _sources(moved, negs, sample)
        if source is None or not negs or np.prod([d or sample for d in out]) > MAX_SIGNS:
            return None
        signs = _narrowed(_signs(source))
        if signs.ndim > len(out):
            return None
        lead = len(out) - signs.ndim
        if any(a >= lead and signs.shape[a - lead] != 1 for a in symbolic):
            return None
        if found is not None and ([id(n) for n in found[0]] != [id(n) for n in negs]
                                  or not np.array_equal(found[1], signs)):
            return None
        found = (negs, signs)
    return found


def _table(value: ir.Value | None) -> np.ndarray | None:
    """The content of a table computed from constants only (HF Flax gathers it by constant positions)."""
    arr = m.folded(value, MAX_TABLE)
    if arr is None:
        arr = _constants.evaluate(value)
    return None if arr is None or arr.size > MAX_TABLE else arr


# where a rotated value's elements come from: (op, dims, axis, parts), op "Neg" (negated), "" (as
# they are) or the mover (Concat: its parts along axis; Unsqueeze, Squeeze, Reshape: its one part)
_Source = tuple[str, list[int], int, list]


def _sources(value: ir.Value, negs: list[ir.Node], sample: int, depth: int = 0) -> _Source | None:
    """Where ``value``'s elements come from, through single-reader movers (no array made); the Negs
    found go in ``negs``; every symbolic size taken as ``sample``. None where a size is not known, or
    known only to shape inference."""
    named = dp.named_dims(value)
    if named is None:
        return None
    dims = [d if isinstance(d, int) else sample for d in named]
    node = value.producer()
    plain: _Source = ("", dims, 0, [])
    if node is None or node.domain not in ("", "ai.onnx") or depth > 32:
        return plain
    if len(m.live_uses(value)) != 1 or value.is_graph_output():
        return plain  # a value read elsewhere too keeps its numbers (dead readers other rules left aside)
    if node.op_type == "Neg":
        negs.append(node)
        return ("Neg", dims, 0, [])
    if node.op_type not in _MOVERS or len(node.outputs) != 1 or not node.inputs or node.inputs[0] is None:
        return plain
    found = len(negs)
    read = node.inputs if node.op_type == "Concat" else node.inputs[:1]
    parts = [_sources(v, negs, sample, depth + 1) if v is not None else None for v in read]
    axis = int(m.attr(node, "axis", 0)) if node.op_type == "Concat" else 0
    if any(p is None for p in parts) or not _fits([p[1] for p in parts], dims, node.op_type == "Concat", axis):
        del negs[found:]
        return plain
    return (node.op_type, dims, axis, parts)


def _fits(parts: list[list[int]], dims: list[int], concat: bool, axis: int) -> bool:
    """Whether parts of these shapes make a value of shape ``dims``: joined along ``axis``, or the
    one part holding as many elements."""
    if not concat:
        return int(np.prod(parts[0])) == int(np.prod(dims))
    if not -len(dims) <= axis < len(dims) or any(len(p) != len(dims) for p in parts):
        return False
    axis %= len(dims)
    rest = [d for a, d in enumerate(dims) if a != axis]
    return sum(p[axis] for p in parts) == dims[axis] and all(
        [d for a, d in enumerate(p) if a != axis] == rest for p in parts)


def _signs(source: _Source) -> np.ndarray:
    """The elements that come from a Neg (True), as a bool array of the value's shape."""
    op, dims, axis, parts = source
    if op in ("", "Neg"):
        return np.full(dims, op == "Neg")
    if op == "Concat":
        return np.concatenate([_signs(p) for p in parts], axis=axis)
    return _signs(parts[0]).reshape(dims)  # Unsqueeze, Squeeze and Reshape keep the row-major order


def _narrowed(signs: np.ndarray) -> np.ndarray:
    """``signs`` with every axis along which it does not change cut to size 1."""
    for axis in range(signs.ndim):
        first = np.take(signs, [0], axis=axis)
        if np.array_equal(np.broadcast_to(first, signs.shape), signs):
            signs = first
    return signs


def _spread(table: np.ndarray, out: list[int | None]) -> np.ndarray:
    """``table`` broadcast along the output's axes after its first non-1 axis (so the Mul broadcasts in
    long runs), when those axes have known sizes (None: a symbolic one) and that stays within
    ``MAX_TABLE`` elements; else ``table``."""
    rank = len(out)
    shape = [1] * (rank - table.ndim) + list(table.shape)
    if len(shape) != rank:
        return table
    first = next((i for i, d in enumerate(shape) if d != 1), rank)
    if any(d is None for d in out[first:]):
        return table
    full = shape[:first] + out[first:]
    if full == shape or int(np.prod(full)) > MAX_TABLE:
        return table
    return np.ascontiguousarray(np.broadcast_to(table.reshape(shape), full))


def _spread_partner(graph: ir.Graph, mul: ir.Node, named: list[int | str], out: list[int | None]) -> None:
    """The table of the Mul added to ``mul``'s result (``x * cos``) laid out the same way."""
    uses = list(mul.outputs[0].uses())
    if len(uses) != 1 or uses[0].node.op_type != "Add" or len(uses[0].node.inputs) != 2:
        return
    add = uses[0].node
    other = add.inputs[1 - uses[0].idx]
    partner = m.producer(other, "Mul")
    if partner is None or dp.named_dims(partner.outputs[0]) != named:
        return
    for k in (0, 1):
        table = partner.inputs[k]
        if table is None or dp.named_dims(partner.inputs[1 - k]) != named:
            continue
        arr = _table(table)
        if arr is None and table.dtype is not None and table.dtype.is_floating_point() and m.const(table) is None \
                and _small_beside(table, named):  # a run-time table, as the rotated Mul's
            expanded = _over_heads(graph, table, named, partner)
            if expanded is not table:
                partner.replace_input_with(k, expanded)
            return
        if arr is None or arr.dtype.kind != "f":
            continue
        spread = _spread(arr, out)
        if spread is not arr:
            partner.replace_input_with(k, m.new_initializer(graph, spread, "rotary_table"))
        return


def _over_heads(graph: ir.Graph, table: ir.Value, named: list[int | str], mul: ir.Node) -> ir.Value:
    """A run-time ``table`` (``[1, s, 1, d]``) expanded along the axes of known size after its first
    non-1 axis (the heads: ``[1, s, h, d]``) before ``mul``, so that the Muls by it broadcast along the
    leading axes only; the Expand, one per table and head count once the clean-up merges equal nodes,
    copies the same values. Only up to ``MAX_EXPANDED`` elements (a symbolic size counted as
    ``LENGTH``); ``table`` itself where nothing is to expand.

    The rotary step of q and k (two tables, ``[2, s, h, d]`` each, ORT alone, alternating, one process,
    load 1.2-1.6), expanded against broadcast, 1 thread / 2 threads: d 32, h 4, s 64: 0.71 / 0.71;
    d 64, h 4, s 64: 0.81 / 0.81; d 32, h 8, s 128: 0.67 / 0.67; d 128, h 4, s 64: 0.92 / 0.92; and past
    the limit, d 64, h 8, s 128: 1.00-1.02 / 1.16; d 32, h 8, s 256: 0.82 / 1.03 (the Muls then read
    the larger table from memory)."""
    dims = dp.named_dims(table)
    if dims is None or len(dims) != len(named):
        return table
    first = next((a for a, d in enumerate(dims) if d != 1), len(dims))
    target = [int(n) if a > first and d == 1 and isinstance(n, int) and n > 1 else 1
              for a, (d, n) in enumerate(zip(dims, named))]
    full = [t if t != 1 else d for t, d in zip(target, dims)]
    if all(t == 1 for t in target) or m.elements(full, LENGTH) > MAX_EXPANDED:
        return table
    expand = ir.node("Expand", [table, m.new_initializer(graph, np.array(target, np.int64), "rotary_heads")])
    expand.outputs[0].dtype = table.dtype
    graph.insert_before(mul, expand)
    return expand.outputs[0]
