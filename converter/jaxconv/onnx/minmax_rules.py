"""onnxscript's Min/Max fusion rules (successive Min or Max, Min/Max into Clip) with unique bound names.

onnxscript names a fused rule's new bounds after its input (``x_min``, ``x_max``) and, when a second fusion
over the same input adds bounds of the same name, replaces the first fusion's initializers: two clamps of one
value then share bounds (a wrong result) or refer to a value that is never defined (onnx.checker error).
These subclasses add the fused node's output name, which is unique in the graph.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter.rules.common import _min_max_to_clip as mm


def _unique(constants: list[tuple[ir.Tensor, str]], first_node: ir.Node) -> list[tuple[ir.Tensor, str]]:
    tag = first_node.outputs[0].name or str(id(first_node))
    return [(tensor, f"{name}_{tag}") for tensor, name in constants]


class _UniqueBounds:
    """Mixin for onnxscript's min/max rules: the folded bounds are named after the first node's output."""

    def compute_constants(self, first_node: ir.Node, second_node: ir.Node, input_name: str = ""):
        return _unique(super().compute_constants(first_node, second_node, input_name), first_node)  # type: ignore[misc]


class FuseSuccessiveMin(_UniqueBounds, mm.FuseSuccessiveMin):
    """Min(Min(x, a), b) -> Min(x, min(a, b)), the bound named uniquely."""


class FuseSuccessiveMax(_UniqueBounds, mm.FuseSuccessiveMax):
    """Max(Max(x, a), b) -> Max(x, max(a, b)), the bound named uniquely."""


class FuseMinMaxToClip(_UniqueBounds, mm.FuseMinMaxToClip):
    """Max(Min(x, hi), lo) -> Clip(x, lo, hi), the bounds named uniquely."""


class FuseMaxMinToClip(_UniqueBounds, mm.FuseMaxMinToClip):
    """Min(Max(x, lo), hi) -> Clip(x, lo, hi), the bounds named uniquely."""


min_min_rule = FuseSuccessiveMin().rule()
max_max_rule = FuseSuccessiveMax().rule()
min_max_rule = FuseMinMaxToClip().rule()
max_min_rule = FuseMaxMinToClip().rule()
