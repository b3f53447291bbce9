"""What the fourth campaign found with the model kinds that reach this round's rules (recurrences unrolled at
trace time, Haiku's and small GRUs, a mixture of experts' einsums, the real halves of small FFTs).

The rules themselves (``unrolled_steps``, ``gru``, ``broadcast_matmul_order``) kept jax.jit's numbers on every
program drawn; the differences were the FFT lowering's (a product with a DFT matrix) and the -NaN order of a
top-k before opset 26. Each is a small program compared with jax.jit here, with the fuzzer's known row.
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import jaxconv  # noqa: E402
from conformance.fuzz import known  # noqa: E402
from conformance.fuzz.compare import compare_all  # noqa: E402
from jaxconv.runtimes.onnxrt import OnnxRunner  # noqa: E402


def _onnx(fn, *args, opset=None):
    model = jaxconv.to_onnx(fn, *[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args], check=False, opset=opset)
    return OnnxRunner(model.SerializeToString()).run(list(args))


def _jit(fn, *args):
    return [np.asarray(jax.jit(fn)(*args))]


def test_an_fft_of_an_infinite_input_gives_nan_where_the_butterflies_skip_a_zero_twiddle():
    """Found as fft2_imag/f32/inf (silent): fft2 of ones with one -inf. jax.jit (like numpy's pocketfft) gives
    an imaginary half of zeros, its butterflies never multiplying by sin 0; the DFT matrix does, and -inf x 0 is
    NaN. Known (DFT_ZEROS): the finite inputs keep their numbers."""
    def fn(v):
        return jnp.fft.fft2(v).imag

    x = np.ones((1, 4, 4), np.float32)
    x[0, 2, 2] = -np.inf
    expected, got = _jit(fn, x), _onnx(fn, x)
    assert (expected[0] == 0).all() and np.isnan(got[0]).any()
    seen = known.facts([x])
    assert compare_all(expected, got) is not None and known.match("fft2_imag/f32/inf", seen) is not None
    finite = np.random.default_rng(0).standard_normal((1, 4, 4)).astype(np.float32)
    assert compare_all(_jit(fn, finite), _onnx(fn, finite)) is None
    assert known.match("fft2_imag/f32/inf", known.facts([finite])) is None


def test_a_one_point_inverse_fft_of_a_nan_imaginary_part_is_nan_in_the_real_half():
    """Found as ifft2_real/f32/nan (silent): ifft2 of one complex value -0.28 + NaN i. jax.jit's transform of one
    point is the value itself (real part -0.28); the artifact's real half is re x 1 - im x 0 = NaN. Known
    (DFT_ZEROS); a length-1 axis could be the identity in ops/fft.py."""
    def fn(re, im):
        return jnp.fft.ifft2(lax.complex(re, im)).real

    re, im = np.full((1, 1, 1), -0.2795975, np.float32), np.full((1, 1, 1), np.nan, np.float32)
    expected, got = _jit(fn, re, im), _onnx(fn, re, im)
    assert expected[0][0, 0, 0] == re[0, 0, 0] and np.isnan(got[0]).all()
    assert known.match("ifft2_real/f32/nan", known.facts([re, im])) is not None


def test_an_fft_of_a_large_input_cancels_exactly_at_quarter_turns():
    """Found as fft2_real/f32/value and ifft2_real/f32/value (silent): the real half of fft([1, 1e30, 1, 1]) is
    [1e30, 0, -1e30, 0] in jax.jit (its butterflies add and subtract); the artifact's DFT matrix carries
    cos(pi / 2) = 6.1e-17 and gave 6.1e13 for the zeros (-1.6e22 against -2.0 with 2.5e38 in fft2 of [2, 2, 8]).
    Within the float rounding of the transform's norm, but not element by element: the quarter turns are now
    exact."""
    def fn(v):
        return jnp.fft.fft(v).real

    x = np.array([[1.0, 1e30, 1.0, 1.0]], np.float32)
    assert compare_all(_jit(fn, x), _onnx(fn, x)) is None


def test_a_mixture_of_experts_top_k_orders_negative_nan_as_nan_before_opset_26():
    """Found as moe_gates/f32/nan (silent): router logits [-NaN, 1] and top-1. jax.jit orders -NaN below every
    number and routes to expert 1; without BitCast (opset < 26) -NaN is ordered like +NaN, the artifact routes to
    the NaN (README: Known differences; the top_k row, NAN_ORDER). At opset 26 it matches."""
    def fn(logits):
        v, i = lax.top_k(logits, 1)
        return jnp.sum(jax.nn.one_hot(i, 4, dtype=v.dtype) * jax.nn.softmax(v, -1)[..., None], axis=-2)

    x = np.array([[-np.nan, 1.0]], np.float32)
    assert np.signbit(x[0, 0])
    expected = _jit(fn, x)
    assert compare_all(expected, _onnx(fn, x, opset=21)) is not None
    assert known.match("moe_gates/f32/nan", known.facts([x])) is not None
    assert compare_all(expected, _onnx(fn, x, opset=26)) is None


def test_eigenvalues_beside_a_huge_entry_are_known_within_the_norms_rounding():
    """Found as eigvalsh/f32/value (silent, the general sample): a 4 x 4 matrix read from one row holding -1.8e19.
    An eigenvalue near 0 is 1e-14 in jax.jit and 6.4e9 in the artifact, the largest ones one ulp apart (2.2e12):
    all within twice eps x norm (6.6e12), the LAPACK_NORM row."""
    x = np.array([-1.8446743e19, 1.0, 1.0, 1.0], np.float32).reshape(1, 1, 4)
    got, expected = _onnx(jnp.linalg.eigvalsh, x), _jit(jnp.linalg.eigvalsh, x)
    bound = 2 * np.finfo(np.float32).eps * np.abs(expected[0]).max()  # the norm: the largest |eigenvalue|, 2.8e19
    assert np.abs(got[0].astype(np.float64) - expected[0]).max() < bound
    assert known.match("eigvalsh/f32/value", known.facts([x])) is not None
    assert known.match("eigvalsh/f32/value", known.facts([np.ones((1, 1, 4), np.float32)])) is None
