"""Fuzz rows of known differences found by the fuzzer (run seed 60613): a layer norm over a row holding
values near the largest float, whose mean's sum overflows in ONNX Runtime's order and not in jax.jit's
(no rewrite fired: the lowering's ReduceSum), and eigvalsh beside a huge entry followed by an op that tells
a near-zero eigenvalue from zero. Each is excused only with the input fact that makes it possible."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxconv
from conformance.fuzz import known
from jaxconv.runtimes.onnxrt import OnnxRunner

# the fuzzer's input (seed 60613182203): ones, and three values near the largest float
ROW = np.ones((1, 1, 64), np.float32)
ROW[0, 0, [16, 19, 20]] = [-2.779173597639206e+37, 2.5757732276398254e+37, -3.1518635332846175e+38]


def _norm(x):
    c = x - jnp.mean(x, -1, keepdims=True)
    return c / jnp.sqrt(jnp.mean(c * c, -1, keepdims=True)) + 0.5


def test_the_row_sum_overflows_in_one_order_only():
    exact = sum(float(v) for v in ROW.ravel())  # float64: -3.17e38, within float32's range
    assert np.isfinite(np.float32(exact))
    with np.errstate(over="ignore"):
        lanes = ROW.reshape(-1, 4).sum(0, dtype=np.float32)  # four partial sums, as a vector unit adds them
    assert np.isneginf(lanes).any()  # -2.8e37 and -3.2e38 share a lane: -3.4e38 overflows
    assert np.isfinite(np.asarray(jax.jit(lambda x: jnp.sum(x))(ROW)))  # XLA's order stays finite
    got = OnnxRunner(jaxconv.to_onnx(_norm, "f32[1,1,64]", check=False).SerializeToString()).run([ROW])[0]
    want = np.asarray(jax.jit(_norm)(ROW))
    assert np.isfinite(want).all() and np.isnan(got).all()  # the difference the row below excuses


def test_the_rows_need_the_facts():
    seen = known.facts([ROW])
    assert "huge-input" in seen
    for form in ("two_pass", "one_pass", "var", "keras", "rms"):
        assert known.match(f"norm_{form}/f32/nan", seen).reason == known.SUM_ORDER
    ordinary = known.facts([np.full((1, 1, 64), 3.0, np.float32)])
    assert known.match("norm_two_pass/f32/nan", ordinary) is None
    # an overflowing square alone (no huge input) is the layer-norm guard's case: not excused
    assert known.match("norm_two_pass/f32/nan", frozenset({"square-overflow-input"})) is None
    assert known.match("eigvalsh+reduce_all/f32/value", frozenset({"square-overflow-input"})).reason == known.LAPACK_NORM
    assert known.match("eigvalsh+reduce_all/f32/value") is None


def test_litert_sigmoids_over_a_huge_input_are_known_rows():
    """LiteRT's LOGISTIC over pre-activations of 4e27 to 2e37 (fuzz seed 24680, target tflite: Flax and Haiku
    LSTMs, an unrolled Haiku GRU, a deep LSTM stack; the tf-ops route's TF function gives jax.jit's numbers,
    the TFLite model NaN): known only with the huge input, and only as NaN."""
    huge = known.facts([np.array([[[1.0, np.finfo(np.float32).max]]], np.float32)])
    for klass in ("tflite:lstm_flax/f32/nan", "tflite:unrolled_lstm_haiku/f32/nan",
                  "tflite:scan_unrolled_gru_haiku/f32/nan", "tflite:deep_lstm_haiku_lstm_haiku_lstm_fused/f32/nan"):
        assert known.match(klass, huge).reason == known.LITERT_LOGISTIC, klass
        assert known.match(klass, known.facts([np.ones((1, 1, 2), np.float32)])) is None
        assert known.match(klass.replace("/nan", "/value"), huge) is None


def test_lu_of_a_matrix_with_an_infinity_is_a_known_row():
    """Fuzz seed 271828815500: det of a 4 x 4 matrix with one -inf and two equal rows is 0 in jax.jit (LAPACK's
    LU), NaN in the artifact. Known only with the infinite input."""
    m = np.ones((1, 4, 4), np.float32)
    m[0, 0, 1], m[0, 1, 2] = 0.5, -np.inf
    fn = lambda x: jnp.linalg.det(x)  # noqa: E731
    got = OnnxRunner(jaxconv.to_onnx(fn, "f32[1,4,4]", check=False).SerializeToString()).run([m])[0]
    assert np.asarray(jax.jit(fn)(m))[0] == 0.0 and np.isnan(got).all()  # the difference the row excuses
    seen = known.facts([m])
    assert known.match("det/f32/nan", seen).reason == known.LAPACK_LU
    assert known.match("det/f32/nan", known.facts([np.ones((1, 4, 4), np.float32)])) is None
    assert known.match("qr_r/f32/nan", seen) is None


def test_an_fft_over_huge_values_making_nan_is_a_known_row():
    """Fuzz seed 314159942573: fft2 of [1, 3, 8] with two values of FLT_MAX in a row: their sum overflows in the
    artifact's DFT product and inf x sin 0 is NaN where jax.jit's butterflies give 0. Known only with the
    huge input, and only as NaN."""
    x = np.ones((1, 3, 8), np.float32)
    x[0, 0, 3] = x[0, 0, 7] = np.finfo(np.float32).max
    fn = lambda v: jnp.fft.fft2(v).imag  # noqa: E731
    got = OnnxRunner(jaxconv.to_onnx(fn, "f32[1,3,8]", check=False).SerializeToString()).run([x])[0]
    want = np.asarray(jax.jit(fn)(x))
    assert want[0, 0, 0] == 0.0 and np.isnan(got[0, 0, 0])  # the difference the row excuses
    seen = known.facts([x])
    assert known.match("fft2_imag/f32/nan", seen).reason == known.DFT_ZEROS
    assert known.match("fft2_imag/f32/nan", known.facts([np.ones((1, 3, 8), np.float32)])) is None
    assert known.match("fft2_imag/f32/value", seen).reason == known.FFT_ABSORBED  # a value: the other row
