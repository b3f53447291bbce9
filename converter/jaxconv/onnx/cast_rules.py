"""Rewrite rule: a Cast round trip through a type that holds every value exactly is a no-op.

``Cast(Cast(x, to=wider), to=type(x))`` gives back ``x`` when ``wider`` represents every value of
``x``'s type (int8 -> int32 -> int8, bfloat16 -> float32 -> bfloat16). A round trip through a
narrower or differently shaped type (float32 -> bfloat16 -> float32) rounds, and stays.
"""

from __future__ import annotations

from typing import ClassVar

import onnx_ir as ir
from onnxscript.rewriter import MatchResult, RewriteRuleClassBase

D = ir.DataType
LOSSLESS_WIDENING = frozenset({
    (D.BFLOAT16, D.FLOAT), (D.FLOAT16, D.FLOAT), (D.FLOAT, D.DOUBLE), (D.FLOAT16, D.DOUBLE), (D.BFLOAT16, D.DOUBLE),
    (D.INT8, D.INT16), (D.INT8, D.INT32), (D.INT8, D.INT64), (D.INT16, D.INT32), (D.INT16, D.INT64),
    (D.INT32, D.INT64), (D.UINT8, D.INT16), (D.UINT8, D.INT32), (D.UINT8, D.INT64), (D.UINT8, D.UINT16),
    (D.UINT8, D.UINT32), (D.UINT8, D.UINT64), (D.UINT16, D.INT32), (D.UINT16, D.INT64), (D.UINT16, D.UINT32),
    (D.UINT16, D.UINT64), (D.UINT32, D.INT64), (D.UINT32, D.UINT64),
    (D.BOOL, D.INT8), (D.BOOL, D.INT32), (D.BOOL, D.INT64), (D.BOOL, D.UINT8), (D.BOOL, D.FLOAT),
})


class LosslessCastRoundTrip(RewriteRuleClassBase):
    """``Cast(Cast(x, to=wider), to=type(x))`` -> ``x`` for a widening that loses nothing."""

    pairs: ClassVar = LOSSLESS_WIDENING

    def pattern(self, op, x, mid, to):
        return op.Cast(op.Cast(x, to=mid), to=to)

    def check(self, context, x: ir.Value, mid: ir.Attr, to: ir.Attr) -> MatchResult:
        result = MatchResult()
        if x.dtype is None:
            return result.fail("the source type is unknown")
        if x.dtype != D(to.as_int()) or (x.dtype, D(mid.as_int())) not in self.pairs:
            return result.fail("not a lossless round trip")
        return result

    def rewrite(self, op, x: ir.Value, mid: ir.Attr, to: ir.Attr):
        return op.Identity(x)


lossless_cast_round_trip_rule = LosslessCastRoundTrip.rule()


class CastBeforeTranspose(RewriteRuleClassBase):
    """``Cast(Transpose(x))`` -> ``Transpose(Cast(x))``: the same values (a Cast acts on each element
    alone), in the order ONNX Runtime 1.32 can load. Its MatMul-Transpose fusion crashes the process
    while the session is built when a Transpose that moves the first axis ([1, 0, 2], [1, 2, 0],
    [1, 2, 0, 3], [1, 2, 3, 0]) reaches a MatMul through a Cast, directly or through another Transpose
    its optimizer merges (found with a float16 attention whose heads have one element: f16 -> Transpose
    -> Cast(f32) -> MatMul); with the Cast first, every such graph loads and runs. Done wherever the
    Transpose has no other reader (no work is added), and where a MatMul reads the Cast."""

    def pattern(self, op, x, perm, to):
        return op.Cast(op.Transpose(x, perm=perm, _outputs=["moved"]), to=to, _outputs=["casted"])

    def check(self, context, x: ir.Value, perm: ir.Attr, to: ir.Attr, moved: ir.Value, casted: ir.Value) -> MatchResult:
        result = MatchResult()
        alone = len(moved.uses()) == 1 and not moved.is_graph_output()
        if not alone and not any(u.node.op_type in ("MatMul", "Gemm") and u.node.domain == "" for u in casted.uses()):
            return result.fail("the Transpose has other readers and no MatMul reads the Cast")
        return result

    def rewrite(self, op, x: ir.Value, perm: ir.Attr, to: ir.Attr, moved: ir.Value, casted: ir.Value):
        return op.Transpose(op.Cast(x, to=to.as_int()), perm=perm.as_ints())


cast_before_transpose_rule = CastBeforeTranspose.rule()
