"""Graph rewrites that give ONNX Runtime the forms its fused kernels expect.

The lowering emits exact, general graphs; the rules here turn parts of them into
forms ORT runs faster (MatMul instead of Einsum, Softmax, Gelu, ...) without
changing the numbers. ``apply`` runs every rule on an ``onnx_ir.Model`` in place.
"""

from __future__ import annotations

import onnx_ir


def apply(model: onnx_ir.Model, opset: int) -> None:
    """Rewrites ``model`` in place into forms ONNX Runtime runs faster.

    Args:
        model: The model to rewrite.
        opset: The default-domain opset the model targets; rules that need a
            newer op (e.g. Gelu, opset 20) are skipped below it.
    """
    del model, opset
