"""Attention's scale on q before ``q @ k``: ONNX Runtime's graph optimizer (MatMulScaleFusion) folds it into the
product, so ORT computes c * (q @ k) where jax.jit computes (q * c) @ k. Where q @ k alone passes the largest
float, ORT's product overflows and jax.jit's does not. The artifact itself keeps jax.jit's order: with that one
fusion disabled, ORT gives jax.jit's numbers. The fuzzer found it as ``dense_q+dense_k+..+softmax/f32/nan`` (seed
5051 program 136, an input of -1.8e19); the known row needs an input whose square can overflow and a scaled
operand in the program."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnxruntime as ort

import jaxconv
from conformance.fuzz import known
from conformance.fuzz.program import FuzzProgram, Step


def _scores(q, k):
    return jnp.einsum("bhqd,bhkd->bhqk", q * 0.5, k)


def _run(model: bytes, q: np.ndarray, k: np.ndarray, disabled: list[str]) -> np.ndarray:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"], disabled_optimizers=disabled)
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, (q, k))))[0]


def test_ort_folds_the_scale_into_the_product_and_overflows_before_it():
    q = np.ones((1, 1, 2, 4), np.float32)
    q[..., 0] = 2e19  # q . k = 4e38 + 3: past FLT_MAX; (q * 0.5) . k = 2e38 + 1.5: not
    k = q.copy()
    want = np.asarray(jax.jit(_scores)(q, k))
    assert np.isfinite(want).all() and want.max() > 1e38
    model = jaxconv.to_onnx(_scores, q, k, check=False).SerializeToString()
    np.testing.assert_allclose(_run(model, q, k, ["MatMulScaleFusion"]), want, rtol=1e-6)  # the artifact's order
    assert np.isinf(_run(model, q, k, [])).all()  # ORT's default optimization


def _program(expr: str) -> FuzzProgram:
    return FuzzProgram(inputs=[0, 1], steps=[Step("scores", (0, 1), expr, 2)], outputs=[2])


def test_the_known_row_needs_a_square_overflow_and_a_scaled_operand():
    seen = known.SQUARES | {"scaled-operand"}
    row = known.match("dense_q+dense_k+..+softmax/f32/nan", seen)
    assert row is not None and row.reason == known.SCALE_FOLD
    assert known.match("scores/f32/inf", seen).reason == known.SCALE_FOLD
    assert getattr(known.match("dense_q+dense_k+..+softmax/f32/nan", known.SQUARES), "reason", None) != known.SCALE_FOLD
    assert getattr(known.match("dense_q+dense_k+..+softmax/f32/nan", frozenset({"scaled-operand"})), "reason",
                   None) != known.SCALE_FOLD
    assert known.match("softmax/f32/nan", seen) is None  # no product


def test_the_scaled_operand_fact_reads_both_score_forms():
    for expr, fact in (("jnp.einsum('bhqd,bhkd->bhqk', {0} * 0.707107, {1})", True),
                       ("jnp.einsum('bhqd,bhkd->bhqk', {0} * (1 / np.sqrt(4)), {1})", True),  # seed 9090 program 116
                       ("({0} * 0.5) @ jnp.swapaxes({1}, -1, -2)", True),
                       ("({0} @ jnp.swapaxes({1}, -1, -2)) * 0.5", False),  # a scale after the product: not folded
                       ("jnp.einsum('bhqd,bhkd->bhqk', {0}, {1})", False)):
        assert ("scaled-operand" in known.program_facts(_program(expr))) == fact, expr
