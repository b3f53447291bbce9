"""A select on a NaN test whose two sides are both NaN wherever the tested value is: the other side alone.

``jnp.logaddexp`` (and with it jax.nn.softplus, log_sigmoid and mish) ends in

    select(isnan(x1 - x2), x1 + x2, max(x1, x2) + log1p(exp(-|x1 - x2|)))

whose first side serves infinities of one sign (inf - inf is NaN where inf + inf is not). Where x2 is a finite
constant, ``x1 - x2`` is NaN only where x1 is, and there both sides are NaN: the select changes nothing but
the NaN's payload. A float select costs ONNX Runtime two Wheres and a Mul (``float_select`` keeps -0), about
12 Muls' time, so it goes.

A value ``follows`` the tested value ``v`` when it is NaN wherever ``v`` is: ``v`` itself, a value that ``v``
is computed from by adding, subtracting or multiplying a finite constant (``v`` NaN then means that value is),
and any result of an op that returns NaN for a NaN in any input (ONNX Runtime's Max, Min and Relu included:
checked) with a following input. Broadcasting aligns the elements: every op on the way is elementwise and
the select's sides have its shape.
"""

from __future__ import annotations

import numpy as np

from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops._common import known_values

# a NaN in any input gives a NaN (IEEE arithmetic; ONNX Runtime's Max, Min, Relu and Sum propagate it)
_PROPAGATING = frozenset({"Add", "Sub", "Mul", "Div", "Neg", "Abs", "Exp", "Log", "Sqrt", "Max", "Min", "Relu",
                          "Tanh", "Sum", "Reciprocal"})
_MAX_DEPTH = 16


def tested_for_nan(ctx: LoweringContext, cond: str) -> str | None:
    """``v`` when ``cond`` is true exactly where the float ``v`` is NaN (IsNaN(v), or ``v != v`` as Not or Xor
    with true of Equal(v, v)), else None."""
    node = ctx.producer(cond)
    if node is None:
        return None
    if node.op_type == "IsNaN":
        return node.inputs[0].name if node.inputs[0] is not None else None
    if node.op_type == "Xor":
        flags = [i for i in node.inputs if i is not None and _all_true(ctx, i.name)]
        others = [i for i in node.inputs if i is not None and i not in flags]
        if len(flags) != 1 or len(others) != 1:
            return None
        equal = ctx.producer(others[0].name)
    elif node.op_type == "Not":
        equal = ctx.producer(node.inputs[0].name) if node.inputs[0] is not None else None
    else:
        return None
    if equal is None or equal.op_type != "Equal" or equal.inputs[0] is None or equal.inputs[0] is not equal.inputs[1]:
        return None
    return equal.inputs[0].name


def _all_true(ctx: LoweringContext, name: str) -> bool:
    values = known_values(ctx, name)
    return values is not None and values.dtype == np.bool_ and bool(np.all(values))


def _finite_constant(ctx: LoweringContext, name: str) -> bool:
    values = known_values(ctx, name)
    return values is not None and values.dtype.kind == "f" and bool(np.all(np.isfinite(values)))


def _sources(ctx: LoweringContext, v: str) -> set[str]:
    """``v`` and the values it is computed from by a finite constant's Add, Sub or Mul (or a Neg): each is
    NaN wherever ``v`` is."""
    found = {v}
    for _ in range(_MAX_DEPTH):
        node = ctx.producer(v)
        if node is None or len(node.inputs) not in (1, 2) or any(i is None for i in node.inputs):
            break
        names = [i.name for i in node.inputs]
        if node.op_type == "Neg":
            v = names[0]
        elif node.op_type in ("Add", "Sub", "Mul") and len(names) == 2:
            variable = [n for n in names if not _finite_constant(ctx, n)]
            if len(variable) != 1:
                break
            v = variable[0]
        else:
            break
        found.add(v)
    return found


def _follows(ctx: LoweringContext, name: str, sources: set[str], depth: int = 0) -> bool:
    if name in sources:
        return True
    node = ctx.producer(name)
    if node is None or depth > _MAX_DEPTH or node.op_type not in _PROPAGATING or node.domain not in ("", "ai.onnx"):
        return False
    return any(i is not None and _follows(ctx, i.name, sources, depth + 1) for i in node.inputs)


def redundant(ctx: LoweringContext, cond: str, on_nan: str, otherwise: str) -> bool:
    """True when ``select(cond, on_nan, otherwise)`` is ``otherwise`` but for NaN payloads: ``cond`` tests a
    value for NaN and both sides follow it."""
    v = tested_for_nan(ctx, cond)
    if v is None:
        return False
    sources = _sources(ctx, v)
    return _follows(ctx, on_nan, sources) and _follows(ctx, otherwise, sources)
