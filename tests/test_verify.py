"""verify.compare: tolerances, NaN placement, infinities, shapes and dtypes."""

import ml_dtypes
import numpy as np

from jaxconv.verify import compare


def test_equal_infinities_match_even_with_zero_tolerance():
    e = np.array([np.inf, -np.inf, 1.0], np.float32)
    assert compare("o", e, e.copy(), rtol=0, atol=0).ok


def test_finite_value_never_matches_an_expected_infinity():
    e = np.array([np.inf, 1.0], np.float32)
    a = np.array([3.0e38, 1.0], np.float32)
    result = compare("o", e, a, rtol=0.5, atol=1.0)
    assert not result.ok


def test_nan_positions_must_agree():
    e = np.array([np.nan, 1.0], np.float32)
    assert compare("o", e, e.copy()).ok
    result = compare("o", e, np.array([1.0, 1.0], np.float32))
    assert not result.ok and "NaN positions differ" in result.note


def test_relative_tolerance_by_dtype():
    e = np.array([1000.0], np.float32)
    assert compare("o", e, e * (1 + 5e-5)).ok
    assert not compare("o", e, e * (1 + 5e-3)).ok
    b = np.array([1000.0], ml_dtypes.bfloat16)
    assert compare("o", b, np.array([1004.0], ml_dtypes.bfloat16)).ok


def test_integers_must_be_exact_and_shapes_and_dtypes_must_agree():
    e = np.array([1, 2, 3], np.int32)
    assert compare("o", e, e.copy()).ok
    assert not compare("o", e, np.array([1, 2, 4], np.int32)).ok
    assert not compare("o", e, np.array([1, 2], np.int32)).ok
    assert not compare("o", e, e.astype(np.int64)).ok


class _Runner:
    kind = "fake"

    def __init__(self, fn, shift=0.0):
        self.fn, self.shift = fn, shift

    def run(self, inputs):
        return [np.asarray(o) + self.shift for o in self.fn(*inputs)]


def _cancelling_sum(x):
    import jax.numpy as jnp

    return (jnp.sum(x + 1000.0) - 1000.0 * x.shape[0],)


def test_float64_arbitration_accepts_an_ill_conditioned_but_accurate_artifact():
    import jax

    from jaxconv.program import trace
    from jaxconv.verify import check_runner, compare, reference_outputs

    program = trace(lambda x: _cancelling_sum(x)[0], ["f32[20000]"])

    def float64_twin(x):  # computes in float64 and rounds once: more accurate than jax.jit in float32
        with jax.enable_x64(True):
            return [np.asarray(_cancelling_sum(x.astype(np.float64))[0]).astype(np.float32)]

    report = check_runner(_Runner(float64_twin), "twin", program.fn, program.arg_specs, program.signature)
    assert report.ok
    (row,) = report.rows
    assert "jax.jit is off by" in row.note  # the plain comparison failed and float64 settled it
    wrong = check_runner(_Runner(float64_twin, shift=50.0), "wrong", program.fn, program.arg_specs, program.signature)
    assert not wrong.ok
