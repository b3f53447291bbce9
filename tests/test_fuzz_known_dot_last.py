"""A product at the end of a chain over a huge input: a causal log-softmax of a row holding FLT_MAX puts
-FLT_MAX beside -inf in its output, and its product by v then overflows. jax.jit gives NaN (inf - inf),
ONNX Runtime -inf (its fused multiply-add keeps -FLT_MAX * -2.6 unrounded beside the -inf), the order of
the terms deciding. The fuzzer found it as ``causal_mask+log_softmax+attend/f32/nan``; the known row needs the
huge input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxconv
from conformance.fuzz import known
from jaxconv.runtimes.onnxrt import OnnxRunner


def _fn(s, v):
    return jax.nn.log_softmax(jnp.where(jnp.tril(jnp.ones((8, 8), bool)), s, -jnp.inf), axis=-1) @ v


def test_the_product_after_a_huge_log_softmax_differs_by_its_order():
    s = np.ones((1, 1, 8, 8), np.float32)
    s[0, 0, 6, 2] = np.finfo(np.float32).max
    v = np.ones((1, 1, 8, 8), np.float32)
    v[0, 0, 6, 7] = -2.5963387
    want = np.asarray(jax.jit(_fn)(s, v))
    model = jaxconv.to_onnx(_fn, s, v, check=False)
    (got,) = OnnxRunner(model.SerializeToString()).run([s, v])
    assert np.isnan(want[0, 0, 6, 7]) and got[0, 0, 6, 7] == -np.inf
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-6)  # the last row: a dot's last bit


def test_the_known_row_needs_a_huge_input():
    assert known.match("causal_mask+log_softmax+attend/f32/nan", frozenset({"huge-input"})) is not None
    assert known.match("causal_mask+log_softmax+attend/f32/nan", frozenset()) is None
    assert known.match("causal_mask+log_softmax/f32/nan", frozenset({"huge-input"})) is None  # no product
    assert known.match("causal_mask+softmax+attend/f32/nan", frozenset({"huge-input"})) is None  # bounded


def _fill_fn(s, v):
    masked = jnp.where(jnp.tril(jnp.ones((8, 8), bool)), s, jnp.finfo(jnp.float32).min)
    return jax.nn.log_softmax(masked, axis=-1) @ v


def test_the_product_after_a_log_softmax_of_a_huge_fill_differs_by_its_order():
    """The huge value can come from the mask's fill with no huge input: the masked places of a log-softmax
    behind ``finfo.min`` are about -FLT_MAX, and a row of v holding -1.93 makes their products overflow in
    jax.jit (-FLT_MAX * -1.93 rounds to inf) while ORT's fused multiply-adds keep them unrounded
    (-FLT_MAX + 1.93 FLT_MAX - FLT_MAX: -2.2e37). Found as ``causal_mask+log_softmax+attend/f32/inf``."""
    s = np.ones((1, 1, 8, 8), np.float32)
    v = np.ones((1, 1, 8, 8), np.float32)
    v[0, 0, 6, 2] = -1.9342374
    want = np.asarray(jax.jit(_fill_fn)(s, v))
    model = jaxconv.to_onnx(_fill_fn, s, v, check=False)
    (got,) = OnnxRunner(model.SerializeToString()).run([s, v])
    assert want[0, 0, 4, 2] == np.inf and np.isfinite(got[0, 0, 4, 2]) and got[0, 0, 4, 2] < -1e37
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6)


def test_the_known_row_takes_a_huge_fill_for_a_huge_input():
    from conformance.fuzz.program import FuzzProgram, Step

    assert known.match("causal_mask+log_softmax+attend/f32/inf", frozenset({"huge-fill"})) is not None
    assert known.match("causal_mask+softmax+attend/f32/inf", frozenset({"huge-fill"})) is None  # bounded
    for fill, facts in (("jnp.finfo(jnp.float32).min", {"huge-fill"}), ("-jnp.inf", set()), ("-1e9", set()),
                        ("-3e38", {"huge-fill"})):
        step = Step("causal_mask", (0,), "jnp.where(jnp.tril(jnp.ones((8, 8), bool)), {}, " + fill + ")", 1)
        assert known.program_facts(FuzzProgram(inputs=[0], steps=[step], outputs=[1])) & {"huge-fill"} == facts, fill
