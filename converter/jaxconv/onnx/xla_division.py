"""Float divisions XLA computes as a product by the divisor's reciprocal, written so once the fusion rules ran.

XLA's algebraic simplifier turns ``a / c`` (a constant) and ``a / broadcast(b)`` into ``a * (1 / c)`` and
``a * broadcast(1 / b)``; the lowering marks such a float32/float64 Div (``context.RECIPROCAL_KEY``). The
marked Divs are left as they are until ``onnx/rewrites`` has run, so the rules that recognise a softmax,
a layer norm or a mean by its Div still see one (they replace it by ONNX Runtime's fused op); any marked
Div left then becomes ``Mul(a, Reciprocal(source))`` with the divisor's broadcast (its Expand, Reshape,
Unsqueeze) moved after the Reciprocal, so the reciprocal is taken once per divisor element, not per
quotient. A subnormal reciprocal is flushed to a zero of its sign, as XLA on the CPU flushes it; a
constant's reciprocal is folded so in its own dtype (IEEE division, as XLA folds it).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.context import RECIPROCAL_KEY

_MOVERS = ("Expand", "Reshape", "Unsqueeze", "Squeeze", "Identity")


# Divisors XLA rewrites by rules of their own (``a / sqrt(b)`` is ``a * rsqrt(b)`` with XLA's rsqrt, not
# ``1 / sqrt(b)``: it matched neither form on float32): left as IEEE division, which ONNX Runtime's norm
# fusions read (an RMS norm's ``x / sqrt(mean(x^2) + eps)``), and out of the nested-division rules.
OWN_RULES = frozenset({"stablehlo.sqrt", "stablehlo.rsqrt", "stablehlo.exponential", "stablehlo.power"})


def divides_by_exp_as_a_product() -> bool:
    """Whether jax.jit on the CPU computes a float16 ``a / exp(b)`` as ``a * exp(-b)``: jax 0.10's XLA does;
    jax 0.11.2's keeps the division (its compiled HLO divides by the exp; ``a / rsqrt(b)`` is still
    ``a * sqrt(b)``)."""
    import jax

    return jax.__version_info__ < (0, 11)


def rewrite(graph: ir.Graph) -> int:
    """Rewrite the marked Divs of ``graph`` and its subgraphs; returns how many."""
    count = 0
    for node in list(ir.traversal.RecursiveGraphIterator(graph)):
        if node.op_type == "Div" and node.domain == "" and node.metadata_props.pop(RECIPROCAL_KEY, None) == "1":
            count += _rewrite(node)
    return count


def moved_from(value: ir.Value) -> tuple[ir.Value, list[ir.Node]]:
    """The value ``value`` is moved or broadcast from (through at most 4 ``_MOVERS``), and those nodes, last first."""
    movers: list[ir.Node] = []
    source = value
    while (made := source.producer()) is not None and made.op_type in _MOVERS and made.domain == "" \
            and made.inputs[0] is not None and len(movers) < 4:
        movers.append(made)
        source = made.inputs[0]
    return source, movers


def _rewrite(div: ir.Node) -> int:
    dividend, divisor = div.inputs
    owner = div.graph
    if dividend is None or divisor is None or owner is None:
        return 0
    source, movers = moved_from(divisor)
    new: list[ir.Node] = []
    constant = source.const_value
    if constant is not None:
        arr = constant.numpy()
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            inverse = (np.ones((), arr.dtype) / arr).astype(arr.dtype)
            inverse = np.where(np.abs(inverse) < np.finfo(arr.dtype).tiny, inverse * 0, inverse).astype(arr.dtype)
        new.append(ir.node("Constant", [], {"value": ir.tensor(inverse)}))
    else:
        new += _flushed_reciprocal(source)
    value = new[-1].outputs[0]
    for mover in reversed(movers):  # the broadcast again, on the reciprocal
        again = ir.node(mover.op_type, [value, *mover.inputs[1:]], dict(mover.attributes))
        new.append(again)
        value = again.outputs[0]
    product = ir.node("Mul", [dividend, value], metadata_props=dict(div.metadata_props))
    new.append(product)
    product.outputs[0].type, product.outputs[0].shape = div.outputs[0].type, div.outputs[0].shape
    ir.convenience.replace_nodes_and_values(owner, div, [div], new, [div.outputs[0]], [product.outputs[0]])
    return 1


def _flushed_reciprocal(x: ir.Value) -> list[ir.Node]:
    """``1 / x`` with a subnormal result flushed to a zero of its sign, as XLA on the CPU computes it
    (``x / x.max()`` of a row holding FLT_MAX: the reciprocal 2.9e-39 is 0 in jax.jit, so every quotient is
    0 there, not near 1): ``r * (|r| >= FLT_MIN)``, a product, because ONNX Runtime's Where gives +0 for a
    selected -0 (``x / -inf`` must stay -0). The nodes run on the divisor's elements, before its broadcast."""
    dtype = x.dtype.numpy() if x.dtype is not None else np.dtype(np.float32)
    tiny = ir.node("Constant", [], {"value": ir.tensor(np.array(np.finfo(dtype).tiny, dtype))})
    inverse = ir.node("Reciprocal", [x])
    magnitude = ir.node("Abs", [inverse.outputs[0]])
    normal = ir.node("GreaterOrEqual", [magnitude.outputs[0], tiny.outputs[0]])
    keep = ir.node("Cast", [normal.outputs[0]], {"to": ir.AttrInt64("to", ir.DataType.from_numpy(dtype))})
    flushed = ir.node("Mul", [inverse.outputs[0], keep.outputs[0]])
    return [tiny, inverse, magnitude, normal, keep, flushed]
