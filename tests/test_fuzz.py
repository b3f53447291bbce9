"""The fuzzer itself: deterministic generation, element comparison, minimisation, classification."""

from __future__ import annotations

import collections
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from conformance.fuzz import known, reproducer  # noqa: E402
from conformance.fuzz import run as fuzz_run  # noqa: E402
from conformance.fuzz.compare import compare_all, compare_one  # noqa: E402
from conformance.fuzz.driver import class_of, fuzz_program  # noqa: E402
from conformance.fuzz.generate import generate, input_values  # noqa: E402
from conformance.fuzz.minimise import Failure, minimise  # noqa: E402
from conformance.fuzz.program import FuzzProgram, Step, Value, infer_types  # noqa: E402


def test_generator_is_deterministic_for_a_seed():
    for seed in (0, 7, 123456):
        a, b = generate(seed), generate(seed)
        assert a.source() == b.source()
        assert [a.types[i] for i in a.inputs] == [b.types[i] for i in b.inputs]
        for kind in ("normal", "edge", "mixed"):
            for x, y in zip(input_values(a, kind, seed), input_values(b, kind, seed)):
                assert x.dtype == y.dtype and x.tobytes() == y.tobytes()
    assert generate(1).source() != generate(2).source()


def test_generator_covers_dtypes_shapes_ops_and_control_flow():
    dtypes, ops, sizes = set(), collections.Counter(), set()
    for seed in range(150):
        p = generate(seed, family="random")  # the model family: tests/test_fuzz_models.py
        assert 1 <= len(p.steps) <= 8
        dtypes.update(v.dtype for v in p.types.values())
        ops.update(p.ops())
        sizes.update(v.size for v in p.types.values())
        sizes.update(len(v.shape) for v in p.types.values())
    assert dtypes == {"float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
                      "uint8", "uint16", "uint32", "uint64", "bool"}
    for op in ("conv", "matmul", "take", "scatter_add", "dynamic_slice", "dynamic_update_slice", "sort", "argsort",
               "cond", "fori_loop", "scan", "while_loop", "where", "concatenate", "transpose", "reshape"):
        assert ops[op] > 0, op
    assert any(op.startswith("reduce_window") for op in ops) and any(op.startswith("convert_") for op in ops)
    assert any(op.startswith("cum") for op in ops)
    assert 0 in sizes and 1 in sizes  # zero-size values and scalars


def test_edge_inputs_hold_special_values():
    p = FuzzProgram(inputs=[0, 1], types={0: Value((64,), "float32"), 1: Value((64,), "int8")})
    f, i = input_values(p, "edge", 3)
    assert np.isnan(f).any() and np.isposinf(f).any() and np.isneginf(f).any()
    assert ((f == 0) & np.signbit(f)).any()
    assert ((f != 0) & (np.abs(f) < np.finfo(np.float32).tiny)).any()
    assert i.min() == -128 and i.max() == 127


@pytest.mark.parametrize("e,a,kind", [
    (np.float32([0.0, 1.0]), np.float32([-0.0, 1.0]), "signed-zero"),
    (np.float32([np.nan, 1.0]), np.float32([0.0, 1.0]), "nan"),
    (np.float32([-np.inf]), np.float32([-3.4028235e38]), "inf"),
    (np.float32([3.0]), np.float32([3.3]), "value"),
    (np.int64([2**53 + 1]), np.int64([2**53]), "value"),
    (np.uint64([2**64 - 1]), np.uint64([2**64 - 2]), "value"),
    (np.float32([1, 2]), np.float32([1, 2, 3]), "shape"),
])
def test_compare_names_the_kind_of_difference(e, a, kind):
    assert compare_one(e, a).kind == kind


def test_flush_subnormals_keeps_the_sign_and_reports_none_without_any():
    from conformance.fuzz.minimise import flush_subnormals

    flushed = flush_subnormals([np.float32([1e-40, -1e-40, 1.0]), np.int32([1])])
    assert flushed[0].tolist() == [0.0, 0.0, 1.0] and np.signbit(flushed[0]).tolist() == [False, True, False]
    assert flush_subnormals([np.float32([1.0, 0.0])]) is None


def test_compare_accepts_rounding_and_equal_specials():
    e = np.float32([1.0, np.nan, np.inf, -0.0, 0.0])
    a = np.float32([1.00001, np.nan, np.inf, -0.0, 0.0])
    assert compare_one(e, a) is None
    assert compare_all([np.int8([1])], [np.int8([1])]) is None


def _planted(program: FuzzProgram, target: str, inputs):
    """A fake converter that computes jnp.maximum as where(a > b, a, b): wrong when b is NaN."""
    expected = fuzz_run.reference(program, inputs)
    buggy = program.copy()
    buggy.steps = [Step(s.op, s.args, s.expr.replace("jnp.maximum({0}, {1})", "jnp.where({0} > {1}, {0}, {1})"), s.out)
                   for s in program.steps]
    actual = fuzz_run.reference(buggy, inputs)
    diff = compare_all(expected, actual)
    return ("mismatch" if diff else "ok"), diff, expected, actual, diff.line() if diff else ""


def _program_with_planted_max() -> tuple[FuzzProgram, list[np.ndarray]]:
    p = FuzzProgram(inputs=[0, 1], types={0: Value((4, 3), "float32"), 1: Value((4, 3), "float32")})
    steps = [("sin", (0,), "jnp.sin({0})"), ("mul", (2, 1), "{0} * {1}"), ("max", (3, 2), "jnp.maximum({0}, {1})"),
             ("exp", (4,), "jnp.exp({0})"), ("reduce_sum", (5,), "jnp.sum({0}, axis=0)"), ("cos", (0,), "jnp.cos({0})")]
    for k, (op, args, expr) in enumerate(steps):
        p.steps.append(Step(op, args, expr, 2 + k))
    p.outputs = [6, 7]
    p = infer_types(p)
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    y = np.ones((4, 3), np.float32)
    y[2, 1] = np.nan
    return p, [x, y]


def test_minimiser_shrinks_a_planted_bug_to_one_op_and_one_element():
    program, inputs = _program_with_planted_max()
    status, diff, expected, actual, detail = _planted(program, "onnx", inputs)
    assert status == "mismatch" and diff.kind == "nan"
    small = minimise(Failure(program, inputs, status, diff, detail, expected, actual), "onnx", try_fn=_planted)
    assert small.program.ops() == ["max"]
    assert all(a.size == 1 for a in small.inputs)
    assert any(np.isnan(a).all() for a in small.inputs)
    assert class_of(small, "onnx") == "max/f32/nan"
    assert class_of(small, "tflite") == "tflite:max/f32/nan"


def test_reproducer_is_standalone_and_exact(tmp_path):
    program, inputs = _program_with_planted_max()
    small = minimise(Failure(program, inputs, *_planted(program, "onnx", inputs)[:2], "", [], []), "onnx", try_fn=_planted)
    small.inputs = [np.float32([-0.0, np.nan, -np.inf, 1e-45]).reshape(-1)[: a.size].reshape(a.shape) for a in small.inputs]
    path = reproducer.write(small, "max/f32/nan", "silent", "planted", "onnx", str(tmp_path), "seed0")
    scope: dict = {"__name__": "repro"}
    exec(compile(open(path).read(), path, "exec"), scope)  # noqa: S102
    for got, want in zip(scope["INPUTS"], small.inputs):
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    for dtype, values in (("bfloat16", [-0.0, float("inf")]), ("uint64", [2**64 - 1]), ("int8", [-128]), ("bool", [True])):
        from conformance.case import np_dtype

        a = np.array(values, np.float64 if dtype == "bfloat16" else None).astype(np_dtype(dtype))
        back = eval(reproducer.literal(a), {"_a": scope["_a"], "nan": np.nan, "inf": np.inf})  # noqa: S307
        assert back.tobytes() == a.tobytes()


class _Runner:
    kind = "onnx"

    def __init__(self, program: FuzzProgram, offset: float = 0.0, trigger: float | None = None) -> None:
        self.program, self.offset, self.trigger = program, offset, trigger

    def run(self, inputs):
        out = fuzz_run.reference(self.program, inputs)
        if self.trigger is not None and not any((np.asarray(a) == self.trigger).any() for a in inputs):
            return out
        return [o + np.asarray(self.offset, o.dtype) for o in out]


def test_default_check_verdict_silent_versus_caught():
    p = infer_types(FuzzProgram(inputs=[0], steps=[Step("sin", (0,), "jnp.sin({0})", 1)], outputs=[1],
                                types={0: Value((5,), "float32")}))
    traced = fuzz_run.trace(p)
    assert fuzz_run.default_check(traced, _Runner(p, offset=0.5)) == "mismatch"
    assert fuzz_run.default_check(traced, _Runner(p, offset=0.5, trigger=1234.5)) == "ok"


def test_fuzz_program_records_a_planted_mismatch(monkeypatch, tmp_path):
    p = infer_types(FuzzProgram(inputs=[0], steps=[Step("abs", (0,), "jnp.abs({0})", 1)], outputs=[1],
                                types={0: Value((32,), "float32")}))
    real = fuzz_run.convert

    def buggy_convert(program, target, tmp, opset=None):
        runner = real(program, target, tmp)

        class Flip:
            kind = "onnx"

            def run(self, inputs):
                out = runner.run(inputs)
                return [np.where(np.isinf(o), np.float32(3.4028235e38), o) for o in out]

        return Flip()

    monkeypatch.setattr(fuzz_run, "convert", buggy_convert)
    rec = fuzz_program(p, 5, "onnx", str(tmp_path))
    assert rec["status"] == "mismatch" and rec["class"] == "abs/f32/inf" and rec["verdict"] in ("silent", "caught")
    assert rec["known"] == "" and os.path.exists(rec["reproducer"])
    assert "jnp.abs(v" in open(rec["reproducer"]).read()


def test_crash_signatures_ignore_numbers_addresses_and_node_names():
    from conformance.fuzz.minimise import signature

    a = "PassError: running '<onnx_ir.passes.PassManager object at 0x7f4eda236ad0>' failed at n_Reshape_7 (rank 2)"
    b = "PassError: running '<onnx_ir.passes.PassManager object at 0x7f5381afb950>' failed at n_Reshape_12 (rank 3)"
    assert signature(a) == signature(b) != signature("ConversionError: onnx.checker failed")


def test_known_table_matches_classes_and_every_row_has_a_reason():
    assert known.match("add/f32/subnormal") is not None
    assert known.match("where/f32/signed-zero") is None
    assert known.match("bitcast_f32_u32/f32/nan-bits") is not None
    assert known.match("bitcast_f32_u32/f32/value") is None and known.match("bitcast_f32_u32/f32/last-bit") is None
    assert "nan-input" in known.facts([np.float32([1.0, np.nan])])
    assert "zero-size" in known.facts([np.zeros((2, 0), np.int8)])
    huge = known.facts([np.float32([1.0, 3.4e38, -3.4e38])])
    assert known.match("reduce_sum/f32/value", huge) is not None and known.match("reduce_sum/f32/value") is None
    assert known.match("expm1+bitcast_f32_i32/f32/last-bit") is not None


@pytest.mark.parametrize("expected,actual,kind", [
    (np.float32([np.nan]).view(np.uint32) | np.uint32(2**31), np.float32([np.nan]).view(np.uint32), "nan-bits"),
    (np.float32([1.0]).view(np.uint32), np.float32([1.0]).view(np.uint32) + np.uint32(1), "last-bit"),
    (np.float32([0.0]).view(np.uint32), np.float32([1e-40]).view(np.uint32), "subnormal"),
    (np.float32([1.0]).view(np.uint32), np.float32([2.0]).view(np.uint32), "value"),
])
def test_bitcast_differences_are_read_as_floats(expected, actual, kind):
    from conformance.fuzz.driver import _bitcast_kind

    p = infer_types(FuzzProgram(inputs=[0], steps=[Step("bitcast_f32_u32", (0,), "lax.bitcast_convert_type({0}, jnp.uint32)", 1)],
                                outputs=[1], types={0: Value((1,), "float32")}))
    failure = Failure(p, [np.float32([1.0])], "mismatch", compare_all([expected], [actual]), "", [expected], [actual])
    assert _bitcast_kind(failure).diff.kind == kind
    assert all(row.reason.strip() for row in known.KNOWN)


def test_cli_runs_a_seeded_sample(tmp_path):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "fuzz.py"), "--count", "3", "--seed", "1",
                          "-o", str(tmp_path), "-q"], capture_output=True, text=True, timeout=300)
    assert out.returncode in (0, 1), out.stderr[-2000:]
    assert "fuzz: 3 programs" in out.stdout
    assert os.path.exists(tmp_path / "summary.txt") and os.path.exists(tmp_path / "results.jsonl")
    bad = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "fuzz.py"), "--targets", "nope"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown target" in bad.stderr


def _float_arrays():
    from hypothesis.extra import numpy as hnp

    return hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
                      elements={"allow_nan": True, "allow_infinity": True, "allow_subnormal": True})


def test_reproducer_literal_round_trips_any_float32_array():
    from hypothesis import given, settings

    @settings(max_examples=100, deadline=None)
    @given(_float_arrays())
    def check(a):
        from conformance.fuzz.reproducer import literal

        scope = {"nan": float("nan"), "inf": float("inf")}
        exec("import numpy as np\n" + _A_SOURCE, scope)  # noqa: S102
        back = eval(literal(a), scope)  # noqa: S307
        assert back.shape == a.shape and back.dtype == a.dtype
        same = (back.view(np.uint32) == a.view(np.uint32)) | (np.isnan(back) & np.isnan(a))
        assert same.all()

    check()


def test_compare_finds_no_difference_between_an_array_and_itself():
    from hypothesis import given, settings

    @settings(max_examples=100, deadline=None)
    @given(_float_arrays())
    def check(a):
        assert compare_one(a, a.copy()) is None
        if (a == 0).any():
            assert compare_one(a, np.where(a == 0, -a, a)).kind == "signed-zero"

    check()


_A_SOURCE = '''
def _a(values, dtype, shape):
    import ml_dtypes

    dt = np.dtype(ml_dtypes.bfloat16) if dtype == 'bfloat16' else np.dtype(dtype)
    if dt.kind == 'f' or dtype == 'bfloat16':
        return np.array(values, np.float64).astype(dt).reshape(shape)
    return np.array(values, dt).reshape(shape)
'''


def test_a_difference_from_a_subnormal_intermediate_is_classified_subnormal(monkeypatch):
    """square(5e-20) is subnormal in bfloat16: XLA flushes it (False), a runtime that keeps it says True."""
    from conformance.case import np_dtype
    from conformance.fuzz import driver

    p = infer_types(FuzzProgram(inputs=[0], steps=[Step("square", (0,), "jnp.square({0})", 1),
                                                   Step("convert_bf16_bool", (1,), "{0}.astype(jnp.bool)", 2)],
                                outputs=[2], types={0: Value((2,), "bfloat16")}))

    def no_flush_runtime(program, target, inputs):
        expected = fuzz_run.reference(program, inputs)
        x = np.asarray(inputs[0]).astype(np.float32)
        actual = [(x * x).astype(np_dtype("bfloat16")).astype(np.float32) != 0]
        diff = compare_all(expected, actual)
        return ("mismatch" if diff else "ok"), diff, expected, actual, ""

    monkeypatch.setattr(driver, "attempt", no_flush_runtime)
    inputs = [np.array([5.4e-20, 2.0], np.float32).astype(np_dtype("bfloat16"))]
    failure = Failure(p, inputs, *no_flush_runtime(p, "onnx", inputs)[:2], "", *no_flush_runtime(p, "onnx", inputs)[2:4])
    assert failure.status == "mismatch" and failure.diff.kind == "value"
    relabelled = driver._relabel_subnormal(failure, "onnx")
    assert relabelled.diff.kind == "subnormal" and class_of(relabelled, "onnx") == "convert_bf16_bool/bf16/subnormal"
    # A difference jax itself depends on is not explained by flushing.
    big = Failure(p, [np.array([5.4e-20, 2.0], np.float32).astype(np_dtype("bfloat16"))], "mismatch",
                  compare_all([np.array([True, True])], [np.array([True, False])]), "", [np.array([True, True])],
                  [np.array([True, False])])
    assert driver._relabel_subnormal(big, "onnx").diff.kind == "value"


def test_a_difference_from_xla_excess_precision_is_named():
    """exp in bfloat16 fused into a float32 dot: XLA keeps exp's float32 value, a target rounds it to bfloat16."""
    from conformance.case import np_dtype
    from conformance.fuzz.driver import _relabel_excess_precision

    bf16 = np_dtype("bfloat16")
    p = infer_types(FuzzProgram(inputs=[0, 1], steps=[
        Step("exp", (1,), "jnp.exp({0})", 2),
        Step("dot_general_f32", (2, 0), "jnp.matmul({0}, {1}, preferred_element_type=jnp.float32)", 3)],
        outputs=[3], types={0: Value((5, 1), "bfloat16"), 1: Value((5,), "bfloat16")}))
    inputs = [np.ones((5, 1), bf16), np.ones((5,), bf16)]
    expected = fuzz_run.reference(p, inputs)
    rounded = [np.float32([5 * float(np.float32(np.e).astype(bf16))])]
    assert compare_all(expected, rounded) is not None  # jax.jit keeps the excess precision
    named = _relabel_excess_precision(Failure(p, inputs, "mismatch", compare_all(expected, rounded), "", expected, rounded))
    assert named.diff.kind == "excess-precision" and known.match(class_of(named, "onnx")) is not None
    wrong = [np.float32([13.0])]
    kept = _relabel_excess_precision(Failure(p, inputs, "mismatch", compare_all(expected, wrong), "", expected, wrong))
    assert kept.diff.kind == "value"


def test_fuzz_program_minimises_a_planted_converter_crash(monkeypatch, tmp_path):
    p = infer_types(FuzzProgram(inputs=[0], steps=[Step("cos", (0,), "jnp.cos({0})", 1), Step("sin", (1,), "jnp.sin({0})", 2),
                                                   Step("neg", (2,), "-{0}", 3), Step("exp", (0,), "jnp.exp({0})", 4)],
                                outputs=[3, 4], types={0: Value((3,), "float32")}))
    real = fuzz_run.convert

    def crashing_convert(program, target, tmp, opset=None):
        if "stablehlo.sine" in program.exported.mlir_module():
            raise fuzz_run.Crashed("internal ValueError: planted at node n_Sin_3 (0x7f00aa)")
        return real(program, target, tmp)

    monkeypatch.setattr(fuzz_run, "convert", crashing_convert)
    rec = fuzz_program(p, 1, "onnx", str(tmp_path))
    assert rec["status"] == "crash" and rec["verdict"] == "crash" and rec["class"] == "sin/f32/crash"
    assert rec["known"] == "" and "planted" in open(rec["reproducer"]).read()


def test_a_difference_one_ulp_explains_is_named_last_bit():
    """rem(x, cos(y)) magnifies a one-ulp difference in cos: jax.jit with cos moved by one ulp gives it."""
    from conformance.fuzz.driver import _relabel_last_bit, _ulp_step

    assert _ulp_step(np.float32([1.0]), True)[0] == np.nextafter(np.float32(1.0), np.float32(2.0))
    assert _ulp_step(np.float32([-1.0]), False)[0] == np.nextafter(np.float32(-1.0), np.float32(-2.0))
    p = infer_types(FuzzProgram(inputs=[0, 1], steps=[Step("cos", (0,), "jnp.cos({0})", 2),
                                                      Step("rem", (1, 2), "lax.rem({0}, {1})", 3)],
                                outputs=[3], types={0: Value((1,), "float32"), 1: Value((1,), "float32")}))
    inputs = [np.float32([1.3]), np.float32([1000.0])]
    expected = fuzz_run.reference(p, inputs)
    import jax

    jax_cos = np.asarray(jax.jit(jax.numpy.cos)(inputs[0]))
    moved = [np.asarray(jax.jit(jax.lax.rem)(inputs[1], np.nextafter(jax_cos, np.float32(2))))]
    assert compare_all(expected, moved) is not None  # rem magnifies the one-ulp move beyond tolerance
    named = _relabel_last_bit(Failure(p, inputs, "mismatch", compare_all(expected, moved), "", expected, moved))
    assert named.diff.kind == "last-bit" and known.match(class_of(named, "onnx")) is not None
    far = [expected[0] + np.float32(1.0)]
    assert _relabel_last_bit(Failure(p, inputs, "mismatch", compare_all(expected, far), "", expected, far)).diff.kind == "value"


def test_negative_nan_ordering_is_known_only_with_a_negative_nan():
    assert known.match("top_k/f16/nan", known.facts([np.array([1.0, -np.nan], np.float16)])) is not None
    assert known.match("top_k/f16/nan", known.facts([np.array([1.0, np.nan], np.float16)])) is None
    assert known.match("convert_bool_f32+mul+copysign/f32/value") is not None


def test_xla_order_flush_and_loop_rows_match_only_their_cases():
    huge = known.facts([np.float32([1.0, 0.69, 3.4e38, 1.31])])
    for klass in ("cumprod/f32/inf", "reduce_var/f32/nan", "pow+floor_divide/f32/nan"):
        assert known.match(klass, huge) is not None and known.match(klass) is None, klass
    assert known.match("reduce_var+acos/f32/nan") is not None and known.match("reduce_var/f32/value") is None
    assert known.match("while_loop/f16/value") is None and known.match("while_loop/f32/value") is None


def _program(steps: list[tuple[str, tuple[int, ...], str]], inputs: dict[int, tuple[tuple[int, ...], str]]) -> FuzzProgram:
    """A fuzz program of ``(op, args, expr)`` steps over typed inputs, each step's value numbered after the inputs."""
    first = max(inputs) + 1
    program = FuzzProgram(inputs=list(inputs), steps=[Step(op, args, expr, first + k) for k, (op, args, expr) in
                                                      enumerate(steps)],
                          outputs=[first + len(steps) - 1], types={i: Value(*t) for i, t in inputs.items()})
    typed = infer_types(program)
    assert typed is not None
    return typed


def test_tan_in_a_loop_is_known_only_for_loops_that_apply_tan():
    loop = "lax.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, {f}(s[1])), (0, {{0}}))[1]"
    tan = _program([("while_loop", (0,), loop.format(f="jnp.tan"))], {0: ((1,), "float32")})
    sin = _program([("while_loop", (0,), loop.format(f="jnp.sin"))], {0: ((1,), "float32")})
    x = [np.float32([1.0])]
    assert known.match("while_loop/f32/value", known.facts(x, (), tan)) is not None
    assert known.match("while_loop/f16/value", known.facts(x, (), tan)) is not None
    assert known.match("while_loop/f32/value", known.facts(x, (), sin)) is None
    assert known.match("while_loop/f32/nan", known.facts(x, (), tan)) is None


def test_bfloat16_window_sums_are_known_only_over_two_active_dims():
    window = "lax.reduce_window({{0}}, np.array(0, jnp.bfloat16), lax.add, {dims}, (1, 1, 1, 1), {pad})"
    x = {0: ((2, 1, 1, 5), "bfloat16")}
    two = _program([("reduce_window_add", (0,), window.format(dims=(3, 1, 1, 2), pad="'SAME'"))], x)
    pads = ((0, 0), (1, 0), (0, 0), (0, 0))
    padded = _program([("reduce_window_add", (0,), window.format(dims=(1, 1, 1, 2), pad=pads))], x)
    one = _program([("reduce_window_add", (0,), window.format(dims=(1, 1, 1, 2), pad="'SAME'"))], x)
    assert "window-2d" in known.program_facts(two) and "window-2d" in known.program_facts(padded)
    assert "window-2d" not in known.program_facts(one)
    assert known.match("reduce_window_add/bf16/value", known.program_facts(two)) is not None
    assert known.match("reduce_window_add/bf16/value", known.program_facts(one)) is None
    # float16 too: XLA summed [-255.9, 255.9, -1.451, 1.0] (a 2x2 window) in float16 one add at a time to
    # -0.375, the artifact in float32 to -0.451 (fuzz seed 41, tests/test_fuzz_regressions_3.py)
    assert known.match("reduce_window_add/f16/value", known.program_facts(two)) is not None


def test_conv_with_an_inf_tap_on_padding_is_named_conv_zeros():
    """XLA skips the padding of this f32 conv (a 1x1 input), ONNX Runtime's Conv multiplies it (0 x inf = NaN)."""
    from conformance.fuzz import convzeros

    conv = "lax.conv_general_dilated({0}, {1}, window_strides=(1,), padding=[(1, 1)], lhs_dilation=(1,), " \
           "rhs_dilation=(1,), feature_group_count=1)"
    p = _program([("conv", (0, 1), conv)], {0: ((1, 1, 1), "float32"), 1: ((1, 1, 1), "float32")})
    inputs = [np.float32([[[1.5]]]), np.float32([[[np.inf]]])]
    expected = fuzz_run.reference(p, inputs)
    assert np.array_equal(expected[0], np.float32([[[0.0, np.inf, 0.0]]]))  # jax.jit skips the padding here
    multiplied = [np.float32([[[np.nan, np.inf, np.nan]]])]
    named = convzeros.relabel(Failure(p, inputs, "mismatch", compare_all(expected, multiplied), "", expected, multiplied))
    assert named.diff.kind == "conv-zeros" and known.match(class_of(named, "onnx")) is not None
    wrong = [np.float32([[[np.nan, 1.0, np.nan]]])]
    assert convzeros.relabel(Failure(p, inputs, "mismatch", compare_all(expected, wrong), "", expected, wrong)).diff.kind != "conv-zeros"


def test_conv64_multiplies_or_skips_padding_holes_and_group_blocks():
    from conformance.fuzz.convzeros import conv64

    x = np.array([[[1.0], [2.0]]])  # N=1, C=2, W=1
    w = np.array([[[np.inf]], [[3.0]]])  # O=2, C/g=1, K=1, two groups
    params = {"window_strides": (1,), "padding": [(1, 0)], "lhs_dilation": (1,), "rhs_dilation": (1,),
              "feature_group_count": 2}
    skipped = conv64(x, w, params, False, False)
    assert np.array_equal(skipped, [[[0.0, np.inf], [0.0, 6.0]]])
    groups = conv64(x, w, params, False, True)  # channel 1 of group 0 meets the kernel's zero block: 0 x 2 = 0
    assert np.array_equal(groups, [[[0.0, np.inf], [0.0, 6.0]]])
    padded = conv64(x, w, params, True, False)
    assert np.isnan(padded[0, 0, 0]) and padded[0, 1, 0] == 0.0
    assert np.array_equal(conv64(x, w, {**params, "padding": "VALID"}, True, True), [[[np.inf], [6.0]]])


def test_a_last_bit_move_of_only_the_differing_elements_is_named():
    """bf16 acos(-0.5195) is 2.125 in XLA, 2.1094 (correctly rounded) in ONNX Runtime; cos magnifies it. Moving the
    whole intermediate would move the elements that agree too."""
    import ml_dtypes

    from conformance.fuzz.driver import _relabel_last_bit

    p = _program([("acos", (0,), "jnp.arccos({0})"), ("cos", (1,), "jnp.cos({0})")], {0: ((2,), "bfloat16")})
    assert p.steps[1].args == (1,)
    inputs = [np.array([-0.51953125, -0.51953125], ml_dtypes.bfloat16)]
    expected = fuzz_run.reference(p, inputs)
    actual = [np.array([-0.51171875, -0.52734375], ml_dtypes.bfloat16)]
    assert np.asarray(expected[0], np.float32)[0] == np.float32(-0.52734375)
    named = _relabel_last_bit(Failure(p, inputs, "mismatch", compare_all(expected, actual), "", expected, actual))
    assert named.diff.kind == "last-bit"


def test_zero_sign_of_dots_and_convs_is_known_only_for_signed_zeros():
    for klass in ("conv/f16/signed-zero", "matmul/f32/signed-zero", "dot_general_f32/bf16/signed-zero"):
        assert known.match(klass) is not None, klass
    for klass in ("conv/f32/value", "matmul/f32/nan", "reduce_sum/f32/signed-zero", "conv+reduce_prod/bf16/signed-zero"):
        assert known.match(klass) is None, klass
    assert known.match("sinh/f32/inf") is not None and known.match("sinh/f16/inf") is None
    assert known.match("sinh/f32/value") is None


def test_conv_overflow_order_needs_terms_that_reach_the_largest_float():
    """-inf in XLA, NaN (inf - inf) in the artifact: the window sums 8.5e37 and 3.4e38 terms of both signs."""
    from conformance.fuzz import convzeros

    conv = "lax.conv_general_dilated({0}, {1}, window_strides=(1,), padding='SAME', lhs_dilation=(1,), " \
           "rhs_dilation=(1,), feature_group_count=1)"
    p = _program([("conv", (0, 1), conv)], {0: ((1, 3, 1), "float32"), 1: ((1, 3, 2), "float32")})
    inputs = [np.float32([[[8.5e37], [3.4e38], [1.0]]]), np.float32([[[-4.0, 1.0], [-2.0, 1.0], [1.0, 1.0]]])]
    expected = fuzz_run.reference(p, inputs)
    nan = [np.where(np.isinf(expected[0]), np.float32(np.nan), expected[0])]
    assert np.isinf(expected[0]).any()
    named = convzeros.relabel(Failure(p, inputs, "mismatch", compare_all(expected, nan), "", expected, nan))
    assert named.diff.kind == "overflow-order" and known.match(class_of(named, "onnx")) is not None
    small = [np.float32([[[1.0], [2.0], [1.0]]]), inputs[1]]
    expected = fuzz_run.reference(p, small)
    wrong = [np.full_like(expected[0], np.nan)]
    failure = Failure(p, small, "mismatch", compare_all(expected, wrong), "", expected, wrong)
    named = convzeros.relabel(failure)
    assert named.diff.kind == "nan" and known.match("conv/f32/nan", frozenset({"huge-input"})) is None


def test_conv64_flushes_subnormal_products_when_asked():
    from conformance.fuzz.convzeros import conv64

    params = {"window_strides": (1,), "padding": "VALID", "feature_group_count": 1}
    x, w = np.array([[[0.5]]]), np.array([[[1.17549435e-38]]])
    assert conv64(x, w, params, True, True)[0, 0, 0] > 0
    assert conv64(x, w, params, True, True, float(np.finfo(np.float32).tiny))[0, 0, 0] == 0


def test_half_float_scatter_rounding_is_known_only_with_a_repeated_index():
    scatter = "{0}.at[{1}].add({2}, mode='clip')"
    p = _program([("scatter_add", (0, 1, 2), scatter)], {0: ((3, 1), "float16"), 1: ((3,), "int32"),
                                                        2: ((3, 1), "float16")})
    x, u = np.float16([[1.0], [2.0], [3.0]]), np.float16([[1.0], [-255.9], [255.9]])
    repeated = known.facts([x, np.int32([0, 0, 0]), u], (), p)
    clipped = known.facts([x, np.int32([0, 5, 7]), u], (), p)
    distinct = known.facts([x, np.int32([0, 1, 2]), u], (), p)
    assert known.match("scatter_add/f16/value", repeated) is not None
    assert known.match("scatter_add/f16/value", clipped) is not None
    assert known.match("scatter_add/f16/value", distinct) is None
    assert known.match("scatter_add/f32/value", repeated) is None


def test_signbit_of_a_negative_nan_is_known_only_with_one():
    assert known.match("signbit/f32/value", known.facts([np.float32([-np.nan])])) is not None
    assert known.match("signbit/f32/value", known.facts([np.float32([np.nan, -0.0])])) is None


def test_xla_division_rewrite_and_zero_ties_rows_are_narrow():
    assert known.match("div+div/f16/nan") is not None and known.match("div/f16/nan") is None
    assert known.match("div+div/f32/signed-zero") is None
    assert known.match("reduce_window_min/f16/signed-zero") is not None
    assert known.match("reduce_window_min/f16/value") is None and known.match("reduce_sum/f16/signed-zero") is None


def test_minimiser_cuts_at_a_dot_that_differs_only_once_shapes_shrank():
    """XLA's dot emitter depends on the shape: a -0 that only a later top_k shows at the start differs at the
    dot itself once the inputs are small; the class then names the dot (a known row), not dot+top_k."""
    p = _program([("matmul", (0, 1), "jnp.matmul({0}, {1})"), ("top_k", (2,), "lax.top_k({0}, 1)[0]")],
                 {0: ((1, 3, 2), "float32"), 1: ((2, 2, 1), "float32")})
    x = np.array([[[0.0, 1.0]] * 3], np.float32)
    y = np.array([[[1.0], [1.0]], [[-0.5], [-0.0]]], np.float32)

    def fake(program, target, inputs):
        """Zero signs flip when top_k follows the dot, or for the dot alone once its operand has one row."""
        expected = fuzz_run.reference(program, inputs)
        shows = program.ops() == ["matmul", "top_k"] or inputs[0].shape[1] == 1
        actual = [np.where(a == 0, -a, a) for a in expected] if shows else expected
        diff = compare_all(expected, actual)
        return ("mismatch" if diff else "ok"), diff, expected, actual, diff.line() if diff else ""

    status, diff, expected, actual, detail = fake(p, "onnx", [x, y])
    assert status == "mismatch" and diff.kind == "signed-zero"
    small = minimise(Failure(p, [x, y], status, diff, detail, expected, actual), "onnx", try_fn=fake)
    assert class_of(small, "onnx") == "matmul/f32/signed-zero"
    assert known.match(class_of(small, "onnx")) is not None


def test_a_float_to_float_bitcast_of_differing_nan_bits_is_named_nan_bits():
    """f16 NaN bits read as bf16 are a NaN (0xFFFF) in one runtime and a number (0xFE00) in the other."""
    from conformance.fuzz.driver import _bitcast_kind

    p = _program([("bitcast_f16_bf16", (0,), "lax.bitcast_convert_type({0}, jnp.bfloat16)")], {0: ((1,), "float16")})
    import ml_dtypes

    e = np.uint16([0xFFFF]).view(ml_dtypes.bfloat16)
    for a, kind in ((np.uint16([0xFE00]).view(ml_dtypes.bfloat16), "nan-bits"),
                    (np.array([2.0], ml_dtypes.bfloat16), "nan")):
        failure = Failure(p, [np.float16([1.0])], "mismatch", compare_all([e], [a]), "", [e], [a])
        assert _bitcast_kind(failure).diff.kind == kind
    assert known.match("log+reverse+bitcast_f16_bf16/f16/nan-bits") is not None


def test_nan_sign_rows_need_a_negative_nan_and_a_sign_read_in_the_body():
    loop = _program([("fori_loop", (0, 1), "lax.fori_loop(0, 2, lambda i, c: jnp.copysign(c, {1}), {0})")],
                    {0: ((1,), "float64"), 1: ((1,), "float64")})
    plain = _program([("fori_loop", (0, 1), "lax.fori_loop(0, 2, lambda i, c: c * {1}, {0})")],
                     {0: ((1,), "float64"), 1: ((1,), "float64")})
    neg, pos = [np.float64([np.inf]), np.float64([-np.nan])], [np.float64([np.inf]), np.float64([np.nan])]
    assert known.match("fori_loop/f64/inf", known.facts(neg, (), loop)) is not None
    assert known.match("fori_loop/f64/inf", known.facts(pos, (), loop)) is None
    assert known.match("fori_loop/f64/inf", known.facts(neg, (), plain)) is None
    assert known.match("copysign/f32/value", known.facts([np.float32([-np.nan])])) is not None
    assert known.match("copysign/f32/value", known.facts([np.float32([np.nan])])) is None


def test_a_dot_converted_after_it_is_known_only_with_huge_inputs():
    huge = known.facts([np.float32([-1.8e19, 3.4e38])])
    assert known.match("matmul+convert_bf16_u16/bf16/value", huge) is not None
    assert known.match("matmul+convert_bf16_u16/bf16/value") is None
    assert known.match("matmul+top_k/f32/value", huge) is None


def test_any_summing_layer_cast_to_an_integer_after_it_is_known_only_with_huge_inputs():
    """Found as group_stats+convert_f32_i32/f32/value (fuzz seed 2024, caught by the check): a group's mean over
    -FLT_MAX and FLT_MAX overflows to inf or NaN by the order of its terms, and the cast to int32 gives INT_MIN
    in jax.jit and INT_MAX in ORT."""
    huge = known.facts([np.float32([-3.4e38, 3.4e38, 1.0])])
    for klass in ("group_stats+convert_f32_i32/f32/value", "spatial_sum+convert_f32_i16/f32/value",
                  "norm_rms+convert_f32_i32/f32/value"):
        assert known.match(klass, huge) is not None and known.match(klass) is None, klass
    assert known.match("group_stats+top_k/f32/value", huge) is None


def test_a_normalised_zero_whose_sign_the_sum_order_decides_is_known_only_with_huge_inputs():
    """Found as group_stats/f32/signed-zero (fuzz seed 2312, silent): a group over -FLT_MAX and FLT_MAX has an
    infinite variance, so each output is (x - mean) * 0, a zero with the sign of x - mean, and the mean is
    whatever its terms' order makes of the overflow: +0.0 in jax.jit, -0.0 in ORT."""
    huge = known.facts([np.float32([-3.4e38, 3.4e38, 1.0])])
    for klass in ("group_stats/f32/signed-zero", "norm_two_pass/f32/signed-zero", "norm_keras/f32/signed-zero"):
        assert known.match(klass, huge) is not None and known.match(klass) is None, klass
    assert known.match("spatial_sum/f32/signed-zero", huge) is None  # a sum of zeros: +0 in any order


def test_cumlogsumexp_is_generated_for_floats_only():
    """jax rejects an integer cumlogsumexp (its -inf init): such programs were counted invalid, not run."""
    from conformance.fuzz.generate import generate

    steps = [(p, s) for seed in range(105 * 1_000_003 + 600, 105 * 1_000_003 + 800)
             for p in [generate(seed)] for s in p.steps if s.op == "cumlogsumexp"]
    assert steps and all(p.types[s.args[0]].dtype in ("float16", "bfloat16", "float32", "float64") for p, s in steps)


def test_a_subnormal_conv_product_under_sqrt_is_classified_subnormal():
    """0.18 * -1.2e-38 is subnormal: XLA flushes it to -0 (sqrt -0), ONNX Runtime keeps it (sqrt NaN). Flushing
    the input gives +0 in jax.jit (a zero of another sign): still explained by flushing."""
    from conformance.fuzz import driver

    conv = ("lax.conv_general_dilated({0}, {1}, window_strides=(1,), padding=[(1, 0)], lhs_dilation=(2,), "
            "rhs_dilation=(1,), feature_group_count=1)")
    p = _program([("conv", (0, 1), conv), ("sqrt", (2,), "jnp.sqrt({0})")],
                 {0: ((1, 1, 1), "float32"), 1: ((1, 1, 1), "float32")})
    inputs = [np.float32([[[0.17997248]]]), np.float32([[[-1.1754944e-38]]])]
    status, diff, expected, actual, detail = fuzz_run.attempt(p, "onnx", inputs)
    assert status == "mismatch" and diff.kind == "nan"
    relabelled = driver._relabel_subnormal(Failure(p, inputs, status, diff, detail, expected, actual), "onnx")
    assert relabelled.diff.kind == "subnormal"


def test_xla_clz_row_is_narrow():
    clz = _program([("clz", (0,), "lax.clz({0})")], {0: ((), "int32")})
    neg = _program([("neg", (0,), "-{0}")], {0: ((), "int32")})
    x = [np.int32(3)]
    assert known.match("argmin+sub+..+cond/i32/value", known.facts(x, (), clz)) is not None
    assert known.match("argmin+sub+..+cond/i32/value", known.facts(x, (), neg)) is None
    assert known.match("clz/i32/value", known.facts(x, (), clz)) is None


def test_argmin_flush_and_window_convert_rows_need_huge_inputs():
    huge = known.facts([np.float64([1.79769313e308])])
    for klass in ("fori_loop+argmin/f64/value", "reduce_window_add+convert_f16_u16/f16/value"):
        assert known.match(klass, huge) is not None and known.match(klass) is None, klass


def test_a_difference_from_a_subnormal_weight_is_classified_subnormal():
    """inf times a closed-over weight of the smallest subnormal: XLA reads the weight as 0 (NaN), ONNX Runtime keeps
    it (inf). Flushing the weights, not the inputs, explains it; a difference from a normal weight stays a value."""
    from conformance.fuzz import driver

    def failure_of(expr):
        p = infer_types(FuzzProgram(inputs=[0], steps=[Step("mul", (0,), expr, 1),
                                                       Step("isnan", (1,), "jnp.isnan({0})", 2)],
                                    outputs=[2], types={0: Value((1, 1), "float32")}))
        inputs = [np.float32([[np.inf]])]
        return Failure(p, inputs, *fuzz_run.attempt(p, "onnx", inputs)[:2], "", *fuzz_run.attempt(p, "onnx", inputs)[2:4])

    # _w(103030569, (1, 3), 'float32', 1, 0.05) is [-0.29, 1.4e-45, -1.08]
    failure = failure_of("{0} @ _w(103030569, (1, 3), 'float32', 1, 0.05)")
    assert failure.status == "mismatch" and failure.diff.kind == "value", failure.diff
    assert driver._relabel_subnormal(failure, "onnx").diff.kind == "subnormal"
    assert class_of(failure, "onnx") == "isnan/f32/subnormal"
    assert failure_of("{0} @ _w(103030569, (1, 3), 'float32', 1, 0.0)").status == "ok"
