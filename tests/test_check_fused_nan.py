"""The check on a Conv, ReLU and sum pooling that XLA fuses into code dropping NaN on edge inputs.

jax.jit gives numbers where the same program run op by op gives NaN; the ONNX model gives NaN as
the op-by-op run does, so the check calls those elements undecided (a warning), not a mismatch,
and still calls NaN that the op-by-op run does not have a mismatch.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import jaxconv
from jaxconv import known_differences, references
from jaxconv.compare import MISMATCH, OutputCheck

_rng = np.random.default_rng(0)
W = (_rng.standard_normal((3, 3, 1, 32)) * 0.3).astype(np.float32)
B = (_rng.standard_normal(32) * 0.1).astype(np.float32)
SPEC = jax.ShapeDtypeStruct((2, 28, 28, 1), jnp.float32)


def conv_relu_sum_pool(x):
    """A Flax NNX MNIST layer: Conv, batch norm in inference mode, ReLU, average pooling."""
    y = lax.conv_general_dilated(x, W, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")) + B
    y = jax.nn.relu((y - 0.1) * 0.9 + 0.05)
    return lax.reduce_window(y, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4.0


def test_fused_nan_dropping_is_undecided_not_a_mismatch():
    reports: list = []
    jaxconv.to_onnx(conv_relu_sum_pool, SPEC, report_to=reports)
    edge = [row for report in reports for row in report.rows if row.inputs == "edge"]
    assert edge and edge[0].verdict == "undecided"
    assert known_differences.FUSED_NAN_NOTE in edge[0].note
    # the premise: jax.jit really has numbers there and the op-by-op run has NaN
    assert "NaN in the artifact and op by op where jax.jit has a number" in edge[0].note


def test_nan_the_op_by_op_run_lacks_stays_a_mismatch(monkeypatch):
    expected = np.array([1.0, 2.0, 3.0], np.float32)
    actual = np.array([np.nan, 2.0, 3.0], np.float32)
    cls = np.array([MISMATCH, 0, 0], np.int8)
    row = OutputCheck(name="y", dtype="float32", shape=(3,), max_abs=0.0, max_rel=0.0, ok=False, note="",
                      verdict="mismatch", inputs="edge")
    monkeypatch.setattr(references, "eager_outputs", lambda fn, specs, flat: [expected.copy()])
    assert known_differences.as_fused_nan([row], [cls], None, [], [], [expected], [actual]) == [row]
    monkeypatch.setattr(references, "eager_outputs", lambda fn, specs, flat: [actual.copy()])
    assert known_differences.as_fused_nan([row], [cls], None, [], [], [expected], [actual])[0].verdict == "undecided"


def test_random_inputs_are_not_excused():
    row = OutputCheck(name="y", dtype="float32", shape=(1,), max_abs=0.0, max_rel=0.0, ok=False, note="",
                      verdict="mismatch", inputs="random")
    cls = np.array([MISMATCH], np.int8)
    out = known_differences.as_fused_nan([row], [cls], None, [], [], [np.ones(1, np.float32)], [np.full(1, np.nan, np.float32)])
    assert out == [row]

