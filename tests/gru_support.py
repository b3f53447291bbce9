"""Sizes, inputs and the comparison with jax.jit shared by the GRU rule's tests (test_gru_rewrite.py,
test_gru_forms.py, test_gru_size.py)."""

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


def assert_runs_like_jit(model, fn, input_sets, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """ONNX Runtime's outputs of ``model`` on each input set are jax.jit's of ``fn``: NaN in the same
    places, the other elements within ``rtol`` and ``atol``."""
    import jax

    from jaxconv.runtimes.onnxrt import OnnxRunner

    runner = OnnxRunner(model.SerializeToString())
    for inputs in input_sets:
        got = runner.run(inputs)
        want = [np.asarray(w) for w in jax.tree_util.tree_leaves(jax.jit(fn)(*inputs))]
        assert len(got) == len(want), (len(got), len(want))
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def op_types_with_branches(model) -> set[str]:
    """Op types of the main graph and of its subgraphs (If branches, Scan bodies), at any depth."""
    from onnx_graphs import op_types

    return set(op_types(model.graph))
