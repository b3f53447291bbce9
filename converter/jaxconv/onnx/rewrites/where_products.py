"""A Where on a comparison of data, with a constant on one side, as a product by a 0/1 mask behind a guard.

ONNX Runtime's CPU Where is three passes: it selects X where the condition holds, Y where it does not,
then merges the two with a branch on each element (``x != 0 ? x : y``). Where the condition follows the
data (``x > 0`` over activations: a ReLU's gradient, a clip's, a max pool's pick) that branch is taken at
random and the Where costs 4-9 ns an element against 1.0-1.5 for a uniform condition and 0.3 for a Mul
([32, 28, 28, 16] float32, one thread). The merge also returns +0.0 where X holds -0.0.

With ``m = Cast(cond)`` (1.0 or 0.0) and a finite constant ``K`` other than -0.0,

    Where(cond, x, K) = x * m + z,    z = (m - 1) * -K  (K >= +0)   or   (1 - m) * K  (K < 0)

for every finite ``x``, bit for bit and signed zeros included: where ``m`` is 1, ``x * 1 + (-0.0)`` is
``x``; where it is 0, ``x * 0`` is a zero that ``+ K`` replaces by ``K`` (``+0.0`` for ``K = +0.0``).
A NaN or an infinity in ``x`` makes ``x * 0`` NaN, so the product runs behind

    If(IsNaN(s - s), then: Where(cond, x, K), else: x * m + z)     with s = ReduceSum(x)

as in ``mask_min``. ``Where(cond, K, x)`` is the same with ``Cast(Not(cond))``. Only conditions that
compare data (Greater, Less, GreaterOrEqual, LessOrEqual, or their Not, or an Xor with true) and tensors of at least
``MIN_ELEMENTS`` are taken: a uniform condition (a NaN test, a mask) keeps ORT's Where, which is
faster there, and below that size the If costs more than the Where (a ReLU's gradient ``x > 0`` over
random data, whole one-thread sessions on an Intel Xeon: 4,096 elements 10.5 us against 8.4 guarded,
8,192 24 against 10, 16,384 63 against 18, 32,768 131 against 28; an optax step's hidden layer of a
batch of 64 is 16,384). A symbolic dimension (a batch)
counts as ``SYMBOLIC_SIZE``.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m

MIN_ELEMENTS = 8192
SYMBOLIC_SIZE = 16  # a symbolic dimension's size when the tensor is weighed (thread_count's smaller record size)
_COMPARISONS = frozenset({"Greater", "Less", "GreaterOrEqual", "LessOrEqual"})
_FLOATS = {ir.DataType.FLOAT: np.float32, ir.DataType.DOUBLE: np.float64}


def rewrite(graph: ir.Graph) -> int:
    """Guard every data-driven float Where with a constant side in ``graph``; returns how many."""
    return sum(_one(graph, node) for node in m.each_node(graph, "Where"))


def data_comparison(cond: ir.Value | None) -> bool:
    """True when ``cond`` is a comparison of non-constant values (through Not), which follows the data."""
    node = m.unnegated(cond)[0].producer() if cond is not None else None
    if node is None or node.op_type not in _COMPARISONS or node.domain not in ("", "ai.onnx"):
        return False
    return any(m.const(v) is None for v in node.inputs)


def _fill(value: ir.Value | None) -> float | None:
    """The constant's one finite value other than -0.0 (through Reshapes and Unsqueezes of it), else None."""
    arr = m.repeated_const(value)
    if arr is None or arr.size != 1 or arr.dtype.kind != "f" or value is None or value.shape is None \
            or any(d != 1 for d in value.shape):
        return None
    k = float(arr.reshape(()))
    return k if math.isfinite(k) and not (k == 0.0 and math.copysign(1.0, k) < 0) else None


def _same_extent(shape: ir.Shape | None, result: ir.Shape) -> bool:
    """``shape`` has ``result``'s rank and its size on every axis whose sizes both know: the Where broadcasts it
    along no known axis (a mask of fewer axes follows a pattern, not the data, and keeps the Where). The
    products broadcast as the Where does, so an axis whose size is symbolic on either side is no error."""
    if shape is None or len(shape) != len(result):
        return False
    return all(not (isinstance(d, int) and isinstance(r, int)) or d == r for d, r in zip(shape, result))


def _one(graph: ir.Graph, where: ir.Node) -> int:
    if where.domain not in ("", "ai.onnx") or len(where.inputs) != 3:
        return 0
    cond, a, b = where.inputs
    k_second, k_first = _fill(b), _fill(a)
    if (k_second is None) == (k_first is None):
        return 0
    x, k = (a, k_second) if k_second is not None else (b, k_first)
    result = where.outputs[0]
    fill = a if k_first is not None else b
    if x is None or x.dtype not in _FLOATS or m.const(x) is not None or result.shape is None \
            or m.elements(result.shape, SYMBOLIC_SIZE) < MIN_ELEMENTS or not _same_extent(x.shape, result.shape) or cond is None \
            or not _same_extent(cond.shape, result.shape) or fill is None or fill.shape is None \
            or len(fill.shape) > len(result.shape) or not data_comparison(cond):
        return 0
    assert k is not None
    kind = _FLOATS[x.dtype]
    nodes = []
    keep = cond
    if k_first is not None:  # Where(cond, K, x): x where cond is false
        nodes.append(ir.node("Not", [cond]))
        keep = nodes[-1].outputs[0]
    nodes.append(ir.node("Cast", [keep], {"to": x.dtype.value}))
    mask = nodes[-1].outputs[0]
    one = m.new_initializer(graph, np.array(1, kind), "where_one")
    if k >= 0:  # (m - 1) * -K: -0.0 where m is 1, K where it is 0
        nodes.append(ir.node("Sub", [mask, one]))
        scale = m.new_initializer(graph, np.array(-k, kind), "where_neg_fill")
    else:  # (1 - m) * K
        nodes.append(ir.node("Sub", [one, mask]))
        scale = m.new_initializer(graph, np.array(k, kind), "where_fill")
    nodes.append(ir.node("Mul", [nodes[-1].outputs[0], scale]))
    offset = nodes[-1].outputs[0]
    nodes.append(ir.node("Mul", [x, mask]))
    nodes.append(ir.node("Add", [nodes[-1].outputs[0], offset]))
    test = m.non_finite_test(x)
    graph.insert_before(where, test)
    m.branch_on(graph, test[-1].outputs[0], result, [where], nodes, test[-1], ("where_exact", "where_products"))
    return 1
