"""What the sixth campaign found with group norms in the CNN kind (NHWC, Flax's form).

The one difference is XLA's: at batch 1 its algebraic simplifier squares a mean as the square of the sum
times 1/n^2, which overflows first; the artifact follows it only where the batch is known. A small
program compared with jax.jit here, with the fuzzer's known row.
"""

from __future__ import annotations

import os
import sys

import jax
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import jaxconv  # noqa: E402
from conformance.fuzz import known  # noqa: E402
from conformance.fuzz.program import FuzzProgram, Value  # noqa: E402
from jaxconv.runtimes.onnxrt import OnnxRunner  # noqa: E402


def _group_variance(v):
    """Flax's GroupNorm's variance: E[g^2] - E[g]^2 over the spatial axes and a group's channels."""
    g = v.reshape(v.shape[0], 3, 3, 1, 16)
    m = g.mean(axis=(1, 2, 4), keepdims=True)
    return (g * g).mean(axis=(1, 2, 4), keepdims=True) - m * m


def test_a_group_variance_of_values_whose_sum_squared_overflows_at_a_symbolic_batch():
    """Found as conv_nhwc+hard_swish+..+group_norm/f32/nan (silent, before this round's rules too) with the
    batch symbolic, run at batch 1: values near 1e19, whose sum squared exceeds the largest float. jax.jit
    gives NaN (XLA, at batch 1: sum * sum / n^2 = inf, subtracted from the mean square, inf); the artifact
    does the same for a batch of 1 it knows, and squares the mean (inf - a number: inf) for any batch. Known
    (MEAN_SQUARE, a symbolic batch and an input whose square can overflow); ordinary inputs keep jax.jit's
    numbers."""
    rng = np.random.default_rng(6)
    ordinary = rng.standard_normal((1, 3, 3, 16)).astype(np.float32)
    near = np.full((1, 3, 3, 16), 1e18, np.float32)
    near[:, 0, 0, :10] = 9.7e18
    want = np.asarray(jax.jit(_group_variance)(near))
    assert np.isnan(want).all()
    for batch in (1, jax.export.symbolic_shape("b")[0]):
        spec = jax.ShapeDtypeStruct((batch, 3, 3, 16), np.float32)
        run = OnnxRunner(jaxconv.to_onnx(_group_variance, spec, check=False).SerializeToString()).run
        np.testing.assert_allclose(run([ordinary])[0], np.asarray(jax.jit(_group_variance)(ordinary)), rtol=1e-4, atol=1e-4)
        got = run([near])[0]
        assert (np.isnan(got).all() if batch == 1 else np.isinf(got).all()), (batch, got)

    def program(batch_axis):
        return FuzzProgram(inputs=[0], types={0: Value((1, 3, 3, 16), "float32", batch_axis=batch_axis)})

    name = "conv_nhwc+hard_swish+..+group_norm/f32/nan"
    assert known.match(name, known.facts([near], program=program(0))) is not None
    assert known.match(name, known.facts([near], program=program(None))) is None  # a static batch: as XLA
    assert known.match(name, known.facts([ordinary], program=program(0))) is None


def _one_pass_norm(x, y):
    h = x + y
    m, m2 = h.mean(-1, keepdims=True), jax.lax.square(h).mean(-1, keepdims=True)
    return (h - m) * jax.lax.rsqrt(jax.numpy.maximum(m2 - m * m, 0.0) + 1e-12) * 1.8 + 0.25


def test_a_one_pass_norm_of_a_row_whose_sum_squared_overflows_at_a_symbolic_batch():
    """Found as residual+norm_one_pass/f32/nan (silent, before this round's rules too; fuzz seed 2025006127,
    the batch symbolic, run at batch 1): a row [1, 2.83e19] whose sum squared exceeds the largest float. jax.jit
    at batch 1 squares the sum (inf - inf: NaN); the artifact for any batch squares the mean (the variance inf,
    the row its bias 0.25), for a known batch of 1 as XLA does. The MEAN_SQUARE class, as the group norm's."""
    y = np.array([[[1.0, 2.8294617e19]]], np.float32)
    x = np.ones((1, 1, 2), np.float32)
    assert np.isnan(np.asarray(jax.jit(_one_pass_norm)(x, y))).all()
    for batch in (1, jax.export.symbolic_shape("b")[0]):
        spec = jax.ShapeDtypeStruct((batch, 1, 2), np.float32)
        model = jaxconv.to_onnx(_one_pass_norm, spec, jax.ShapeDtypeStruct((1, 1, 2), np.float32), check=False)
        got = OnnxRunner(model.SerializeToString()).run([x, y])[0]
        assert (np.isnan(got).all() if batch == 1 else (got == np.float32(0.25)).all()), (batch, got)

    def program(batch_axis):
        return FuzzProgram(inputs=[0, 1], types={0: Value((1, 1, 2), "float32", batch_axis=batch_axis),
                                                 1: Value((1, 1, 2), "float32")})

    name = "residual+norm_one_pass/f32/nan"
    assert known.match(name, known.facts([x, y], program=program(0))) is not None
    assert known.match(name, known.facts([x, y], program=program(None))) is None  # a static batch: as XLA
    assert known.match(name, known.facts([x, x], program=program(0))) is None
