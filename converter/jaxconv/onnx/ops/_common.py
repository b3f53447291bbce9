"""Helpers shared by lowering families (no registrations here)."""

from __future__ import annotations

from typing import Callable, Sequence

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


def direct(op_name: str, onnx_op: str, native: frozenset[str] = dt.ARITH, **attrs) -> None:
    """Register a 1:1 elementwise mapping; dtypes outside ``native`` are computed wider and cast back."""

    def lower(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
        names, work = compute_in(ctx, inputs, [v.type for v in op.operands], native)
        out = ctx.op(onnx_op, names, **attrs)
        return ctx.cast_if(out, _result_work_dtype(onnx_op, work), op.results[0].type.dtype)

    lower.__module__ = _caller_module()
    register(Lowering(op_name=op_name, fn=lower, family=lower.__module__.rsplit(".", 1)[-1],
                      onnx_ops=(onnx_op,), doc=f"{onnx_op} (direct)"))


_BOOL_RESULT = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "IsNaN", "IsInf", "Not", "And", "Or", "Xor"}


def _result_work_dtype(onnx_op: str, work: str) -> str:
    return "bool" if onnx_op in _BOOL_RESULT else work


def _caller_module() -> str:
    import inspect

    frame = inspect.stack()[2]
    return frame.frame.f_globals.get("__name__", "jaxconv.onnx.ops")


def static_shape(t: hir.TensorType) -> bool:
    return t.is_static


def shape_of(ctx: LoweringContext, name: str) -> str:
    """An int64 1-D Shape tensor of ``name``."""
    return ctx.op("Shape", [name])
