"""An attention mask's ``Where(mask, x, f)`` with a huge negative fill ``f`` as ``Min(x, M)``, behind a
magnitude test.

ONNX Runtime's float Where is slow: on [8, 4, 128, 128] logits with a [128, 128] causal mask it
took 414 us against 172 us for a Min with the same broadcast (one thread). With ``M = Where(mask, +inf,
f)`` of the mask's (small) shape, ``Min(x, M)`` is ``x`` where the mask keeps (``min(x, +inf) = x``,
-0.0 and NaN included) and ``min(x, f)`` where it drops, which is ``f`` for every ``x`` above ``f``, but
not for a NaN (ORT's Min propagates it), nor below ``f`` (-inf under a -FLT_MAX fill). So

    If(Less(s, f * f), then: Min(x, M), else: Where(mask, x, f))     with s = ReduceSumSquare(x)

gives the Where's values everywhere: a float32 sum of squares is at least each square it adds (rounding
is monotone), so ``s < f * f`` bounds every ``|x|`` below ``|f|``; a NaN or an infinity makes ``s`` NaN or
inf and takes the exact branch (``f * f`` is +inf in float32 for ``|f| >= 1.85e19``: the test is then
finiteness). The sum of squares costs 68 us there (ReduceSum 86).

The fills masks use: -inf, ``finfo.min`` (Flax, Equinox), -0.7 * FLT_MAX (``jax.nn.dot_product_attention``,
as an Expand of the scalar, which the branches read as the scalar: no fill of the scores' size is made),
-1e30 (Haiku), -1e10 (Hugging Face LongT5), -1e9 and -1e4 (BERT-style code). A fill above ``MAX_FILL``
(-1e4) is left alone: the logits would rarely be bounded by it. On the benchmark transformer (4 causal
masks; one thread, one process, alternating, load 5.7-6.2) CPU per call 78.1 -> 76.8 ms; BERT's padding
masks gained nothing measurable (-0.7%).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _bounds, _input_guard
from jaxconv.onnx.rewrites import _constants as constants
from jaxconv.onnx.rewrites import _match as m

MAX_FILL = -1e4  # fills at or below read as a mask's (BERT-style code's -10000 is the highest in use)
BRANCHES = ("mask_where", "mask_min")  # the If's branches: the exact Where, the Min


def rewrite(graph: ir.Graph) -> int:
    """Put every float32 Where that fills with a mask's huge negative behind a magnitude test; returns how many."""
    masks: dict[tuple[int, bool, float], ir.Value] = {}
    return sum(_rewrite(graph, node, masks) for node in m.each_node(graph, "Where"))


def tested(value: ir.Value | None) -> ir.Value | None:
    """The test of the If this rule made ``value`` with: true only where the masked scores are NaN-free and
    above the fill (its Min branch runs then); None for a value made otherwise."""
    node = None if value is None else value.producer()
    then = None if node is None or node.op_type != "If" else node.attributes.get("then_branch")
    if then is None or then.type != ir.AttributeType.GRAPH or then.value.name != BRANCHES[1]:
        return None
    return node.inputs[0]


def _fill(value: ir.Value | None) -> float | None:
    """The one value the float32 constant ``value`` repeats (through Expand and the like), if a mask's fill."""
    arr = m.repeated_const(value)
    if arr is None or arr.size == 0 or arr.dtype != np.float32:
        return None
    f = float(arr.flat[0])
    return f if f <= MAX_FILL and bool(np.all(arr == f)) else None


def _one_choice(cond: ir.Value) -> bool:
    """Whether ``cond`` is computed from constants and one value everywhere (keras-hub's padding mask of
    ones): ``where_consts`` then drops the Where, which costs nothing."""
    arr = constants.evaluate(cond)
    return arr is not None and arr.dtype == np.bool_ and arr.size > 0 and bool(arr.all() or not arr.any())


def _square(f: float) -> np.ndarray:
    """``f * f`` as a float32 scalar, +inf where it overflows."""
    return np.array(f * f if f * f <= float(np.finfo(np.float32).max) else np.inf, np.float32)


def _const(graph: ir.Graph, arr: np.ndarray, before: ir.Node) -> ir.Value:
    node = ir.node("Constant", [], {"value": ir.tensor(arr)})
    graph.insert_before(before, node)
    return node.outputs[0]


def _rewrite(graph: ir.Graph, where: ir.Node, masks: dict[tuple[int, bool, float], ir.Value]) -> int:
    if len(where.inputs) != 3:
        return 0
    cond, a, b = where.inputs
    fill_second = _fill(b)
    fill_first = _fill(a) if fill_second is None else None
    if cond is None or (fill_first is None and fill_second is None) or _one_choice(cond):
        return 0
    x, fill_value = (a, b) if fill_second is not None else (b, a)
    fill = fill_second if fill_second is not None else fill_first
    result = where.outputs[0]
    if x is None or x.dtype != ir.DataType.FLOAT or m.const(x) is not None or x.shape is None \
            or result.shape is None or x.shape != result.shape:
        return 0
    keep_when_true = fill_second is not None  # Where(mask, x, f): the mask keeps x
    key = (id(cond), keep_when_true, fill)
    bound = masks.get(key)
    if bound is None or bound.producer() is None or bound.producer().graph is not graph:
        inf = _const(graph, np.array(np.inf, np.float32), where)
        f = _const(graph, np.array(fill, np.float32), where)
        node = ir.node("Where", [cond, inf, f] if keep_when_true else [cond, f, inf])
        graph.insert_before(where, node)
        bound = masks[key] = node.outputs[0]
    if getattr(m.const(fill_value), "size", 0) != 1:  # an Expand of it (or a folded copy): the scalar instead
        where.replace_input_with(2 if keep_when_true else 1, _const(graph, np.array(fill, np.float32), where))
    shared = _input_guard.shared_test(graph, x, lambda magnitude: magnitude < abs(fill), nan=True)
    if shared is not None:  # bounded inputs keep x NaN-free and above the fill
        test, after = _input_guard.anchored(graph, shared, [where])
    else:
        total = ir.node("ReduceSumSquare", [x], {"keepdims": 0})
        bounded = ir.node("Less", [total.outputs[0], _const(graph, _square(fill), where)])
        graph.insert_before(where, [total, bounded])
        test, after = bounded.outputs[0], bounded
    fast = ir.node("Min", [x, bound])
    branch = m.branch_on(graph, test, result, [where], fast, after, BRANCHES, exact_if=False).producer()
    assert branch is not None
    branch.meta[_bounds.SAME_AS] = where
    return 1
