"""Bounds on the magnitude of a graph's values, where its inputs bound them: a rule that guards an op against
overflow (``keras_norm``'s If) needs no guard where no element can come near it.

A model that takes token ids looks them up in a constant table: every float value after that is a chain of
ops on bounded operands. ``magnitude(value)`` is a number ``B`` such that every element of ``value``, whatever
the inputs, is NaN or at most ``B`` in magnitude (never an infinity); ``math.inf`` where nothing bounds it (a
float input, an op not known here, a division by a computed value, a square root, a loop). NaN is let through
because it stays NaN (jnp.take's fill for an id out of range, and every row attention mixes it into): an op
of NaN-or-bounded operands gives NaN or a bounded value, and no infinity unless a bound overflows, which
gives no bound. Each op's bound follows from its operands': integers are finite (a cast of int32 is at most
2**31), constants their largest magnitude, sums add, products multiply, a product by a constant matrix grows
by its largest column sum of magnitudes, a Conv by its largest kernel sum (plus its bias); tanh, erf, sin,
cos, sigmoid and softmax are at most 1 and a layer norm at most ``sqrt(n) * |gamma| + |beta|`` whatever their
operands; GELU and ReLU at most their operand. Each
arithmetic step multiplies its bound by ``ROUNDING`` so that float32 rounding (relative 2**-24 a term) stays
inside it.
"""

from __future__ import annotations

import math
from typing import Callable, Iterator

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _constants as constants
from jaxconv.onnx.rewrites import _match as m

ROUNDING = 1.01  # a step's bound over its exact value: float32 sums of up to ~10**5 terms round within it
_INT_BOUNDS = {ir.DataType.BOOL: 1.0, ir.DataType.INT8: 2.0 ** 7, ir.DataType.UINT8: 2.0 ** 8,
               ir.DataType.INT16: 2.0 ** 15, ir.DataType.UINT16: 2.0 ** 16, ir.DataType.INT32: 2.0 ** 31,
               ir.DataType.UINT32: 2.0 ** 32, ir.DataType.INT64: 2.0 ** 63, ir.DataType.UINT64: 2.0 ** 64}
_FLOATS = (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
_SAME = frozenset({"Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Slice", "Split", "Expand",
                   "Tile", "Flatten", "Neg", "Abs", "Relu", "Gelu", "HardSwish", "ReduceMax", "ReduceMin",
                   "MaxPool", "GlobalMaxPool", "DepthToSpace", "SpaceToDepth", "Dropout", "Gather",
                   "GatherElements", "GatherND"})
_AVERAGES = frozenset({"ReduceMean", "AveragePool", "GlobalAveragePool", "Mean"})  # a rounded sum, divided
_AT_MOST_ONE = frozenset({"Tanh", "Sigmoid", "Erf", "Sin", "Cos", "Softmax", "HardSigmoid", "Sign"})
_LARGEST = frozenset({"Concat", "Max", "Min"})

# id of a value -> (the value, its bound); holding the value keeps its id from being reused by a rule's new
# value once a rewrite drops it
Memo = dict[int, tuple[ir.Value, float]]

# an If's node.meta: a node of one of its branches that computes the If's output from the outer graph's values
# (a guard's fast op: both branches give the same values), so that bounds and NaN read through the If
SAME_AS = "jaxconv.same_as"


def reads(node: ir.Node) -> ir.Node:
    """The node whose inputs ``node`` computes its output from: a guard's If (``SAME_AS``) its fast op, which
    reads the outer values its branches read; any other node itself."""
    return node.meta.get(SAME_AS, node) if node.op_type == "If" else node


def computed_from(value: ir.Value) -> Iterator[ir.Value]:
    """``value`` and every value it is computed from, each once (through guards' Ifs as their fast op)."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        top = stack.pop()
        if id(top) in seen:
            continue
        seen.add(id(top))
        yield top
        node = top.producer()
        if node is not None and m.const(top) is None:
            stack.extend(v for v in reads(node).inputs if v is not None)


def nan_free(value: ir.Value | None, memo: Memo) -> bool:
    """Whether ``value`` cannot be NaN where it is bounded (``magnitude(value, memo)`` finite, its assumed values
    finite): no constant it is computed from holds a NaN (jnp.take's fill row), and no layer norm divides by
    a deviation of 0 (an epsilon of 0). A value bounded here is computed by ops that give a finite result of
    finite operands otherwise (sums, products, products by constants, divisions by nonzero constants, softmax,
    tanh, a layer norm with an epsilon)."""
    if value is None or magnitude(value, memo) == math.inf:
        return False
    for top in computed_from(value):
        arr = m.const(top)
        if arr is not None:
            if arr.dtype.kind in "fc" and np.isnan(arr).any():
                return False
            continue
        node = top.producer()
        if node is not None and reads(node).op_type == "LayerNormalization" \
                and float(m.attr(reads(node), "epsilon", 1e-5)) <= 0:
            return False
    return True


def magnitude(value: ir.Value | None, memo: Memo | None = None) -> float:
    """A bound on ``|x|`` over the elements of ``value`` that are not NaN (none is infinite), or
    ``math.inf``."""
    if value is None:
        return math.inf
    memo = {} if memo is None else memo
    stack = [value]
    while stack:  # post-order without recursion: a deep graph's chain is thousands of values long
        top = stack[-1]
        if id(top) in memo:
            stack.pop()
            continue
        node = top.producer()  # (a constant is an initializer or a Constant's output: no inputs to visit)
        read = [] if node is None else reads(node).inputs
        pending = [v for v in read if v is not None and id(v) not in memo]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        memo[id(top)] = (top, _bound(top, node, lambda v: memo[id(v)][1] if v is not None and id(v) in memo
                                     else math.inf))
    return memo[id(value)][1]


def _bound(value: ir.Value, node: ir.Node | None, of: Callable[[ir.Value | None], float]) -> float:
    if value.dtype in _INT_BOUNDS:
        return _INT_BOUNDS[value.dtype]
    if value.const_value is not None or (node is not None and node.op_type == "Constant"):
        return _of_constant(value, "largest", _largest)
    if node is None or node.domain not in ("", "ai.onnx") or value.dtype not in (*_FLOATS, None):
        return math.inf  # (a rule's new value may have no type yet)
    op, ins = node.op_type, list(node.inputs)
    if op != "Split" and value is not node.outputs[0]:
        return math.inf  # a second output: a layer norm's inverse deviation, ...
    if op == "If":  # a guard: its fast op's bound, of the same outer values
        same = node.meta.get(SAME_AS)
        return _bound(same.outputs[0], same, of) if same is not None and len(node.outputs) == 1 else math.inf
    first = of(ins[0]) if ins else math.inf
    if op == "Cast":
        source = ins[0].dtype if ins[0] is not None else None
        bound = _INT_BOUNDS.get(source, first) if source is not None else math.inf
        return bound if value.dtype != ir.DataType.FLOAT16 or bound < 65504 else math.inf
    if op == "LeakyRelu":
        return first * max(1.0, abs(float(m.attr(node, "alpha", 0.01))))
    if op in _SAME:
        return first
    if op in _AT_MOST_ONE:  # of any operand (an infinity gives 1 or NaN)
        return 1.0
    if op == "Where":
        return max(of(ins[1]), of(ins[2])) if len(ins) == 3 else math.inf
    if op in _LARGEST:
        return max((of(v) for v in ins), default=math.inf)
    if op in _AVERAGES:
        averaged = ins if op == "Mean" else ins[:1]
        return _finite(max((of(v) for v in averaged), default=math.inf) * ROUNDING)
    if op in ("Add", "Sub", "Sum"):
        return _finite(sum(of(v) for v in ins) * ROUNDING) if ins else math.inf
    if op == "Mul":
        return _finite(first * of(ins[1]) * ROUNDING)
    if op == "Div":
        divisor = m.const(ins[1]) if len(ins) > 1 else None
        if divisor is None and len(ins) > 1:  # computed from constants (a head's sqrt(d), not yet folded)
            divisor = constants.evaluate(ins[1])
        if divisor is None:
            return _rms_bound(ins)
        smallest = float(np.min(np.abs(divisor))) if divisor.size else 0.0
        return _finite(first / smallest * ROUNDING) if smallest > 0 else math.inf
    if op == "Pow":
        exponent = m.const(ins[1])
        if exponent is None or exponent.size != 1 or float(exponent.reshape(-1)[0]) not in (1.0, 2.0, 3.0):
            return math.inf
        return _finite(first ** float(exponent.reshape(-1)[0]) * ROUNDING)
    if op == "Exp":
        return _finite(math.exp(first) * ROUNDING) if first < 80 else math.inf
    if op == "Clip":  # within [lo, hi] where both are given, else within x's bound and the one limit's
        limits = [of(v) for v in ins[1:3] if v is not None]
        return max(limits) if len(limits) == 2 else max(first, *limits)
    if op in ("ReduceSum", "ReduceSumSquare"):
        n = _reduced_count(node)
        base = first ** 2 if op == "ReduceSumSquare" else first
        return _finite(base * n * ROUNDING) if n is not None else math.inf
    if op == "MatMul":
        return _finite(_product_bound(ins, of) * ROUNDING)
    if op == "Conv" and len(ins) >= 2 and ins[1] is not None:  # by constant kernels: a patch embedding
        grows = _of_constant(ins[1], "kernel_sums", _largest_kernel_sum)
        bias = _of_constant(ins[2], "largest", _largest) if len(ins) > 2 and ins[2] is not None else 0.0
        return _finite((first * grows + bias) * ROUNDING)
    if op == "LayerNormalization":
        return _layer_norm_bound(node, ins, first)
    return math.inf


def _rms_bound(ins: list[ir.Value | None]) -> float:
    """``x / sqrt(mean(x ** 2) + eps)`` over rows of ``n`` (``rms_norm``'s form, ``eps`` a positive constant):
    each element at most ``sqrt(n)`` (its square is at most the row's sum, ``n`` times the mean); a row
    whose squares overflow is 0 or NaN there. Else unbounded: a division by a computed value."""
    x = ins[0] if ins else None
    sqrt = m.producer(ins[1] if len(ins) > 1 else None, "Sqrt")
    add = m.producer(sqrt.inputs[0] if sqrt is not None else None, "Add")
    if x is None or add is None or len(add.inputs) != 2:
        return math.inf
    for k in (0, 1):
        eps, mean = m.const(add.inputs[k]), m.producer(add.inputs[1 - k], "ReduceMean")
        if eps is None or eps.size != 1 or not float(eps.reshape(-1)[0]) > 0 or mean is None:
            continue
        square = m.producer(mean.inputs[0], "Pow", "Mul")
        if square is None or len(square.inputs) != 2 or square.inputs[0] is not x:
            continue
        two = m.const(square.inputs[1]) if square.op_type == "Pow" else None
        if square.op_type == "Pow" and (two is None or two.size != 1 or float(two.reshape(-1)[0]) != 2.0):
            continue
        if square.op_type == "Mul" and square.inputs[1] is not x:
            continue
        rank = len(x.shape) if x.shape is not None else None
        axes = m.normalize_axes(m.reduce_axes(mean) or (), rank) if rank else None
        n = x.shape[-1] if rank else None  # (the mean's input has x's shape)
        if axes == (rank - 1,) and int(m.attr(mean, "keepdims", 1)) == 1 and isinstance(n, int) and n > 0:
            return _finite(math.sqrt(n) * ROUNDING)
    return math.inf


def _of_constant(value: ir.Value, key: str, measure: Callable[[np.ndarray], float]) -> float:
    """``measure`` of the constant ``value``'s content (``math.inf`` where it is not a constant), kept in the
    value's metadata: every guard a rule writes bounds the same weights again."""
    found = value.meta.get(f"jaxconv.bounds.{key}")
    if found is None:
        arr = m.const(value)
        if arr is None and key != "largest":  # a weight laid out by ops on a constant (a kernel's Transpose)
            arr = constants.evaluate(value)
        found = measure(arr) if arr is not None else math.inf
        value.meta[f"jaxconv.bounds.{key}"] = found
    return found


def _largest_sum(w: np.ndarray, axis: int) -> float:
    """The largest sum of magnitudes along ``axis`` of a finite float matrix (a product's growth), else inf."""
    if w.ndim < 2 or w.dtype.kind != "f" or not np.all(np.isfinite(w)):
        return math.inf
    return float(np.max(np.sum(np.abs(w.astype(np.float64)), axis=axis)))


def _largest_kernel_sum(w: np.ndarray) -> float:
    """The largest sum of magnitudes of one output channel's kernel (``[out, in / groups, *window]``): what a
    Conv multiplies its input's bound by (padding adds zeros), else inf."""
    if w.ndim < 3 or w.dtype.kind != "f" or not np.all(np.isfinite(w)):
        return math.inf
    return float(np.max(np.sum(np.abs(w.astype(np.float64)).reshape(w.shape[0], -1), axis=1)))


def _largest(arr: np.ndarray) -> float:
    """The largest magnitude of a constant's elements other than NaN; an infinity bounds nothing."""
    if arr.dtype.kind in "iub":
        return float(np.max(np.abs(arr.astype(np.float64)))) if arr.size else 0.0
    if arr.dtype.kind != "f":
        return math.inf
    magnitudes = np.abs(arr.astype(np.float64))
    magnitudes = magnitudes[~np.isnan(magnitudes)]
    largest = float(np.max(magnitudes)) if magnitudes.size else 0.0
    return largest if math.isfinite(largest) else math.inf


def _finite(bound: float) -> float:
    return bound if math.isfinite(bound) and bound < float(np.finfo(np.float32).max) else math.inf


def _reduced_count(node: ir.Node) -> int | None:
    """How many elements each result of a reduction sums (its axes' sizes, static)."""
    shape = node.inputs[0].shape if node.inputs[0] is not None else None
    axes = m.reduce_axes(node)
    if shape is None or axes is None:
        return None
    rank = len(shape)
    picked = m.normalize_axes(axes, rank) if axes else tuple(range(rank))
    if picked is None:
        return None
    dims = [shape[a] for a in picked]
    return math.prod(dims) if all(isinstance(d, int) for d in dims) else None


def _product_bound(ins: list[ir.Value | None], of: Callable[[ir.Value | None], float]) -> float:
    """A MatMul's: ``|a| * (largest column sum of |w|)`` by a constant ``w`` on the right (the largest row
    sum on the left), else ``|a| * |b| * k`` with ``k`` the contracted length."""
    if len(ins) != 2 or ins[0] is None or ins[1] is None:
        return math.inf
    a, b = ins
    if _convex_rows(a):  # attention's probabilities @ v: each result a convex combination of v's rows
        return of(b)
    for value, other, axis in ((b, a, -2), (a, b, -1)):
        grows = _of_constant(value, f"column_sums{axis}", lambda w: _largest_sum(w, axis))
        if grows < math.inf:
            return of(other) * grows
    sizes = [a.shape[-1] if a.shape is not None and len(a.shape) else None,
             b.shape[-2] if b.shape is not None and len(b.shape) >= 2 else None]
    k = next((d for d in sizes if isinstance(d, int)), None)
    return of(a) * of(b) * k if k is not None else math.inf


def _convex_rows(value: ir.Value, depth: int = 0) -> bool:
    """Whether every row (last axis) of ``value`` is non-negative and sums to at most 1, whatever its length
    (a symbolic one too): a Softmax over the last axis, such rows times a 0/1 mask (a bool cast), or moved
    by a Transpose that keeps the last axis last or a Reshape that keeps its length."""
    node = value.producer()
    if node is None or node.domain not in ("", "ai.onnx") or depth > 6:
        return False
    if node.op_type in ("Transpose", "Reshape", "Identity") and node.inputs and node.inputs[0] is not None:
        source = node.inputs[0]
        if node.op_type == "Transpose":
            perm = m.attr(node, "perm")
            keeps = perm is not None and len(perm) > 0 and int(perm[-1]) == len(perm) - 1
        else:
            keeps = node.op_type == "Identity" or (
                source.shape is not None and value.shape is not None and len(source.shape) > 0
                and len(value.shape) > 0 and source.shape[-1] == value.shape[-1]
                and (isinstance(value.shape[-1], int) or value.shape[-1].value is not None))
        return keeps and _convex_rows(source, depth + 1)
    if node.op_type == "Softmax":
        rank = len(value.shape) if value.shape is not None else None
        axis = int(m.attr(node, "axis", -1))
        return axis == -1 or (rank is not None and axis == rank - 1)
    if node.op_type == "Mul" and len(node.inputs) == 2 and all(v is not None for v in node.inputs):
        for k in (0, 1):
            cast = node.inputs[1 - k].producer()
            source = cast.inputs[0] if cast is not None and cast.op_type == "Cast" and cast.inputs else None
            if source is not None and _boolean(source) and _convex_rows(node.inputs[k], depth + 1):
                return True
    return False


_COMPARISONS = frozenset({"Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Not", "And", "Or", "Xor",
                          "IsNaN", "IsInf"})


def _boolean(value: ir.Value) -> bool:
    node = value.producer()
    return value.dtype == ir.DataType.BOOL or (node is not None and node.op_type in _COMPARISONS
                                               and node.domain in ("", "ai.onnx"))


def _layer_norm_bound(node: ir.Node, ins: list[ir.Value | None], first: float) -> float:
    """``sqrt(n) * |gamma| + |beta|`` over the last axis (each normalized element is at most ``sqrt(n)``:
    their squares sum to ``n * var / (var + eps)``; a row of an infinity, or whose squares overflow, is NaN
    or beta)."""
    axis = int(m.attr(node, "axis", -1))
    shape = ins[0].shape if ins[0] is not None else None
    gamma = m.const(ins[1]) if len(ins) > 1 else None
    beta = m.const(ins[2]) if len(ins) > 2 and ins[2] is not None else np.zeros(1, np.float32)
    if gamma is None or beta is None or axis != -1 and (shape is None or axis != len(shape) - 1):
        return math.inf
    n = shape[-1] if shape is not None and len(shape) and isinstance(shape[-1], int) else \
        (gamma.size if gamma.ndim == 1 and gamma.size > 1 else None)  # a gamma of the axis' length
    return _finite((math.sqrt(n) * _largest(gamma) + _largest(beta)) * ROUNDING) if n else math.inf
