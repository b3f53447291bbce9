"""The check where jax.jit's result on edge values is its implementation's choice.

- LU: OpenBLAS's ``i?amax`` (jax.jit's pivot search) returns a NaN's index or a column's first entry on
  a column holding NaN; the ONNX passes over NaN as reference LAPACK does. ``jnp.linalg.det`` of a
  4x4 edge matrix failed the default check ("written but is WRONG": jax.jit 0, artifact NaN).
- eigh: LAPACK's syevd of a matrix holding NaN returns values of its own making (finite eigenvalues for
  ``[[NaN, 1], [1, 1]]``); the ONNX's Jacobi returns NaN.
- ``top_k(-x)`` / ``jnp.partition`` below opset 26: the ONNX cannot read a NaN's sign.
- A sum with an infinite term and huge finite ones: ONNX Runtime's vectorised sum overflows a partial
  sum to the other infinity (NaN in the end) where jax.jit and float64 keep the infinite term's sign.

Each is ``undecided`` on edge inputs (a warning; ``--strict`` fails it); the same difference on other
inputs, or past opset 26 for top_k, stays a mismatch. Premises are asserted against JAX and numpy.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg.blas as blas
from judging_support import judge_one_set

import jaxconv
from jaxconv import known_differences, nan_choices
from jaxconv.check_context import check_options
from jaxconv.errors import MismatchError
from jaxconv.runtimes import open_artifact

BIG = float(np.finfo(np.float32).max)
# a column whose pivot OpenBLAS and reference LAPACK choose differently: 0, NaN, -FLT_MAX, a subnormal
EDGE_MATRIX = np.array([[0.0, -0.0, np.inf, -np.inf],
                        [np.nan, 1.0, -1.0, BIG],
                        [-BIG, 4.8611764e37, -1.1754944e-38, 3.5264831e-38],
                        [1.4e-45, -7.0e-45, 0.5, -3.25]], np.float32)


def test_openblas_pivot_search_is_not_reference_lapack():
    """The premise: on a column holding NaN, SciPy's (jaxlib's) isamax picks neither the largest finite
    magnitude nor consistently the NaN (reference LAPACK's |x| > max passes over NaN)."""
    column = EDGE_MATRIX[:, 0]
    reference = int(np.argmax(np.where(np.isnan(column), -np.inf, np.abs(column))))
    assert reference == 2
    assert blas.isamax(column) != reference


def test_det_of_an_edge_matrix_is_undecided(tmp_path):
    (row,), expected, actual = judge_one_set(jnp.linalg.det, [EDGE_MATRIX], "edge", tmp_path)
    assert expected[0] == 0.0 and np.isnan(actual[0])  # jax.jit pivots on the zero: det 0
    assert row.verdict == "undecided" and row.ok, row.note
    assert nan_choices.LU_NOTE in row.note


def test_lu_and_det_pass_the_default_check_and_fail_strict():
    spec = jax.ShapeDtypeStruct((4, 4), jnp.float32)
    jaxconv.to_onnx(jnp.linalg.det, spec)
    jaxconv.to_onnx(lambda a: jax.scipy.linalg.lu(a), spec)
    with check_options(strict=True), pytest.raises(MismatchError, match="cannot decide"):
        jaxconv.to_onnx(jnp.linalg.det, spec)


NAN_DIAGONAL = np.array([[np.nan, 1.0], [1.0, 1.0]], np.float32)


def test_eigenvalues_of_a_matrix_holding_nan_are_undecided(tmp_path):
    (row,), expected, actual = judge_one_set(jnp.linalg.eigvalsh, [NAN_DIAGONAL], "edge", tmp_path)
    # the premise: LAPACK's syevd returns finite eigenvalues of its own making; the artifact NaN
    assert np.isfinite(expected[0]).all() and np.isnan(actual[0]).all()
    assert row.verdict == "undecided" and row.ok, row.note
    assert nan_choices.EIGH_NOTE in row.note


def test_an_eigenvalue_difference_on_random_inputs_stays_a_mismatch(tmp_path):
    a = np.array([[2.0, 1.0], [1.0, 3.0]], np.float32)
    wrong = [np.asarray(jnp.linalg.eigvalsh(a)) + np.float32(0.5)]
    (row,), _, _ = judge_one_set(jnp.linalg.eigvalsh, [a], "random", tmp_path, actual=wrong)
    assert row.verdict == "mismatch" and not row.ok


def test_an_lu_difference_on_random_inputs_stays_a_mismatch(tmp_path):
    a = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
    wrong = [np.asarray(jnp.linalg.det(a)) * np.float32(1.01)]
    (row,), _, _ = judge_one_set(jnp.linalg.det, [a], "random", tmp_path, actual=wrong)
    assert row.verdict == "mismatch" and not row.ok


def smallest_three(x):
    return jax.lax.top_k(-x, 3)


X_NAN = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, BIG], np.float32)


def test_top_k_of_negated_nan_below_opset_26_is_undecided(tmp_path):
    rows, expected, actual = judge_one_set(smallest_three, [X_NAN], "edge", tmp_path)
    # the premise: jax.jit puts -NaN last; the artifact, blind to the sign, first
    assert not np.isnan(expected[0]).any() and np.isnan(actual[0][0])
    assert rows[0].verdict == "undecided" and nan_choices.TOP_K_NOTE in rows[0].note
    jaxconv.to_onnx(lambda x: jnp.partition(x, 3), jax.ShapeDtypeStruct((8,), jnp.float32))


def test_top_k_at_opset_26_gets_no_such_excuse(tmp_path):
    rows, expected, actual = judge_one_set(smallest_three, [X_NAN], "edge", tmp_path, opset=26)
    assert all(np.array_equal(e, a, equal_nan=True) for e, a in zip(expected, actual))  # it reads NaN signs
    assert all(row.verdict == "ok" for row in rows)
    specs = [jax.ShapeDtypeStruct(X_NAN.shape, X_NAN.dtype)]
    for opset, notes in ((26, []), (21, [nan_choices.TOP_K_NOTE])):
        path = str(tmp_path / f"m{opset}.onnx")
        jaxconv.to_onnx(smallest_three, *specs, path=path, check=False, opset=opset)
        assert nan_choices.choices(smallest_three, specs, [X_NAN], open_artifact(path)) == notes


def dot(x, w):
    return x @ w


def test_a_sum_overflowing_in_the_artifacts_order_is_undecided(tmp_path):
    x = np.array([[-np.inf] + [BIG] * 7], np.float32)
    w = np.ones((8, 1), np.float32)
    (row,), expected, actual = judge_one_set(dot, [x, w], "edge", tmp_path)
    # the premise: jax.jit and float64 keep the infinite term; ONNX Runtime's vectorised sum gives NaN
    assert np.isneginf(expected[0]).all() and np.isneginf(x.astype(np.float64) @ w.astype(np.float64)).all()
    assert np.isnan(actual[0]).all()
    assert row.verdict == "undecided" and known_differences.SUM_OVERFLOW_NOTE in row.note


def test_a_sum_beyond_float_range_reaching_other_infinities_is_undecided(tmp_path):
    """A Flax Dense over edge-valued params showed it first: float64 beyond FLT_MAX, jax.jit and the
    artifact each reach an infinity or NaN of their own, by their summation orders."""
    h = BIG / 2
    x = np.array([[1.0, h, 1.0, -h, -h, -BIG, -h, BIG, h, h, 1.0, BIG, 1.0, BIG, -h, h]], np.float32)
    w = np.ones((16, 1), np.float32)
    (row,), expected, actual = judge_one_set(dot, [x, w], "edge", tmp_path)
    truth = x.astype(np.float64) @ w.astype(np.float64)
    assert truth[0, 0] > BIG  # the premise: the sum is beyond float32's range
    assert not np.isfinite(expected[0]).any() and not np.isfinite(actual[0]).any()
    assert not np.array_equal(expected[0], actual[0], equal_nan=True)
    assert row.verdict == "undecided" and known_differences.SUM_OVERFLOW_NOTE in row.note


def test_nan_where_float64_is_finite_stays_a_mismatch(tmp_path):
    x = np.array([[1.0] * 8], np.float32)
    w = np.ones((8, 1), np.float32)
    (row,), _, _ = judge_one_set(dot, [x, w], "edge", tmp_path, actual=[np.full((1, 1), np.nan, np.float32)])
    assert row.verdict == "mismatch"
