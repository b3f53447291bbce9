"""Complex data movement, sums and products of matrices: the real lowerings, applied per half.

Ops that move or add elements without mixing real and imaginary parts (reshape, transpose,
slices, gather, select, pad, sums, ...) run their real lowering on the real halves and again on
the imaginary halves (``via_parts``). Control flow and tuples pass the [..., 2] tensors through.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto

from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops._complex import component, is_complex, pack, parts, real_lowering, real_view, via_parts
from jaxconv.onnx.ops.complex_arith import multiply, zeros_like
from jaxconv.onnx.ops.indexing import scatter_kind
from jaxconv.onnx.ops.reduce import reducer_kind
from jaxconv.onnx.registry import REGISTRY, complex_lowering
from jaxconv.stablehlo import ir as hir

_PER_HALF = (
    "stablehlo.reshape",
    "stablehlo.dynamic_reshape",
    "stablehlo.transpose",
    "stablehlo.broadcast_in_dim",
    "stablehlo.dynamic_broadcast_in_dim",
    "stablehlo.slice",
    "stablehlo.real_dynamic_slice",
    "stablehlo.concatenate",
    "stablehlo.reverse",
    "stablehlo.pad",
    "stablehlo.dynamic_gather",
    "stablehlo.select",
)
_PASS_THROUGH = (
    "stablehlo.while",
    "stablehlo.if",
    "stablehlo.case",
    "stablehlo.optimization_barrier",
    "stablehlo.composite",
    "stablehlo.tuple",
    "stablehlo.get_tuple_element",
    "stablehlo.get_dimension_size",
)


def _real_check(op: hir.Op) -> str | None:
    """The real lowering's own check, on the op's real view."""
    check = REGISTRY[op.name].check
    return check(real_view(op)) if check is not None else None


for _name in _PER_HALF:
    complex_lowering(_name, check=_real_check, onnx_ops=REGISTRY[_name].onnx_ops)(via_parts)


def _pass_through(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str] | str | None:
    """Control flow and tuples carry complex values as they are."""
    return REGISTRY[op.name].fn(ctx, op, inputs)


def _pass_check(op: hir.Op) -> str | None:
    check = REGISTRY[op.name].check
    return check(op) if check is not None else None


for _name in _PASS_THROUGH:
    complex_lowering(_name, check=_pass_check, onnx_ops=REGISTRY[_name].onnx_ops)(_pass_through)


@complex_lowering("stablehlo.custom_call", check=_pass_check,
                  onnx_ops=REGISTRY["stablehlo.custom_call"].onnx_ops)
def lower_custom_call(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str] | str | None:
    """By call target; a ``stablehlo.dynamic_reduce_window`` sum (cumsum over a symbolic axis) per half."""
    if op.attrs.get("call_target_name") != "stablehlo.dynamic_reduce_window":
        return _pass_through(ctx, op, inputs)
    from jaxconv.errors import UnsupportedError
    from jaxconv.onnx.ops.complex_reduce import dynamic_cumsum

    body = ctx.module.functions[op.attrs["called_computations"][0]].body
    if len(op.results) != 1 or reducer_kind(body) != "add":
        raise UnsupportedError("stablehlo.custom_call @stablehlo.dynamic_reduce_window on complex values: "
                               "only a sum is lowered (a product, max or min window needs static sizes)")
    return dynamic_cumsum(ctx, op, inputs)


def _packed_value(v: hir.Value) -> hir.Value:
    t = v.type
    return hir.Value(hir.TensorType(component(t.dtype), t.shape + (2,)), id=v.id) if is_complex(t) else v


def packed(
    ctx: LoweringContext, op: hir.Op, inputs: list[str], attrs: dict[str, Any], zero_starts: int = 0
) -> list[str]:
    """The real lowering applied to the [..., 2] tensors themselves, the trailing axis made an ordinary
    one by ``attrs`` (and ``zero_starts`` extra start indices of 0), with index computations done once."""
    operands = [_packed_value(v) for v in op.operands]
    names = list(inputs)
    for _ in range(zero_starts):
        operands.append(hir.Value(hir.TensorType("int64", ())))
        names.append(ctx.const(np.array(0, np.int64)))
    view = hir.Op(
        op.name,
        operands,
        [_packed_value(v) for v in op.results],
        {**op.attrs, **attrs},
        [real_view(op).regions[i] for i in range(len(op.regions))],
        op.location,
    )
    out = REGISTRY[op.name].fn(ctx, view, names)
    return [out] if isinstance(out, str) else list(out)


@complex_lowering(
    "stablehlo.dynamic_slice",
    "stablehlo.dynamic_update_slice",
    "stablehlo.gather",
    check=_real_check,
    onnx_ops=("Slice", "ScatterND", "GatherND"),
)
def lower_indexed(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """Indexed reads and writes move (re, im) pairs together: the pair axis is one more full window axis."""
    if op.name == "stablehlo.dynamic_slice":
        return packed(ctx, op, inputs, {"slice_sizes": list(op.attrs["slice_sizes"]) + [2]}, zero_starts=1)
    if op.name == "stablehlo.dynamic_update_slice":
        return packed(ctx, op, inputs, {}, zero_starts=1)
    if op.name == "stablehlo.gather":
        dn = dict(op.attrs["dimension_numbers"])
        dn["offset_dims"] = list(dn.get("offset_dims", ())) + [op.results[0].type.rank]
        return packed(
            ctx, op, inputs, {"dimension_numbers": dn, "slice_sizes": list(op.attrs["slice_sizes"]) + [2]}
        )
    dn = dict(op.attrs["scatter_dimension_numbers"])
    dn["update_window_dims"] = list(dn.get("update_window_dims", ())) + [op.operands[2].type.rank]
    return packed(ctx, op, inputs, {"scatter_dimension_numbers": dn})


def _check_sum(op: hir.Op) -> str | None:
    n = len(op.results)
    kind = (
        scatter_kind(op)
        if op.name == "stablehlo.scatter"
        else (reducer_kind(op.regions[0]) if n == 1 else None)
    )
    if kind == "mul" and op.name == "stablehlo.scatter" and not op.attrs.get("unique_indices"):
        return ("complex scatter-multiply at indices that may repeat is not lowered "
                "(`.at[i].multiply` with slices, integers or `unique_indices=True` is)")
    if kind not in ("add", "none", "mul") or (kind == "mul" and op.name != "stablehlo.scatter"):
        return f"complex {op.short_name} with a combiner other than add is not lowered"
    return _real_check(op)


def _setting(op: hir.Op) -> hir.Op:
    """``op`` (a scatter) with a body that sets each element to its update."""
    body = op.regions[0]
    return hir.Op(op.name, op.operands, op.results, op.attrs,
                  [hir.Block(body.args, [], [body.args[1]])], op.location)


@complex_lowering("stablehlo.scatter", check=_check_sum, onnx_ops=("ScatterND", "Where"))
def lower_scatter(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """Scatter (set or add) of (re, im) pairs, the pair axis one more update window axis.

    A product at unique indices scatters the updates and a mask of the places they reach, and
    multiplies there with XLA's complex product: each place meets one update, as in XLA."""
    if scatter_kind(op) != "mul":
        return lower_indexed(ctx, op, inputs)
    x, idx, upd = inputs
    dtype = component(op.results[0].type.dtype)
    setting = _setting(op)
    zeros = zeros_like(ctx, x, dtype)
    spread = lower_indexed(ctx, setting, [zeros, idx, upd])[0]
    ones = ctx.op("Expand", [ctx.scalar(1.0, dtype), ctx.op("Shape", [upd])])
    reached = lower_indexed(ctx, setting, [zeros, idx, ones])[0]
    reached = ctx.op("Cast", [parts(ctx, reached)[0]], to=TensorProto.BOOL)
    product = pack(ctx, *multiply(ctx, parts(ctx, x), parts(ctx, spread), dtype))
    return [ctx.op("Where", [ctx.op("Unsqueeze", [reached, ctx.i64([-1])]), product, x])]


def _check_reduce(op: hir.Op) -> str | None:
    n = len(op.results)
    if n == 1 and reducer_kind(op.regions[0]) == "add":
        return _real_check(op)
    from jaxconv.onnx.ops.complex_reduce import general_problem

    return general_problem(op)


@complex_lowering(
    "stablehlo.reduce",
    "stablehlo.reduce_window",
    check=_check_reduce,
    onnx_ops=("ReduceSum", "CumSum", "Slice"),
)
def lower_reduce(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """Sums (reduce, windowed) of complex values per half; other bodies (product, max, min) applied to
    whole tensors in a halving tree or a prefix scan (``complex_reduce``)."""
    if len(op.results) == 1 and reducer_kind(op.regions[0]) == "add":
        return via_parts(ctx, op, inputs)
    from jaxconv.onnx.ops.complex_reduce import lower_general

    return lower_general(ctx, op, inputs)


@complex_lowering("stablehlo.dot_general", check=_real_check, onnx_ops=("MatMul",))
def lower_dot_general(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Four real products (re re - im im, re im + im re): the three-product Gauss form loses
    accuracy to cancellation when the halves differ in size."""
    lhs_c, rhs_c = (is_complex(v.type) for v in op.operands)
    a = parts(ctx, inputs[0]) if lhs_c else (inputs[0], None)
    b = parts(ctx, inputs[1]) if rhs_c else (inputs[1], None)

    def dot(x: str, y: str) -> str:
        return real_lowering(ctx, op, [x, y])[0]

    re = dot(a[0], b[0])
    if a[1] is not None and b[1] is not None:
        re = ctx.op("Sub", [re, dot(a[1], b[1])])
        im = ctx.op("Add", [dot(a[0], b[1]), dot(a[1], b[0])])
    else:
        im = dot(a[0], b[1]) if b[1] is not None else dot(a[1], b[0])  # type: ignore[arg-type]
    return pack(ctx, re, im)
