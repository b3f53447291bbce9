"""Helpers shared by lowering families (no registrations here)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.registry import Lowering, register
from jaxconv.stablehlo import ir as hir


def compute_in(ctx: LoweringContext, names: Sequence[str], dtype: str, native: frozenset[str]) -> tuple[list[str], str]:
    """Cast ``names`` (all of ``dtype``) to a dtype in ``native``, or a wider one (dtypes.WIDER).

    Returns:
        (the cast names, the dtype they are in).
    """
    work = dt.compute_dtype(dtype, native)
    return [ctx.cast_if(n, dtype, work) for n in names], work


def where(ctx: LoweringContext, cond: str, a: str, b: str, dtype: str, exact_zeros: bool = True) -> str:
    """``Where(cond, a, b)`` for values of ``dtype``, detouring through a type with a kernel when needed.

    The detour types (dtypes.WHERE_DETOUR) hold every value of the original type, so the
    round trip is exact. Floats go through ``float_select``, which keeps -0 (``exact_zeros`` is
    accepted for older callers; every float select is exact).
    """
    work = dtype if dtype in dt.WHERE else dt.WHERE_DETOUR.get(dtype)
    if work is None:
        raise ValueError(f"no Where detour for {dtype}")
    if work != dtype:
        return ctx.cast(where(ctx, cond, ctx.cast(a, work), ctx.cast(b, work), work), dtype)
    if dtype in dt.FLOATS:
        return float_select(ctx, cond, a, b, dtype)
    return ctx.op("Where", [cond, a, b])


def expand(ctx: LoweringContext, x: str, shape: str, dtype: str) -> str:
    """``Expand`` for any dtype: one without an ONNX Runtime kernel (bfloat16) is moved as float32 (exact)."""
    if dtype in dt.kernels("Expand"):
        return ctx.op("Expand", [x, shape])
    return ctx.cast(ctx.op("Expand", [ctx.cast(x, "float32"), shape]), dtype)


# Stand-ins for ops that compare values (ReduceMax, ArgMax, TopK): each holds every value in the same order.
ORDER_DETOUR: dict[str, str] = {"float16": "float32", "bfloat16": "float32", "bool": "uint8", "int16": "int32",
                                "uint16": "int32", "uint32": "int64"}


def order_preserving(ctx: LoweringContext, x: str, dtype: str, native: frozenset[str]) -> tuple[str, str]:
    """``x`` in a dtype of ``native`` with the same order; returns (name, dtype).

    A wider type (``ORDER_DETOUR``) holds every value exactly; uint64 is shifted by 2^63 onto
    int64 (its top bit flipped), which maps its order onto int64's.
    """
    if dtype in native:
        return x, dtype
    if dtype == "uint64":
        return ctx.op("BitwiseXor", [ctx.cast(x, "int64"), ctx.scalar(np.iinfo(np.int64).min, "int64")]), "int64"
    work = ORDER_DETOUR.get(dtype)
    if work is None or work not in native:
        from jaxconv.errors import UnsupportedError

        raise UnsupportedError(f"no order-preserving stand-in for {dtype} with an ONNX Runtime kernel")
    return ctx.cast(x, work), work


def float_select(ctx: LoweringContext, cond: str, a: str, b: str, work: str) -> str:
    """``cond ? a : b`` for floats with a Where kernel, keeping the sign of zero.

    ONNX Runtime's float Where returns +0 where it selects a -0 from its *second* input (it merges
    ``x != 0 ? x : y``); the third input is copied exactly. So each value that may be -0 is
    placed third: ``Where(not cond, 1, a) * Where(cond, 1, b)`` (x * 1 is exact for every float),
    or a single Where when one side is a constant without -0. ``not cond`` is an Xor, because
    ONNX Runtime fuses Not into Where by swapping Where's value inputs.
    """
    cond, a, b = _without_not(ctx, cond, a, b)
    if not may_be_negative_zero(ctx, a):
        return ctx.op("Where", [cond, a, b])
    negated = ctx.op("Xor", [cond, ctx.const(np.array(True))])
    if not may_be_negative_zero(ctx, b):
        return ctx.op("Where", [negated, b, a])
    one = ctx.scalar(1.0, work)
    return ctx.op("Mul", [ctx.op("Where", [negated, one, a]), ctx.op("Where", [cond, one, b])])


def without_negative_zero(ctx: LoweringContext, x: str, dtype: str) -> str:
    """``x`` with -0 replaced by +0 (what ``x + 0`` does; ONNX Runtime's NoopElimination drops an
    Add of a zero constant, so a select is used)."""
    zero = ctx.scalar(0.0, dtype)
    return ctx.op("Where", [ctx.op("Equal", [x, zero]), zero, x])


def _without_not(ctx: LoweringContext, cond: str, a: str, b: str) -> tuple[str, str, str]:
    """(cond, a, b) with a condition made by Not replaced by Not's input and a, b swapped."""
    for _ in range(4):
        node = ctx.producer(cond)
        if node is None or node.op_type != "Not" or node.inputs[0] is None:
            break
        cond, a, b = node.inputs[0].name, b, a
    return cond, a, b


_NEVER_NEGATIVE_ZERO = {"Abs", "Exp", "Softplus", "Sigmoid"}


_FIRST_INPUT_DECIDES = {"ReduceSum", "CumSum", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Expand", "Cast",
                        "Identity"}


def may_be_negative_zero(ctx: LoweringContext, name: str, depth: int = 8) -> bool:
    """False when ``name`` is known to hold no -0: a constant without one, an Abs or Exp, a Cast
    from an integer, a Where/Max/Add of such values, or a sum or reshaping of them."""
    value = known_values(ctx, name)
    if value is not None:
        value = np.asarray(value, dtype=np.float64) if value.dtype.kind == "f" or value.dtype.name == "bfloat16" else value
        return bool(np.any((value == 0) & np.signbit(value)))
    node = ctx.producer(name)
    if node is None:
        return True
    if node.op_type in _NEVER_NEGATIVE_ZERO:
        return False
    if node.op_type == "Cast" and node.inputs[0] is not None and node.inputs[0].dtype is not None \
            and not node.inputs[0].dtype.is_floating_point():
        return False
    values = {"Where": node.inputs[1:], "Add": node.inputs, "Max": node.inputs}.get(node.op_type)
    if node.op_type in _FIRST_INPUT_DECIDES:
        values = node.inputs[:1]
    if values is None or depth == 0:
        return True
    return any(v is None or may_be_negative_zero(ctx, v.name, depth - 1) for v in values)


def unary_in(ctx: LoweringContext, op: hir.Op, inputs: Sequence[str], native: frozenset[str]) -> tuple[str, str]:
    """The single operand of ``op`` cast to a dtype in ``native`` (or a wider one); returns (name, dtype)."""
    names, work = compute_in(ctx, inputs[:1], op.operands[0].type.dtype, native)
    return names[0], work


def result(ctx: LoweringContext, op: hir.Op, name: str, work: str) -> str:
    """Cast ``name`` (of dtype ``work``) to ``op``'s result dtype."""
    return ctx.cast_if(name, work, op.results[0].type.dtype)


_VALUE_PRESERVING = {"Expand", "Unsqueeze", "Squeeze", "Reshape", "Identity", "Transpose", "Flatten"}
_FLOAT_CASTS = {dt.onnx_type(t): dt.numpy_dtype(t) for t in ("float32", "float64")}


def known_values(ctx: LoweringContext, name: str, lookback: int = 64, depth: int = 4) -> np.ndarray | None:
    """The element values of ``name`` when it is a constant, or a constant reshaped/broadcast by
    recent nodes (so ``broadcast_in_dim`` of a scalar constant still counts); else None."""
    value = ctx.constant_value(name)
    if value is not None or depth == 0:
        return value
    node = ctx.producer(name)
    if node is None or not node.inputs or node.inputs[0] is None:
        return None
    if node.op_type in _VALUE_PRESERVING:
        return known_values(ctx, node.inputs[0].name, lookback, depth - 1)
    if node.op_type == "Cast":  # to a float type: jnp.clip(x, 0, 1) converts its integer bounds in the callee
        to = node.attributes["to"].as_int() if "to" in node.attributes else None
        source = known_values(ctx, node.inputs[0].name, lookback, depth - 1)
        if source is not None and to in _FLOAT_CASTS and source.dtype.kind in "biuf":
            return source.astype(_FLOAT_CASTS[to])  # round to nearest even, as ONNX Runtime's Cast
    return None


def direct(op_name: str, onnx_op: str, native: frozenset[str] = dt.ARITH, **attrs) -> None:
    """Register a 1:1 elementwise mapping; dtypes outside ``native`` are computed wider and cast back."""

    def lower(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
        names, work = compute_in(ctx, inputs, op.operands[0].type.dtype, native)
        out = ctx.op(onnx_op, names, same_shape_inputs=True, **attrs)
        return ctx.cast_if(out, _result_work_dtype(onnx_op, work), op.results[0].type.dtype)

    lower.__module__ = _caller_module()
    register(Lowering(op_name=op_name, fn=lower, family=lower.__module__.rsplit(".", 1)[-1],
                      onnx_ops=(onnx_op,), doc=f"{onnx_op} (direct)"))


_BOOL_RESULT = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "IsNaN", "IsInf", "Not", "And", "Or", "Xor"}


def _result_work_dtype(onnx_op: str, work: str) -> str:
    return "bool" if onnx_op in _BOOL_RESULT else work


def _caller_module() -> str:
    import sys

    return sys._getframe(2).f_globals.get("__name__", "jaxconv.onnx.ops")  # (inspect.stack() reads every source file)


def static_shape(t: hir.TensorType) -> bool:
    """True when every dimension of ``t`` is known."""
    return t.is_static


def shape_of(ctx: LoweringContext, name: str) -> str:
    """An int64 1-D Shape tensor of ``name``."""
    return ctx.op("Shape", [name])


def is_inf(ctx: LoweringContext, x: str, dtype: str, **attrs) -> str:
    """IsInf for any float dtype at the context's opset."""
    work = dt.isinf_work_dtype(dtype, ctx.opset)
    return ctx.op("IsInf", [ctx.cast(x, work) if work else x], **attrs)
