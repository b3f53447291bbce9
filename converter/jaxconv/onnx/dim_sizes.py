"""The sizes of a graph's symbolic dimensions, given sizes for its inputs' (``b`` of ``f32[b, 784]``).

A value's shape may name a symbolic dimension three ways: a name of an input's dimension (``b``); an
expression of them, as jax.export writes one (``64*b``, ``b + 1``, ``floordiv(b*s, 4)``, ``max(b, 1)``:
``size_of`` evaluates it); or a name that shape inference made up where it lost track (``unk__16``: a
rewritten Conv's batch, a Split's pieces). ``with_equated`` finds sizes for the made-up names from the
ops that equate dimensions: an elementwise op's output and its inputs, a Transpose's permuted axes, the
batch of a Conv or pool and its input, a MatMul's rows and its first operand's, the axes a Slice or Pad
leaves and a Concat's or Split's other axes, a Scan's stacked rows (its steps, its body's row) and carries,
a Reshape's target (its 0 the input's dimension there, its -1 what the input's size leaves for it).
``thread_count`` weighs a model's products with them.
"""

from __future__ import annotations

import ast
import functools
import math
from typing import Any, Callable, Iterator, Mapping

import onnx_ir as ir

_FUNCTIONS: dict[str, Callable[..., int]] = {
    "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "max": max, "min": min,
    "non_negative": lambda a: max(a, 0)}
_OPERATORS: dict[type, Callable[[int, int], int]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}

_SAME_SHAPE = frozenset((
    "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Abs", "Neg", "Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Cast",
    "Identity", "Softmax", "LogSoftmax", "Gelu", "HardSwish", "HardSigmoid", "Elu", "Selu", "Softplus", "Sin",
    "Cos", "Floor", "Ceil", "Round", "Sign", "Not", "IsNaN", "IsInf", "Clip", "LayerNormalization", "Dropout",
    "BatchNormalization", "InstanceNormalization", "LpNormalization"))
_BROADCAST = frozenset((
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Where", "Equal", "Less", "Greater", "LessOrEqual",
    "GreaterOrEqual", "And", "Or", "Xor", "Mod", "PRelu", "Sum", "Mean", "BitShift", "BitwiseAnd",
    "BitwiseOr", "BitwiseXor"))
_SAME_BATCH = frozenset((
    "Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool"))


Monomial = tuple[tuple[str, int], ...]  # (name, power) pairs, sorted by name


class Poly:
    """A size as a polynomial of symbolic dimension names (``2*b*s + 64*b``): what a product's flops
    come to on a model exported with symbolic sizes, weighed later at a call's sizes (``value``)."""

    __slots__ = ("terms",)

    def __init__(self, terms: Mapping[Monomial, float]) -> None:
        self.terms = {m: c for m, c in terms.items() if c != 0}

    @classmethod
    def of(cls, x: Poly | float) -> Poly:
        return x if isinstance(x, Poly) else cls({(): x})

    @classmethod
    def name(cls, name: str) -> Poly:
        return cls({((name, 1),): 1})

    def __add__(self, other: Poly | float) -> Poly:
        terms = dict(self.terms)
        for m, c in Poly.of(other).terms.items():
            terms[m] = terms.get(m, 0) + c
        return Poly(terms)

    __radd__ = __add__

    def __neg__(self) -> Poly:
        return Poly({m: -c for m, c in self.terms.items()})

    def __sub__(self, other: Poly | float) -> Poly:
        return self + -Poly.of(other)

    def __rsub__(self, other: Poly | float) -> Poly:
        return Poly.of(other) + -self

    def __mul__(self, other: Poly | float) -> Poly:
        terms: dict[Monomial, float] = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in Poly.of(other).terms.items():
                powers = dict(m1)
                for n, e in m2:
                    powers[n] = powers.get(n, 0) + e
                m = tuple(sorted(powers.items()))
                terms[m] = terms.get(m, 0) + c1 * c2
        return Poly(terms)

    __rmul__ = __mul__

    def __floordiv__(self, other: Poly | float) -> Poly:
        """The exact quotient by a one-term polynomial (``6*b*s // 2*s`` is ``3*b``: a Reshape's -1);
        ValueError where a term does not hold the divisor's names or a multiple of its coefficient (the
        floor of ``floordiv(b, 2)`` is no polynomial)."""
        divisor = Poly.of(other).terms
        if len(divisor) != 1:
            raise ValueError(f"not a one-term divisor: {other!r}")
        (names, c), = divisor.items()
        terms: dict[Monomial, float] = {}
        for m, k in self.terms.items():
            powers = dict(m)
            if k % c or any(powers.get(n, 0) < e for n, e in names):
                raise ValueError(f"{self!r} is not a multiple of {other!r}")
            for n, e in names:
                powers[n] -= e
            terms[tuple(sorted((n, e) for n, e in powers.items() if e))] = k / c
        return Poly(terms)

    def __rfloordiv__(self, other: Poly | float) -> Poly:
        return Poly.of(other) // self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (Poly, int, float)) and self.terms == Poly.of(other).terms

    def __hash__(self) -> int:
        return hash(frozenset(self.terms.items()))

    def __repr__(self) -> str:
        return " + ".join(f"{c:g}" + "".join(f"*{n}^{e}" for n, e in m) for m, c in self.terms.items()) or "0"

    def value(self, sizes: Mapping[str, int]) -> float | None:
        """The polynomial at ``sizes``; None where a name has no size."""
        total = 0.0
        for m, c in self.terms.items():
            if any(n not in sizes for n, _ in m):
                return None
            total += c * math.prod(sizes[n] ** e for n, e in m)
        return total

    def to_json(self) -> list[list[Any]]:
        return [[int(c) if float(c).is_integer() else c, {n: e for n, e in m}] for m, c in self.terms.items()]

    @classmethod
    def from_json(cls, data: Any) -> Poly:
        """Raises ValueError, TypeError or KeyError where ``data`` is not what ``to_json`` writes."""
        terms: dict[Monomial, float] = {}
        for c, powers in data:
            if not isinstance(c, (int, float)) or not all(isinstance(n, str) and type(e) is int and e > 0
                                                           for n, e in powers.items()):
                raise ValueError(f"not a term: {c!r}, {powers!r}")
            terms[tuple(sorted(powers.items()))] = c
        return cls(terms)


def size_of(name: str | None, sizes: Mapping[str, int | Poly]) -> int | Poly | None:
    """A symbolic dimension's size: a name of ``sizes``, or an expression of them; None for anything else
    (or for what a polynomial cannot express: ``floordiv(b, 2)`` of a ``Poly``)."""
    if name is None:
        return None
    if name in sizes:
        return sizes[name]
    expression = _parsed(name)
    try:
        return None if expression is None else _evaluate(expression, sizes)
    except (ValueError, TypeError, ZeroDivisionError, RecursionError):
        return None


@functools.lru_cache(maxsize=4096)
def _parsed(name: str) -> ast.AST | None:
    try:
        return ast.parse(name, mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None


def _evaluate(node: ast.AST, sizes: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        return sizes.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _evaluate(node.operand, sizes)
        return None if value is None else -value
    args: list[ast.AST]
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        apply, args = _OPERATORS[type(node.op)], [node.left, node.right]
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS \
            and not node.keywords:
        apply, args = _FUNCTIONS[node.func.id], list(node.args)
    else:
        return None
    values = [_evaluate(a, sizes) for a in args]
    return None if any(v is None for v in values) else apply(*values)


def with_equated(graph: Any, sizes: Mapping[str, int | Poly]) -> dict[str, int | Poly]:
    """``sizes`` and a size for each made-up dimension name of ``graph``'s values (not its subgraphs')
    that an op equates to a dimension of known size; a name keeps the first size found."""
    found = dict(sizes)
    for _ in range(2):  # forward in graph order, then once more for names met before their size
        for node in graph:
            if node.domain not in ("", "ai.onnx"):
                continue
            for one, other in _equated(node):
                for name, dim in ((one, other), (other, one)):
                    if isinstance(name, ir.SymbolicDim) and name.value is not None and \
                            size_of(name.value, found) is None:
                        size = dim if isinstance(dim, int) else size_of(dim.value, found)
                        if size is not None:
                            found[name.value] = size
    return found


def _equated(node: Any) -> Iterator[tuple[Any, Any]]:
    """Pairs of dimensions (ints or ``ir.SymbolicDim``) that ``node`` makes equal."""
    if node.op_type == "Scan":
        yield from _scan_equated(node)
        return
    out = node.outputs[0].shape if node.outputs else None
    ins = [v.shape if v is not None else None for v in node.inputs]
    if out is None or not ins or ins[0] is None:
        return
    op = node.op_type
    if op == "Reshape" and len(node.inputs) > 1:
        target = shape_entries(node.inputs[1])
        if target is not None and len(target) == len(out):
            yield from _reshape_equated(node, list(ins[0]), target, list(out))
    elif op in _SAME_SHAPE and len(ins[0]) == len(out):
        yield from zip(ins[0], out)
    elif op in _BROADCAST:
        for shape in ins:
            if shape is not None and len(shape) <= len(out):
                yield from ((d, o) for d, o in zip(shape, list(out)[len(out) - len(shape):]) if d != 1)
    elif op == "Transpose" and len(ins[0]) == len(out):
        perm = node.attributes.get("perm")
        order = [int(k) for k in perm.value] if perm is not None else list(range(len(out)))[::-1]
        yield from ((ins[0][k], o) for k, o in zip(order, out))
    elif op in _SAME_BATCH and len(out) and len(ins[0]):
        yield ins[0][0], out[0]
    elif op == "MatMul" and len(ins[0]) >= 2 and len(out) >= 2:
        yield ins[0][-2], out[-2]
        for shape in ins:  # the batch axes broadcast, aligned from the right
            if shape is not None and 2 <= len(shape) <= len(out):
                yield from ((d, o) for d, o in zip(list(shape)[:-2], list(out)[len(out) - len(shape):-2]) if d != 1)
        if ins[1] is not None and len(ins[1]) >= 2:
            yield ins[1][-1], out[-1]
    elif op in ("Slice", "Pad") and len(ins[0]) == len(out):
        cut = _cut_axes(node, len(out))
        if cut is not None:
            yield from ((d, o) for k, (d, o) in enumerate(zip(ins[0], out)) if k not in cut)
    elif op in ("Concat", "Split"):
        axis = int(node.attributes["axis"].value) if "axis" in node.attributes else 0
        pieces = [s for s in (ins if op == "Concat" else [v.shape for v in node.outputs]) if s is not None]
        whole = out if op == "Concat" else ins[0]
        for shape in pieces:
            if len(shape) == len(whole) > 0:
                yield from ((d, w) for k, (d, w) in enumerate(zip(shape, whole)) if k != axis % len(whole))


def _reshape_equated(node: Any, ins: list[Any], target: list[int | str],
                     out: list[Any]) -> Iterator[tuple[Any, Any]]:
    """A Reshape's output dimensions and its target's entries: a 0 (``allowzero`` off) is the input's
    dimension there, a -1 what the input's size leaves for it (an expression of both, ``(s)*(32)//(32)``)."""
    copies = not int(node.attributes["allowzero"].value) if "allowzero" in node.attributes else True
    entries: list[Any] = [ins[k] if t == 0 and copies and k < len(ins) else t for k, t in enumerate(target)]
    for k, (t, o) in enumerate(zip(entries, out)):
        if isinstance(t, int) and t < 0:
            left = _product_expression(ins)
            rest = _product_expression([e for j, e in enumerate(entries) if j != k])
            if t == -1 and left is not None and rest is not None:
                yield ir.SymbolicDim(f"({left})//({rest})"), o
        elif isinstance(t, str):
            yield ir.SymbolicDim(t), o
        else:
            yield t, o


def _product_expression(dims: list[Any]) -> str | None:
    """``dims`` (ints, dimension names or expressions) multiplied, as an expression for ``size_of``."""
    parts = []
    for d in dims:
        name = d.value if isinstance(d, ir.SymbolicDim) else d
        if name is None or (isinstance(name, int) and name < 0):
            return None
        parts.append(f"({name})")
    return "*".join(parts) or "1"


def _cut_axes(node: Any, rank: int) -> set[int] | None:
    """The axes a Slice cuts or a Pad pads (None where its constant inputs do not say)."""
    inputs = list(node.inputs)
    if node.op_type == "Slice":
        axes = inputs[3] if len(inputs) > 3 else None
        if axes is not None:
            return _constant_axes(axes, rank)
        starts = inputs[1].const_value if len(inputs) > 1 and inputs[1] is not None else None
        return None if starts is None else set(range(starts.numpy().size))
    pads = inputs[1].const_value if len(inputs) > 1 and inputs[1] is not None else None
    if pads is None:
        return None
    amounts = [int(p) for p in pads.numpy().reshape(-1)]
    axes = inputs[3] if len(inputs) > 3 else None
    listed = list(range(rank)) if axes is None else sorted(_constant_axes(axes, rank) or ())
    if len(amounts) != 2 * len(listed):
        return None
    return {a for k, a in enumerate(listed) if amounts[k] or amounts[k + len(listed)]}


def _constant_axes(value: Any, rank: int) -> set[int] | None:
    tensor = value.const_value
    return None if tensor is None else {int(a) % rank for a in tensor.numpy().reshape(-1)}


def _scan_equated(scan: Any) -> Iterator[tuple[Any, Any]]:
    """A Scan over axis 0: each carry out as its initial value, each stacked output's rows as the scan
    inputs' count and its row as the body's output."""
    for name in ("scan_input_axes", "scan_output_axes"):
        attr = scan.attributes.get(name)
        if attr is not None and any(int(v) != 0 for v in attr.value):
            return
    body = scan.attributes["body"].value
    n_state = len(scan.inputs) - int(scan.attributes["num_scan_inputs"].value)
    steps = next((v.shape[0] for v in list(scan.inputs)[n_state:] if v is not None and v.shape), None)
    for k, (out, inner) in enumerate(zip(scan.outputs, body.outputs)):
        if out.shape is None:
            continue
        if k < n_state:
            initial = scan.inputs[k].shape if scan.inputs[k] is not None else None
            if initial is not None and len(initial) == len(out.shape):
                yield from zip(initial, out.shape)
            continue
        if steps is not None and len(out.shape):
            yield steps, out.shape[0]
        if inner.shape is not None and len(inner.shape) == len(out.shape) - 1:
            yield from zip(inner.shape, list(out.shape)[1:])


def shape_entries(value: Any, depth: int = 12) -> list[int | str] | None:
    """The entries of a 1-D integer tensor computed from shapes (a Reshape's target on symbolic sizes): ints,
    or expressions of dimension names (``b``, ``(s)*(1)``) for ``size_of``; None where it is not read.

    Reads constants, ``Shape`` (with ``start`` and ``end``), ``Concat``, ``ReduceProd`` of all entries, and
    ``Gather``, ``Squeeze``, ``Unsqueeze`` and ``Cast`` that keep the entries."""
    if value is None or depth == 0:
        return None
    tensor = value.const_value
    if tensor is not None:
        arr = tensor.numpy()
        return [int(v) for v in arr.reshape(-1)] if arr.dtype.kind in "iu" and arr.ndim <= 1 else None
    node = value.producer()
    if node is None or node.domain not in ("", "ai.onnx"):
        return None
    op = node.op_type
    if op == "Shape":
        shape = node.inputs[0].shape if node.inputs[0] is not None else None
        if shape is None:
            return None
        start, end = (node.attributes.get(n) for n in ("start", "end"))
        dims = list(shape)[None if start is None else int(start.value):None if end is None else int(end.value)]
        entries: list[int | str] = []
        for d in dims:
            if isinstance(d, int):
                entries.append(d)
            elif d.value is None:
                return None
            else:
                entries.append(d.value)
        return entries
    if op == "Concat":
        parts = [shape_entries(v, depth - 1) for v in node.inputs]
        return None if any(p is None for p in parts) else [e for p in parts for e in p or ()]
    if op in ("Cast", "Squeeze", "Unsqueeze", "Identity"):
        return shape_entries(node.inputs[0], depth - 1)
    if op == "ReduceProd" and _all_of_one_axis(node):
        entries = shape_entries(node.inputs[0], depth - 1)
        if entries is None:
            return None
        if all(isinstance(e, int) for e in entries):
            return [math.prod(int(e) for e in entries)]
        return ["*".join(f"({e})" for e in entries)]
    if op == "Gather" and len(node.inputs) == 2:
        entries, index = shape_entries(node.inputs[0], depth - 1), node.inputs[1].const_value if node.inputs[1] else None
        if entries is None or index is None:
            return None
        picked = [int(i) for i in index.numpy().reshape(-1)]
        return [entries[i] for i in picked] if all(-len(entries) <= i < len(entries) for i in picked) else None
    return None


def _all_of_one_axis(reduce: Any) -> bool:
    """A reduction of a 1-D tensor over all of it: no axes, or axes ``[0]`` (an input or an attribute)."""
    axes = reduce.inputs[1] if len(reduce.inputs) > 1 else None
    if axes is not None:
        tensor = axes.const_value
        return tensor is not None and [int(a) for a in tensor.numpy().reshape(-1)] in ([0], [-1])
    attr = reduce.attributes.get("axes")
    return attr is None or [int(a) for a in attr.value] in ([0], [-1])
