"""Find everything the lowering cannot handle before lowering anything."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterator

from jaxconv.errors import UnsupportedError
from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.complex_layout import COMPONENT
from jaxconv.onnx.registry import lookup, lookup_for, touches_complex
from jaxconv.stablehlo import ir as hir

UNSUPPORTED_DTYPE_REASON: dict[str, str] = {}


def reachable_ops(module: hir.Module, entry: hir.Function) -> Iterator[hir.Op]:
    """Every op the entry function can execute, following func.call and composites."""
    seen: set[str] = set()
    stack = [entry]
    while stack:
        fn = stack.pop()
        if fn.name in seen:
            continue
        seen.add(fn.name)
        for op in hir.walk_ops(fn.body):
            yield op
            callee = op.attrs.get("callee") if op.name == "func.call" else None
            if op.name == "stablehlo.composite":
                lowering = lookup(op.name)
                if lowering is not None and lowering.check is not None and lowering.check(op) is None:
                    from jaxconv.onnx.ops.composites import composite_is_native

                    if composite_is_native(op):
                        continue
                callee = op.attrs.get("decomposition")
            if callee and callee in module.functions:
                stack.append(module.functions[callee])


def _problem(op: hir.Op) -> str | None:
    if op.name == "func.call":
        return None
    lowering = lookup_for(op)
    if lowering is None:
        return "no ONNX lowering for this op on complex values" if touches_complex(op) else "no ONNX lowering for this op"
    if lowering.check is not None:
        return lowering.check(op)
    return None


def _dtype_problem(op: hir.Op) -> str | None:
    for v in list(op.operands) + list(op.results):
        dtype = v.type.dtype
        if dtype == "token" or dtype.startswith("tuple<"):
            continue
        if dtype in UNSUPPORTED_DTYPE_REASON:
            return f"{dtype} values: {UNSUPPORTED_DTYPE_REASON[dtype]}"
        if dtype not in dt.ONNX_TYPE and dtype not in COMPONENT:
            return f"{dtype} values have no ONNX type"
    return None


def preflight(module: hir.Module, entry: hir.Function) -> None:
    """Raise one UnsupportedError that lists every problem, with counts and source lines."""
    counts: Counter[tuple[str, str]] = Counter()
    where: dict[tuple[str, str], list[str]] = defaultdict(list)
    for op in reachable_ops(module, entry):
        reason = _problem(op) or _dtype_problem(op)
        if reason is None:
            continue
        label = op.name
        if op.name == "stablehlo.custom_call":
            label = f"stablehlo.custom_call @{op.attrs.get('call_target_name')}"
        elif op.name == "stablehlo.composite":
            label = f"stablehlo.composite {op.attrs.get('name')}"
        key = (label, reason)
        counts[key] += 1
        loc = hir.short_location(op.location)
        if loc and loc not in where[key] and len(where[key]) < 3:
            where[key].append(loc)
    if not counts:
        return
    parts = []
    for (label, reason), n in sorted(counts.items()):
        at = f" at {', '.join(where[(label, reason)])}" if where[(label, reason)] else ""
        parts.append(f"{label} x{n} ({reason}){at}")
    raise UnsupportedError(
        f"cannot convert to ONNX: {len(counts)} unsupported construct(s): " + "; ".join(parts)
        + ". Run `jaxconv list-ops` to see what is supported, or convert to another target.")
