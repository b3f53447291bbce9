"""Helpers shared by lowering families (no registrations here)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.registry import Lowering, register
from jaxconv.stablehlo import ir as hir


def compute_in(ctx: LoweringContext, inputs: Sequence[str], types: Sequence[hir.TensorType],
               native: frozenset[str]) -> tuple[list[str], str]:
    """Cast ``inputs`` to a dtype ONNX Runtime computes (see dtypes.WIDER); returns (names, dtype)."""
    src = types[0].dtype
    work = dt.compute_dtype(src, native)
    return [ctx.cast_if(n, t.dtype, work) for n, t in zip(inputs, types)], work


def where(ctx: LoweringContext, cond: str, a: str, b: str, dtype: str, exact_zeros: bool = False) -> str:
    """``Where(cond, a, b)`` for values of ``dtype``, detouring through a type with a kernel when needed.

    The detour types (dtypes.WHERE_DETOUR) hold every value of the original type, so the
    round trip is exact. ONNX Runtime's float Where can return +0 where it picks a -0; with
    ``exact_zeros`` and opset >= 26 floats are selected as their integer bits instead (BitCast).
    """
    if exact_zeros and dtype in dt.FLOATS and ctx.opset >= 26:
        bits = f"int{dt.bit_width(dtype)}"
        picked = where(ctx, cond, *(ctx.op("BitCast", [n], to=dt.onnx_type(bits)) for n in (a, b)), bits)
        return ctx.op("BitCast", [picked], to=dt.onnx_type(dtype))
    if dtype in dt.WHERE:
        return ctx.op("Where", [cond, a, b])
    work = dt.WHERE_DETOUR.get(dtype)
    if work is None:
        raise ValueError(f"no Where detour for {dtype}")
    return ctx.cast(ctx.op("Where", [cond, ctx.cast(a, work), ctx.cast(b, work)]), dtype)


def unary_in(ctx: LoweringContext, op: hir.Op, inputs: Sequence[str], native: frozenset[str]) -> tuple[str, str]:
    """The single operand of ``op`` cast to a dtype in ``native`` (or a wider one); returns (name, dtype)."""
    names, work = compute_in(ctx, inputs[:1], [op.operands[0].type], native)
    return names[0], work


def result(ctx: LoweringContext, op: hir.Op, name: str, work: str) -> str:
    """Cast ``name`` (of dtype ``work``) to ``op``'s result dtype."""
    return ctx.cast_if(name, work, op.results[0].type.dtype)


_VALUE_PRESERVING = {"Expand", "Unsqueeze", "Squeeze", "Reshape", "Identity", "Transpose", "Flatten"}


def known_values(ctx: LoweringContext, name: str, lookback: int = 64, depth: int = 4) -> np.ndarray | None:
    """The element values of ``name`` when it is a constant, or a constant reshaped/broadcast by
    recent nodes (so ``broadcast_in_dim`` of a scalar constant still counts); else None."""
    value = ctx.constant_value(name)
    if value is not None or depth == 0:
        return value
    node = ctx.producer(name)
    if node is not None and node.op_type in _VALUE_PRESERVING and node.inputs and node.inputs[0] is not None:
        return known_values(ctx, node.inputs[0].name, lookback, depth - 1)
    return None


def direct(op_name: str, onnx_op: str, native: frozenset[str] = dt.ARITH, **attrs) -> None:
    """Register a 1:1 elementwise mapping; dtypes outside ``native`` are computed wider and cast back."""

    def lower(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
        names, work = compute_in(ctx, inputs, [v.type for v in op.operands], native)
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
