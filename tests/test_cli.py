"""The jaxconv command line: targets that need no TensorFlow, every error path, exit codes, no partial files."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from cli_support import run_cli
from jaxconv.cli import main
from jaxconv.errors import (
    ArtifactError,
    FileLoadError,
    MismatchError,
    SpecError,
    TraceError,
    UnsupportedError,
    UsageError,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MLP = os.path.join(ROOT, "examples", "mlp.py")
MLP_SPECS = ['{"w1":"f32[784,64]","b1":"f32[64]","w2":"f32[64,10]","b2":"f32[10]"}', "f32[b,784]"]




def test_to_onnx_mlp_writes_checked_model(tmp_path, capsys):
    out = tmp_path / "mlp.onnx"
    code, stdout, err = run_cli(["to-onnx", MLP, "--specs", *MLP_SPECS, "-o", str(out)], capsys)
    assert code == 0, err
    assert out.exists()
    assert "output_0" in stdout and "ok" in stdout
    assert "[5, 10]" in stdout  # the symbolic batch was tried at a second size
    import onnx

    model = onnx.load(str(out))
    assert [i.name for i in model.graph.input] == ["params_b1", "params_b2", "params_w1", "params_w2", "x"]
    assert model.graph.input[4].type.tensor_type.shape.dim[0].dim_param == "b"
    assert [o.name for o in model.graph.output] == ["output_0"]


def test_to_stablehlo_writes_three_files(tmp_path, capsys):
    base = tmp_path / "mlp"
    code, stdout, err = run_cli(["to-stablehlo", MLP, "--specs", *MLP_SPECS, "-o", str(base)], capsys)
    assert code == 0, err
    assert "stablehlo.dot_general" in (tmp_path / "mlp.mlir").read_text()
    assert (tmp_path / "mlp.mlirbc").read_bytes()[:4] == b"ML\xefR"
    from jax import export

    exp = export.deserialize(bytearray((tmp_path / "mlp.jaxexport").read_bytes()))
    assert str(exp.in_avals[4].shape[0]) == "b"


def test_to_stablehlo_several_platforms_without_gpu(tmp_path, capsys):
    base = tmp_path / "m"
    code, stdout, err = run_cli(["to-stablehlo", MLP, "--specs", *MLP_SPECS, "-o", str(base), "--platforms", "cpu,cuda"], capsys)
    assert code == 0, err
    from jax import export

    exp = export.deserialize(bytearray((tmp_path / "m.jaxexport").read_bytes()))
    assert exp.platforms == ("cpu", "cuda")


def test_unknown_platform(tmp_path, capsys):
    code, _, err = run_cli(["to-stablehlo", MLP, "--specs", *MLP_SPECS, "-o", str(tmp_path / "m"), "--platforms", "cpu,gpu9"], capsys)
    assert code == UsageError.exit_code
    assert "unknown platform(s) gpu9" in err


def test_unused_argument_stays_an_input(tmp_path, capsys, user_file):
    path = user_file("def f(x, unused, y):\n    return x * 2 + y\n")
    out = tmp_path / "u.onnx"
    code, _, err = run_cli(["to-onnx", path, "--specs", "f32[3]", "i32[7]", "f32[3]", "-o", str(out)], capsys)
    assert code == 0, err
    import onnx

    model = onnx.load(str(out))
    assert [i.name for i in model.graph.input] == ["x", "unused", "y"]


def test_a_parameter_with_a_default_may_be_given_a_spec(tmp_path, capsys, user_file):
    """``def f(x, scale=2.0)``: one spec keeps the default, two make scale an input, three are refused."""
    path = user_file("def f(x, scale=2.0):\n    return x * scale\n", "dflt.py")
    import onnx

    for specs, names in ((["f32[3]"], ["x"]), (["f32[3]", "f32[3]"], ["x", "scale"])):
        out = tmp_path / f"d{len(specs)}.onnx"
        code, _, err = run_cli(["to-onnx", path, "--specs", *specs, "-o", str(out)], capsys)
        assert code == 0, err
        assert [i.name for i in onnx.load(str(out)).graph.input] == names
    code, _, err = run_cli(["to-onnx", path, "--specs", "f32[3]", "f32[3]", "f32[3]", "-o", str(tmp_path / "d3.onnx")],
                           capsys)
    assert code == 2 and "takes 1 to 2 positional argument(s) (x, scale) but 3 spec(s)" in err
    assert not (tmp_path / "d3.onnx").exists()


def test_check_command_with_npz_inputs(tmp_path, capsys, user_file):
    path = user_file("import jax.numpy as jnp\ndef f(x, n):\n    return jnp.sin(x) * n\n")
    out = tmp_path / "f.onnx"
    assert run_cli(["to-onnx", path, "--specs", "f32[4]", "f32[]", "-o", str(out), "--no-check"], capsys)[0] == 0
    npz = tmp_path / "in.npz"
    np.savez(npz, x=np.arange(4, dtype=np.float32), n=np.float32(3))
    code, stdout, err = run_cli(["check", str(out), path, "--specs", "f32[4]", "f32[]", "--inputs", str(npz)], capsys)
    assert code == 0, err
    assert "max abs err" in stdout


def test_check_reports_mismatch_and_keeps_the_artifact(tmp_path, capsys, user_file, monkeypatch):
    path = user_file("def f(x):\n    return x + 1\n")
    out = tmp_path / "f.onnx"
    from jaxconv.runtimes import onnxrt

    real_run = onnxrt.OnnxRunner.run
    monkeypatch.setattr(onnxrt.OnnxRunner, "run", lambda self, inputs: [o + 0.5 for o in real_run(self, inputs)])
    code, stdout, err = run_cli(["to-onnx", path, "--specs", "f32[3]", "-o", str(out)], capsys)
    assert code == MismatchError.exit_code
    assert "WRONG" in err and "output_0" in err
    assert "MISMATCH" in stdout
    assert out.exists()


@pytest.mark.parametrize("case", ["missing_file", "syntax", "missing_fn", "bad_spec", "spec_count", "no_specs",
                                  "trace", "unsupported", "opset", "bad_artifact", "entry_for_py"])
def test_error_paths(case, tmp_path, capsys, user_file):
    out = tmp_path / "out.onnx"
    good = user_file("import jax.numpy as jnp\ndef f(x):\n    return jnp.tanh(x)\n", "good.py")
    args, exc, words = {
        "missing_file": (["to-onnx", str(tmp_path / "nope.py"), "--specs", "f32[2]", "-o", str(out)], FileLoadError, "file not found"),
        "syntax": (["to-onnx", user_file("def f(x):\n  return (x\n", "syn.py"), "--specs", "f32[2]", "-o", str(out)],
                   FileLoadError, "syn.py:"),
        "missing_fn": (["to-onnx", good + ":g", "--specs", "f32[2]", "-o", str(out)], FileLoadError, "has no function 'g'"),
        "bad_spec": (["to-onnx", good, "--specs", "f32[2,,3]", "-o", str(out)], SpecError, "at character 7"),
        "spec_count": (["to-onnx", good, "--specs", "f32[2]", "f32[2]", "-o", str(out)], UsageError,
                       "takes 1 positional argument(s) (x) but 2 spec(s)"),
        "no_specs": (["to-onnx", good, "-o", str(out)], UsageError, "no --specs given"),
        "trace": (["to-onnx", user_file("def f(x):\n    y = x.reshape(7)\n    return y\n", "tr.py"), "--specs", "f32[2,3]", "-o", str(out)],
                  TraceError, "tr.py:2"),
        "unsupported": (["to-onnx", user_file("from jax import lax\ndef f(x):\n    return lax.reduce_window(x, 1 + 0j, lax.mul, "
                                              "(2,), (1,), 'VALID')\n", "un.py"),
                         "--specs", "c64[5]", "-o", str(out)], UnsupportedError, "un.py:3"),
        "opset": (["to-onnx", good, "--specs", "f32[2]", "-o", str(out), "--opset", "12"], UsageError, "--opset 12 is out of range"),
        "bad_artifact": (["check", str(tmp_path / "x.bin"), good, "--specs", "f32[2]"], ArtifactError, "artifact not found"),
        "entry_for_py": (["to-onnx", good, "--specs", "f32[2]", "-o", str(out), "--entry", "main"], UsageError, "--entry applies"),
    }[case]
    code, stdout, err = run_cli(args, capsys)
    assert code == exc.exit_code, err
    assert words in err
    assert err.startswith("jaxconv: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert not out.exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".jaxconv-")]


def test_unsupported_lists_every_problem_at_once(tmp_path, capsys, user_file):
    path = user_file("""
        import jax
        import jax.numpy as jnp
        def f(b, a):
            factors = jnp.linalg.eigh(b), jnp.linalg.eigh(a)
            return factors, jnp.linalg.qr(a)
    """)
    code, _, err = run_cli(["to-onnx", path, "--specs", "c64[3,3]", "c64[2,2]", "-o", str(tmp_path / "o.onnx")], capsys)
    assert code == UnsupportedError.exit_code
    assert "@lapack_cheevd_ffi x2" in err
    assert "complex Householder QR" in err
    assert "jaxconv list-ops" in err


def test_debug_shows_traceback(tmp_path, capsys):
    with pytest.raises(FileLoadError):
        main(["--debug", "to-onnx", str(tmp_path / "nope.py"), "--specs", "f32[2]", "-o", str(tmp_path / "o.onnx")])


def test_inspect_onnx_and_jaxexport(tmp_path, capsys):
    base = tmp_path / "mlp"
    assert main(["to-stablehlo", MLP, "--specs", *MLP_SPECS, "-o", str(base), "--no-check"]) == 0
    assert main(["to-onnx", MLP, "--specs", *MLP_SPECS, "-o", str(base) + ".onnx", "--no-check"]) == 0
    capsys.readouterr()
    code, out, _ = run_cli(["inspect", str(base) + ".onnx"], capsys)
    assert code == 0
    assert "params['w1']" in out and "[b,784]" in out and "MatMul" in out and "opset=21" in out
    code, out, _ = run_cli(["inspect", str(base) + ".jaxexport"], capsys)
    assert code == 0
    assert "x " in out and "[b,784]" in out and "stablehlo.dot_general" in out


def test_inspect_rejects_unknown_files(tmp_path, capsys):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    code, _, err = run_cli(["inspect", str(junk)], capsys)
    assert code == ArtifactError.exit_code
    assert "not a readable ONNX model" in err


def test_list_ops_reads_the_registry(capsys):
    code, out, _ = run_cli(["list-ops"], capsys)
    assert code == 0
    from jaxconv.onnx.registry import every_construct

    rows = [line.split()[:2] for line in out.strip().splitlines()]
    assert rows == [[e.kind, e.op_name] for e in every_construct()]
    assert ["op", "stablehlo.dot_general"] in rows
    lines = {line.split()[1]: line for line in out.splitlines()}
    assert "[float32; static matrix sizes up to 256 (unrolled)" in lines["lapack_sgetrf_ffi"]
    assert lines["ApproxTopK"].startswith("custom_call") and "aggregate_to_topk=true" in lines["ApproxTopK"]
    assert lines["chlo.erf"].startswith("composite") and "Erf" in lines["chlo.erf"]


def test_to_onnx_and_help_never_import_tensorflow(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        from jaxconv.cli import main
        try:
            main(["--help"])
        except SystemExit:
            pass
        assert main(["to-onnx", {MLP!r}, "--specs", *{MLP_SPECS!r}, "-o", {str(tmp_path / 'a.onnx')!r}]) == 0
        assert main(["to-stablehlo", {MLP!r}, "--specs", *{MLP_SPECS!r}, "-o", {str(tmp_path / 'a')!r}]) == 0
        assert main(["check", {str(tmp_path / 'a.onnx')!r}, {MLP!r}, "--specs", *{MLP_SPECS!r}]) == 0
        bad = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "tf2onnx", "keras"))
        assert not bad, bad
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def test_module_entry_point_runs():
    result = subprocess.run([sys.executable, "-m", "jaxconv", "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.startswith("jaxconv ")


def test_ops_doc_is_the_list_ops_output(capsys):
    code, out, _ = run_cli(["list-ops", "--markdown"], capsys)
    assert code == 0
    with open(os.path.join(ROOT, "docs", "ops.md")) as f:
        assert f.read() == out, "docs/ops.md is stale: run `jaxconv list-ops --markdown > docs/ops.md`"
    for heading in ("## StableHLO ops", "## `stablehlo.custom_call` targets", "## `stablehlo.composite` names"):
        assert heading in out
    assert "| `lapack_dpotrf_ffi` | lapack |" in out and "| `chlo.top_k` | composites |" in out


def test_artifacts_get_ordinary_permissions(tmp_path, capsys):
    out = tmp_path / "m.onnx"
    assert main(["to-onnx", MLP, "--specs", *MLP_SPECS, "-o", str(out), "--no-check"]) == 0
    mask = os.umask(0)
    os.umask(mask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~mask


@pytest.mark.tf
def test_inspect_tflite_shows_program_names(tmp_path, capsys):
    out = tmp_path / "mlp.tflite"
    assert main(["to-tflite", MLP, "--specs", *MLP_SPECS, "-o", str(out), "--no-check"]) == 0
    capsys.readouterr()
    code, text, _ = run_cli(["inspect", str(out)], capsys)
    assert code == 0
    assert "params['w1']" in text and "[b,784]" in text
    assert "FULLY_CONNECTED" in text or "BATCH_MATMUL" in text, text


def _model_with_an_unknown_op(path):
    import onnx
    from onnx import TensorProto, helper

    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in ("x", "y")]
    graph = helper.make_graph([helper.make_node("Frobnicate", ["x"], ["y"])], "g", io[:1], io[1:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, str(path))


def test_debug_shows_the_runtime_error_behind_a_failure(tmp_path, capsys, user_file):
    import traceback

    _model_with_an_unknown_op(tmp_path / "bad.onnx")
    fn = user_file("def f(x):\n    return x * 2\n")
    args = ["check", str(tmp_path / "bad.onnx"), fn, "--specs", "f32[3]"]
    code, _, err = run_cli(args, capsys)
    assert code == ArtifactError.exit_code and err.count("\n") == 1, err
    assert err.startswith("jaxconv: error: ONNX Runtime cannot load") and "Traceback" not in err
    with pytest.raises(ArtifactError) as info:
        main(["--debug", *args])
    cause = info.value.__cause__
    assert cause is not None and type(cause).__module__.startswith("onnxruntime"), repr(cause)
    shown = "".join(traceback.format_exception(info.value))
    assert "direct cause of the following exception" in shown and type(cause).__name__ in shown
