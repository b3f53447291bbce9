"""The check's float64 reference widens the constants a function closes over, not only its inputs.

Haiku calls ``lax.conv_general_dilated`` on its float32 weights directly; tracing such a function
again with float64 inputs fails ("requires arguments to have the same dtypes"), which left the
check with the float32 tolerance alone (Haiku ResNet-18 failed the default check on one logit of
20, abs 1.45e-5, rel 7e-4 on 0.018). Each reference here is computed by the same function built
with its constants widened to float64 first, never by the code under test.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from jaxconv import check_context, compare, references, verify
from jaxconv.signature import Signature, input_infos, output_infos

_rng = np.random.default_rng(3)
# float32 values: the float64 versions are the same numbers, widened
_CONV_W = _rng.standard_normal((3, 3, 2, 4)).astype(np.float32)  # HWIO, numpy
_DENSE_W = _rng.standard_normal((64, 5)).astype(np.float32)  # jax array below
_BIAS = _rng.standard_normal((5,)).astype(np.float32)
_STEP_W = (_rng.standard_normal((4, 4)) / 2).astype(np.float32)
_BF16_W = _rng.standard_normal((6, 3)).astype(ml_dtypes.bfloat16)
_F16_W = _rng.standard_normal((6, 3)).astype(np.float16)
_IDX = _rng.integers(0, 6, size=(4,)).astype(np.int32)


def haiku_like(conv_w, dense_w, bias):
    """conv -> relu -> flatten -> dense, as Haiku's Conv2D and Linear call lax (no dtype promotion)."""
    def fn(x):
        y = lax.conv_general_dilated(x, conv_w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        y = jax.nn.relu(y).reshape(x.shape[0], -1)
        return lax.dot_general(y, dense_w, (((1,), (0,)), ((), ())), preferred_element_type=y.dtype) + bias
    return fn


def scanned(step_w):
    """A closed-over weight inside a scan body and a while body, through lax.mul (equal dtypes only)."""
    def fn(x):
        def step(h, row):
            h = jnp.tanh(lax.dot_general(h, step_w, (((0,), (0,)), ((), ()))) + row)
            return h, lax.mul(h, step_w[0])
        h, ys = lax.scan(step, jnp.zeros((4,), x.dtype), x)
        _, h = lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, lax.mul(c[1], step_w[1])), (0, h))
        return h, ys
    return fn


@jax.custom_jvp
def _scaled_sin(x, w):
    return lax.mul(jnp.sin(x), w)


_scaled_sin.defjvp(lambda p, t: (_scaled_sin(*p), t[0] * jnp.cos(p[0]) * p[1]))


@jax.custom_vjp
def _scaled_cos(x, w):
    return lax.mul(jnp.cos(x), w)


_scaled_cos.defvjp(lambda x, w: (_scaled_cos(x, w), (x, w)), lambda r, g: (g, g))


def custom_derivatives(w):
    def fn(x):
        return _scaled_sin(x, w) + _scaled_cos(x, w)
    return fn


def narrow_and_int(bf16_w, f16_w, idx):
    """bfloat16 and float16 weights, and an int32 index table (which stays int32)."""
    def fn(x):
        a = lax.dot_general(x.astype(jnp.bfloat16), bf16_w, (((1,), (0,)), ((), ())),
                            preferred_element_type=jnp.float32)
        b = x @ f16_w.astype(jnp.float32)
        return a + b, jnp.take(x, idx, axis=1), idx + 1
    return fn


def _wide(a):
    return np.asarray(a).astype(np.float64)


CASES = {
    "conv_dense": (haiku_like(_CONV_W, jnp.asarray(_DENSE_W), _BIAS),
                   haiku_like(_wide(_CONV_W), _wide(_DENSE_W), _wide(_BIAS)), (2, 4, 4, 2)),
    "scan_while": (scanned(_STEP_W), scanned(_wide(_STEP_W)), (3, 4)),
    "custom_jvp_vjp": (custom_derivatives(_BIAS), custom_derivatives(_wide(_BIAS)), (5,)),
    # the program rounds x to bfloat16 on purpose: so does the float64 version
    "bf16_f16_int": (narrow_and_int(_BF16_W, _F16_W, _IDX),
                     lambda x: (x.astype(jnp.bfloat16).astype(jnp.float64) @ _wide(_BF16_W) + x @ _wide(_F16_W),
                                jnp.take(x, _IDX, axis=1), _IDX + 1), (2, 6)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_float64_reference_widens_closed_over_constants(name):
    fn, wide_fn, shape = CASES[name]
    x = _rng.standard_normal(shape).astype(np.float32)
    spec = [jax.ShapeDtypeStruct(x.shape, x.dtype)]
    got, why = references.float64_outputs(fn, spec, [x])
    assert why == "" and got is not None
    with jax.enable_x64(True):
        want = [np.asarray(o) for o in jax.tree_util.tree_leaves(jax.jit(wide_fn)(jnp.asarray(_wide(x))))]
    assert [g.dtype for g in got] == [w.dtype for w in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_inputs_alone_widened_is_what_failed():
    """The old reference (inputs widened, the function traced again) has no float64 for a Haiku-like model."""
    fn = CASES["conv_dense"][0]
    with jax.enable_x64(True), pytest.raises(TypeError, match="same dtypes"):
        jax.jit(fn)(jnp.ones((2, 4, 4, 2), jnp.float64))


def test_subnormal_inputs_and_constants_are_kept_when_widened():
    """XLA on the CPU flushes subnormals as it converts float32 to float64: the widening is numpy's."""
    tiny = np.float32(1e-42)
    fn = lambda x: lax.mul(jnp.sign(x), np.float32(3.0)) + jnp.sign(np.array([tiny, -tiny], np.float32))  # noqa: E731
    x = np.array([tiny, -tiny], np.float32)
    got, why = references.float64_outputs(fn, [jax.ShapeDtypeStruct(x.shape, x.dtype)], [x])
    assert why == ""
    np.testing.assert_array_equal(got[0], [4.0, -4.0])


def test_bitcast_stays_at_the_program_dtype():
    """An op whose meaning is its precision runs at the program's dtypes; the rest in float64."""
    from jaxconv.jit_reference import wide_call

    fn = lambda x: (lax.bitcast_convert_type(x * np.float32(3.0), jnp.int32), x / np.float32(3.0))  # noqa: E731
    x = np.array([1.0, 0.1], np.float32)
    (bits, third), narrow = wide_call(fn, [jnp.asarray(x)])
    assert narrow == {"bitcast_convert_type"}
    np.testing.assert_array_equal(np.asarray(bits), (x * np.float32(3.0)).view(np.int32))
    assert third.dtype == np.float64 and float(third[1]) == float(np.float32(0.1)) / 3.0


# An ill-conditioned program on closed-over weights: (x + 1e4) @ W - 1e4 * colsum(W) is x @ W, but
# float32 loses about 1e-3 of it to rounding in the big sums. An artifact that computes it better
# than jax.jit is beyond the float32 tolerance of jax.jit's result; only float64 shows it is fine.
_ILL_W = _rng.standard_normal((256, 8)).astype(np.float32)
_ILL_SUM = _ILL_W.astype(np.float64).sum(0).astype(np.float32)


def ill_conditioned(x):
    y = lax.dot_general(x + np.float32(1e4), jnp.asarray(_ILL_W), (((1,), (0,)), ((), ())),
                        preferred_element_type=jnp.float32)
    return y - np.float32(1e4) * _ILL_SUM


class _ExactRunner:
    """An artifact that computes ``ill_conditioned`` in float64 (numpy), rounded once to float32."""

    kind = "onnx"

    def run(self, flat):
        x = flat[0].astype(np.float64)
        return [((x + 1e4) @ _ILL_W.astype(np.float64) - 1e4 * _ILL_SUM.astype(np.float64)).astype(np.float32)]


def _ill_report(monkeypatch=None):
    spec = jax.ShapeDtypeStruct((4, 256), np.float32)
    out = jax.eval_shape(ill_conditioned, spec)
    sig = Signature(input_infos([spec], ["x"]), output_infos([out], jax.tree_util.tree_structure(out)))
    with check_context.check_options(edge=False):
        return verify.check_runner(_ExactRunner(), "m.onnx", ill_conditioned, [spec], sig)


def test_the_verdict_uses_the_float64_reference():
    x = np.random.default_rng(0).standard_normal((4, 256)).astype(np.float32)
    jit_out = np.asarray(jax.jit(ill_conditioned)(x))
    exact = _ExactRunner().run([x])[0]
    row, _ = compare.judge("y", jit_out, exact)
    assert not row.ok  # the float32 tolerance alone calls the better artifact wrong
    report = _ill_report()
    assert report.ok and not report.undecided, report.table()
    assert {r.verdict for r in report.rows} == {"float64"}, report.table()
    assert "within JAX's float32 accuracy against float64" in report.rows[0].note


def test_without_float64_the_mismatch_says_why(monkeypatch):
    """With the float64 reference gone, the same artifact is no longer vindicated, and the row says why."""
    monkeypatch.setattr(references, "float64_outputs", lambda fn, specs, flat: (None, "RuntimeError: no float64 here"))
    report = _ill_report()
    assert not any(r.verdict == "float64" for r in report.rows), report.table()
    text = report.table()
    assert "no float64 here" in text


def test_a_wrong_artifact_is_not_vindicated_by_float64():
    """The float64 reference licenses rounding, not a weight off by 1%."""
    class Off(_ExactRunner):
        def run(self, flat):
            y = super().run(flat)[0]
            return [y + np.float32(0.01) * np.abs(y).max()]

    spec = jax.ShapeDtypeStruct((4, 256), np.float32)
    out = jax.eval_shape(ill_conditioned, spec)
    sig = Signature(input_infos([spec], ["x"]), output_infos([out], jax.tree_util.tree_structure(out)))
    with check_context.check_options(edge=False):
        report = verify.check_runner(Off(), "m.onnx", ill_conditioned, [spec], sig)
    assert not report.ok, report.table()


_SPD = (np.eye(4) * 4 + _rng.standard_normal((4, 4)) / 4).astype(np.float32)


@pytest.mark.parametrize("name, fn, wide_fn", [
    ("solve", lambda x: jnp.linalg.solve(_SPD, x), lambda x: jnp.linalg.solve(_wide(_SPD), x)),
    ("reduce", lambda x: lax.reduce(x, np.float32(0), lambda a, b: a + b * _BIAS[0], (0,)),
     lambda x: lax.reduce(x, np.float64(0), lambda a, b: a + b * _wide(_BIAS)[0], (0,))),
    ("reduce_window", lambda x: lax.reduce_window(x, np.float32(1), lax.mul, (2, 2), (1, 1), "VALID"),
     lambda x: lax.reduce_window(x, np.float64(1), lax.mul, (2, 2), (1, 1), "VALID")),
])
def test_linear_solves_and_own_reductions_run_in_float64(name, fn, wide_fn):
    """jnp.linalg.solve (a custom_linear_solve) and reductions with their own computation run widened."""
    from jaxconv.jit_reference import wide_call

    x = _rng.standard_normal((4, 4)).astype(np.float32)
    (got,), narrow = wide_call(lambda x: [fn(x)], [jnp.asarray(x)])
    assert not narrow
    with jax.enable_x64(True):
        want = np.asarray(jax.jit(wide_fn)(jnp.asarray(_wide(x))))
    assert got.dtype == np.float64
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)
