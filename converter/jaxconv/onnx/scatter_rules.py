"""onnxscript's "a ScatterND over every row is its updates" rule, for plain assignment only.

onnxscript's ``no_op_static_scatter_nd_rule`` replaces ``ScatterND(data, [[0], ..., [n-1]], updates)`` by
``updates`` whatever the node's ``reduction``; with ``reduction="min"`` (``x.at[i].min(u)``), "max", "add"
or "mul" the result combines ``data`` with the updates, so that rewrite drops ``data``: a one-row
``x.at[0].min(u)`` returned ``u``. This subclass fires only where the reduction is "none".
"""

from __future__ import annotations

from onnxscript.rewriter import MatchResult
from onnxscript.rewriter.rules.common import _redundant_scatter_nd as scatter


class WholeScatterAssignment(scatter.ScatterAllStatic):
    """ScatterND(data, every row in order, updates) with no reduction -> updates."""

    def check(self, context, data, indices, updates, **_):
        reduction = context.root.attributes.get("reduction")
        if reduction is not None and reduction.as_string() != "none":
            return MatchResult().fail("ScatterND combines data with the updates.")
        return super().check(context, data, indices, updates)


whole_scatter_assignment_rule = WholeScatterAssignment.rule()
