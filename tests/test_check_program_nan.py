"""A NaN the program itself makes, which jax.jit's compiled code drops, is not called WRONG on ordinary inputs.

Found by the fuzzer as cell_scan_gru_haiku/f32/nan (seed 9090): a GRU cell scanned over two steps whose gate
bias holds a NaN (a closed-over weight of the fuzzer's edge share). Run op by op, JAX gives NaN everywhere, and
so does the float64 program; jax.jit's compiled scan gives numbers on some CPUs (an AMD Zen 4; NaN on others);
the artifact follows the program. The check
called it WRONG on random inputs (it forgave such differences on its edge inputs only). It now says it cannot
decide, naming why, where every differing element is a NaN that float64 and JAX op by op have too; a NaN the
program does not make stays a mismatch.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jaxconv
from jaxconv.errors import MismatchError
from jaxconv.judging import judge_set
from jaxconv.program import trace
from jaxconv.runtimes.onnxrt import OnnxRunner

_RNG = np.random.default_rng(4)
_WX = (_RNG.standard_normal((2, 6)) * 0.7).astype(np.float32)
_WH = (_RNG.standard_normal((2, 4)) * 0.7).astype(np.float32)
_WN = (_RNG.standard_normal((2, 2)) * 0.7).astype(np.float32)
_B = (_RNG.standard_normal(6) * 0.1).astype(np.float32)
_B[3] = np.nan  # the second unit of the reset gate


def _gru_scan(xs):
    def step(s, xt):
        gx = xt @ _WX + _B
        z, r = jnp.split(1 / (1 + jnp.exp(-(gx[..., :4] + s @ _WH))), 2, axis=-1)
        n = jnp.tanh(gx[..., 4:] + (r * s) @ _WN)
        h = (1 - z) * s + z * n
        return h, h

    return lax.scan(step, jnp.zeros((1, 2), xs.dtype), xs)[1]


def _traced(fn, xs):
    return trace(fn, [jax.ShapeDtypeStruct(xs.shape, xs.dtype)], name="f", param_names=["xs"])


def _gru_scan_with_bias(bias):
    def fn(xs):
        def step(s, xt):
            gx = xt @ _WX + bias
            z, r = jnp.split(1 / (1 + jnp.exp(-(gx[..., :4] + s @ _WH))), 2, axis=-1)
            h = (1 - z) * s + z * jnp.tanh(gx[..., 4:] + (r * s) @ _WN)
            return h, h

        return lax.scan(step, jnp.zeros((1, 2), xs.dtype), xs)[1]

    return fn


def test_the_program_makes_the_nan():
    xs = np.ones((2, 1, 2), np.float32)
    with jax.disable_jit():
        assert np.isnan(np.asarray(_gru_scan(xs))).all()


def test_a_number_where_the_program_makes_nan_is_undecided_and_says_why():
    """Whether jax.jit's compiled scan drops the NaN depends on the CPU (it does on an AMD Zen 4, not on the
    CI's CPU): the judging is tested on a stand-in for jax.jit's numbers, the same scan with a finite bias."""
    xs = np.ones((2, 1, 2), np.float32)
    program = _traced(_gru_scan, xs)
    runner = OnnxRunner(jaxconv.to_onnx(_gru_scan, "f32[2,1,2]", check=False).SerializeToString())
    artifact = runner.run([xs])
    assert np.isnan(artifact[0]).all()
    bias = _B.copy()
    bias[3] = 0.25
    numbers = [np.asarray(jax.jit(_gru_scan_with_bias(bias))(xs))]
    assert np.isfinite(numbers[0]).all()
    rows = judge_set(runner, program.fn, program.arg_specs, program.signature, [xs], numbers, artifact, None, None,
                     "random")
    assert [r.verdict for r in rows] == ["undecided"], rows
    assert rows[0].inputs == "random" and "JAX's op-by-op value" in rows[0].note, rows[0]


def test_the_check_passes_the_scan_on_this_cpu():
    """End to end: the check never calls the NaN scan WRONG; where this CPU's jax.jit drops the NaN it warns."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = jaxconv.to_onnx(_gru_scan, "f32[2,1,2]")
    notes = [str(w.message) for w in caught if "cannot decide" in str(w.message) and "random inputs" in str(w.message)]
    xs = np.ones((2, 1, 2), np.float32)
    if np.isfinite(np.asarray(jax.jit(_gru_scan)(xs))).all():
        assert notes and "JAX's op-by-op value" in notes[0], notes
    got = OnnxRunner(model.SerializeToString()).run([xs])[0]
    assert np.isnan(got).all()


def test_a_nan_the_program_does_not_make_is_still_wrong():
    """The same program without the NaN weight, judged against an artifact output that has NaNs: float64 has
    numbers there, so the verdict stays a mismatch."""
    bias = _B.copy()
    bias[3] = 0.25
    fn = _gru_scan_with_bias(bias)
    xs = np.ones((2, 1, 2), np.float32)
    program = _traced(fn, xs)
    model = jaxconv.to_onnx(fn, "f32[2,1,2]")
    runner = OnnxRunner(model.SerializeToString())
    expected = [np.asarray(jax.jit(fn)(xs))]
    wrong = [np.full_like(expected[0], np.nan)]
    rows = judge_set(runner, program.fn, program.arg_specs, program.signature, [xs], expected, wrong, None, None,
                     "random")
    assert [r.verdict for r in rows] == ["mismatch"], rows


def test_a_wrong_nan_fails_the_check_end_to_end(monkeypatch):
    """An artifact that makes NaN where the program does not (a broken lowering) still raises."""
    from jaxconv.runtimes import onnxrt

    real = onnxrt.OnnxRunner.run

    def broken(self, inputs):
        return [np.full_like(np.asarray(o), np.nan) for o in real(self, inputs)]

    monkeypatch.setattr(onnxrt.OnnxRunner, "run", broken)
    with pytest.raises(MismatchError, match="WRONG"):
        jaxconv.to_onnx(lambda x: jnp.tanh(x) * 2.0, "f32[4]")
