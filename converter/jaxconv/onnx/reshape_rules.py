"""Rewrite rule: a Reshape whose target spells out its input's own shape, with one ``-1``, is a no-op.

onnxscript's folding drops a Reshape whose target equals its input's shape entry by entry. The
lowering and the rules that pool planes write targets like ``[-1, 256, 2, 2]`` for a symbolic batch
(the batch's size is not a constant), and ``-1`` never equals ``b``: on ``f32[b, 256, 2, 2]`` the Reshape
stays, a copy per run, where the static model has none. A target whose every entry but one equals the
input's dimension there (the same number, or 0 copying it) keeps the element count only if the ``-1``
stands for that one's size too, so the Reshape moves nothing.

A Reshape of an Unsqueeze or a Squeeze reads the elements in the same order either way: with a constant target
that copies no size (no 0), ``Reshape(Unsqueeze(x), t)`` is ``Reshape(x, t)`` (EfficientNet's squeeze-excite
mean ``[b, c]`` unsqueezed to ``[b, 1, 1, c]`` and reshaped to ``[-1, c, 1]``; the static model folds the
Unsqueeze's target in).
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
        if -1 in entries and any(d == 0 for e, d in zip(entries, x.shape) if e != -1):
            return result.fail("no elements: the -1 is not determined")
        return result

    def rewrite(self, op, x: ir.Value, target: ir.Value):
        return op.Identity(x)


inferred_same_shape_reshape_rule = InferredSameShapeReshape.rule()


class ReshapeOfRegroup(RewriteRuleClassBase):
    """``Reshape(Unsqueeze(x) or Squeeze(x), t)`` -> ``Reshape(x, t)`` for a constant ``t`` without a 0."""

    def __init__(self, inner: str) -> None:
        super().__init__(f"ReshapeOf{inner}")
        self.inner = inner
        self._allowzero = 0

    def pattern(self, op, x, axes, target):
        inner = op.Unsqueeze(x, axes) if self.inner == "Unsqueeze" else op.Squeeze(x, axes)
        return op.Reshape(inner, target, _allow_other_attributes=True)

    def check(self, context, x: ir.Value, axes: ir.Value, target: ir.Value) -> MatchResult:
        result = MatchResult()
        tensor = ir.convenience.get_const_tensor(target)
        if tensor is None:
            return result.fail("the target is computed")
        allowzero = context.root.attributes.get("allowzero")
        self._allowzero = 0 if allowzero is None else allowzero.as_int()
        if self._allowzero == 0 and 0 in tensor.numpy().reshape(-1).tolist():
            return result.fail("the target copies a size of the regrouped tensor")
        return result

    def rewrite(self, op, x: ir.Value, axes: ir.Value, target: ir.Value):
        return op.Reshape(x, target, allowzero=self._allowzero)


reshape_of_unsqueeze_rule = ReshapeOfRegroup.rule("Unsqueeze")
reshape_of_squeeze_rule = ReshapeOfRegroup.rule("Squeeze")
