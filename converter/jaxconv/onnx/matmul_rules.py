"""onnxscript's Reshape -> MatMul -> Reshape rules, only where dropping the Reshapes keeps every product.

onnxscript's check compares shapes: ``Reshape([h, b, k, d] -> [h, b * k, d])``, ``MatMul`` with a
batched ``[h, d, n]``, ``Reshape -> [h, b, k, n]`` passes it when ``b == h``, yet ``MatMul([h, b, k, d],
[h, d, n])`` broadcasts the rhs's batch over ``b``, not ``h`` (a dot_general with batch dims and two free
dims on the lhs: head 1's scores took head 0's query). Without batch dims on the rhs the Reshapes only
regroup the lhs's rows, which MatMul reads in the same order: the rules apply there (a Dense over
``[b, t, d]``), and only there.
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
from onnxscript.rewriter._rewrite_rule import RewriteRule
from onnxscript.rewriter.rules.common import _broadcast_to_matmul as onnxscript_rule


def _rows_only(context: Any, input_a: ir.Value, input_b: ir.Value, shape_c: ir.Value, shape_a: ir.Value,
               shape_b: ir.Value | None = None, **_: Any) -> bool:
    """The rhs a matrix (its Reshape, if any, a no-op) and the lhs's last dim kept: onnxscript's check then holds."""
    a, b = input_a.shape, input_b.shape
    if a is None or b is None or len(b) != 2 or not a.is_static() or not b.is_static() or len(a) < 2:
        return False
    new_a = shape_a.const_value
    if new_a is None or int(new_a.numpy().reshape(-1)[-1]) != a[-1] or a[-1] != b[0]:
        return False
    if shape_b is not None:
        new_b = shape_b.const_value
        if new_b is None or [int(d) for d in new_b.numpy().reshape(-1)] != [int(d) for d in b]:
            return False
    return bool(onnxscript_rule.check_if_not_need_reshape(context, input_a, input_b, shape_c))


two_reshapes_matmul_reshape_rule = RewriteRule(
    onnxscript_rule._two_reshapes_matmul_reshape_pattern, onnxscript_rule._matmul, _rows_only)
one_reshape_matmul_reshape_rule = RewriteRule(
    onnxscript_rule._one_reshape_matmul_reshape_pattern, onnxscript_rule._matmul, _rows_only)
