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
