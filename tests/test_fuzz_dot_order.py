"""A float32 dot sums in another order in XLA and ONNX Runtime; a cancellation after it magnifies the last bits
(found by the mixed family, seed 4711 program 378: dense_down+dense_gate_up+swiglu_split/f32/value, a
SwiGLU's up projection of 0.00057 from terms up to 1.05). The fuzzer names it dot-order when the artifact's own
value of the dot, within the float rounding of the float64 dot, makes jax.jit give the artifact's result.

Which orders XLA and MLAS sum a dot in depends on the CPU (on some, both give this one's bits), so the
ONNX target's dot is, here, the same dot summed in a fixed other order (``other_order_target``)."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.fuzz import driver, known
from conformance.fuzz import run as fuzz_run
from conformance.fuzz.compare import compare_all
from conformance.fuzz.driver import _relabel_dot_order, class_of
from conformance.fuzz.minimise import Failure
from conformance.fuzz.program import PRELUDE, FuzzProgram, Step, Value, infer_types

DOT = "{0} @ _w(11, (64, 16), 'float32', 0.125, 0)"


def _other_order(x: np.ndarray) -> np.ndarray:
    """``DOT`` as a kernel without fused multiply-adds may sum it: each product rounded to x's dtype, then
    added from the last to the first."""
    scope: dict = {}
    exec(compile(PRELUDE, "<fuzz-prelude>", "exec"), scope)  # noqa: S102  (the program's own weights)
    w = np.asarray(scope["_w"](11, (64, 16), x.dtype.name, 0.125, 0))
    products = (x[:, :, None] * w[None]).astype(x.dtype)
    total = np.zeros((x.shape[0], w.shape[1]), x.dtype)
    for k in reversed(range(w.shape[0])):
        total = (total + products[:, k]).astype(x.dtype)
    return total


@pytest.fixture(autouse=True)
def other_order_target(monkeypatch):
    """The ONNX target's value of a program that is ``DOT`` alone: ``_other_order``; others as converted."""
    real = fuzz_run.attempt

    def attempt(program, target, inputs):
        if target != "onnx" or [s.expr for s in program.steps] != [DOT]:
            return real(program, target, inputs)
        expected, actual = fuzz_run.reference(program, inputs), [_other_order(np.asarray(inputs[0]))]
        diff = compare_all(expected, actual)
        return ("mismatch" if diff else "ok"), diff, expected, actual, diff.line() if diff else ""

    monkeypatch.setattr(fuzz_run, "attempt", attempt)


def _program(near: np.ndarray, dtype: str = "float32") -> FuzzProgram:
    t = ", ".join(repr(float(x)) for x in (near.reshape(-1) * (1 - 2.0 ** -18)))
    return infer_types(FuzzProgram(
        inputs=[0],
        steps=[Step("matmul", (0,), DOT.replace("'float32'", repr(dtype)), 1),
               Step("cancel", (1,), f"({{0}} - jnp.array([{t}], jnp.{dtype}).reshape({near.shape})) * 1e6", 2)],
        outputs=[2], types={0: Value((2, 64), dtype)}))


def _failure(dtype: str = "float32") -> tuple[Failure, np.ndarray]:
    """The program's failure with the ONNX artifact's dot in place of jax.jit's, and that dot."""
    x = np.random.default_rng(5).standard_normal((2, 64)).astype(dtype)
    probe = _program(np.ones((2, 16), dtype), dtype)  # any centre: only the dot is run
    probe.outputs = [1]
    _, _, jit_value, onnx_value, _ = fuzz_run.attempt(probe.prune(), "onnx", [x])
    p = _program(np.asarray(jit_value[0]), dtype)
    expected = fuzz_run.reference(p, [x])
    rest = p.copy()
    rest.steps, rest.inputs = rest.steps[1:], [1]
    actual = fuzz_run.reference(rest, [np.asarray(onnx_value[0])])
    return Failure(p, [x], "mismatch", compare_all(expected, actual), "", expected, actual), np.asarray(onnx_value[0])


def _dot_only(p: FuzzProgram) -> FuzzProgram:
    q = p.copy()
    q.outputs = [1]
    return q.prune()


def test_a_dot_sum_order_magnified_is_named_dot_order():
    failure, onnx_dot = _failure()
    assert not np.array_equal(onnx_dot, fuzz_run.reference(_dot_only(failure.program), failure.inputs)[0])
    assert failure.diff is not None  # the two dots differ, and the cancellation shows it beyond the tolerance
    named = _relabel_dot_order(failure, "onnx")
    assert named.diff.kind == "dot-order" and known.match(class_of(named, "onnx")) is not None


def test_a_difference_the_dot_does_not_explain_stays_a_value():
    failure, _ = _failure()
    far = [np.asarray(failure.expected[0]) + np.float32(3.0)]
    other = Failure(failure.program, failure.inputs, "mismatch", compare_all(failure.expected, far), "",
                    failure.expected, far)
    assert _relabel_dot_order(other, "onnx").diff.kind == "value"


def test_half_precision_dots_are_not_named():
    assert known.match("matmul+cancel/f16/dot-order") is None and known.match("matmul+cancel/bf16/dot-order") is None


def _dense() -> tuple[FuzzProgram, list[np.ndarray], list[np.ndarray]]:
    """A Dense whose products cancel in one output (mixed family, seed 4711 program 558: terms up to 17.9, a
    sum of 0.0035): jax.jit's result, the inputs, and the program."""
    r = np.random.default_rng(3)
    x = r.standard_normal((1, 8)).astype(np.float32) * 4
    w = r.standard_normal((8, 4)).astype(np.float32)
    w[-1, 0] = np.float32(-(x[0, :-1].astype(np.float64) @ w[:-1, 0]) / x[0, -1])  # output 0 nearly cancels
    p = infer_types(FuzzProgram(inputs=[0, 1], steps=[Step("dense_up", (0, 1), "jnp.einsum('...d,df->...f', {0}, {1})", 2)],
                                outputs=[2], types={0: Value((1, 8), "float32"), 1: Value((8, 4), "float32")}))
    return p, [x, w], fuzz_run.reference(p, [x, w])


def test_a_cancelling_dense_output_in_another_sum_order_is_named_dot_order():
    p, inputs, expected = _dense()
    e = np.asarray(expected[0])
    largest = float(np.abs(e).max())
    assert abs(float(e[0, 0])) < 1e-3 * largest  # the cancelling output
    other_order = e.copy()
    other_order[0, 0] += np.float32(3 * np.finfo(np.float32).eps * largest)  # 3 ulps of the largest result
    failure = Failure(p, inputs, "mismatch", compare_all(expected, [other_order]), "", expected, [other_order])
    assert failure.diff is not None
    assert _relabel_dot_order(failure, "onnx").diff.kind == "dot-order"
    wrong = e.copy()
    wrong[0, 0] += np.float32(1000 * np.finfo(np.float32).eps * largest)
    failure = Failure(p, inputs, "mismatch", compare_all(expected, [wrong]), "", expected, [wrong])
    assert _relabel_dot_order(failure, "onnx").diff.kind == "value"


def test_a_half_precision_dot_promoted_to_float32_is_not_named():
    """A float16 dot times a numpy float64 scale is float32 (the fuzzer's ``scores`` step: seed 5050 program 144,
    norm_rms_f32+residual+..+scores/f16/dot-order), but its sums ran in float16: the step's float32 result does not
    make it a float32 dot, and a float16 rounding away from jax.jit's stays a value difference."""
    r = np.random.default_rng(3)
    x, w = (r.standard_normal(s).astype(np.float16) for s in ((1, 8), (8, 4)))
    p = infer_types(FuzzProgram(inputs=[0, 1], steps=[Step("scores", (0, 1), "({0} @ {1}) * (1 / np.sqrt(1))", 2)],
                                outputs=[2], types={0: Value((1, 8), "float16"), 1: Value((8, 4), "float16")}))
    expected = fuzz_run.reference(p, [x, w])
    e = np.asarray(expected[0])
    assert e.dtype == np.float32  # promoted by the float64 scale
    wide = x.astype(np.float64) @ w.astype(np.float64)
    other = wide.astype(np.float16).astype(np.float32)  # the float64 dot rounded once to float16: a fair result
    other[0, 0] = np.nextafter(other[0, 0].astype(np.float16), np.float16(np.inf)).astype(np.float32)
    failure = Failure(p, [x, w], "mismatch", compare_all(expected, [other]), "", expected, [other])
    assert failure.diff is not None and failure.diff.kind == "value"  # one float16 ulp, past float32's tolerance
    assert _relabel_dot_order(failure, "onnx").diff.kind == "value"
    widened = p.copy()
    widened.types = {**p.types, 0: Value((1, 8), "float32"), 1: Value((8, 4), "float32")}
    assert not driver._wide_dot(p, p.steps[0]) and driver._wide_dot(infer_types(widened), p.steps[0])
