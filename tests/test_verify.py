"""compare.compare and compare.judge: tolerances, NaN placement, infinities, exact integers, and the
per-element float64 decision (an element is licensed only by its own float64 value)."""

import ml_dtypes
import numpy as np
import pytest

from jaxconv.compare import References, compare, judge


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
    from jaxconv.verify import check_runner

    program = trace(lambda x: _cancelling_sum(x)[0], ["f32[20000]"])

    def float64_twin(x):  # computes in float64 and rounds once: more accurate than jax.jit in float32
        with jax.enable_x64(True):
            return [np.asarray(_cancelling_sum(x.astype(np.float64))[0]).astype(np.float32)]

    report = check_runner(_Runner(float64_twin), "twin", program.fn, program.arg_specs, program.signature)
    assert report.ok
    (row,) = [r for r in report.rows if r.inputs == "random"]
    assert row.verdict == "float64"  # the plain comparison failed and float64 settled it
    assert "within JAX's float32 accuracy against float64" in row.note
    wrong = check_runner(_Runner(float64_twin, shift=50.0), "wrong", program.fn, program.arg_specs, program.signature)
    assert not wrong.ok


# ---- exact integers and bools ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
def test_64_bit_integers_are_compared_in_their_own_dtype(dtype):
    e = np.array([2**53, 7], dtype)
    a = np.array([2**53 + 1, 7], dtype)
    assert float(e[0]) == float(a[0])  # indistinguishable through float64
    row = compare("o", e, a)
    assert not row.ok and row.max_abs == 1.0
    row, _ = judge("o", e, a)
    assert not row.ok and row.verdict == "mismatch" and "first at [0]" in row.note
    assert judge("o", e, e.copy())[0].ok


def test_uint64_extremes_and_bools_are_exact():
    top = np.iinfo(np.uint64).max
    assert not judge("o", np.array([top], np.uint64), np.array([top - 1], np.uint64))[0].ok
    assert not judge("o", np.array([True, False]), np.array([True, True]))[0].ok
    assert judge("o", np.array([True, False]), np.array([True, False]))[0].ok


# ---- per-element float decisions ---------------------------------------------------------------

def test_one_large_element_licenses_nothing_in_the_small_ones():
    """where(x < 100, 3x, 2.5x) with 3.0 edited to 3.3, on [1, 2, 0.5, 1e7+1]."""
    x = np.array([1, 2, 0.5, 1e7 + 1], np.float32)
    truth = np.where(x < 100, 3 * x.astype(np.float64), 2.5 * x.astype(np.float64))
    e = truth.astype(np.float32)
    a = np.where(x < 100, np.float32(3.3) * x, np.float32(2.5) * x)
    row, cls = judge("o", e, a, refs=References(float64=truth))
    assert not row.ok and row.verdict == "mismatch"
    assert list(cls) == [4, 4, 4, 0]
    assert "3 of 4 elements differ" in row.note


def test_an_element_that_overflows_in_float32_licenses_nothing():
    """exp(100x) * 3 with 3.0 edited to 3.3: the overflowing element is infinite on both sides."""
    x = np.array([0.95, 0.01, 0.2], np.float32)
    truth = np.exp(100 * x.astype(np.float64)) * 3
    with np.errstate(over="ignore"):
        e = (np.exp(100 * x) * np.float32(3)).astype(np.float32)
        a = (np.exp(100 * x) * np.float32(3.3)).astype(np.float32)
    assert np.isinf(e[0]) and np.isfinite(truth[0])
    row, cls = judge("o", e, a, refs=References(float64=truth))
    assert not row.ok
    assert list(cls) == [0, 4, 4]  # the equal infinities match; the finite elements do not


def test_a_finite_value_never_stands_in_for_an_infinity_even_when_float64_is_finite():
    truth = np.array([3.5e38, 1.0])
    e = np.array([np.inf, 1.0], np.float32)
    a = np.array([3.4e38, 1.0], np.float32)
    row, _ = judge("o", e, a, refs=References(float64=truth))
    assert not row.ok
    assert not judge("o", np.array([np.inf], np.float32), np.array([-np.inf], np.float32))[0].ok


def test_nan_on_one_side_is_a_mismatch_unless_the_artifact_has_the_finite_float64_value():
    """jax.jit NaN where float64 is finite (its float32 arithmetic overflowed, inf - inf): the artifact
    may have float64's value (ok (float64)); any other finite value is a mismatch."""
    e = np.array([np.nan, 1.0], np.float32)
    a = np.array([2.0, 1.0], np.float32)
    row, _ = judge("o", e, a, refs=References(float64=np.array([3.0, 1.0])))
    assert not row.ok and "NaN positions differ" in row.note
    row, _ = judge("o", e, a)
    assert not row.ok and "NaN positions differ" in row.note
    row, cls = judge("o", e, a, refs=References(float64=np.array([2.0, 1.0])))
    assert row.ok and row.verdict == "float64" and list(cls) == [1, 0], row
    assert "1 where jax.jit overflows in float32 (inf or NaN)" in row.note


def test_float64_licenses_an_element_where_jit_itself_is_off():
    truth = np.array([1.0, 2.0])
    e = np.array([1.001, 2.0], np.float32)  # jax.jit is 1e-3 off at element 0
    a = np.array([0.9985, 2.0], np.float32)  # the artifact is 1.5e-3 off: within 2x
    row, cls = judge("o", e, a, refs=References(float64=truth))
    assert row.ok and row.verdict == "float64" and list(cls) == [1, 0]
    a_far = np.array([0.99, 2.0], np.float32)  # 1e-2 off: 10x jax.jit's error
    row, cls = judge("o", e, a_far, refs=References(float64=truth))
    assert row.verdict != "ok" and cls[0] in (3, 4)


def test_noise_is_pooled_among_elements_of_similar_magnitude():
    """In an ill-conditioned output jax.jit is right at some elements by luck; the artifact's
    error there is judged against the typical error of elements of that magnitude."""
    rng = np.random.default_rng(0)
    truth = rng.uniform(1, 2, 1000)
    e = (truth + rng.normal(0, 1e-2, 1000)).astype(np.float32)
    a = (truth + rng.normal(0, 1e-2, 1000)).astype(np.float32)
    row, cls = judge("o", e, a, refs=References(float64=truth))
    assert row.ok and row.verdict == "float64", row.note
    wrong = a.copy()
    wrong[17] += 0.5  # far outside the noise
    row, cls = judge("o", e, wrong, refs=References(float64=truth))
    assert not row.ok and cls[17] == 4 and (cls == 4).sum() == 1


def test_pooled_noise_of_large_elements_does_not_license_small_ones():
    truth = np.array([1e6] * 10 + [1.0] * 10)
    e = (truth + np.array([0.5] * 10 + [0.0] * 10)).astype(np.float32)  # jax.jit is off only on the large ones
    a = e.copy()
    a[15] = 1.2
    row, cls = judge("o", e, a, refs=References(float64=truth))
    assert not row.ok and cls[15] == 4


def test_without_float64_a_difference_inside_eager_vs_jit_noise_is_undecided():
    e = np.array([1.0, 2.0], np.float32)
    eager = np.array([1.01, 2.0])  # jax op by op and jax.jit disagree by 1e-2 at element 0
    a = np.array([0.985, 2.0], np.float32)
    row, cls = judge("o", e, a, refs=References(eager=eager, why_not="x64 failed"))
    assert row.ok and row.verdict == "undecided" and list(cls) == [3, 0]
    assert "undecided" in row.note and "x64 failed" in row.note
    row, _ = judge("o", e, np.array([1.5, 2.0], np.float32), refs=References(eager=eager))
    assert not row.ok and row.verdict == "mismatch"


def test_subnormal_only_differences_are_reported_as_such():
    e = np.array([0.0, 1.0], np.float32)
    a = np.array([1e-40, 1.0], np.float32)
    row, _ = judge("o", e, a, rtol=0, atol=0)
    assert row.ok and row.verdict == "subnormal" and "subnormal" in row.note
    assert not compare("o", e, a, rtol=0, atol=0).ok  # fixed-tolerance compare counts every difference
    explained = np.array([True, False])
    row, _ = judge("o", np.array([np.nan, 1.0], np.float32), np.array([1.0, 1.0], np.float32), explained=explained)
    assert row.ok and row.verdict == "subnormal"
    row, _ = judge("o", np.array([np.nan, 1.0], np.float32), np.array([1.0, 1.5], np.float32), explained=explained)
    assert not row.ok


def test_complex_outputs_use_their_component_tolerance():
    e = np.array([1 + 1j, np.inf + 0j], np.complex64)
    assert judge("o", e, np.array([1.000001 + 1.000001j, np.inf + 0j], np.complex64))[0].ok
    assert not judge("o", e, np.array([1 + 1.1j, np.inf + 0j], np.complex64))[0].ok


def _attention(params, x):
    import jax
    import jax.numpy as jnp

    for layer in params:
        q, k, v = x @ layer["q"], x @ layer["k"], x @ layer["v"]
        a = jax.nn.softmax(q @ jnp.swapaxes(k, -1, -2), axis=-1)
        x = x + jax.nn.gelu((a @ v) @ layer["o"])
        x = (x - x.mean(-1, keepdims=True)) / (x.std(-1, keepdims=True) + 1e-5)
    return x


def test_a_cancelling_sum_of_flt_max_products_is_judged_by_how_far_float64_moves(tmp_path):
    """A masked attention row: the mean of v, whose column holds -FLT_MAX and FLT_MAX. Each product by
    1/6 rounds by up to half an ulp of FLT_MAX / 6 (2.5e30): summed in an order without a fused
    multiply-add they cancel exactly, with one the rounding of one stays (1.69e30, ONNX Runtime's MatMul on
    an AVX2 EPYC), and the exact sum is 0.11. jax.jit's spread cannot show it (FLT_MAX moved by a rounding
    step overflows), the float64 result moved by a fraction of one does; 1e33 is beyond any order's
    rounding."""
    from judging_support import judge_one_set

    big = np.finfo(np.float32).max
    v = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    v[:, 0] = [1.4e-45, 0.16728023, -big, big, 3.5264831e-38, 0.67456782]
    third = np.float32(1) / np.float32(6)

    def mean_of_rows(v):
        import jax.numpy as jnp

        return jnp.full((2, 6), third, jnp.float32) @ v

    products = (third * v[:, 0]).astype(np.float32)
    fused = np.float64(products[2]) + np.float64(third) * np.float64(v[3, 0])  # fma(1/6, FLT_MAX, -FLT_MAX/6)
    fused = np.float32(fused + products[[0, 1, 4, 5]].astype(np.float64).sum())
    _, expected, _ = judge_one_set(mean_of_rows, [v], "edge", tmp_path, actual=[np.zeros((2, 4), np.float32)])
    assert 1e30 < fused < 2.5e30
    for value, ok in ((fused, True), (np.float32(1e33), False)):
        artifact = np.asarray(expected[0]).copy()
        artifact[:, 0] = value
        (row,), _, _ = judge_one_set(mean_of_rows, [v], "edge", tmp_path, actual=[artifact])
        assert row.ok == ok, row.note
        assert row.verdict in (("ok", "float64") if ok else ("mismatch",)), row.note


class _Float64Runner:
    """The most accurate float32 artifact there is: the program computed in float64, rounded once."""

    kind = "onnx"

    def __init__(self, program):
        self.program = program

    def run(self, inputs):
        from jaxconv.references import float64_outputs

        out, why = float64_outputs(self.program.fn, self.program.arg_specs, inputs)
        assert out is not None, why
        return [np.asarray(o).astype(np.float32) for o in out]


def test_attention_with_standard_normal_weights_is_no_false_alarm_and_an_edit_is_still_caught():
    """With N(0,1) weights the logits are huge: jax.jit is off the float64 result far beyond the float32
    tolerance, so an artifact as accurate as float32 allows (float64 rounded once) differs from it that far,
    yet passes; so does ONNX Runtime, whichever side of jax.jit its own sum orders fall on this CPU. A
    wrong constant still fails."""
    import onnx
    from onnx import numpy_helper

    from jaxconv.check_context import check_options
    from jaxconv.onnx.convert import program_to_onnx
    from jaxconv.program import trace
    from jaxconv.runtimes.onnxrt import OnnxRunner
    from jaxconv.verify import check_runner

    layer = '{"q":"f32[32,32]","k":"f32[32,32]","v":"f32[32,32]","o":"f32[32,32]"}'
    program = trace(_attention, ["[" + ",".join([layer] * 8) + "]", "f32[b,16,32]"])
    model = program_to_onnx(program, None)
    runner = OnnxRunner(model.SerializeToString())
    with check_options(sizes=(5,), edge=False):
        report = check_runner(_Float64Runner(program), "a.onnx", program.fn, program.arg_specs, program.signature)
    (row,) = report.rows
    assert row.max_rel > 1e-3  # far outside the plain tolerance
    assert report.ok and row.verdict == "float64", row.note
    with check_options(sizes=(5,), edge=False):
        report = check_runner(runner, "a.onnx", program.fn, program.arg_specs, program.signature)
    (row,) = report.rows
    assert report.ok and row.verdict in ("ok", "float64"), row.note
    wrong = onnx.ModelProto()
    wrong.CopyFrom(model)
    edited = 0
    for init in wrong.graph.initializer:  # the feature count that divides the sums of mean and variance
        a = numpy_helper.to_array(init)  # (or its reciprocal, by which XLA and the ONNX multiply)
        for count, edit in ((32.0, 33.0), (np.float32(1 / 32), np.float32(1 / 33))):
            if a.size and a.dtype.kind == "f" and np.all(a == count):
                init.CopyFrom(numpy_helper.from_array(np.full_like(a, edit), init.name))
                edited += 1
    assert edited
    with check_options(sizes=(5,), edge=False):
        report = check_runner(OnnxRunner(wrong.SerializeToString()), "a.onnx", program.fn, program.arg_specs, program.signature)
    assert not report.ok and report.rows[0].verdict == "mismatch"


class _NumpyRunner:
    """Computes like ONNX Runtime would: numpy keeps subnormals where XLA on the CPU flushes them."""

    kind = "numpy"

    def __init__(self, fn):
        self.fn = fn

    def run(self, inputs):
        with np.errstate(all="ignore"):
            return [np.asarray(self.fn(*inputs))]


def test_a_difference_explained_by_subnormal_inputs_is_reported_as_such():
    from jaxconv.program import trace
    from jaxconv.verify import check_runner

    program = trace(lambda x: x / x, ["f32[40]"])
    report = check_runner(_NumpyRunner(lambda x: x / x), "div", program.fn, program.arg_specs, program.signature)
    edges = [r for r in report.rows if r.inputs == "edge"]  # two edge sets: 40 elements is a big input
    assert report.ok and [e.verdict for e in edges] == ["subnormal"] * 2, report.table()  # jax.jit: 0/0 = NaN; numpy: 1
    assert all("differ only in subnormals" in e.note for e in edges)
    wrong = check_runner(_NumpyRunner(lambda x: np.where(x > 1, x, x / x)), "div", program.fn, program.arg_specs,
                         program.signature)
    assert not wrong.ok


def test_edge_values_that_make_jax_raise_are_skipped_with_a_note():
    import jax

    from jaxconv.program import trace
    from jaxconv.verify import check_runner

    def refuse_nan(x):
        if np.isnan(x).any():
            raise ValueError("NaN input")
        return x

    def fn(x):
        return jax.pure_callback(refuse_nan, jax.ShapeDtypeStruct(x.shape, x.dtype), x) * 2

    program = trace(lambda x: x * 2, ["f32[8]"])  # the exported program has no callback; jax.jit(fn) has
    report = check_runner(_NumpyRunner(lambda x: x * 2), "x2", fn, program.arg_specs, program.signature)
    assert [r.inputs for r in report.rows] == ["random"]
    assert any(n.startswith("edge values skipped: jax.jit raises on them") for n in report.notes)
    assert "note: edge values skipped" in report.table()


def test_inputs_given_to_the_api_are_checked_against_the_signature():
    from jaxconv.check_context import check_options
    from jaxconv.errors import UsageError
    from jaxconv.program import trace
    from jaxconv.verify import check_runner

    program = trace(lambda x: x * 2, ["f32[b,3]"])
    runner = _NumpyRunner(lambda x: x * 2)
    with pytest.raises(UsageError, match=r"inputs: input 'x' is float32\[2,4\], the function takes float32\[b,3\]"):
        check_runner(runner, "x2", program.fn, program.arg_specs, program.signature, inputs=[np.zeros((2, 4), np.float32)])
    with check_options(examples=(np.ones((3, 3), np.float64),)):
        with pytest.raises(UsageError, match=r"example inputs: input 'x' is float64\[3,3\]"):
            check_runner(runner, "x2", program.fn, program.arg_specs, program.signature)
    with check_options(examples=(np.ones((7, 3), np.float32),), sizes=(2,), edge=False):
        report = check_runner(runner, "x2", program.fn, program.arg_specs, program.signature)
    assert [(r.inputs, r.shape) for r in report.rows] == [("example", (7, 3)), ("random", (2, 3))]


def test_zero_size_outputs_are_checked_on_every_input_set():
    from jaxconv.program import trace
    from jaxconv.verify import check_runner

    program = trace(lambda x: x[2:2] * 2, ["f32[4,3]"])
    report = check_runner(_NumpyRunner(lambda x: x[2:2] * 2), "empty", program.fn, program.arg_specs, program.signature)
    assert report.ok and [(r.inputs, r.shape) for r in report.rows] == [("random", (0, 3)), ("edge", (0, 3))]
    wrong = check_runner(_NumpyRunner(lambda x: x[2:3] * 2), "empty", program.fn, program.arg_specs, program.signature)
    assert not wrong.ok and "shape [1, 3] != [0, 3]" in wrong.rows[0].note


def test_an_int64_output_off_by_one_above_2_53_fails_the_check():
    from jaxconv.program import trace
    from jaxconv.verify import check_runner

    program = trace(lambda x: x + 2**53, ["i64[6]"])
    with program.jax_scope():  # 64-bit specs: x64 for this program's code only
        right = check_runner(_NumpyRunner(lambda x: x + np.int64(2**53)), "i64", program.fn, program.arg_specs,
                             program.signature)
        off = check_runner(_NumpyRunner(lambda x: x + np.int64(2**53) + (np.arange(6) == 0)), "i64", program.fn,
                           program.arg_specs, program.signature)
    assert right.ok and {r.inputs for r in right.rows} == {"random", "edge"}
    (first,) = [r for r in off.rows if r.inputs == "random"]
    assert not off.ok and not first.ok and first.max_abs == 1.0 and "1 of 6 elements differ, first at [0]" in first.note


def _pool_2x2(x):
    """2x2 max pooling in numpy (NHWC); NaN propagates, as in ONNX Runtime's MaxPool and StableHLO's spec."""
    b, h, w, c = x.shape
    return np.max(x.reshape(b, h // 2, 2, w // 2, 2, c), axis=(2, 4))


def test_nan_kept_by_the_artifact_where_xla_max_pooling_drops_it_is_undecided():
    """At (5, 28, 28, 8) XLA on the CPU drops NaN in reduce_window max; a NaN-keeping artifact is
    undecided on edge values, with the reason. Other differences, or NaN without pooling, still fail."""
    import jax.numpy as jnp
    from jax import lax

    from jaxconv.check_context import check_options
    from jaxconv.known_differences import POOLING_NAN_NOTE
    from jaxconv.program import trace
    from jaxconv.verify import check_runner

    def pool(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    program = trace(pool, ["f32[5,28,28,8]"])
    report = check_runner(_NumpyRunner(_pool_2x2), "pool", program.fn, program.arg_specs, program.signature)
    edges = [r for r in report.rows if r.inputs == "edge"]
    assert report.ok and [e.verdict for e in edges] == ["undecided"] * 2, report.table()
    assert all(POOLING_NAN_NOTE in e.note and "reduce_window_max" in e.note for e in edges)
    assert "NaN in the artifact where jax.jit has a number" in report.warning()

    def off_by_one(x):  # NaN kept, and one finite element wrong
        y = _pool_2x2(x)
        i = np.flatnonzero(np.isfinite(y))[0]
        y.ravel()[i] += 1
        return y

    with check_options(sizes=(5,)):
        wrong = check_runner(_NumpyRunner(off_by_one), "pool", program.fn, program.arg_specs, program.signature)
    # the second edge set's first finite pooled value is huge there: + 1 leaves it, only NaN differs
    assert [(r.inputs, r.verdict) for r in wrong.rows] == [("random", "mismatch"), ("edge", "mismatch"), ("edge", "undecided")]

    def drop_nan(x):  # the artifact drops NaN where jax.jit keeps it: never excused
        return np.where(np.isnan(x), np.float32(0), x) * 2

    doubled = trace(lambda x: x * 2, ["f32[5,28,28,8]"])
    no_pool = check_runner(_NumpyRunner(lambda x: np.where(np.isinf(x), np.nan, x * 2)), "x2", doubled.fn,
                           doubled.arg_specs, doubled.signature)
    edges = [r for r in no_pool.rows if r.inputs == "edge"]
    assert not no_pool.ok and len(edges) == 2, no_pool.table()
    assert all(e.verdict == "mismatch" and POOLING_NAN_NOTE not in e.note for e in edges), no_pool.table()
    assert not check_runner(_NumpyRunner(drop_nan), "x2", doubled.fn, doubled.arg_specs, doubled.signature).ok


def test_nan_on_either_side_of_a_max_pool_gradient_is_undecided_and_only_there():
    """The gradient of a max pool picks what XLA's pooling kept: where it dropped a NaN, jax.jit's gradient can
    be NaN where the artifact's is a number. With the gradient in the program, a NaN on either side alone is
    undecided; a pooling forward pass still fails an artifact that drops a NaN jax.jit keeps."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    from jaxconv.known_differences import POOLING_NAN_NOTE
    from jaxconv.program import trace
    from jaxconv.verify import check_runner

    def pool(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    def grad(x):
        return jax.grad(lambda v: jnp.sum(pool(v) ** 2))(x)  # 2 * the kept value at each pick: NaN too

    def drop_nan(fn):  # jax.jit's own result with its NaNs as zeros
        return lambda x: np.where(np.isnan(y := np.asarray(jax.jit(fn)(x))), np.float32(0), y)

    program = trace(grad, ["f32[2,8,8,4]"])
    report = check_runner(_NumpyRunner(drop_nan(grad)), "grad", program.fn, program.arg_specs, program.signature)
    edges = [r for r in report.rows if r.inputs == "edge"]
    assert report.ok and edges and all(e.verdict in ("ok", "undecided") for e in edges), report.table()
    assert any(POOLING_NAN_NOTE in e.note and "select_and_scatter_add" in e.note for e in edges), report.table()

    forward = trace(pool, ["f32[2,8,8,4]"])
    report = check_runner(_NumpyRunner(drop_nan(pool)), "pool", forward.fn, forward.arg_specs, forward.signature)
    assert not report.ok and any(r.verdict == "mismatch" and r.inputs == "edge" for r in report.rows), report.table()


def test_a_generic_reduce_window_with_a_max_body_counts_as_pooling():
    import jax.numpy as jnp
    from jax import lax

    from jaxconv.known_differences import nan_dropping_ops

    x = [np.zeros((8,), np.float32)]
    assert nan_dropping_ops(lambda v: lax.reduce_window(v, 0.0, lax.max, (2,), (2,), "VALID"), [x[0]], x) == {"reduce_window_max"}
    assert nan_dropping_ops(lambda v: lax.reduce_window(v, 0.0, lax.add, (2,), (2,), "VALID"), [x[0]], x) == set()
    assert nan_dropping_ops(lambda v: jnp.argmin(v) + jnp.max(v).astype(int), [x[0]], x) == {"argmin"}
