"""Elements where jax.jit overflows in float32 (inf or NaN) but the float64 result is finite.

``jnp.std`` of 64 values near 1e37: jax.jit's float32 sum overflows to inf, so its mean is inf, every
centered value -inf and the deviation inf; the deviation is 0 (equal values) or 9.5e29. An artifact that computes the
deviation without overflowing (here numpy in float64, rounded once to float32) agrees with the float64
reference and must not be called wrong; one that agrees with neither still is. References are
numpy's float64 results, never the code under test.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxconv import check_context, known_differences, verify
from jaxconv.compare import References, judge
from jaxconv.signature import Signature, input_infos, output_infos


def deviation(x):
    return jnp.std(x, axis=-1)


def _rows():
    x = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
    x[0] = np.float32(1e37)  # jax.jit: inf, float64: 0
    x[1, :32], x[1, 32:] = np.float32(1e37), np.float32(1e37) + np.float32(2e30)  # jax.jit: inf; float64 finite
    return x


class _Float64Runner:
    """An artifact that computes the deviation in float64 and rounds it once to float32."""

    kind = "onnx"

    def __init__(self, shift=0.0):
        self.shift = shift

    def run(self, flat):
        return [(np.std(flat[0].astype(np.float64), axis=-1) * (1 + self.shift)).astype(np.float32)]


def _report(runner, x):
    spec = jax.ShapeDtypeStruct(x.shape, np.float32)
    out = jax.eval_shape(deviation, spec)
    sig = Signature(input_infos([spec], ["x"]), output_infos([out], jax.tree_util.tree_structure(out)))
    with check_context.check_options(edge=False):
        return verify.check_runner(runner, "m.onnx", deviation, [spec], sig, inputs=[x])


def test_jit_overflows_where_float64_is_finite():
    """The premise: jax.jit has inf on rows 0 and 1, float64 (numpy) finite values there."""
    x = _rows()
    jit = np.asarray(jax.jit(deviation)(x))
    wide = np.std(x.astype(np.float64), axis=-1)
    assert np.isinf(jit[:2]).all() and np.isfinite(wide).all() and wide[0] == 0 and wide[1] > 9e29
    assert np.abs(wide).max() < np.finfo(np.float32).max


def test_an_artifact_that_agrees_with_float64_passes_as_float64():
    report = _report(_Float64Runner(), _rows())
    (given,) = [r for r in report.rows if r.inputs == "given"]
    assert report.ok and given.verdict == "float64", report.table()
    assert "2 where jax.jit overflows in float32 (inf or NaN) and the artifact has the finite float64 value" in given.note
    assert "ok (float64)" in report.table()


def test_an_artifact_off_float64_is_still_wrong_there():
    """Off by 1% of the float64 value: the float64 reference licenses only values it agrees with."""
    report = _report(_Float64Runner(shift=0.01), _rows())
    (given,) = [r for r in report.rows if r.inputs == "given"]
    assert not report.ok and given.verdict == "mismatch", report.table()


def test_judge_keeps_an_infinity_that_float64_overflows_too():
    """Where float64 is beyond float32's range, jax.jit's inf is the rounded truth: FLT_MAX is wrong."""
    big = float(np.finfo(np.float32).max)
    e = np.array([np.inf, np.inf, np.nan, 1.0], np.float32)
    a = np.array([big, 2.5, 2.5, 1.0], np.float32)
    t = np.array([big * 1.00001, 2.5, 2.5, 1.0])
    row, cls = judge("y", e, a, refs=References(float64=t))
    assert list(cls) == [4, 1, 1, 0] and row.verdict == "mismatch", row
    row, cls = judge("y", e[1:], a[1:], refs=References(float64=t[1:]))
    assert row.ok and row.verdict == "float64" and list(cls) == [1, 1, 0], row
    # without a float64 reference nothing is licensed
    row, cls = judge("y", e[1:], a[1:])
    assert not row.ok and list(cls) == [4, 4, 0], row


def test_on_edge_values_other_values_where_jit_overflows_are_undecided_only_when_alone():
    """jax.jit NaN where float64 is 1.78e38 and the artifact 0 (a relu after an overflow in another
    order): undecided on edge values when every difference is of that kind; a mismatch otherwise."""
    e = np.array([np.nan, 1.0, 2.0], np.float32)
    t = np.array([1.78e38, 1.0, 2.0])
    for a, inputs, verdict in (([0.0, 1.0, 2.0], "edge", "undecided"), ([0.0, 1.0, 2.0], "random", "mismatch"),
                               ([0.0, 1.5, 2.0], "edge", "mismatch")):
        row, cls = judge("y", e, np.array(a, np.float32), refs=References(float64=t), inputs=inputs)
        (out,) = known_differences.as_jit_overflow([row], [cls], [t], [e])
        assert out.verdict == verdict and out.ok == (verdict != "mismatch"), out
        assert (known_differences.JIT_OVERFLOW_NOTE in out.note) == (verdict == "undecided"), out.note
    row, cls = judge("y", e, np.zeros(3, np.float32), refs=References(float64=np.array([np.inf, 1.0, 2.0])),
                     inputs="edge")
    assert known_differences.as_jit_overflow([row], [cls], [np.array([np.inf, 1.0, 2.0])], [e])[0].verdict == "mismatch"


def _dot(x):
    return x @ np.ones((4, 3), np.float32)


def test_on_edge_values_the_artifacts_own_overflow_in_a_sum_is_undecided():
    """The artifact NaN or inf where jax.jit and float64 are finite (or where it has float64's own NaN),
    on inputs near the float range in a program of products: undecided (another order of a sum of huge
    terms, as ONNX Runtime's AVX-512 convolutions reach inf - inf); a mismatch where an element is off
    otherwise, where no input is that large, on random inputs, or where the program sums nothing."""
    huge = np.array([[3.4e38, -3.4e38, 1.0, 2.0]], np.float32)
    small = np.array([[1.0, -1.0, 1.0, 2.0]], np.float32)
    spec = [jax.ShapeDtypeStruct((1, 4), np.float32)]
    e = np.array([0.5, np.inf, 2.0], np.float32)
    t = np.array([0.5, np.nan, 2.0])
    for a, fn, x, inputs, verdict in (
            ([np.nan, np.nan, 2.0], _dot, huge, "edge", "undecided"),
            ([np.inf, np.nan, 2.0], _dot, huge, "edge", "undecided"),
            ([np.nan, 1.0, 2.0], _dot, huge, "edge", "mismatch"),  # 1.0 where float64 is NaN
            ([np.nan, np.nan, 2.5], _dot, huge, "edge", "mismatch"),  # a finite element off
            ([np.nan, np.nan, 2.0], _dot, small, "edge", "mismatch"),
            ([np.nan, np.nan, 2.0], _dot, huge, "random", "mismatch"),
            ([np.nan, np.nan, 2.0], lambda x: x[:, :3] * 2, huge, "edge", "mismatch")):
        row, cls = judge("y", e, np.array(a, np.float32), refs=References(float64=t), inputs=inputs)
        assert row.verdict == "mismatch", row
        (out,) = known_differences.as_artifact_overflow([row], [cls], fn, spec, [x], [t], [e], [np.array(a, np.float32)])
        assert out.verdict == verdict and out.ok == (verdict != "mismatch"), (a, inputs, out)
        assert (known_differences.ARTIFACT_OVERFLOW_NOTE in out.note) == (verdict == "undecided"), out.note
