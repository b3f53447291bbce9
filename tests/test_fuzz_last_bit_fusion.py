"""A fused a * b + c * d (XLA on CPU contracts it to an FMA, ONNX Runtime rounds the product first) is one ulp
off in some elements, up in one and down in another; a cancellation after it magnifies that (found by the model
family, seed 6029 program 168: rotary_k+scores/f32/value). The fuzzer names it last-bit: jax computing that
value op by op (no fusion) gives the artifact's result."""

from __future__ import annotations

import jax
import numpy as np

from conformance.fuzz import known
from conformance.fuzz import run as fuzz_run
from conformance.fuzz.compare import compare_all
from conformance.fuzz.driver import _relabel_last_bit, class_of
from conformance.fuzz.minimise import Failure
from conformance.fuzz.program import FuzzProgram, Step, Value, infer_types


def _contracted_pair() -> list[np.ndarray]:
    """a, b, c, d of two elements: jax.jit's a * b + c * d is above the rounded products' sum in one, below in the other."""
    r = np.random.default_rng(0)
    a, b, c, d = (r.standard_normal(256).astype(np.float32) for _ in range(4))
    jit = np.asarray(jax.jit(lambda a, b, c, d: a * b + c * d)(a, b, c, d))
    plain = a * b + c * d
    up, down = int(np.nonzero(jit > plain)[0][0]), int(np.nonzero(jit < plain)[0][0])
    return [x[[up, down]] for x in (a, b, c, d)]


def _program(near: np.ndarray) -> FuzzProgram:
    t = ", ".join(repr(float(x)) for x in (near * np.float32(1 - 2.0 ** -20)))  # k - t: about 2^-20 k
    return infer_types(FuzzProgram(
        inputs=[0, 1, 2, 3],
        steps=[Step("mul_add", (0, 1, 2, 3), "{0} * {1} + {2} * {3}", 4),
               Step("cancel", (4,), f"jnp.sum(({{0}} - jnp.array([{t}], jnp.float32)) * 1e6)", 5)],
        outputs=[5], types={k: Value((2,), "float32") for k in range(4)}))


def test_an_fma_contraction_magnified_is_named_last_bit():
    inputs = _contracted_pair()
    a, b, c, d = inputs
    jit_k = np.asarray(jax.jit(lambda a, b, c, d: a * b + c * d)(*inputs))
    p = _program(jit_k)
    expected = fuzz_run.reference(p, inputs)
    plain_k = a * b + c * d
    t = jit_k * np.float32(1 - 2.0 ** -20)
    actual = [np.asarray(jax.jit(lambda k: jax.numpy.sum((k - t) * np.float32(1e6)))(plain_k))]
    assert compare_all(expected, actual) is not None  # beyond the float32 tolerance
    named = _relabel_last_bit(Failure(p, inputs, "mismatch", compare_all(expected, actual), "", expected, actual))
    assert named.diff.kind == "last-bit" and known.match(class_of(named, "onnx")) is not None


def test_a_difference_the_unfused_value_does_not_explain_stays_a_value():
    inputs = _contracted_pair()
    jit_k = np.asarray(jax.jit(lambda a, b, c, d: a * b + c * d)(*inputs))
    p = _program(jit_k)
    expected = fuzz_run.reference(p, inputs)
    far = [expected[0] + np.float32(3.0)]
    named = _relabel_last_bit(Failure(p, inputs, "mismatch", compare_all(expected, far), "", expected, far))
    assert named.diff.kind == "value"


def test_a_float16_step_is_not_explained_by_its_op_by_op_value():
    """float16 a / sqrt(b): XLA multiplies by the rounded rsqrt, op by op it divides; a lowering must follow
    jax.jit there (tests/test_f16_division.py), so the op-by-op value names nothing."""
    from conformance.fuzz.driver import _ulp_step, _within_one_ulp

    r = np.random.default_rng(1)
    a = r.standard_normal(512).astype(np.float16)
    b = (r.random(512) * 4 + 0.05).astype(np.float16)
    quotient = jax.jit(lambda a, b: a / jax.numpy.sqrt(b))
    jit_q = np.asarray(quotient(a, b))
    with jax.disable_jit():
        plain_q = np.asarray(a / jax.numpy.sqrt(b))
    near = (plain_q == _ulp_step(jit_q, True)) | (plain_q == _ulp_step(jit_q, False)) | (plain_q == jit_q)
    a, b = a[near][:64], b[near][:64]  # one ulp apart at most: what the op-by-op experiment would try
    jit_q, plain_q = np.asarray(quotient(a, b)), plain_q[near][:64]
    assert _within_one_ulp(plain_q, jit_q)
    t = ", ".join(repr(float(x)) for x in jit_q.astype(np.float32) * np.float32(1 - 2.0 ** -9))
    p = infer_types(FuzzProgram(
        inputs=[0, 1], steps=[Step("div", (0, 1), "{0} / jnp.sqrt({1})", 2),
                              Step("cancel", (2,), f"jnp.sum(({{0}}.astype(jnp.float32) - jnp.array([{t}])) * 1e4)", 3)],
        outputs=[3], types={0: Value((64,), "float16"), 1: Value((64,), "float16")}))
    expected = fuzz_run.reference(p, [a, b])
    rest = p.copy()
    rest.steps, rest.inputs = rest.steps[1:], [2]
    actual = fuzz_run.reference(rest, [plain_q])
    assert compare_all(expected, actual) is not None
    named = _relabel_last_bit(Failure(p, [a, b], "mismatch", compare_all(expected, actual), "", expected, actual))
    assert named.diff.kind == "value"
