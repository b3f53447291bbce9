"""A masked Softmax computed without subnormal exponentials: its input raised to ``max - 64`` where lower,
and the outputs there set to zero.

An attention mask puts a huge negative number (-inf, ``finfo.min``, -1e9) where a key is masked, and
``exp`` of it relative to the row's max underflows. ORT's exp (MLAS) clamps its input at -103.97 and
builds the result down into the subnormals, then sums and scales those subnormals: on an Intel CPU
each such operation takes a microcode assist. A causal ``[2, 4, 64, 64]`` Softmax took 102 us there
against 16 us with no masked place (one thread, Xeon with AVX-512); XLA's CPU code flushes
subnormals to zero and never pays that. So, with ``m`` the row's max and ``lo = m - 64``:

    y = Softmax(Max(x, lo)) * Cast(x >= lo)

Places at or above ``lo`` keep their exponentials; the places raised to ``lo`` add ``exp(-64)``
(1.6e-28) each to a sum of at least 1 (the max's own term), which no float32 sum of fewer than
2**40 of them can move, so the kept outputs have the same bits as before. The raised places give
0, which is ``jax.jit``'s value wherever ``x - m`` is below -87.3 (its exp underflows and XLA flushes
it: every masked place); between -87.3 and -64 jax.jit has at most 1.6e-28 there. Where the max is NaN
or infinite, or ``m - 64`` rounds to ``m`` (``|m| >= 2**31``: a row of fills), a guard raises nothing and
the row is ORT's Softmax as before; a NaN that ReduceMax skips (it does unless the NaN comes first) still
makes the row NaN: ORT's Max propagates it, and ``NaN * 0`` is NaN.

The three passes cost about what ORT's whole Softmax costs each (0.31 ns an element for the Max against
0.33 for the Softmax, [8, 4, 128, 128], one thread): nothing is saved on a CPU that handles subnormals at
full speed (an AMD EPYC), where the rule only costs. On the Intel CPU the penalty hardly depends on how
many places are masked, and it falls on the product by V too, whose left operand then holds subnormals:
``Softmax(x + mask) @ v`` on [2, 4, 64, 64], one thread, 49 us with nothing masked, 97-100 us with 1.6%
to 20% of the keys masked, 136 us with half; with the rule 83-88 us at every share (86 with none).

So it runs wherever a mask fills at least ``MIN_SHARE`` of the places whatever the inputs: a causal
mask, Swin's shifted windows (keras-hub Swin, ORT alone, one thread, 0.74x), and a causal mask combined
with a padding mask the model takes (keras-hub Falcon 0.88x): the places the padding fills are not known,
so a padding mask alone from the inputs leaves the Softmax as it is (the benchmark's Flax BERT took 1.06x
with the rule, its padding mask all ones).

Where the mask is read whole (a Where's fill, ``mask_min``'s Min, an additive constant of zeros and fills)
the zeros come from the mask itself: ``If(test, Softmax(...) * keep, Softmax(...) * Cast(x >= lo))`` with
``keep`` the mask's kept places as 0/1 (a constant, or cast once from the mask built at run time) and a test
that holds where the two agree on every masked place (``_zero_by_mask``). Two passes over the scores go
(the comparison and its Cast): 0.96-0.98x the ORT time of the zoo's small decoders, 0.98x the benchmark
transformer's.

keras zeroes the masked places again after its softmax (``where(mask, p, 0)``, or the Trilu ``tri_masks``
makes of it). Where every such reader drops at least the places the known mask drops, the fast branch's
product by the mask is work done twice: the fast branch gives the Softmax's output and the readers zero it
(``_rezeroing``; NaN rows included, as before). Where the reader drops exactly those places and the
fast branch cannot see a NaN (its test sums the scores' squares, or bounds show they hold none), the product's
zeros are the reader's and the reader moves into the compared branch instead. keras-hub decoders fed a padding
mask as an input, ORT alone: 0.95-0.96x (GPT-2, Gemma), Falcon 0.97x, Gemma 2 0.97x, Mixtral 0.99x, same bits.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import onnx_ir as ir

from jaxconv.onnx import thread_count
from jaxconv.onnx.rewrites import _bounds, _input_guard, _rezeroing, mask_min
from jaxconv.onnx.rewrites import _constants as constants
from jaxconv.onnx.rewrites import _dim_products as dp
from jaxconv.onnx.rewrites import _intervals as intervals
from jaxconv.onnx.rewrites import _match as m

FLOOR = -64.0  # below the row's max: exp(FLOOR) over a row's sum is a normal float32 up to 10**10 places
MIN_SHARE = 0.01  # of the places masked whatever the inputs: a causal mask's 0.5, Swin's 0.23 (the first stage)
SYMBOLIC_SIZE = thread_count.RECORD_SIZES[-1]  # a symbolic length where a mask is built at run time (128:
# a causal mask fills 127/256); the size a model's thread record weighs it at
_FILL = 87.0  # |c| at or above which a constant near the Softmax reads as a mask's fill
_DEPTH = 4
_THROUGH = frozenset({"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Expand", "Cast", "Trilu"})


def rewrite(graph: ir.Graph) -> int:
    """Rewrite every masked float32 Softmax in ``graph`` and its subgraphs; returns how many."""
    return m.count_everywhere(graph, "Softmax", _one)


def _filled(value: ir.Value | None, sign: int) -> np.ndarray:
    """Where ``value`` is at or below -87 whatever the inputs (``sign`` -1: at or above 87, a subtrahend)."""
    lo, hi = intervals.evaluate(value, SYMBOLIC_SIZE)
    return hi <= -_FILL if sign > 0 else lo >= _FILL


def _masked_share(value: ir.Value | None, sign: int = 1, depth: int = 0) -> float:
    """The share of ``value``'s places that a mask fills whatever the inputs, within a few ops: a value at
    or below -87 added or taken as the min, one chosen by a Where where its condition picks it (at or above
    87 where it is subtracted); 0 where no such mask is found.

    A mask computed from constants (a causal triangle, Swin's shifted windows, a padding mask of ones) is
    evaluated, so an attention over every key counts 0; so is one combined with the inputs (a causal mask
    and a padding mask the model takes): its causal places count, its padding places do not, as for a
    padding mask alone: how much of it is filled is not known. A mask built at run time over a symbolic length
    (``Shape``, ``Range``) is counted with that length at ``SYMBOLIC_SIZE``: a causal mask's (n - 1) / 2n."""
    node = m.producer(value)
    if node is None or depth > _DEPTH:
        return 0.0
    op = node.op_type
    if op in _THROUGH:
        return _masked_share(node.inputs[0], sign, depth + 1)
    if op == "If":
        return max((_masked_share(out, sign, depth + 1) for branch in _branches(node) for out in branch.outputs),
                   default=0.0)
    if op == "Where" and len(node.inputs) == 3:
        lo, hi = intervals.evaluate(node.inputs[0], SYMBOLIC_SIZE)
        places, shares = np.zeros((), bool), []
        for operand, chosen in ((node.inputs[1], lo >= 1), (node.inputs[2], hi <= 0)):
            filled = _filled(operand, sign)
            if filled.any():
                places = places | (chosen & filled)
            elif chosen.any():
                shares.append(_masked_share(operand, sign, depth + 1))
        return max([float(np.mean(places)), *shares])
    if op in ("Add", "Sum", "Min", "Mul"):
        return max((_operand_share(v, sign, depth, count_fill=op != "Mul") for v in node.inputs), default=0.0)
    if op == "Sub" and len(node.inputs) == 2:
        return max(_operand_share(node.inputs[0], sign, depth), _operand_share(node.inputs[1], -sign, depth))
    return 0.0


def _operand_share(value: ir.Value | None, sign: int, depth: int, count_fill: bool = True) -> float:
    if value is None:
        return 0.0
    filled = _filled(value, sign) if count_fill else np.zeros((), bool)
    if filled.any():
        return float(np.mean(filled))
    return _masked_share(value, sign, depth + 1)


def _one(graph: ir.Graph, softmax: ir.Node) -> int:
    x = softmax.inputs[0] if softmax.inputs else None
    rank = m.rank(x)
    if x is None or x.dtype != ir.DataType.FLOAT or rank is None or rank == 0 \
            or _masked_share(x) < MIN_SHARE:
        return 0
    axis = int(m.attr(softmax, "axis", -1)) % rank
    axes = m.new_initializer(graph, np.array([axis], np.int64), "masked_softmax_axis")
    floor = m.new_initializer(graph, np.array(FLOOR, np.float32), "masked_softmax_floor")
    lowest = m.new_initializer(graph, np.array(-np.inf, np.float32), "masked_softmax_none")
    top = ir.node("ReduceMax", [x, axes], {"keepdims": 1})
    shifted = ir.node("Add", [top.outputs[0], floor])
    # where m - 64 rounds to m (|m| >= 2**31: a row of fills only), or m is NaN or infinite: raise nothing
    below = ir.node("Less", [shifted.outputs[0], top.outputs[0]])
    lo = ir.node("Where", [below.outputs[0], shifted.outputs[0], lowest])
    raised = ir.node("Max", [x, lo.outputs[0]])
    kept = ir.node("GreaterOrEqual", [x, lo.outputs[0]])
    ones = ir.node("Cast", [kept.outputs[0]], {"to": ir.DataType.FLOAT})
    new_softmax = ir.node("Softmax", [raised.outputs[0]], {"axis": axis})
    zeroed = ir.node("Mul", [new_softmax.outputs[0], ones.outputs[0]])
    # shapes where x's is known: scalar_ranks (after this rule) gives the scalars the row max's rank
    row_shape = None if x.shape is None else ir.Shape([1 if k == axis else d for k, d in enumerate(x.shape)])
    f32, boolean = ir.TensorType(ir.DataType.FLOAT), ir.TensorType(ir.DataType.BOOL)
    # named: onnx_ir names unnamed values per graph, and inside an If's branch they could meet the outer ones
    base = softmax.outputs[0].name or f"softmax_{id(softmax)}"
    for node, kind, shape in ((top, f32, row_shape), (shifted, f32, row_shape), (below, boolean, row_shape),
                              (lo, f32, row_shape), (raised, f32, x.shape), (kept, boolean, x.shape),
                              (ones, f32, x.shape), (new_softmax, f32, x.shape)):
        node.outputs[0].type = kind
        node.outputs[0].shape = shape
        node.outputs[0].name = f"{base}_masked_{node.op_type}"  # one node of each type
    new_nodes = [top, shifted, below, lo, raised, kept, ones, new_softmax, zeroed]
    m.replace(graph, softmax.outputs[0], new_nodes, softmax)
    graph.remove(softmax, safe=True)
    known = _known_mask(graph, x, axis)
    if known is not None:
        _zero_by_mask(graph, known, lo, new_softmax, [kept, ones, zeroed], base, mask_min.tested(x))
    return 1


class _KnownMask(NamedTuple):
    """Where a Softmax input's mask keeps its places (``open``: a bool array, or a bool value of the graph,
    true where masked instead with ``negated``; either broadcasts to the input) and the test under which
    the compared form's zeros are exactly its masked places: every row's ``lo`` above ``fill`` (a Where's
    or a Min's fill: every masked place at or below it), or ``ReduceSumSquare(scores) < bound ** 2`` (an
    additive mask)."""

    open: np.ndarray | ir.Value
    negated: bool  # ``open`` a value that is true where the places are masked
    fill: float | None
    scores: ir.Value | None
    bound: float | None
    row_floor: float | None = None  # also every row's ``lo`` above it (an additive mask built at run time)


def _known_mask(graph: ir.Graph, x: ir.Value, axis: int) -> _KnownMask | None:
    """How ``x`` masks its places, where its masked places are bounded by a constant whatever the inputs:
    ``Where(keep, s, f)`` (or ``Where(drop, f, s)``), ``mask_min``'s ``If`` between that Where and
    ``Min(s, Where(keep, +inf, f))``, or ``s + b`` with ``b`` a constant of zeros and fills at or below
    ``mask_min.MAX_FILL`` with a zero in every row; None otherwise. A keep mask computed at run time is cast
    once: a pass over the mask (at most ``x``'s size, often a batch's or a head's share) for the two over ``x``
    the comparison takes."""
    node = m.producer(x)
    if node is None or node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "If":
        return _min_branch_mask(node, x)
    if node.op_type == "Where":
        found = _where_mask(node)
        return None if found is None else _kept(found[0], found[2], x)
    if node.op_type == "Add" and len(node.inputs) == 2 and all(v is not None for v in node.inputs):
        for k in (0, 1):
            if m.const(node.inputs[1 - k]) is not None:
                continue
            bias = m.folded(node.inputs[k])
            if bias is None:
                bias = constants.evaluate(node.inputs[k])
            if bias is not None:
                return _additive(bias, node.inputs[1 - k], x, axis) if bias.dtype == np.float32 else None
            found = _where_mask(m.producer(node.inputs[k], "Where"), zero_data=True)
            if found is not None:  # built at run time: zeros where kept, the fill where masked
                kept = _kept(found[0], found[2], x)
                if kept is not None:
                    return kept._replace(fill=None, scores=node.inputs[1 - k], bound=_bound(found[2]),
                                         row_floor=found[2] / 2)
    return None


def _bound(fill: float) -> float:
    """The scores' bound under an additive mask of fill ``fill`` (see ``_zero_by_mask``)."""
    return min(2.0 ** 30, -fill / 8)


def _where_mask(where: ir.Node | None, zero_data: bool = False) -> tuple[ir.Value, ir.Value, float] | None:
    """(the keep mask, the data, the fill) of ``Where(keep, data, fill)``, or of ``Where(drop, fill, data)``
    with the mask ``_Negated(drop)``, for a float32 fill at or below -87 that is the same everywhere; with
    ``zero_data``, the data a constant of zeros (an additive mask's), at or below ``mask_min.MAX_FILL``."""
    if where is None or len(where.inputs) != 3 or any(v is None for v in where.inputs):
        return None
    cond, a, b = where.inputs
    for data, fill_value, keep in ((a, b, True), (b, a, False)):
        arr = m.repeated_const(fill_value)
        zeros = m.repeated_const(data)
        if arr is None or arr.size == 0 or arr.dtype != np.float32:
            continue
        if zero_data != (zeros is not None) or (zero_data and not (zeros.size and np.all(zeros == 0))):
            continue
        fill = float(arr.flat[0])
        if fill <= (mask_min.MAX_FILL if zero_data else -_FILL) and bool(np.all(arr == fill)):
            return (cond if keep else _Negated(cond), data, fill)  # type: ignore[return-value]
    return None


class _Negated(NamedTuple):
    """A drop mask: the places kept are where it is false."""

    cond: ir.Value


def _min_branch_mask(node: ir.Node, x: ir.Value) -> _KnownMask | None:
    """The mask of ``mask_min``'s If (``Min(s, bound)`` where a magnitude test holds, the exact Where
    else; both at or below the fill where the mask drops), read from its ``bound``: ``+inf`` where the
    mask keeps, the fill where it drops (a constant, or ``Where(keep, +inf, f)`` computed at run time)."""
    branches = {branch.name: branch for branch in _branches(node)}
    if set(branches) != set(mask_min.BRANCHES):
        return None
    fast = branches[mask_min.BRANCHES[1]]
    mins = fast.outputs[0].producer() if len(fast.outputs) == 1 else None
    if mins is None or mins.op_type != "Min" or len(mins.inputs) != 2 or any(v is None for v in mins.inputs):
        return None
    for bound in mins.inputs:
        values = constants.evaluate(bound)
        if values is not None:
            if values.dtype != np.float32:
                continue
            keep = values == np.inf
            dropped = values[~keep]
            if dropped.size and not np.isnan(dropped).any() and float(dropped.max()) <= -_FILL:
                return _kept(keep, float(dropped.max()), x)
            continue
        where = m.producer(bound, "Where")
        if where is None or len(where.inputs) != 3 or any(v is None for v in where.inputs):
            continue
        cond, a, b = where.inputs
        for inf_at, fill_at, keep_value in ((a, b, cond), (b, a, _Negated(cond))):
            inf, fill = m.repeated_const(inf_at), m.repeated_const(fill_at)
            if inf is not None and fill is not None and inf.size == 1 and fill.size == 1 \
                    and float(inf.flat[0]) == np.inf and float(fill.flat[0]) <= -_FILL:
                return _kept(keep_value, float(fill.flat[0]), x)
    return None


def _kept(keep: ir.Value | _Negated | np.ndarray, fill: float, x: ir.Value) -> _KnownMask | None:
    """The keep mask ``keep`` (a drop mask where ``_Negated``), as an array where it is computed from
    constants, else as the graph's value (no larger than ``x``, into which it broadcasts)."""
    if isinstance(keep, np.ndarray):
        return _KnownMask(keep, False, fill, None, None)
    cond = keep.cond if isinstance(keep, _Negated) else keep
    arr = constants.evaluate(cond)
    if arr is not None:
        if arr.dtype != np.bool_:
            return None
        return _KnownMask(~arr if isinstance(keep, _Negated) else arr, False, fill, None, None)
    dims, out = _sample_shape(cond), _sample_shape(x)
    if cond.dtype != ir.DataType.BOOL or dims is None or out is None or math.prod(dims) > math.prod(out):
        return None
    return _KnownMask(cond, isinstance(keep, _Negated), fill, None, None)


_ELEMENTWISE = frozenset({"And", "Or", "Xor", "Not", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
                          "Cast", "Where", "Min", "Max", "Add", "Sub", "Mul"})


def _sample_shape(value: ir.Value | None, depth: int = 0) -> tuple[int, ...] | None:
    """``value``'s shape with every symbolic size at ``SYMBOLIC_SIZE``; where a rule left it unset, the
    broadcast of its elementwise producer's operands' (a mask's logic)."""
    if value is None or depth > _DEPTH + 2:
        return None
    named = dp.named_dims(value)
    if named is not None:
        return tuple(d if isinstance(d, int) else SYMBOLIC_SIZE for d in named)
    node = value.producer()
    if node is None or node.op_type not in _ELEMENTWISE or node.domain not in ("", "ai.onnx"):
        return None
    shapes = [_sample_shape(v, depth + 1) for v in node.inputs]
    if any(shape is None for shape in shapes):
        return None
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


def _additive(bias: np.ndarray, scores: ir.Value, x: ir.Value, axis: int) -> _KnownMask | None:
    """An additive mask of zeros and fills: every row along ``axis`` keeps a place; the scores' bound
    keeps every masked place more than 88 below its row's max (see ``_zero_by_mask``)."""
    open_ = bias == 0
    masked = bias[~open_]
    rank = m.rank(x)
    if masked.size == 0 or rank is None or bias.ndim > rank or np.isnan(masked).any():
        return None
    fill = float(masked.max())
    if fill > mask_min.MAX_FILL:
        return None
    rows = open_.reshape((1,) * (rank - bias.ndim) + open_.shape)
    if not rows.any(axis=axis).all():
        return None  # a row masked everywhere: jax.jit's softmax spreads it, not zeros
    return _KnownMask(open_, False, None, scores, _bound(fill))


def _zero_by_mask(graph: ir.Graph, known: _KnownMask, lo: ir.Node, softmax: ir.Node, compared: list[ir.Node],
                  base: str, finite: ir.Value | None) -> None:
    """The masked Softmax's zeros taken from the mask itself where a test shows they are the places
    the comparison zeroes, and the comparison's nodes (``compared``) run only where it does not.

    With ``fill`` (a Where's or ``mask_min``'s Min: every masked place of ``x`` at or below it), the test is
    that every row's ``lo`` lies above the fill: the masked places are then raised and compared as zeros,
    and a row with a NaN or infinite max (``lo`` is -inf there), or one with nothing kept, fails it. With an
    additive mask (``x = s + b``, ``b`` zeros and fills at or below ``f``), the test is ``sum(s**2) <
    bound**2`` for ``bound = min(2**30, -f / 8)``: every ``|s|`` is then at most the bound (a float32 sum of
    squares is at least each square), every row keeps a place at or above ``-bound``, and its masked places
    lie at most ``f + bound``, more than 88 below the row's max (``3 f / 4``): the compared form's zeros and
    jax.jit's (its exp flushed) there; a NaN or an infinity makes the test false. Scores bounded below the
    bound whatever the inputs (``_bounds``: a model of token ids) need no test: the product by the mask runs
    alone. An additive mask built at
    run time (``Where(keep, 0, f)``) is not known to keep a place in every row: the test also asks every
    row's ``lo`` above ``f / 2``, which a row that keeps a place passes (its max at least ``-bound``, ``lo`` at
    least ``f / 8 - 65``) and one that keeps none fails (every place at most ``f + bound = 7 f / 8``).

    Where the test holds, the kept places are the mask's and the outputs there are the compared form's bits,
    except at a kept place more than 64 below its row's max: raised to ``max - 64`` as before, it gives
    ``exp(-64) / sum`` (at most 1.6e-28; jax.jit between 0 and that) instead of 0. ``[4, 8, 128, 128]``
    causal, one thread (two): the Softmax with its mask and zeros 1161 -> 896 us (1058 -> 839) behind a
    Where's fill, 1119 -> 919 (973 -> 802) behind an additive one."""
    open_ = known.open
    if isinstance(open_, np.ndarray):
        ones = m.new_initializer(graph, open_.astype(np.float32), "masked_softmax_open")
    else:  # cast once (the clean-up merges the Casts of one mask)
        made = []
        if known.negated:
            made.append(ir.node("Not", [open_]))
            made[-1].outputs[0].type = ir.TensorType(ir.DataType.BOOL)
            open_ = made[-1].outputs[0]
        made.append(ir.node("Cast", [open_], {"to": ir.DataType.FLOAT}))
        made[-1].outputs[0].type = ir.TensorType(ir.DataType.FLOAT)
        for node in made:
            node.outputs[0].shape = known.open.shape
            node.outputs[0].name = f"{base}_masked_open_{node.op_type}"
        graph.insert_before(compared[0], made)
        ones = made[-1].outputs[0]
    tests: list[ir.Node] = []  # scalars before the If, its test the last one's (or the inputs' test)
    own_test = False  # the If's test sums the squares of the scores (a NaN among them fails it)
    if known.fill is not None:
        low = ir.node("ReduceMin", [lo.outputs[0]], {"keepdims": 0})
        tests += [low, ir.node("Greater", [low.outputs[0], m.new_initializer(
            graph, np.array(known.fill, np.float32), "masked_softmax_fill")])]
        test = tests[-1].outputs[0]
    else:
        assert known.scores is not None and known.bound is not None
        bound = known.bound
        bounded = _bounds.magnitude(known.scores) <= bound  # whatever the inputs (a model of token ids)
        if bounded and known.row_floor is None:  # no test: the product by the mask alone
            fast = ir.node("Mul", [softmax.outputs[0], ones])
            m.replace(graph, compared[-1].outputs[0], fast, compared[0])
            for node in reversed(compared):
                graph.remove(node, safe=True)
            _rezeroing.fold(graph, fast, known, None, _bounds.nan_free(known.scores, {}))
            return
        shared = None if bounded else _input_guard.shared_test(graph, known.scores, lambda size: size <= bound)
        found: ir.Value | None = shared  # the scores' test, None where they are bounded whatever the inputs
        own_test = not bounded and shared is None
        if own_test:
            total = ir.node("ReduceSumSquare", [known.scores], {"keepdims": 0})
            tests += [total, ir.node("Less", [total.outputs[0], m.new_initializer(
                graph, np.array(bound * bound, np.float32), "masked_softmax_bound")])]
            found = tests[-1].outputs[0]
        if known.row_floor is not None:
            row_low = ir.node("ReduceMin", [lo.outputs[0]], {"keepdims": 0})
            kept = ir.node("Greater", [row_low.outputs[0], m.new_initializer(
                graph, np.array(known.row_floor, np.float32), "masked_softmax_row_floor")])
            tests += [row_low, kept] + ([ir.node("And", [found, kept.outputs[0]])] if found is not None else [])
            found = tests[-1].outputs[0]
        assert found is not None
        test = found
    for k, node in enumerate(tests):
        f32 = node.op_type.startswith("Reduce")
        node.outputs[0].type = ir.TensorType(ir.DataType.FLOAT if f32 else ir.DataType.BOOL)
        node.outputs[0].shape = ir.Shape([])
        node.outputs[0].name = f"{base}_masked_test_{k}"
    graph.insert_after(softmax, tests)
    fast = ir.node("Mul", [softmax.outputs[0], ones])
    fast.outputs[0].name = f"{base}_masked_by_mask"
    # the fast branch runs on scores that hold no NaN: its test sums their squares, or the inputs' test (or
    # nothing) bounds them and they cannot be NaN then
    nan_safe = known.fill is None and (own_test or _input_guard.nan_free_when_tested(graph, known.scores))
    out = m.branch_on(graph, test, compared[-1].outputs[0], compared, fast, tests[-1] if tests else softmax,
                      ("masked_softmax_compared", "masked_softmax_by_mask"), exact_if=False)
    # ``finite``: behind mask_min's If, its test shows the scores NaN-free (the row test alone lets a NaN through)
    _rezeroing.fold(graph, fast, known, compared[-1], nan_safe, out, finite)


def _branches(node: ir.Node) -> list[ir.Graph]:
    return [a.value for a in node.attributes.values() if a.type == ir.AttributeType.GRAPH]
