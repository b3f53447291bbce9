"""Sorting complex values with JAX's comparator: lexicographic on (real, imaginary).

JAX's comparator for complex keys maps -0 to +0 and every NaN to one NaN, then compares the real
parts, and on equal real parts the imaginary parts, in IEEE total order (LT ascending, GT
descending). That is a two-key sort of the real halves (zeros equal, NaN after +inf); the other
operands (argsort's iota, sorted values) follow the permutation.
"""

from __future__ import annotations

from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops._complex import component, is_complex, pack, parts
from jaxconv.onnx.ops.sort import SortKey, gather_sorted, sort_permutation
from jaxconv.onnx.registry import complex_lowering
from jaxconv.stablehlo import ir as hir


def _direction(op: hir.Op) -> str | None:
    """'LT' or 'GT' when the comparator is JAX's complex comparator on the first operand pair, else None."""
    block = op.regions[0]
    if not is_complex(op.operands[0].type) or any(is_complex(v.type) for v in op.operands[1:]):
        return None
    keys = {block.args[0].id, block.args[1].id}
    others = {a.id for a in block.args[2:]}
    directions = set()
    parts_read = set()
    for o in hir.walk_ops(block):
        if any(v.id in others for v in o.operands):
            return None
        if o.name in ("stablehlo.real", "stablehlo.imag"):
            if o.operands[0].id not in keys:
                return None
            parts_read.add(o.name)
        elif any(v.id in keys for v in o.operands):
            return None
        if o.name == "stablehlo.compare" and o.attrs.get("compare_type") == "TOTALORDER":
            if o.attrs.get("comparison_direction") in ("LT", "GT"):
                directions.add(o.attrs["comparison_direction"])
    if parts_read != {"stablehlo.real", "stablehlo.imag"} or len(directions) != 1:
        return None
    return directions.pop()


def _check(op: hir.Op) -> str | None:
    if _direction(op) is None:
        return "sort of complex values with a comparator other than JAX's lexicographic one"
    return None


@complex_lowering("stablehlo.sort", check=_check, onnx_ops=("TopK", "GatherElements"))
def lower_sort(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """A stable two-key sort on (re, im) of the first operand; every operand gathered by the permutation."""
    descending = _direction(op) == "GT"
    t = op.operands[0].type
    axis = int(op.attrs.get("dimension", 0)) % max(t.rank, 1)
    re, im = parts(ctx, inputs[0])
    half = hir.TensorType(component(t.dtype), t.shape)
    keys = [SortKey(0, descending), SortKey(1, descending)]
    perm, _ = sort_permutation(ctx, [re, im], [half, half], keys, axis)
    out = [
        pack(
            ctx,
            gather_sorted(ctx, re, half.dtype, perm, axis),
            gather_sorted(ctx, im, half.dtype, perm, axis),
        )
    ]
    for name, v in zip(inputs[1:], op.operands[1:]):
        out.append(gather_sorted(ctx, name, v.type.dtype, perm, axis))
    return out
