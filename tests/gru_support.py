"""Sizes and inputs shared by the GRU rewrite tests (test_gru_rewrite.py, test_gru_forms.py)."""

from __future__ import annotations

import numpy as np

H, N_IN, T, B = 8, 5, 6, 3  # hidden size, input features, steps, batch


def gru_inputs(seed: int, nonfinite: bool = False) -> list[np.ndarray]:
    """Seeded [xs (T, B, N_IN), h0 (B, H)]; with ``nonfinite``, xs holds a NaN, an inf and a -inf (for which
    the rewritten graph runs the exact Loop)."""
    rng = np.random.default_rng(seed)
    xs = rng.standard_normal((T, B, N_IN)).astype(np.float32) * 2
    h0 = rng.standard_normal((B, H)).astype(np.float32)
    if nonfinite:
        xs[2, 1, 3], xs[4, 0, 0], xs[1, 2, 2] = np.nan, np.inf, -np.inf
    return [xs, h0]


def op_types_with_branches(model) -> set[str]:
    """Op types of the main graph and of the subgraphs its nodes hold (If branches, Scan bodies)."""
    import onnx

    ops = set()
    for node in model.graph.node:
        ops.add(node.op_type)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                ops |= {n.op_type for n in attr.g.node}
    return ops
