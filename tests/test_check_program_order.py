"""The check where jax.jit's compiled code does not compute in the program's order, on edge inputs.

XLA fuses a Conv, ReLU and sum pooling into code whose max drops NaN; its simplifier computes
``(a / b) / c`` as ``a / (b * c)``, which stays finite where the program's ``a / b`` overflows (jaxconv's
ONNX now divides so too; an artifact in the program's order stands in for it); on the CPU it flushes
subnormal intermediates to zero (``sqrt(0.999 * -FLT_MIN)`` is -0 in jax.jit, NaN in float64). Where
an artifact follows the program, the check calls such elements undecided (a warning) when JAX run op
by op has the artifact's value there or float64 has its NaN, and a mismatch otherwise.
The references are JAX's own runs and numpy's float64, never the code under test.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from judging_support import judge_one_set

import jaxconv
from jaxconv import known_differences, references
from jaxconv.compare import MISMATCH, OK, OutputCheck

_rng = np.random.default_rng(0)
W = (_rng.standard_normal((3, 3, 1, 32)) * 0.3).astype(np.float32)
B = (_rng.standard_normal(32) * 0.1).astype(np.float32)
SPEC = jax.ShapeDtypeStruct((2, 28, 28, 1), jnp.float32)
BIG = float(np.finfo(np.float32).max)
TINY = float(np.finfo(np.float32).tiny)


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
    assert known_differences.PROGRAM_ORDER_NOTE in edge[0].note
    assert "have JAX's op-by-op value" in edge[0].note


def nested_division(a, b, c):
    return (a / b) / c


def test_a_division_xla_reorders_is_undecided(tmp_path):
    a = np.array([BIG, 1.0, 3.0], np.float32)
    b = np.array([0.5, 2.0, 4.0], np.float32)
    c = np.array([4.0, 4.0, 0.5], np.float32)
    with jax.disable_jit():
        eager = np.asarray(nested_division(*map(jnp.asarray, (a, b, c))))
    # jaxconv's ONNX divides as XLA does (onnx/xla_reassociation.py): an artifact in the program's order
    # is JAX's op-by-op result
    (row,), expected, actual = judge_one_set(nested_division, [a, b, c], "edge", tmp_path, actual=[eager])
    # the premise: jax.jit stays finite where the program's order (and JAX op by op) overflows
    assert np.isfinite(expected[0][0]) and np.isposinf(eager[0]) and np.isposinf(actual[0][0])
    assert row.verdict == "undecided" and row.ok, row.note
    assert "1 have JAX's op-by-op value" in row.note


def decayed_root(nu):
    return jnp.sqrt(nu * 0.999)


def test_a_flushed_subnormal_intermediate_is_undecided(tmp_path):
    nu = np.array([-TINY, 4.0, -4.0], np.float32)
    (row,), expected, actual = judge_one_set(decayed_root, [nu], "edge", tmp_path)
    with np.errstate(invalid="ignore"):
        wide = np.sqrt(nu.astype(np.float64) * 0.999)
    # the premise: jax.jit flushes 0.999 * -FLT_MIN to -0 (sqrt -0); float64 and the artifact have NaN
    assert expected[0][0] == 0 and np.isnan(wide[0]) and np.isnan(actual[0][0])
    assert row.verdict == "undecided" and row.ok, row.note
    assert "1 lie where float64 is NaN or has their infinity" in row.note


def _row(inputs="edge", n=3):
    return OutputCheck(name="y", dtype="float32", shape=(n,), max_abs=0.0, max_rel=0.0, ok=False, note="",
                       verdict="mismatch", inputs=inputs)


def _apply(expected, actual, cls, truth=None, inputs="edge"):
    return known_differences.as_program_order([_row(inputs, expected.size)], [cls], None, [], [], [expected], [actual],
                                              None if truth is None else [truth])[0]


def test_nan_the_op_by_op_run_lacks_stays_a_mismatch(monkeypatch):
    expected = np.array([1.0, 2.0, 3.0], np.float32)
    actual = np.array([np.nan, 2.0, 3.0], np.float32)
    cls = np.array([MISMATCH, OK, OK], np.int8)
    monkeypatch.setattr(references, "eager_outputs", lambda fn, specs, flat: [expected.copy()])
    assert _apply(expected, actual, cls).verdict == "mismatch"
    monkeypatch.setattr(references, "eager_outputs", lambda fn, specs, flat: [actual.copy()])
    assert _apply(expected, actual, cls).verdict == "undecided"


def test_an_infinity_the_op_by_op_run_lacks_stays_a_mismatch(monkeypatch):
    expected = np.array([1.5e38, 2.0], np.float32)
    actual = np.array([np.inf, 2.0], np.float32)
    cls = np.array([MISMATCH, OK], np.int8)
    monkeypatch.setattr(references, "eager_outputs", lambda fn, specs, flat: [np.array([-np.inf, 2.0], np.float32)])
    assert _apply(expected, actual, cls, truth=np.array([1.5e38, 2.0])).verdict == "mismatch"
    monkeypatch.setattr(references, "eager_outputs", lambda fn, specs, flat: [np.array([np.inf, 2.0], np.float32)])
    assert _apply(expected, actual, cls, truth=np.array([1.5e38, 2.0])).verdict == "undecided"


def test_float64_nan_explains_without_the_op_by_op_run(monkeypatch):
    def no_eager(fn, specs, flat):
        raise AssertionError("the op-by-op run is not needed when float64 explains every element")

    monkeypatch.setattr(references, "eager_outputs", no_eager)
    expected = np.array([0.0, 5.0], np.float32)
    actual = np.array([np.nan, 5.0], np.float32)
    cls = np.array([MISMATCH, OK], np.int8)
    assert _apply(expected, actual, cls, truth=np.array([np.nan, 5.0])).verdict == "undecided"


def test_a_finite_float64_does_not_explain_nan(monkeypatch):
    monkeypatch.setattr(references, "eager_outputs", lambda fn, specs, flat: [np.array([0.0, 5.0], np.float32)])
    expected = np.array([0.0, 5.0], np.float32)
    actual = np.array([np.nan, 5.0], np.float32)
    cls = np.array([MISMATCH, OK], np.int8)
    assert _apply(expected, actual, cls, truth=np.array([0.0, 5.0])).verdict == "mismatch"


def test_a_row_is_excused_only_when_every_element_is(monkeypatch):
    expected = np.array([1.0, 2.0, 3.0], np.float32)
    actual = np.array([np.nan, np.inf, 7.0], np.float32)
    eager = np.array([1.0, np.inf, 3.0], np.float32)
    truth = np.array([np.nan, 2.0, 3.0])
    monkeypatch.setattr(references, "eager_outputs", lambda fn, specs, flat: [eager])
    cls = np.array([MISMATCH, MISMATCH, MISMATCH], np.int8)
    assert _apply(expected, actual, cls, truth=truth).verdict == "mismatch"  # 7.0 is nobody's value
    cls[2] = OK
    row = _apply(expected, actual, cls, truth=truth)
    assert row.verdict == "undecided"
    assert "1 have JAX's op-by-op value" in row.note and "1 lie where float64 is NaN or has their infinity" in row.note


@pytest.mark.parametrize("inputs", ["random", "given", "example"])
def test_other_input_sets_are_not_excused(monkeypatch, inputs):
    monkeypatch.setattr(references, "eager_outputs", lambda fn, specs, flat: [np.full(1, np.nan, np.float32)])
    cls = np.array([MISMATCH], np.int8)
    assert _apply(np.ones(1, np.float32), np.full(1, np.nan, np.float32), cls, inputs=inputs).verdict == "mismatch"


def test_a_zero_of_the_other_sign_than_op_by_op_stays_a_mismatch(monkeypatch):
    """-x on +0.0 is -0.0 in jax.jit and op by op; an artifact with +0.0 is wrong, however close."""
    expected = np.array([-0.0, 1.0], np.float32)
    actual = np.array([0.0, 1.0], np.float32)
    cls = np.array([MISMATCH, OK], np.int8)
    monkeypatch.setattr(references, "eager_outputs", lambda fn, specs, flat: [expected.copy()])
    assert _apply(expected, actual, cls).verdict == "mismatch"
    monkeypatch.setattr(references, "eager_outputs", lambda fn, specs, flat: [actual.copy()])
    assert _apply(expected, actual, cls).verdict == "undecided"


def test_float64_nan_leaves_no_reference_value(monkeypatch):
    """Where float64 is NaN and jax.jit a number (its flushed subnormal's sign is 0), an artifact with
    another number is undecided; where jax.jit is NaN too, a number in the artifact stays a mismatch."""
    monkeypatch.setattr(references, "eager_outputs", lambda fn, specs, flat: [np.array([3.5e-38, 5.0], np.float32)])
    expected = np.array([3.5e-38, 5.0], np.float32)
    actual = np.array([1e-4, 5.0], np.float32)
    cls = np.array([MISMATCH, OK], np.int8)
    assert _apply(expected, actual, cls, truth=np.array([np.nan, 5.0])).verdict == "undecided"
    expected[0] = np.nan
    assert _apply(expected, actual, cls, truth=np.array([np.nan, 5.0])).verdict == "mismatch"


def test_the_artifact_with_float64s_infinity_where_jit_flushed(monkeypatch):
    """exp(-100) is subnormal in float32: jax.jit flushes it, 0 * inf = NaN; float64 and the artifact
    have inf. Another infinity than float64's stays a mismatch."""
    monkeypatch.setattr(references, "eager_outputs", lambda fn, specs, flat: [np.array([np.nan, 5.0], np.float32)])
    expected = np.array([np.nan, 5.0], np.float32)
    actual = np.array([np.inf, 5.0], np.float32)
    cls = np.array([MISMATCH, OK], np.int8)
    assert _apply(expected, actual, cls, truth=np.array([np.inf, 5.0])).verdict == "undecided"
    assert _apply(expected, actual, cls, truth=np.array([-np.inf, 5.0])).verdict == "mismatch"
    assert _apply(expected, actual, cls, truth=np.array([1e30, 5.0])).verdict == "mismatch"


def test_a_zero_whose_sign_a_flushed_intermediate_flipped_is_undecided(tmp_path):
    """Optax Adam at a count of INT32_MIN (an edge state: the bias corrections are -inf), a first moment
    of -FLT_MIN and a parameter of -0.0: jax.jit flushes the decayed moment 0.9 * -FLT_MIN to a zero and
    its update's sign flips, so the new parameter is +0.0; the program's order (float64, the artifact)
    gives -0.0. A zero of float64's sign (a 784 x 256 Adam step failed the default check so)."""
    optax = pytest.importorskip("optax")
    opt = optax.adam(1e-3)

    def step(g, count, mu, nu, p):
        state = (optax.ScaleByAdamState(count=count, mu=mu, nu=nu), optax.EmptyState())
        updates, _ = opt.update(g, state, p)
        return optax.apply_updates(p, updates)

    args = [np.array([0.0, 0.5], np.float32), np.array(np.iinfo(np.int32).min, np.int32),
            np.array([-TINY, 0.1], np.float32), np.array([0.0, 0.2], np.float32), np.array([-0.0, 1.0], np.float32)]
    (row,), expected, actual = judge_one_set(step, args, "edge", tmp_path)
    wide, _ = references.float64_outputs(step, [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args], args)
    # the premise: jax.jit's zero is +0.0, float64's and the artifact's -0.0
    assert expected[0][0] == 0 and not np.signbit(expected[0][0])
    assert wide[0][0] == 0 and np.signbit(wide[0][0]) and actual[0][0] == 0 and np.signbit(actual[0][0])
    assert row.verdict == "undecided" and row.ok, row.note
    assert "1 lie where float64 has their zero's sign" in row.note


def test_a_zero_of_the_other_sign_than_float64_stays_a_mismatch(monkeypatch):
    monkeypatch.setattr(references, "eager_outputs", lambda fn, specs, flat: [np.array([-0.0, 5.0], np.float32)])
    expected = np.array([-0.0, 5.0], np.float32)
    actual = np.array([0.0, 5.0], np.float32)
    cls = np.array([MISMATCH, OK], np.int8)
    assert _apply(expected, actual, cls, truth=np.array([-0.0, 5.0])).verdict == "mismatch"
    assert _apply(expected, actual, cls, truth=np.array([1e-40, 5.0])).verdict == "mismatch"  # no zero in float64
    assert _apply(expected, actual, cls, truth=np.array([0.0, 5.0])).verdict == "undecided"
