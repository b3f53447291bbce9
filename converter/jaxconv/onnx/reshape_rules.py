"""Rewrite rule: a Reshape whose target spells out its input's own shape, with one ``-1``, is a no-op.

onnxscript's folding drops a Reshape whose target equals its input's shape entry by entry. The
lowering and the rules that pool planes write targets like ``[-1, 256, 2, 2]`` for a symbolic batch
(the batch's size is not a constant), and ``-1`` never equals ``b``: on ``f32[b, 256, 2, 2]`` the Reshape
stays, a copy per run, where the static model has none. A target whose every entry but one equals the
input's dimension there (the same number, or 0 copying it) keeps the element count only if the ``-1``
stands for that one's size too, so the Reshape moves nothing.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter import MatchResult, RewriteRuleClassBase


class InferredSameShapeReshape(RewriteRuleClassBase):
    """``Reshape(x, t)`` -> ``x`` where ``t`` is ``x``'s shape with one entry -1 and static sizes elsewhere."""

    def pattern(self, op, x, target):
        return op.Reshape(x, target, _allow_other_attributes=True)

    def check(self, context, x: ir.Value, target: ir.Value) -> MatchResult:
        result = MatchResult()
        tensor = ir.convenience.get_const_tensor(target)
        if x.shape is None or tensor is None:
            return result.fail("the input's rank or the target is unknown")
        entries = [int(e) for e in tensor.numpy().reshape(-1)]
        allowzero = context.root.attributes.get("allowzero")
        copies = allowzero is None or allowzero.as_int() == 0
        if len(entries) != len(x.shape) or entries.count(-1) > 1:
            return result.fail("the target changes the rank or infers more than one size")
        for entry, dim in zip(entries, x.shape):
            if entry == -1 or (entry == 0 and copies):
                continue
            if not isinstance(dim, int) or entry != dim:
                return result.fail("an entry is not the input's size there")
        return result

    def rewrite(self, op, x: ir.Value, target: ir.Value):
        return op.Identity(x)


inferred_same_shape_reshape_rule = InferredSameShapeReshape.rule()
