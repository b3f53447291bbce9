"""Helpers for complex values: (re, im) halves of the [..., 2] layout, and real views of ops.

A complex tensor is a real tensor with a trailing axis of 2 (see ``onnx.complex_layout``). The
lowerings split it into its halves (``parts``), compute on real tensors and put the halves back
together (``pack``). Halves are remembered per graph scope, so a chain of complex ops splits each
value once; a Gather nothing uses any more is removed by the clean-up.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from jaxconv.onnx.complex_layout import COMPONENT
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops._common import where
from jaxconv.onnx.registry import REGISTRY
from jaxconv.stablehlo import ir as hir


def is_complex(t: hir.TensorType) -> bool:
    """True for a complex64 or complex128 type."""
    return t.dtype in COMPONENT


def component(dtype: str) -> str:
    """The real dtype of a complex dtype's halves (a real dtype maps to itself)."""
    return COMPONENT.get(dtype, dtype)


def _cached(ctx: LoweringContext, name: str) -> tuple[str, str] | None:
    scope = ctx.scope
    while scope is not None:
        found = ctx.complex_parts.get((scope, name))
        if found is not None:
            return found
        scope = scope.parent
    return None


def parts(ctx: LoweringContext, name: str) -> tuple[str, str]:
    """The (re, im) halves of the complex tensor ``name``."""
    found = _cached(ctx, name)
    if found is not None:
        return found
    known = ctx.constant_value(name)
    if known is not None:
        re, im = ctx.const(known[..., 0]), ctx.const(known[..., 1])
    else:
        re = ctx.op("Gather", [name, ctx.const(np.array(0, np.int64))], axis=-1, name_hint="re")
        im = ctx.op("Gather", [name, ctx.const(np.array(1, np.int64))], axis=-1, name_hint="im")
    ctx.complex_parts[(ctx.scope, name)] = (re, im)
    return re, im


def known_parts(ctx: LoweringContext, name: str) -> tuple[str, str] | None:
    """The (re, im) halves of ``name`` when they need no Gather (a lowering made them, or a constant),
    else None: a lowering that can read the packed tensor directly does so instead."""
    if _cached(ctx, name) is not None or ctx.constant_value(name) is not None:
        return parts(ctx, name)
    return None


_VALUE_KEEPING = ("Expand", "Reshape", "Unsqueeze", "Squeeze", "Identity", "Transpose", "Flatten")


def is_zeros(ctx: LoweringContext, name: str) -> bool:
    """True when every element of the float tensor ``name`` is a zero by construction: a constant of
    zeros, broadcast, reshaped or transposed (the zero imaginary half of a real value made complex)."""
    for _ in range(8):
        known = ctx.constant_value(name)
        if known is not None:
            return known.dtype.kind == "f" and not np.any(known)
        node = ctx.producer(name)
        if node is None or node.domain or node.op_type not in _VALUE_KEEPING or node.inputs[0] is None:
            return False
        name = node.inputs[0].name or ""
    return False


def share_parts(ctx: LoweringContext, name: str, re: str, im: str) -> None:
    """Record ``re`` and ``im`` (computed apart) as the halves of the complex tensor ``name``: readers
    of its halves use them, and what computes ``name`` goes where nothing reads it packed."""
    ctx.complex_parts[(ctx.scope, name)] = (re, im)


def pack(ctx: LoweringContext, re: str, im: str) -> str:
    """The complex tensor with halves ``re`` and ``im`` (same shape and real dtype)."""
    axis = ctx.i64([-1])
    out = ctx.op(
        "Concat",
        [ctx.op("Unsqueeze", [re, axis]), ctx.op("Unsqueeze", [im, axis])],
        axis=-1,
        name_hint="cplx",
    )
    ctx.complex_parts[(ctx.scope, out)] = (re, im)
    return out


def complex_const(ctx: LoweringContext, value: np.ndarray) -> str:
    """A complex numpy array as a constant in the (re, im) layout."""
    value = np.asarray(value)
    work = COMPONENT[value.dtype.name]
    re, im = ctx.const(value.real.astype(work)), ctx.const(value.imag.astype(work))
    out = ctx.const(np.stack([value.real, value.imag], axis=-1).astype(work))
    ctx.complex_parts[(ctx.scope, out)] = (re, im)
    return out


def select(ctx: LoweringContext, cond: str, a: str, b: str, dtype: str) -> str:
    """``cond ? a : b`` on real halves, keeping the sign of zero."""
    return where(ctx, cond, a, b, dtype)


class _RealView:
    """Copies of values with complex types made real; one copy per value, so identity checks hold."""

    def __init__(self) -> None:
        self.seen: dict[int, hir.Value] = {}

    def value(self, v: hir.Value) -> hir.Value:
        found = self.seen.get(v.id)
        if found is None:
            found = self.seen[v.id] = hir.Value(
                hir.TensorType(component(v.type.dtype), v.type.shape), id=v.id
            )
        return found

    def block(self, block: hir.Block) -> hir.Block:
        return hir.Block(
            args=[self.value(a) for a in block.args],
            ops=[self.op(o) for o in block.ops],
            returns=[self.value(r) for r in block.returns],
        )

    def op(self, op: hir.Op, name: str | None = None) -> hir.Op:
        return hir.Op(
            name=name or op.name,
            operands=[self.value(v) for v in op.operands],
            results=[self.value(v) for v in op.results],
            attrs=op.attrs,
            regions=[self.block(b) for b in op.regions],
            location=op.location,
        )


def real_view(op: hir.Op, name: str | None = None) -> hir.Op:
    """``op`` with every complex type replaced by its component type (same value ids, regions included)."""
    return _RealView().op(op, name)


def real_lowering(
    ctx: LoweringContext, op: hir.Op, inputs: Sequence[str], name: str | None = None
) -> list[str]:
    """Run the real lowering of ``name`` (default: ``op``'s) on ``op``'s real view."""
    out = REGISTRY[name or op.name].fn(ctx, real_view(op, name), list(inputs))
    return [out] if isinstance(out, str) else list(out or [])


def via_parts(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """An op that treats real and imaginary halves alike (data movement, sums): its real lowering
    applied to the real halves and to the imaginary halves."""
    halves = []
    for k in (0, 1):
        ins = [parts(ctx, n)[k] if is_complex(v.type) else n for n, v in zip(inputs, op.operands)]
        halves.append(real_lowering(ctx, op, ins))
    return [
        pack(ctx, re, im) if is_complex(v.type) else re for v, re, im in zip(op.results, halves[0], halves[1])
    ]
