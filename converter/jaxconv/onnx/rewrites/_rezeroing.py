"""masked_softmax's readers that zero the masked places again, folded with the zero-by-mask If's product.

keras zeroes an attention's masked places again after its softmax (``where(mask, p, 0)``, or the Trilu
``tri_masks`` makes of it); ``masked_softmax._zero_by_mask`` has multiplied them by the mask on its fast branch
already. ``fold`` takes one of the two off the path (see its docstring); masked_softmax calls it with the mask
it knows (``masked_softmax._KnownMask``: ``open`` the kept places, a bool array or a value of the graph, true
where dropped with ``negated``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _constants as constants
from jaxconv.onnx.rewrites import _match as m

if TYPE_CHECKING:
    from jaxconv.onnx.rewrites.masked_softmax import _KnownMask as KnownMask

_NEGATIONS = 4  # Nots (or Xors with true) looked through on a mask


def fold(graph: ir.Graph, fast: ir.Node, known: KnownMask, exact: ir.Node | None, nan_safe: bool,
         out: ir.Value | None = None, finite: ir.Value | None = None) -> None:
    """The readers of the masked Softmax that zero its masked places again (keras' ``where(mask, p, 0)``
    after its softmax, or the Trilu ``tri_masks`` made of it), and the product by the mask (``fast``), which
    then does the same work twice.

    ``Where(keep, p, +0)``, ``Where(drop, +0, p)`` or ``Trilu(p)`` writes +0 where its mask drops and ``p``
    elsewhere. Where every reader of the result (``out``, the If's; else ``fast``'s) drops at least the
    places the known mask drops (the same value of the graph, or constant masks compared place by place),
    the product by the mask changes nothing they pass on: ``fast`` goes, and the readers zero the Softmax's
    own output. Where a reader drops exactly those places and the scores cannot hold a NaN on the product's
    path (``nan_safe``: the If's test sums their squares, or bounds show it), the product's zeros are
    already its zeros (``Softmax(...) * 0`` is +0 there) and the reader goes instead: it moves into the
    compared branch (``exact``, that branch's last node), which keeps its own zeros, or is dropped with no
    If. A NaN row takes the reader's zeros at its masked places either way, as in jax.jit.

    ``finite``, a test true only where the scores hold no NaN (``mask_min``'s, behind whose If the Softmax
    reads them), joins the If's test where the reader is a Where: the fast branch then never sees a NaN and
    the Where (ORT's, 3-4x a Mul's time) moves into the compared branch. A Trilu stays where it is (ORT's is
    as fast as the product; the extra test would cost more than it saves)."""
    result = out if out is not None else fast.outputs[0]
    uses = [use for use in result.uses()]
    if not uses or result.is_graph_output():
        return
    shape = result.shape
    static = tuple(int(d) for d in shape) if shape is not None and all(isinstance(d, int) for d in shape) else None
    covers = [_rezeroes(use.node, use.idx, known, static) for use in uses]
    if not all(c is not None and c[0] for c in covers):
        return
    reader = uses[0].node
    movable = len(uses) == 1 and covers[0] is not None and covers[0][1] and not reader.outputs[0].is_graph_output()
    if movable and not nan_safe and finite is not None and reader.op_type == "Where" and out is not None:
        nan_safe = _also_test(graph, out, finite)
    if nan_safe and movable:
        if exact is not None:  # the same zeroing on the compared branch's result, inside its branch
            (moved,) = m.clone([reader], {id(result): exact.outputs[0]})
            moved.outputs[0].name = f"{result.name or 'masked_softmax'}_rezeroed"
            exact.graph.append(moved)
            exact.graph.outputs[0] = moved.outputs[0]
        reader.outputs[0].replace_all_uses_with(result)
        graph.remove(reader, safe=True)
        if exact is not None:  # the branch may read a mask made after the If: the If moves down to it
            graph.sort()
        return
    softmax = fast.inputs[0]
    assert softmax is not None
    if out is None:  # no If: the readers read the Softmax
        fast.outputs[0].replace_all_uses_with(softmax)
        graph.remove(fast, safe=True)
        return
    branch = fast.graph  # each branch computes the Softmax itself: the fast one gives it as it is
    node = softmax.producer()
    assert branch is not None and exact is not None and node is not None
    own = _copy_into(branch, node, fast)
    branch.outputs[0] = own
    branch.remove(fast, safe=True)
    inside = [use for use in softmax.uses() if use.node.graph is exact.graph]
    first = next(n for n in exact.graph if any(v is softmax for v in n.inputs))
    mine = _copy_into(exact.graph, node, first)
    for use in inside:
        use.node.replace_input_with(use.idx, mine)
    if not softmax.uses():
        graph.remove(node, safe=True)


def _also_test(graph: ir.Graph, out: ir.Value, finite: ir.Value) -> bool:
    """The If that gives ``out`` runs its fast branch only where ``finite`` holds too; whether it was changed."""
    branch = out.producer()
    if branch is None or branch.op_type != "If" or branch.inputs[0] is None:
        return False
    both = ir.node("And", [branch.inputs[0], finite])
    both.outputs[0].type, both.outputs[0].shape = ir.TensorType(ir.DataType.BOOL), ir.Shape([])
    both.outputs[0].name = f"{out.name or 'masked_softmax'}_finite_test"
    graph.insert_before(branch, both)
    branch.replace_input_with(0, both.outputs[0])
    return True


def _copy_into(branch: ir.Graph, node: ir.Node, before: ir.Node) -> ir.Value:
    """A copy of the one-output ``node`` (of the graph around ``branch``) in ``branch``, before ``before``."""
    (copy,) = m.clone([node], {})
    copy.outputs[0].name = f"{node.outputs[0].name or 'masked_softmax'}_{branch.name or 'branch'}"
    branch.insert_before(before, copy)
    return copy.outputs[0]


def _rezeroes(reader: ir.Node, idx: int, known: KnownMask,
              static: tuple[int, ...] | None) -> tuple[bool, bool] | None:
    """For a reader of the zeroed probabilities (at input ``idx``) that writes +0 where a mask drops and
    passes them through elsewhere: (it drops every place ``known`` drops, it drops no other place); None
    for any other reader."""
    if reader.domain not in ("", "ai.onnx") or len(reader.outputs) != 1:
        return None
    if reader.op_type == "Trilu" and idx == 0:
        k, last = _diagonal(reader), _last_two(reader.inputs[0])
        if k is None or last is None or not isinstance(known.open, np.ndarray):
            return None
        keep = np.ones(last, bool)
        keep = np.triu(keep, k) if int(m.attr(reader, "upper", 1)) else np.tril(keep, k)
        try:  # the triangle is the same in every leading place, whatever their sizes (a symbolic batch)
            shape = np.broadcast_shapes(known.open.shape, last)
        except ValueError:
            return None
        return _compare(known.open, keep, shape)
    if reader.op_type != "Where" or len(reader.inputs) != 3 or idx == 0:
        return None
    zero = m.repeated_const(reader.inputs[3 - idx])
    if zero is None or zero.size == 0 or zero.dtype != np.float32 or np.any(zero != 0) or np.any(np.signbit(zero)):
        return None
    cond, keeps = reader.inputs[0], idx == 1  # Where(keep, p, 0) keeps where true; Where(drop, 0, p) where false
    if isinstance(known.open, np.ndarray):
        arr = constants.evaluate(cond)
        if arr is None or arr.dtype != np.bool_ or static is None:
            return None
        return _compare(known.open, arr if keeps else ~arr, static)
    (reader_mask, reader_flips), (mask, flips) = (m.unnegated(v, _NEGATIONS) for v in (cond, known.open))
    # the reader keeps where ``reader_mask`` is true when this is 0, the known mask where ``mask`` is
    same = m.same_value(reader_mask, mask) and reader_flips ^ (not keeps) == flips ^ known.negated
    return (True, True) if same else None


def _last_two(value: ir.Value | None) -> tuple[int, int] | None:
    """The sizes of ``value``'s last two axes, where both are known."""
    shape = None if value is None else value.shape
    if shape is None or len(shape) < 2 or not all(isinstance(d, int) for d in shape[-2:]):
        return None
    return int(shape[-2]), int(shape[-1])


def _diagonal(trilu: ir.Node) -> int | None:
    """A Trilu's diagonal ``k``: 0 without its input, the constant's value, or None where it is not known."""
    if len(trilu.inputs) < 2 or trilu.inputs[1] is None:
        return 0
    k = constants.evaluate(trilu.inputs[1])
    return int(k.reshape(())) if k is not None and k.size == 1 and k.dtype == np.int64 else None


def _compare(open_: np.ndarray, keep: np.ndarray, shape: tuple[int, ...]) -> tuple[bool, bool] | None:
    """(``keep`` keeps no place ``open_`` drops, ``keep`` keeps every place ``open_`` keeps), both broadcast
    to ``shape``; None where they do not broadcast."""
    try:
        a, b = np.broadcast_to(open_, shape), np.broadcast_to(keep, shape)
    except ValueError:
        return None
    return bool(np.all(a | ~b)), bool(np.all(b | ~a))
