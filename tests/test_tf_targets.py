"""TF SavedModel and TFLite targets, end to end: convert, run, compare with jax.jit, names, errors, CLI."""

from __future__ import annotations

import inspect
import json
import os
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxconv import api
from jaxconv.cli import main
from jaxconv.errors import ArtifactError, ConversionError, UnsupportedError
from jaxconv.program import trace

pytestmark = pytest.mark.tf
pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MLP = os.path.join(ROOT, "examples", "mlp.py")
CNN = os.path.join(ROOT, "examples", "cnn.py")
MLP_SPECS = ['{"w1": "f32[784,32]", "b1": "f32[32]", "w2": "f32[32,10]", "b2": "f32[10]"}', "f32[b,784]"]
CNN_SPECS = ['{"conv1": "f32[3,3,1,8]", "conv2": "f32[3,3,8,16]", "dense": "f32[784,10]", "bias": "f32[10]"}',
             "f32[b,28,28,1]"]


def _program(path: str, name: str, specs):
    from jaxconv.loading import load_function

    loaded = load_function(path, name)
    return trace(loaded.fn, specs, name=loaded.name, param_names=loaded.param_names, source_path=loaded.path)


def _both(program, tmp_path, **tflite_kwargs):
    """Convert to both targets with the built-in check; return the two reports."""
    reports: list = []
    api.to_saved_model(program, path=str(tmp_path / "sm"), report_to=reports)
    api.to_tflite(program, path=str(tmp_path / "m.tflite"), report_to=reports, **tflite_kwargs)
    assert [r.runtime for r in reports] == ["saved-model", "tflite"]
    for r in reports:
        assert r.ok, r.table()
    return reports


def _edge_rows(report):
    """{output name: note} of the rows that differ from jax.jit on edge values only."""
    rows = {r.name: r.note for r in report.rows if r.verdict == "edge"}
    assert all(r.inputs == "edge" for r in report.rows if r.verdict == "edge")
    return rows


def _tf_signature(path: str):
    import tensorflow as tf

    sig = tf.saved_model.load(path).signatures["serving_default"]
    return sig, sorted(sig.structured_input_signature[1]), sorted(sig.structured_outputs)


def _litert_signature(path: str):
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=path)
    sigs = interp.get_signature_list()
    assert list(sigs) == ["serving_default"]
    return interp, sorted(sigs["serving_default"]["inputs"]), sorted(sigs["serving_default"]["outputs"])


# ------------------------------------------------------------------ end to end on several functions


def test_mlp_symbolic_batch(tmp_path):
    program = _program(MLP, "mlp", MLP_SPECS)
    reports = _both(program, tmp_path)
    for r in reports:  # checked at three batch sizes
        assert [row.shape for row in r.rows if row.inputs == "random"] == [(2, 10), (5, 10), (1, 10)]
    # log_softmax over a row holding NaN is NaN in both artifacts too: its max reduction carries jaxconv's
    # NaN guard (without it TFLite's REDUCE_MAX skips the NaN and the row comes out -inf)
    assert [r.warning() for r in reports] == [None, None]
    assert {row.verdict for r in reports for row in r.rows if row.inputs == "edge"} == {"ok"}
    names = sorted(t.name for t in program.signature.inputs)
    _, tf_in, tf_out = _tf_signature(str(tmp_path / "sm"))
    assert (tf_in, tf_out) == (names, ["output_0"])
    _, lite_in, lite_out = _litert_signature(str(tmp_path / "m.tflite"))
    assert (lite_in, lite_out) == (names, ["output_0"])


def test_cnn_symbolic_batch(tmp_path):
    program = _program(CNN, "cnn", CNN_SPECS)
    reports = _both(program, tmp_path)
    assert [row.shape for row in reports[1].rows if row.inputs == "random"] == [(2, 10), (5, 10), (1, 10)]
    # inf/NaN through conv + max pooling: TF's XLA gives NaN where jax.jit has finite values; TFLite gives infinities
    sm, lite = _edge_rows(reports[0]), _edge_rows(reports[1])
    assert list(sm) == list(lite) == ["output_0"]
    assert "TensorFlow's XLA" in sm["output_0"] and "jax.jit finite / artifact NaN x" in sm["output_0"]
    assert "TFLite's kernels" in lite["output_0"] and "jax.jit finite / artifact +inf x" in lite["output_0"]


def test_cnn_uses_tflite_builtins_only(tmp_path):
    program = _program(CNN, "cnn", CNN_SPECS)
    from ai_edge_litert.interpreter import Interpreter

    from jaxconv.tf import tflite

    interp = Interpreter(model_content=tflite.convert(program))
    ops = {op["op_name"] for op in interp._get_ops_details()}
    assert "MAX_POOL_2D" in ops and ops & {"CONV_2D", "DEPTHWISE_CONV_2D"}
    assert not any(name.startswith(("STABLEHLO_", "FlexDelegate", "Flex")) for name in ops), ops


def unused_arg(x, unused, scale):
    return x * scale


def test_unused_argument_stays_an_input(tmp_path):
    program = trace(unused_arg, ["f32[3,4]", "i32[7]", "f32[]"])
    assert program.kept_inputs == (0, 2)
    _both(program, tmp_path)
    _, tf_in, _ = _tf_signature(str(tmp_path / "sm"))
    _, lite_in, _ = _litert_signature(str(tmp_path / "m.tflite"))
    assert tf_in == lite_in == ["scale", "unused", "x"]


def f16_io(x, y):
    return (x.astype(jnp.float32) * y.astype(jnp.float32) + 1).astype(jnp.float16), jnp.tanh(x.astype(jnp.float32))


def test_float16_inputs(tmp_path):
    reports = _both(trace(f16_io, ["f16[2,5]", "f16[5]"]), tmp_path)
    assert [row.dtype for row in reports[1].rows if row.inputs == "random"] == ["float16", "float32"]


def f16_math(x, y):
    return x * y + x  # f16 arithmetic


def test_float16_arithmetic_saved_model_ok_tflite_names_op_and_dtype(tmp_path):
    program = trace(f16_math, ["f16[4]", "f16[4]"])
    reports: list = []
    api.to_saved_model(program, path=str(tmp_path / "sm"), report_to=reports)
    assert reports[0].ok
    with pytest.raises(UnsupportedError) as err:
        api.to_tflite(program, path=str(tmp_path / "m.tflite"), route="xla")
    line = inspect.getsourcelines(f16_math)[1] + 1
    assert "float16" in str(err.value) and f"test_tf_targets.py:{line}" in str(err.value)
    assert not os.path.exists(tmp_path / "m.tflite")


def int_fn(a, b):
    return a * b + 3, jnp.max(a, axis=0), jnp.where(a > b, a - b, b)


def test_int32_inputs(tmp_path):
    reports = _both(trace(int_fn, ["i32[b,3]", "i32[b,3]"]), tmp_path)
    assert all(row.dtype == "int32" and row.max_abs == 0 for r in reports for row in r.rows)


def dict_result(x, w):
    h = x @ w
    return {"logits": h, "stats": {"mean": h.mean(axis=0), "max": h.max()}, "relu": jax.nn.relu(h)}


def test_several_outputs_from_a_dict(tmp_path):
    program = trace(dict_result, ["f32[b,6]", "f32[6,4]"])
    assert [t.path for t in program.signature.outputs] == [
        "result['logits']", "result['relu']", "result['stats']['max']", "result['stats']['mean']"]
    reports = _both(program, tmp_path)
    # 4 outputs x (3 batch sizes + 2 edge sets: the second lines the two small inputs' edge values up differently)
    assert len(reports[0].rows) == len(reports[1].rows) == 20
    # h.max() over NaN is NaN in both artifacts (jaxconv guards max/min reductions); only TFLite's RELU
    # turns NaN into 0
    assert _edge_rows(reports[0]) == {}
    edge = _edge_rows(reports[1])
    assert list(edge) == ["output_1"] and "jax.jit NaN / artifact finite x" in edge["output_1"]
    outs = ["output_0", "output_1", "output_2", "output_3"]
    sig, tf_in, tf_out = _tf_signature(str(tmp_path / "sm"))
    interp, lite_in, lite_out = _litert_signature(str(tmp_path / "m.tflite"))
    assert tf_in == lite_in == ["w", "x"] and tf_out == lite_out == outs
    with open(tmp_path / "sm" / "jaxconv_signature.json") as f:
        assert json.load(f) == {**program.signature.to_json(), "route": "xla"}

    # The artifacts work without jaxconv: TF and LiteRT called by input name give jax.jit's numbers.
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 6)).astype(np.float32)
    w = rng.standard_normal((6, 4)).astype(np.float32)
    expected = jax.tree_util.tree_leaves(jax.jit(dict_result)(x, w))
    got_tf = sig(x=x, w=w)
    got_lite = interp.get_signature_runner("serving_default")(x=x, w=w)
    for i, e in enumerate(expected):
        np.testing.assert_allclose(got_tf[f"output_{i}"].numpy(), e, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got_lite[f"output_{i}"], e, rtol=1e-4, atol=1e-4)


def two_args(zeta, alpha):
    return zeta * alpha, alpha.sum(axis=1)


def test_input_order_survives_converter_reordering(tmp_path):
    """The TFLite converter reorders subgraph inputs; runs must still feed each input by name."""
    program = trace(two_args, ["f32[3]", "f32[2,3]"])
    _both(program, tmp_path)
    from jaxconv.runtimes.tflite import TFLiteRunner, read_signature

    stored = read_signature(str(tmp_path / "m.tflite"))
    assert stored == program.signature
    assert TFLiteRunner(str(tmp_path / "m.tflite")).input_names == ["zeta", "alpha"]


# ------------------------------------------------------------------ quantization

_W = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32) / 8


def const_weights(x):
    return jnp.tanh(x @ _W) @ _W


@pytest.mark.parametrize("mode", ["float16", "dynamic-range"])
def test_quantized_models_run_and_are_close(mode, tmp_path):
    program = trace(const_weights, ["f32[4,64]"])
    plain = api.to_tflite(program)
    reports: list = []
    quantized = api.to_tflite(program, quantize=mode, report_to=reports)  # checked at rtol=atol=5e-2
    assert reports[0].ok and reports[0].rows[0].max_abs > 0
    assert len(quantized) < 0.7 * len(plain)  # weights stored in 16 or 8 bits


# ------------------------------------------------------------------ ops JAX exports as stablehlo.composite


def composites(x):
    values, indices = lax.top_k(x, 3)
    return {"sinh": jnp.sinh(x), "erf": jax.scipy.special.erf(x), "top_k": values, "top_k_index": indices}


def test_composite_ops_run_in_saved_model_and_tflite(tmp_path):
    from jaxconv.tf.saved_model import describe_ops

    program = trace(composites, ["f32[4,6]"])
    reports = _both(program, tmp_path)  # both checked against jax.jit
    assert [len(r.rows) for r in reports] == [8, 8]  # 4 outputs x (random + edge values)
    # outputs: erf, sinh, top_k values, top_k indices. TFLite's sinh turns NaN into 0, and its TOPK_V2
    # orders NaN and infinities differently from XLA's sort (values and indices)
    assert _edge_rows(reports[0]) == {}
    edge = _edge_rows(reports[1])
    assert list(edge) == ["output_1", "output_2", "output_3"]
    assert "jax.jit NaN / artifact finite x" in edge["output_1"] and "jax.jit NaN / artifact +inf x" in edge["output_2"]
    ops = describe_ops(str(tmp_path / "sm"))
    assert ops["XlaCallModule"] == 1 and "stablehlo.composite" not in ops, ops


def test_composites_become_calls_only_inside_the_block():
    """Guards the private JAX function the rewrite wraps: JAX still emits composites, the block removes them."""
    from jaxconv.stablehlo.composites import composites_as_calls

    def export():
        spec = jax.ShapeDtypeStruct((3,), jnp.float32)
        return jax.export.export(jax.jit(jnp.sinh), platforms=["cpu"])(spec).mlir_module()

    assert 'stablehlo.composite "chlo.sinh"' in export()
    with composites_as_calls():
        text = export()
    assert "stablehlo.composite" not in text and "call @chlo.sinh.impl" in text
    assert 'stablehlo.composite "chlo.sinh"' in export()


# ------------------------------------------------------------------ failures


def cholesky(x):
    return jnp.linalg.cholesky(x @ x.T + 4 * jnp.eye(x.shape[0], dtype=x.dtype))


def test_saved_model_runner_error_names_the_real_cause(tmp_path):
    from jaxconv.runtimes.tf import SavedModelRunner

    path = api.to_saved_model(cholesky, "f32[3,3]", path=str(tmp_path / "sm"), check=False, route="xla")
    with pytest.raises(ArtifactError) as err:
        SavedModelRunner(path).run([np.eye(3, dtype=np.float32)])
    msg = str(err.value)
    assert "\n" not in msg and "Graph execution error" not in msg, msg
    assert msg.startswith("running the SavedModel failed: ") and "No FFI handler registered for lapack_spotrf" in msg
    import inspect

    line = inspect.getsourcelines(cholesky)[1] + 1  # the line calling jnp.linalg.cholesky
    want = rf"stablehlo\.custom_call @lapack_spotrf_ffi x1 at tests/test_tf_targets\.py:{line}; a SavedModel cannot run"
    with pytest.raises(UnsupportedError, match=want):
        api.to_tflite(cholesky, "f32[3,3]", route="xla")


def test_saved_model_runner_reports_mlir_error_line(tmp_path, monkeypatch):
    import contextlib

    from jaxconv.runtimes.tf import SavedModelRunner
    from jaxconv.tf import saved_model

    monkeypatch.setattr(saved_model, "composites_as_calls", contextlib.nullcontext)  # keep the composite
    path = api.to_saved_model(hyperbolic, "f32[3]", path=str(tmp_path / "sm"), check=False)
    with pytest.raises(ArtifactError) as err:
        SavedModelRunner(path).run([np.ones(3, dtype=np.float32)])
    msg = str(err.value)
    assert "\n" not in msg and "unregistered operation 'vhlo.composite_v2'" in msg, msg


def hyperbolic(x):
    return jnp.sinh(x) + 1


def scalar_math(x, n):
    return jnp.sin(x) * n, x + 1, jnp.sum(n)


def test_tflite_scalar_outputs_keep_their_shape():
    from jaxconv.runtimes.tflite import TFLiteRunner

    reports: list = []
    data = api.to_tflite(scalar_math, "f32[]", "f32[2]", report_to=reports)  # checked against jax.jit
    assert reports[0].ok and [row.shape for row in reports[0].rows if row.inputs == "random"] == [(2,), (), ()]
    x, n = np.float32(0.5), np.array([1.0, 2.0], np.float32)
    outs = TFLiteRunner(data).run([x, n])
    assert [o.shape for o in outs] == [(2,), (), ()]
    expected = jax.jit(scalar_math)(x, n)
    for got, want in zip(outs, expected):
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-6)


def sorts(x):
    y = x * 2
    return jnp.sort(y, axis=1)


def spectrum(x):
    return jnp.abs(jnp.fft.fft(x))


@pytest.mark.parametrize("fn, op, offset", [(sorts, "stablehlo.sort x1", 2), (spectrum, "stablehlo.fft x1", 1)])
def test_legalization_failure_names_op_and_source_line(fn, op, offset, tmp_path):
    line = inspect.getsourcelines(fn)[1] + offset
    out = tmp_path / "m.tflite"
    with pytest.raises(UnsupportedError) as err:
        api.to_tflite(fn, "f32[3,5]", path=str(out), route="xla")
    msg = str(err.value)
    assert msg.startswith("TFLite cannot convert: ") and "\n" not in msg
    assert op in msg and f"test_tf_targets.py:{line}" in msg, msg
    assert not out.exists() and os.listdir(tmp_path) == []


def shifts(x):
    return x << 2


def test_tf_op_suggests_flex_and_flex_model_needs_delegate():
    with pytest.raises(UnsupportedError, match=r"tf\.LeftShift x1 at .*--allow-flex"):
        api.to_tflite(shifts, "i32[4]", route="xla")
    data = api.to_tflite(shifts, "i32[4]", allow_flex=True, check=False, route="xla")
    from jaxconv.runtimes.tflite import TFLiteRunner

    with pytest.raises(ArtifactError, match="Flex delegate"):
        TFLiteRunner(data).run([np.arange(4, dtype=np.int32)])


def complex_out(x):
    return lax.complex(x, x), x * 2


def test_complex_dtype_names_output_for_tflite_but_saved_model_works(tmp_path):
    with pytest.raises(UnsupportedError, match=r"TFLite cannot hold output output_0 \(complex64\)"):
        api.to_tflite(complex_out, "f32[3]")
    assert api.to_saved_model(complex_out, "f32[3]", path=str(tmp_path / "sm"))


def test_quantize_mode_is_checked():
    from jaxconv.errors import UsageError

    with pytest.raises(UsageError, match="quantize"):
        api.to_tflite(unused_arg, "f32[2]", "i32[1]", "f32[]", quantize="int4")


def test_saved_model_failure_leaves_nothing(tmp_path, monkeypatch):
    import tensorflow as tf

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(tf.saved_model, "save", broken)
    with pytest.raises(ConversionError, match="disk on fire"):
        api.to_saved_model(unused_arg, "f32[2]", "i32[1]", "f32[]", path=str(tmp_path / "sm"))
    assert os.listdir(tmp_path) == []


def test_runners_reject_bad_artifacts(tmp_path):
    from jaxconv.runtimes.tf import SavedModelRunner
    from jaxconv.runtimes.tflite import TFLiteRunner

    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"not a flatbuffer at all")
    with pytest.raises(ArtifactError, match="LiteRT cannot load"):
        TFLiteRunner(str(bad))
    with pytest.raises(ArtifactError, match="not a SavedModel"):
        SavedModelRunner(str(tmp_path))


# ------------------------------------------------------------------ CLI

USER_FILE = textwrap.dedent("""\
    import jax.numpy as jnp


    def f(x):
        y = jnp.tanh(x)
        return jnp.sort(y, axis=0)
""")


def test_cli_to_saved_model_and_to_tflite_then_check(tmp_path, capsys):
    sm, lite = str(tmp_path / "mlp_sm"), str(tmp_path / "mlp.tflite")
    assert main(["to-saved-model", MLP, "-o", sm, "--specs", *MLP_SPECS]) == 0
    out = capsys.readouterr().out
    assert "(saved-model) against jax.jit" in out and f"wrote {sm}" in out and "MISMATCH" not in out
    assert main(["to-tflite", MLP, "-o", lite, "--specs", *MLP_SPECS]) == 0
    captured = capsys.readouterr()
    assert "(tflite) against jax.jit" in captured.out and f"wrote {lite}" in captured.out
    rows = [line.split() for line in captured.out.splitlines() if line.startswith("output_")]
    assert [r[1] for r in rows] == ["random"] * 3 + ["edge"] * 3 and all(r[-1] == "ok" for r in rows), captured.out
    assert "warning" not in captured.err
    for artifact, runtime in ((lite, "tflite"), (sm, "saved-model")):
        assert main(["check", artifact, MLP, "--strict", "--specs", *MLP_SPECS]) == 0
        out = capsys.readouterr().out
        assert f"check {artifact} ({runtime}) against jax.jit" in out and "output_0" in out and " ok" in out
    assert main(["inspect", sm]) == 0
    out = capsys.readouterr().out
    assert "params['w1']" in out and "XlaCallModule                    1" in out and "stablehlo.dot_general" in out


RELU_FILE = textwrap.dedent("""\
    import jax


    def f(x):
        return jax.nn.relu(x) * 2
""")


def test_cli_edge_value_difference_warns_and_strict_fails(tmp_path, capsys):
    """TFLite's RELU turns NaN into 0: a warning naming the output and the elements, exit 0; --strict: exit 9."""
    user, lite = tmp_path / "relu.py", str(tmp_path / "relu.tflite")
    user.write_text(RELU_FILE)
    assert main(["to-tflite", str(user), "-o", lite, "--route", "xla", "--specs", "f32[b,6]"]) == 0
    captured = capsys.readouterr()
    assert f"wrote {lite}" in captured.out and "MISMATCH" not in captured.out
    assert captured.out.count(" ok") == 3 and captured.out.count("differs on edge values") == 1  # 3 random sets, edge set
    warning = (f"jaxconv: warning: {lite}: output output_0 differs from jax.jit on edge values only (NaN/inf/huge "
               "inputs): computed by TFLite's kernels, which jaxconv does not control; differing elements: jax.jit NaN / "
               "artifact finite x")
    assert captured.err.startswith(warning) and captured.err.endswith("--strict makes this an error\n")
    assert captured.err.count("\n") == 1
    assert main(["check", lite, str(user), "--specs", "f32[b,6]"]) == 0
    capsys.readouterr()
    assert main(["check", lite, str(user), "--strict", "--specs", "f32[b,6]"]) == 9
    err = capsys.readouterr().err.splitlines()[-1]  # after the report's warning line, the error
    assert err.startswith("jaxconv: error: ") and "output output_0 differs from jax.jit on edge values only" in err
    assert "jax.jit NaN / artifact finite x" in err and err.endswith("(--strict)")
    other = str(tmp_path / "relu2.tflite")  # to-tflite --strict: exit 9 (the file stays, as for any failed check)
    assert main(["to-tflite", str(user), "-o", other, "--route", "xla", "--strict", "--specs", "f32[b,6]"]) == 9
    assert capsys.readouterr().err.rstrip().endswith("(--strict)") and os.path.exists(other)
    assert main(["to-saved-model", str(user), "-o", str(tmp_path / "sm"), "--strict", "--specs", "f32[b,6]"]) == 0


def test_cli_quantized_tflite(tmp_path, capsys):
    lite = str(tmp_path / "cnn.tflite")
    assert main(["to-tflite", CNN, "-o", lite, "--quantize", "float16", "--specs", *CNN_SPECS]) == 0
    assert "(tflite) against jax.jit" in capsys.readouterr().out and os.path.getsize(lite) > 0


def test_cli_tflite_failure_one_line_and_no_file(tmp_path, capsys):
    user = tmp_path / "model.py"
    user.write_text(USER_FILE)
    out = tmp_path / "out" / "model.tflite"
    code = main(["to-tflite", str(user), "-o", str(out), "--route", "xla", "--specs", "f32[4,3]"])
    err = capsys.readouterr().err
    assert code == UnsupportedError.exit_code
    assert err.count("\n") == 1 and err.startswith("jaxconv: error: TFLite cannot convert: stablehlo.sort x1 at ")
    assert "model.py:6" in err
    assert not out.exists() and (not out.parent.exists() or os.listdir(out.parent) == [])


# ------------------------------------------------------------------ edge-value policy of the check


class _NanToZero:
    """A runner that computes jax.jit's outputs, then turns NaN in output_0 into 0 (as TFLite's RELU and sinh do)."""

    def __init__(self, kind, fn):
        self.kind, self.fn = kind, fn

    def run(self, flat):
        out = [np.asarray(o) for o in jax.jit(self.fn)(*flat)]
        return [np.where(np.isnan(out[0]), np.float32(0), out[0])] + out[1:]


def two_outputs(x):
    return x + 1, x * 2  # NaN only where the input is NaN


@pytest.mark.parametrize("kind", ["tflite", "saved-model", "onnx"])
def test_edge_value_differences_warn_on_tf_targets_and_fail_on_onnx(kind):
    from jaxconv.check_context import check_options
    from jaxconv.errors import MismatchError
    from jaxconv.verify import check_runner, raise_on_mismatch

    program = trace(two_outputs, ["f32[8]"])
    runner = _NanToZero(kind, two_outputs)
    report = check_runner(runner, "a", program.fn, program.arg_specs, program.signature, inputs=[np.arange(8, dtype=np.float32)])
    assert [(r.name, r.inputs, r.verdict) for r in report.rows if r.verdict != "ok"] == (
        [("output_0", "edge", "edge")] if kind != "onnx" else [("output_0", "edge", "mismatch")])
    if kind == "onnx":  # jaxconv's own lowering: an edge-value difference is a bug
        with pytest.raises(MismatchError, match="WRONG: output output_0 differs from jax.jit on edge inputs"):
            raise_on_mismatch(report)
        return
    row = report.edge_differences[0]
    assert row.ok and "jax.jit NaN / artifact finite x" in row.note
    assert report.warning().startswith("warning: a: output output_0 differs from jax.jit on edge values only")
    raise_on_mismatch(report)  # a warning, not an error
    with check_options(strict=True), pytest.raises(MismatchError, match=r"edge values only .*\(--strict\)"):
        raise_on_mismatch(report)


def test_edge_value_verdict_needs_the_edge_set():
    """The same NaN difference on the user's inputs is a mismatch on a TF target too."""
    from jaxconv.check_context import check_options
    from jaxconv.errors import MismatchError
    from jaxconv.verify import check_runner, raise_on_mismatch

    program = trace(two_outputs, ["f32[8]"])
    given = [np.array([np.nan, 0, 1, 2, 3, 4, 5, 6], np.float32)]
    with check_options(edge=False):
        report = check_runner(_NanToZero("tflite", two_outputs), "a", program.fn, program.arg_specs,
                              program.signature, inputs=given)
    assert [(r.name, r.inputs, r.verdict) for r in report.rows if r.verdict != "ok"] == [("output_0", "given", "mismatch")]
    with pytest.raises(MismatchError, match="WRONG"):
        raise_on_mismatch(report)


WRONG_FILE = textwrap.dedent("""\
    def f(x):
        return x * 2.2
""")


def twice(x):
    return x * 2


@pytest.mark.parametrize("target", ["saved-model", "tflite"])
def test_random_input_mismatch_on_tf_targets_still_fails(target, tmp_path, capsys):
    """An artifact of x*2 checked against x*2.2 differs on random inputs: exit 9, not a warning."""
    program = trace(twice, ["f32[b,3]"])
    path = str(tmp_path / ("sm" if target == "saved-model" else "m.tflite"))
    (api.to_saved_model if target == "saved-model" else api.to_tflite)(program, path=path)
    user = tmp_path / "model.py"
    user.write_text(WRONG_FILE)
    assert main(["check", path, str(user), "--specs", "f32[b,3]"]) == 9
    captured = capsys.readouterr()
    assert "WRONG: output output_0 differs from jax.jit on random inputs" in captured.err
    assert "MISMATCH" in captured.out


def nan_reductions(x):
    pool = lambda init, op: lax.reduce_window(x, init, op, (1, 2), (1, 1), ((0, 0), (1, 0)))  # noqa: E731
    return jnp.max(x), jnp.min(x, axis=1), jnp.max(x, axis=0), pool(-jnp.inf, lax.max), pool(jnp.inf, lax.min)


def test_max_min_reductions_keep_nan_in_both_targets(tmp_path):
    """TF's XLA and TFLite drop NaN in max/min reductions and pooling; jaxconv's guard makes both give jax.jit's NaN."""
    from jaxconv.runtimes import open_artifact

    program = trace(nan_reductions, ["f32[3,4]"])
    api.to_saved_model(program, path=str(tmp_path / "sm"))
    api.to_tflite(program, path=str(tmp_path / "m.tflite"))
    x = np.array([[1, np.nan, 3, 4], [5, 6, 7, 8], [2, -np.inf, -1, 0]], np.float32)  # no window of only -inf
    expected = [np.asarray(e) for e in jax.jit(nan_reductions)(x)]
    assert np.isnan(expected[0]) and np.isnan(expected[1][0]) and np.isnan(expected[2][1])
    assert np.isnan(expected[3][0, 1:3]).all() and np.isnan(expected[4][0, 1:3]).all()  # windows holding the NaN
    for path in (str(tmp_path / "sm"), str(tmp_path / "m.tflite")):
        got = [np.asarray(o) for o in open_artifact(path).run([x])]
        for e, g in zip(expected, got):
            np.testing.assert_array_equal(g, e, err_msg=path)


def test_nan_guard_is_registered_only_inside_the_block():
    from jax._src.interpreters import mlir
    from jax._src.lax.lax import reduce_max_p

    from jaxconv.stablehlo.nan_reductions import reductions_keep_nan

    registry = mlir._platform_specific_lowerings["cpu"]
    before = registry.get(reduce_max_p)
    text = lambda: jax.jit(jnp.max).lower(jnp.zeros(4)).as_text()  # noqa: E731
    assert "reduce" in text() and "compare" not in text()
    with reductions_keep_nan():
        assert "compare" in text()  # x != x
    assert registry.get(reduce_max_p) is before and "compare" not in text()
