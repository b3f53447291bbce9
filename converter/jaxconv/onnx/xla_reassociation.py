"""Constant chains and nested divisions as XLA's algebraic simplifier rewrites them before running.

jax.jit does not compute ``(x * 0.1) * 3`` as written: XLA's simplifier folds the constants first,
``x * (0.1 * 3)``, one rounding instead of two. Measured bit for bit on jax 0.10.2 (CPU, float32 and
float64, random normal inputs; tests/test_xla_simplifier_match.py), these are its rules on float StableHLO
ops, applied here to the ONNX nodes lowered from them:

- ``(a * c1) * c2`` is ``a * (c1 * c2)`` and ``(a + c1) + c2`` is ``a + (c1 + c2)`` when ``c1`` and ``c2``
  are both scalar constants (broadcast) or both constants of the product's full shape, a constant on
  either side of either op; not for a constant row broadcast to a matrix, nor a scalar with a full one,
  nor a scalar input. ``a - c`` counts as ``a + (-c)``, ``(c1 - a) + c2`` is ``(c1 + c2) - a``.
  The constants are folded in their own dtype. A folded product by one is ``a`` itself (``x / 3 * 3``
  is ``x``, through the reciprocal ``xla_division`` folds), as is a folded sum of zero (``a + -0``).
- ``(a * c1) * (b * c2)`` is ``(a * b) * (c1 * c2)`` when ``c1`` and ``c2`` are both constants of the
  product's full shape, or the product has one element (any two constants: XLA folds a broadcast scalar
  into a constant there, so Flax's ``mean(x)**2`` of one row is ``sum(x)**2 / n**2``, which overflows where
  ``(sum / n)**2`` does not); two broadcast scalars over more elements stay as written.
- ``(a / b) / c`` is ``a / (b * c)``, ``a / (b / c)`` is ``(a * c) / b`` and ``(a / b) / (c / d)`` is
  ``(a * d) / (b * c)`` for divisions XLA leaves divisions: not by a constant or a broadcast (those are
  products by the reciprocal, ``xla_division``), nor by a root, exp or power (rules of their own).

float16 chains fold the same way, the constants folded in float16 (measured: 28% and 49% of the elements
of ``(x * 3.1) * 1.7`` and ``(x + 3.1) + 1.7`` differed by a float16 ulp): each float16 op is lowered as
float32 arithmetic between Casts, so the chain is read through the Cast pair that rounds the inner result.
bfloat16 chains are not folded: XLA computes bfloat16 ops in float32 with a rounding after each
(``xla_bfloat16``), which the simplifier does not see through.

``fold_additions`` runs before the fusion rules (so ``rewrites.add_chains`` sums the folded chain),
``rewrite`` after ``xla_division`` (so a product by a folded reciprocal is seen). Only nodes lowered from
``stablehlo.add``/``subtract``/``multiply``/``divide`` in float32 or float64 are read (float16's are float32
nodes); integers need no emulation (their arithmetic is exact modulo wrapping).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.xla_division import OWN_RULES, moved_from

_FLOATS = (ir.DataType.FLOAT, ir.DataType.DOUBLE)
_ADDITIVE = {"stablehlo.add": "Add", "stablehlo.subtract": "Sub"}
# A division by a constant is a product by its reciprocal once ``xla_division`` has run.
_PRODUCTS = ("stablehlo.multiply", "stablehlo.divide")


def fold_additions(graph: ir.Graph) -> int:
    """Fold the constant pairs of float addition/subtraction chains; returns how many additions went."""
    count = 0
    for node in list(ir.traversal.RecursiveGraphIterator(graph)):
        if _lowered_from(node, *_ADDITIVE) and _ADDITIVE.get(_origin(node)) == node.op_type:
            count += _fold_addition(node)
    return count


def rewrite(graph: ir.Graph) -> int:
    """Fold the constant pairs of float product chains and rewrite nested divisions; returns how many."""
    count = 0
    plain: set[ir.Node] = set()
    for node in list(ir.traversal.RecursiveGraphIterator(graph)):
        if node.graph is None:
            continue  # replaced by an earlier rewrite
        if node.op_type == "Mul" and _lowered_from(node, *_PRODUCTS):
            count += _fold_product(node) or _pair_product(node)
        elif node.op_type == "Div" and _lowered_from(node, "stablehlo.divide") and _divides_in_xla(node):
            plain.add(node)
            count += _nested_division(node, plain)
    return count


# ---- which nodes ---------------------------------------------------------------------------------
def _origin(node: ir.Node) -> str:
    return node.metadata_props.get("stablehlo.op", "")


def _lowered_from(node: ir.Node, *ops: str) -> bool:
    out = node.outputs[0]
    # a half float's op computes in float32 between Casts, its result's dtype not yet inferred
    dtype = out.dtype or next((v.dtype for v in node.inputs if v is not None and v.dtype is not None), None)
    return node.domain == "" and _origin(node) in ops and dtype in _FLOATS and len(node.inputs) == 2 \
        and all(v is not None and v.dtype in (None, dtype) for v in node.inputs)


def _divides_in_xla(div: ir.Node) -> bool:
    """Whether XLA keeps ``div`` a division: its divisor is neither a constant nor a broadcast (products by
    the reciprocal, already written by ``xla_division``) nor a root, exp or power."""
    divisor = div.inputs[1]
    assert divisor is not None
    source, movers = moved_from(divisor)
    if movers or _constant(source) is not None:
        return False
    made = source.producer()
    return made is None or _origin(made) not in OWN_RULES


def _constant(value: ir.Value) -> np.ndarray | None:
    """The value of an initializer or a Constant node's output (or a Cast of one: a float16 constant read as
    float32), else None."""
    if value.const_value is not None:
        return value.const_value.numpy()
    made = value.producer()
    if made is not None and made.op_type == "Constant" and made.domain == "" and "value" in made.attributes:
        tensor = made.attributes["value"].value
        return tensor.numpy() if hasattr(tensor, "numpy") else None
    if made is not None and made.op_type == "Cast" and made.domain == "" and made.inputs[0] is not None:
        inner = _constant(moved_from(made.inputs[0])[0])  # a scalar broadcast before its Cast stays a scalar
        to = ir.DataType(made.attributes["to"].as_int())
        floats = (*_FLOATS, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
        return None if inner is None or to not in floats else inner.astype(to.numpy())
    return None


def _inner(value: ir.Value, ops: tuple[str, ...]) -> tuple[ir.Node | None, type | None]:
    """The node computing ``value`` and the dtype its constants fold in: None for the node's own dtype, or
    float16 when ``value`` is a float16 result read as float32 (the lowering's ``Cast(Cast(op, f16), f32)``)."""
    made = value.producer()
    if made is None or made.op_type != "Cast" or made.domain:
        return made, None
    rounded = made.inputs[0]
    narrowing = rounded.producer() if rounded is not None else None
    if narrowing is None or narrowing.op_type != "Cast" or narrowing.domain or narrowing.inputs[0] is None \
            or narrowing.attributes["to"].as_int() != ir.DataType.FLOAT16 \
            or made.attributes["to"].as_int() != ir.DataType.FLOAT or _origin(narrowing) not in ops:
        return None, None
    return narrowing.inputs[0].producer(), np.float16


def _folded(c1: np.ndarray, c2: np.ndarray, combine, narrow: type | None) -> np.ndarray:
    """``combine(c1, c2)`` in the constants' dtype, or computed in float32 and rounded to ``narrow`` (as XLA
    folds float16 constants), held in the constants' dtype."""
    if narrow is None:
        return np.asarray(combine(c1, c2), dtype=c1.dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        total = combine(np.asarray(c1, np.float32), np.asarray(c2, np.float32)).astype(narrow)
    return total.astype(c1.dtype)


def _constant_kind(value: ir.Value, node: ir.Node) -> tuple[str, np.ndarray] | None:
    """``("scalar", c)`` for a one-element constant (broadcast or not), ``("full", c)`` for a constant of
    the shape of ``node``'s output (read from its other input before shapes are inferred), None for
    anything else (a row broadcast to a matrix, a non-constant)."""
    source, movers = moved_from(value)
    arr = _constant(source)
    if arr is None:
        return None
    if arr.size == 1:
        return "scalar", arr.reshape(())
    full = _full_shape(node)
    if not movers and full is not None and tuple(arr.shape) == full:
        return "full", arr
    return None


def _full_shape(node: ir.Node, depth: int = 4) -> tuple[int, ...] | None:
    """The static shape of an elementwise ``node``'s output: its own, else the largest of its inputs' (their
    producers' before shapes are inferred); None when unknown."""
    shape = node.outputs[0].shape
    if shape is not None and shape.is_static():
        return tuple(shape.numpy())
    found: list[tuple[int, ...]] = []
    for value in node.inputs:
        if value is None:
            continue
        made = value.producer()
        if value.shape is not None and value.shape.is_static():
            found.append(tuple(value.shape.numpy()))
        elif made is not None and made.op_type in ("Add", "Sub", "Mul", "Div", "Cast") and depth > 0:
            inner = _full_shape(made, depth - 1)
            found += [inner] if inner is not None else []
    return max(found, key=lambda s: (int(np.prod(s)), len(s)), default=None)


def _split(node: ir.Node) -> tuple[ir.Value, str, np.ndarray] | None:
    """``node``'s non-constant input and its constant (``(a, kind, c)``) when it has exactly one of each."""
    kinds = [_constant_kind(v, node) if v is not None else None for v in node.inputs]
    constant_sides = [k for k, kind in enumerate(kinds) if kind is not None]
    if len(constant_sides) != 1:
        return None
    side = constant_sides[0]
    other = node.inputs[1 - side]
    kind = kinds[side]
    if other is None or kind is None or _constant(moved_from(other)[0]) is not None:
        return None
    return other, kind[0], kind[1]


# ---- constant chains -----------------------------------------------------------------------------
def _fold_product(outer: ir.Node) -> int:
    """``(a * c1) * c2`` as ``a * (c1 * c2)``."""
    found = _split(outer)
    if found is None:
        return 0
    inner_value, kind, c2 = found
    inner, narrow = _inner(inner_value, _PRODUCTS)
    if inner is None or inner.op_type != "Mul" or not _lowered_from(inner, *_PRODUCTS):
        return 0
    inner_found = _split(inner)
    if inner_found is None or inner_found[1] != kind:
        return 0
    a, _, c1 = inner_found
    return _replace(outer, "Mul", [a, None], _folded(c1, c2, np.multiply, narrow))


def _pair_product(outer: ir.Node) -> int:
    """``(a * c1) * (b * c2)`` as ``(a * b) * (c1 * c2)``, where XLA's simplifier sees two constants: both of
    the product's full shape, or any two where the product has one element (a broadcast scalar is a
    constant there; a mean, ``ReduceMean`` since the zeros rule, is its sum times ``1 / n`` to XLA). Broadcast
    scalars over more elements stay as written. Not through float16's Casts."""
    if _split(outer) is not None:
        return 0  # a constant operand: the chain rule's case
    full = _full_shape(outer)
    one = full is not None and int(np.prod(full)) == 1
    sides, made = [], []
    for value in outer.inputs:
        inner, narrow = _inner(value, _PRODUCTS) if value is not None else (None, None)
        mean = _mean_as_product(inner, made) if one and narrow is None else None
        if mean is not None:
            sides.append(mean)
            continue
        if inner is None or narrow is not None or inner.op_type != "Mul" or not _lowered_from(inner, *_PRODUCTS):
            return 0
        found = _split(inner)
        if found is None:
            return 0
        sides.append(found)
    (a, kind_a, c1), (b, kind_b, c2) = sides
    if not (one or kind_a == kind_b == "full"):
        return 0
    product = ir.node("Mul", [a, b], metadata_props=dict(outer.metadata_props))
    product.outputs[0].type = outer.outputs[0].type
    return _replace(outer, "Mul", [product.outputs[0], None], _folded(c1, c2, np.multiply, None), (*made, product))


def _mean_as_product(node: ir.Node | None, made: list[ir.Node]) -> tuple[ir.Value, str, np.ndarray] | None:
    """A float ``ReduceMean`` of a static input as ``(ReduceSum, "scalar", 1 / n)``, as XLA's simplifier reads
    ``sum / n``: the sum a new node appended to ``made``, or the one made there for the same mean (``m * m``)."""
    if node is None or node.op_type != "ReduceMean" or node.domain or node.inputs[0] is None:
        return None
    x = node.inputs[0]
    if x.dtype not in _FLOATS or x.shape is None or not x.shape.is_static() or node.attributes.get("axes") is not None \
            or node.attributes.get("noop_with_empty_axes") is not None and node.attributes["noop_with_empty_axes"].as_int():
        return None
    axes = _constant(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] is not None else None
    dims = [int(d) for d in x.shape]
    reduced = [dims[int(a)] for a in axes.reshape(-1)] if axes is not None and axes.size else dims
    total = next((n for n in made if list(n.inputs) == list(node.inputs)), None)
    if total is None:
        total = ir.node("ReduceSum", list(node.inputs), dict(node.attributes.items()))
        total.outputs[0].type = node.outputs[0].type
        made.append(total)
    return total.outputs[0], "scalar", _reciprocal(int(np.prod(reduced)), x.dtype)


def _reciprocal(n: int, dtype: ir.DataType) -> np.ndarray:
    one = np.ones((), dtype.numpy())
    return np.asarray(one / one.dtype.type(n), dtype=one.dtype)


def _fold_addition(outer: ir.Node) -> int:
    """``(a ± c1) ± c2`` as ``a + (±c1 ± c2)``, ``(c1 - a) ± c2`` as ``(c1 ± c2) - a``."""
    if outer.op_type == "Sub" and _constant_kind(outer.inputs[0], outer) is not None:
        return 0  # c2 - (...) has no rule
    found = _split(outer)
    if found is None:
        return 0
    inner_value, kind, c2 = found
    c2 = -c2 if outer.op_type == "Sub" else c2
    inner, narrow = _inner(inner_value, tuple(_ADDITIVE))
    if inner is None or not _lowered_from(inner, *_ADDITIVE) or _ADDITIVE.get(_origin(inner)) != inner.op_type:
        return 0
    inner_found = _split(inner)
    if inner_found is None or inner_found[1] != kind:
        return 0
    a, _, c1 = inner_found
    constant_first = _constant_kind(inner.inputs[0], inner) is not None
    if inner.op_type == "Sub" and constant_first:  # (c1 - a) + c2 = (c1 + c2) - a
        return _replace(outer, "Sub", [None, a], _folded(c1, c2, np.add, narrow))
    c1 = -c1 if inner.op_type == "Sub" else c1
    total = _folded(c1, c2, np.add, narrow)
    if not np.any(total):  # XLA drops a + 0; a + -0 is a, bit for bit
        total = np.full_like(total, -0.0)
    return _replace(outer, "Add", [a, None], total)


def _replace(old: ir.Node, op_type: str, inputs: list[ir.Value | None], constant: np.ndarray,
             before: tuple[ir.Node, ...] = ()) -> int:
    """``old`` replaced by ``op_type`` of ``inputs``, a None among them the folded ``constant``; ``before``:
    nodes those inputs read, inserted first."""
    owner = old.graph
    if owner is None:
        return 0
    made = ir.node("Constant", [], {"value": ir.tensor(constant)})
    operands = [made.outputs[0] if v is None else v for v in inputs]
    new = ir.node(op_type, operands, metadata_props=dict(old.metadata_props))
    new.outputs[0].type, new.outputs[0].shape = old.outputs[0].type, old.outputs[0].shape
    ir.convenience.replace_nodes_and_values(owner, old, [old], [*before, made, new], [old.outputs[0]],
                                            [new.outputs[0]])
    return 1


# ---- nested divisions ----------------------------------------------------------------------------
def _nested_division(outer: ir.Node, plain: set[ir.Node]) -> int:
    dividend, divisor = outer.inputs
    assert dividend is not None and divisor is not None
    top, bottom = dividend.producer(), divisor.producer()
    top = top if top in plain else None
    bottom = bottom if bottom in plain else None
    if top is None and bottom is None:
        return 0
    meta = dict(outer.metadata_props)
    new: list[ir.Node] = []

    def mul(x: ir.Value | None, y: ir.Value | None) -> ir.Value:
        node = ir.node("Mul", [x, y], metadata_props={**meta, "stablehlo.op": "stablehlo.multiply"})
        new.append(node)
        return node.outputs[0]

    if top is not None and bottom is not None:  # (a / b) / (c / d) = (a * d) / (b * c)
        numerator = mul(top.inputs[0], bottom.inputs[1])
        denominator = mul(top.inputs[1], bottom.inputs[0])
    elif top is not None:  # (a / b) / c = a / (b * c)
        numerator, denominator = top.inputs[0], mul(top.inputs[1], divisor)
    else:  # a / (b / c) = (a * c) / b
        assert bottom is not None
        numerator, denominator = mul(dividend, bottom.inputs[1]), bottom.inputs[0]
    quotient = ir.node("Div", [numerator, denominator], metadata_props=meta)
    new.append(quotient)
    quotient.outputs[0].type, quotient.outputs[0].shape = outer.outputs[0].type, outer.outputs[0].shape
    owner = outer.graph
    assert owner is not None
    ir.convenience.replace_nodes_and_values(owner, outer, [outer], new, [outer.outputs[0]], [quotient.outputs[0]])
    plain.add(quotient)
    return 1
