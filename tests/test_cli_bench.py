"""``jaxconv bench``: the table and its figures, --json, --onnx, --inputs, --profile, every error it reports.

Nothing here judges speed: the iterations are few so the tests are fast; figures are checked for
consistency (positive, ratios from the times shown, node counts of the model timed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest

from cli_support import run_cli

FN = """
import jax.numpy as jnp
import numpy as np

W = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)


def predict(x):
    return jnp.tanh(x @ W) + 1.0


def doubled(x):
    return 2.0 * predict(x)


def pair(x, y):
    return x @ W + y


LAYERS = [np.random.default_rng(k).standard_normal((128, 128)).astype(np.float32) * 0.1 for k in range(3)]


def layers(x):
    for w in LAYERS:
        x = jnp.tanh(x @ w)
    return x
"""
FAST = ["--iters", "3", "--budget", "0.01"]


def bench(capsys, *args):
    """``jaxconv bench ARGS`` with few iterations: (exit code, stdout, stderr)."""
    return run_cli(["bench", *args, *FAST], capsys)


@pytest.fixture
def fn_file(user_file):
    return user_file(FN, "model.py")


def _table(stdout: str) -> dict[str, str]:
    """The table's one row, by column header."""
    lines = stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| function |"))
    cols = [c.strip() for c in lines[head].strip("|").split("|")]
    cells = [c.strip() for c in lines[head + 2].strip("|").split("|")]
    assert lines[head + 1] == "|" + "---|" * len(cols)
    return dict(zip(cols, cells))


def _to_onnx(fn_file: str, name: str, spec: str, out) -> onnx.ModelProto:
    from jaxconv.cli import main

    assert main(["to-onnx", f"{fn_file}:{name}", "--specs", spec, "-o", str(out), "--no-check"]) == 0
    return onnx.load(str(out))


def test_table_figures_are_consistent(fn_file, tmp_path, capsys):
    model = _to_onnx(fn_file, "predict", "f32[b,16]", tmp_path / "ref.onnx")
    capsys.readouterr()
    code, out, err = bench(capsys, f"{fn_file}:predict", "--specs", "f32[b,16]", "--sizes", "b=4")
    assert code == 0, err
    assert out.startswith("Machine: ") and "load average" in out.splitlines()[0]
    row = _table(out)
    assert row["function"] == "predict"
    jit, ort, ort1 = float(row["jax.jit ms"]), float(row["ORT ms"]), float(row["ORT 1t ms"])
    assert jit > 0 and ort > 0 and ort1 > 0
    # the ratios are those of the printed times (4 significant digits each, the ratio to 2 decimals)
    assert float(row["ORT/jit"]) == pytest.approx(ort / jit, abs=0.006, rel=1e-3)
    assert float(row["ORT 1t/jit"]) == pytest.approx(ort1 / jit, abs=0.006, rel=1e-3)
    assert float(row["CPU: ORT/jit"]) > 0 and float(row["CPU: ORT 1t/jit"]) > 0
    assert row["ORT spin/jit"] == "–"  # only with --spin
    assert int(row["nodes"]) == len(model.graph.node)
    assert float(row["ONNX MB"]) == pytest.approx(model.ByteSize() / 2**20, rel=5e-3)
    assert float(row["max abs error"]) < 1e-5 and "mismatch" not in row["max abs error"]
    load = row["load"].split("→")
    assert len(load) == 2 and all(float(x) >= 0 for x in load)
    assert err == ""


def test_json_holds_the_figures_of_the_table(fn_file, tmp_path, capsys):
    out_json = tmp_path / "bench.json"
    code, out, err = bench(capsys, fn_file, "--fn", "predict", "--specs", "f32[3,16]", "--threads", "1", "--spin",
                           "--json", str(out_json))
    assert code == 0, err
    row = _table(out)
    data = json.loads(out_json.read_text())
    assert data["function"] == "predict" and data["specs"] == ["f32[3,16]"] and data["inputs"] == "random"
    assert data["onnx"] is None and data["threads"] == 1 and data["mismatches"] == []
    assert data["profile"] is None
    assert set(data["ms"]) == {"ort", "ort 1t", "ort spin"} and set(data["cpu_ms"]) == {"jax", "ort", "ort 1t"}
    assert format(data["jax_ms"], ".4g") == row["jax.jit ms"]
    assert format(data["ms"]["ort"], ".4g") == row["ORT ms"]
    assert data["ratio"]["ort"] == pytest.approx(data["ms"]["ort"] / data["jax_ms"])
    assert data["cpu_ratio"]["ort 1t"] == pytest.approx(data["cpu_ms"]["ort 1t"] / data["cpu_ms"]["jax"])
    assert format(data["ratio"]["ort spin"], ".2f") == row["ORT spin/jit"] and data["ratio"]["ort spin"] > 0
    assert data["nodes"] == int(row["nodes"]) and 0 <= data["max_abs_error"] < 1e-5
    assert "ORT: jaxconv's session options (spinning off), 1 thread(s)" in out
    assert f"wrote {out_json}" in out


@pytest.mark.parametrize("batch,threads", [(2, 1), (16, None)])
def test_a_symbolic_model_is_timed_on_the_thread_count_it_records_for_the_sizes(fn_file, tmp_path, capsys,
                                                                                 batch, threads):
    """``f32[b, 64, 128]`` through three 128x128 products: one thread up to b = 4 (thread_count's record)."""
    from jaxconv.runtimes.onnxrt import default_threads

    out_json = tmp_path / "bench.json"
    code, out, err = bench(capsys, f"{fn_file}:layers", "--specs", "f32[b,64,128]", "--sizes", f"b={batch}",
                           "--json", str(out_json))
    assert code == 0, err
    assert json.loads(out_json.read_text())["threads"] == (threads or default_threads())


def test_onnx_file_is_timed_as_given(fn_file, tmp_path, capsys):
    path = tmp_path / "given.onnx"
    model = _to_onnx(fn_file, "predict", "f32[b,16]", path)
    capsys.readouterr()
    code, out, err = bench(capsys, f"{fn_file}:predict", "--specs", "f32[b,16]", "--sizes", "b=2", "--onnx", str(path))
    assert code == 0, err
    row = _table(out)
    assert int(row["nodes"]) == len(model.graph.node)
    assert float(row["ONNX MB"]) == pytest.approx(os.path.getsize(path) / 2**20, rel=5e-3)
    assert float(row["max abs error"]) < 1e-5


def test_onnx_of_another_function_is_a_warning_not_a_failure(fn_file, tmp_path, capsys):
    path = tmp_path / "doubled.onnx"
    _to_onnx(fn_file, "doubled", "f32[4,16]", path)
    capsys.readouterr()
    code, out, err = bench(capsys, f"{fn_file}:predict", "--specs", "f32[4,16]", "--onnx", str(path))
    assert code == 0, err
    row = _table(out)
    # doubled = 2 * predict, and predict = tanh(.) + 1 lies in (0, 2): the difference is predict itself
    error = row["max abs error"]
    assert error.endswith(" (mismatch)") and 0 < float(error.split()[0]) <= 2
    assert float(row["ORT ms"]) > 0
    assert err.startswith("jaxconv: warning: output_0 differs from jax.jit (max abs error ")


def test_inputs_from_npz_give_the_sizes(fn_file, tmp_path, capsys):
    x = np.random.default_rng(1).standard_normal((5, 16)).astype(np.float32)
    y = np.zeros((5, 8), np.float32)
    np.savez(tmp_path / "in.npz", x=x, y=y)
    out_json = tmp_path / "b.json"
    code, out, err = run_cli(["bench", f"{fn_file}:pair", "--specs", "f32[b,16]", "f32[b,8]", "--inputs",
                              str(tmp_path / "in.npz"), "--json", str(out_json), *FAST], capsys)
    assert code == 0, err
    data = json.loads(out_json.read_text())
    assert data["inputs"] == str(tmp_path / "in.npz") and data["max_abs_error"] < 1e-5


def test_profile_writes_trace_and_names_top_kernels(fn_file, tmp_path, capsys):
    prof = tmp_path / "prof"
    code, out, err = bench(capsys, f"{fn_file}:predict", "--specs", "f32[4,16]", "--profile", str(prof))
    assert code == 0, err
    line = next(line for line in out.splitlines() if line.startswith("profile (1 thread, "))
    trace = line[len("profile (1 thread, "):].split("): ")[0]
    assert os.path.dirname(trace) == str(prof) and os.path.isfile(trace)
    assert json.load(open(trace))  # ORT's chrome-trace events
    assert "MatMul" in line.split("): ")[1]
    assert any(f.endswith(".optimized.onnx") for f in os.listdir(prof))


@pytest.mark.parametrize("args, code, message", [
    (["{missing}", "--specs", "f32[2]"], 4, "file not found: {missing}"),
    (["{fn}:nope", "--specs", "f32[2]"], 4,
     "{fn} has no function 'nope'; candidates: predict, doubled, pair"),
    (["{fn}:predict", "--specs", "f32[2,"], 3,
     "bad spec 'f32[2,' at character 7: missing ']' (here: 'f32[2,→')"),
    (["{fn}:predict", "--specs", "f32[b,16]"], 2,
     "symbolic dimension(s) b need a size for the benchmark's inputs: give --sizes b=8 or --inputs X.npz"),
    (["{fn}:predict", "--specs", "f32[b,16]", "--sizes", "c=3"], 2,
     "--sizes 'c=3': c is not a symbolic dimension of the specs (they have b)"),
    (["{fn}:predict", "--specs", "f32[b,16]", "--sizes", "b=x"], 2,
     "--sizes 'b=x': give NAME=SIZE pairs, e.g. b=8,n=3"),
    (["{fn}:predict", "--specs", "f32[b,16]", "--sizes", "b=0"], 2,
     "--sizes 'b=0': sizes must be at least 1"),
    (["{fn}:predict", "--specs", "f32[2,16]", "--iters", "0"], 2, "--iters 0: give a count of at least 1"),
    (["{fn}:predict", "--specs", "f32[2,16]", "--budget", "0"], 2, "--budget 0.0: give seconds above 0"),
    (["{fn}:predict", "--specs", "f32[2,16]", "--inputs", "{missing}"], 2, "file not found: {missing}"),
    (["{fn}:predict", "--specs", "f32[b,16]", "--inputs", "{missing}", "--sizes", "b=2"], 2,
     "--sizes sizes random inputs; with --inputs the arrays give the sizes"),
    (["{fn}:predict", "--specs", "f32[2,16]", "--onnx", "{missing}"], 8, "artifact not found: {missing}"),
    (["{fn}:predict", "--specs", "f32[2,16]", "--onnx", "{fn}"], 8, "{fn} is not an ONNX model: "),
    (["{fn}:predict", "--specs", "f32[2,16]", "--onnx", "{fn}", "--opset", "18"], 2,
     "--opset applies to the conversion; --onnx takes the model as it is"),
    (["{fn}:predict", "--specs", "f32[2,16]", "--threads", "0"], 2, "--threads 0: give a count of at least 1"),
])
def test_errors_are_one_line_with_exit_code(fn_file, tmp_path, capsys, args, code, message):
    names = {"fn": fn_file, "missing": str(tmp_path / "missing.xyz")}
    got, out, err = run_cli(["bench", *[a.format(**names) for a in args]], capsys)
    assert got == code
    assert err.startswith("jaxconv: error: " + message.format(**names)) and err.count("\n") == 1
    assert out == ""


@pytest.mark.parametrize("specs, message", [
    (["f32[5,16]"], ": input 'x' is float32[4,16], the specs give 'x' float32[5,16]"),
    (["f32[4,16,1]"], ": input 'x' is float32[4,16], the specs give 'x' float32[4,16,1]"),
    (["i32[4,16]"], ": input 'x' is float32[4,16], the specs give 'x' int32[4,16]"),
    (["{\"a\": \"f32[4,16]\", \"b\": \"f32[4,16]\"}"], " takes 1 input(s) (x); the specs give 2 (x_a, x_b)"),
])
def test_onnx_whose_inputs_differ_from_the_specs_is_refused(fn_file, tmp_path, capsys, specs, message):
    path = tmp_path / "m.onnx"
    _to_onnx(fn_file, "predict", "f32[4,16]", path)
    user = tmp_path / "other.py"
    user.write_text("def f(x):\n    return x\n")
    capsys.readouterr()
    code, out, err = run_cli(["bench", f"{user}:f", "--specs", *specs, "--onnx", str(path)], capsys)
    assert code == 2
    assert err == f"jaxconv: error: {path}{message}\n"


def test_the_converter_does_not_import_scripts():
    code = ("import sys, jaxconv.cli, jaxconv.benchmark\n"
            "bad = [m for m in ('bench', 'bench_models') if m in sys.modules]\n"
            "assert not bad, bad\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_bench_script_times_with_the_library():
    scripts = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")
    sys.path.insert(0, scripts)
    try:
        import bench
    finally:
        sys.path.remove(scripts)
    from jaxconv import benchmark

    assert bench.alternate is benchmark.alternate and bench.ort_session is benchmark.ort_session
    assert bench.ort_call is benchmark.ort_call and bench.machine is benchmark.machine


def test_rotate_gives_ratios_of_its_medians():
    from jaxconv import benchmark

    fns = {"jax": lambda: sum(range(100)), "ort": lambda: sum(range(1000))}
    r = benchmark.rotate(fns, iters=5, budget_s=10)
    assert r.jax_ms > 0 and r.ms["ort"] > 0
    assert r.ratio["ort"] == pytest.approx(r.ms["ort"] / r.jax_ms)
    assert set(r.cpu_ms) == {"jax", "ort"}


def test_result_table_marks_a_mismatch_and_missing_figures():
    from jaxconv import benchmark

    rot = benchmark.Rotation(2.0, {"ort": 1.0}, {"ort": 0.5}, {"jax": 4.0, "ort": 3.0})
    res = benchmark.Result("f", rot, 2, nodes=7, size_mb=1.5, max_abs=0.25, mismatches=["output_0 differs"],
                           load=(1.0, 2.0))
    lines = res.table().splitlines()
    cols = [c.strip() for c in lines[0].strip("|").split("|")]
    row = dict(zip(cols, (c.strip() for c in lines[2].strip("|").split("|"))))
    assert row == {"function": "f", "jax.jit ms": "2", "ORT ms": "1", "ORT/jit": "0.50", "ORT 1t ms": "–",
                   "ORT 1t/jit": "–", "ORT spin/jit": "–", "CPU: ORT/jit": "0.75", "CPU: ORT 1t/jit": "–",
                   "max abs error": "0.25 (mismatch)", "nodes": "7", "ONNX MB": "1.5", "load": "1.0→2.0"}


def test_example_inputs_of_the_file_are_used_unless_sizes_are_given(user_file, tmp_path, capsys):
    path = user_file(FN + "\n\ndef example_inputs():\n    return (np.ones((3, 16), np.float32),)\n", "ex.py")
    out_json = tmp_path / "b.json"
    code, out, err = bench(capsys, f"{path}:predict", "--specs", "f32[b,16]", "--json", str(out_json))
    assert code == 0, err
    assert out.splitlines()[1].startswith("Inputs: example_inputs(); ORT: ")
    assert json.loads(out_json.read_text())["inputs"] == "example_inputs()"
    code, out, err = bench(capsys, f"{path}:predict", "--specs", "f32[b,16]", "--sizes", "b=2", "--json", str(out_json))
    assert code == 0, err
    assert json.loads(out_json.read_text())["inputs"] == "random"


def test_example_inputs_that_do_not_fit_the_specs_are_refused(user_file, capsys):
    path = user_file(FN + "\n\ndef example_inputs():\n    return (np.ones((3, 15), np.float32),)\n", "ex.py")
    code, out, err = bench(capsys, f"{path}:predict", "--specs", "f32[b,16]")
    assert code == 2
    assert err == ("jaxconv: error: example_inputs() in ex.py: input 'x' is float32[3,15], "
                   "the function takes float32[b,16] (with b=3)\n")


@pytest.mark.parametrize("spec", ["bf16[4,5]", "c64[4,5]"])
def test_bfloat16_and_complex_models_are_timed(user_file, capsys, spec):
    path = user_file("import jax.numpy as jnp\n\ndef f(x):\n    return jnp.sin(x) * 2\n", "bf.py")
    code, out, err = bench(capsys, f"{path}:f", "--specs", spec)
    assert code == 0, err
    row = _table(out)
    assert float(row["ORT ms"]) > 0 and float(row["ORT 1t ms"]) > 0  # not dropped (numpy cannot feed bfloat16; complex goes in as pairs)
    assert "\n- ort" not in out


def test_an_output_the_check_passes_against_float64_is_not_a_mismatch(user_file, tmp_path, capsys):
    """jax.jit's own rounding is off (the sum of x + 1e8 cancels): an artifact nearer the float64 result is
    right, as ``check`` says, so bench gives no warning; an artifact off the float64 result by more than
    any float32 evaluation can be still gets one. (Sixteen terms near 1e8 summed in float32 round by up to
    64 at each add: an artifact 100 off is within that, and the check's rounding reference says so.)"""
    src = user_file("import jax.numpy as jnp\n\n\ndef shifted(x):\n    return jnp.sum(x + 1e8, axis=-1) - 16e8\n\n\n"
                    "def plain(x):\n    return jnp.sum(x, axis=-1)\n\n\ndef off(x):\n    return jnp.sum(x, axis=-1) + 1e4\n",
                    "shifted.py")
    for name, wrong in (("plain", False), ("off", True)):
        path = tmp_path / f"{name}.onnx"
        _to_onnx(src, name, "f32[4,16]", path)
        capsys.readouterr()
        code, out, err = bench(capsys, f"{src}:shifted", "--specs", "f32[4,16]", "--onnx", str(path))
        assert code == 0, err
        error = _table(out)["max abs error"]
        assert float(error.split()[0]) > 1.0  # jax.jit is off by more than the tolerance
        assert error.endswith(" (mismatch)") == wrong, error
        assert ("differs from jax.jit" in err) == wrong, err


def test_a_model_of_short_calls_is_timed_spinning_during_each_run(user_file, capsys):
    """Six [256, 256] x [256, 256] products: the model records spinning during the run, and the
    table's header says so."""
    src = user_file("import jax.numpy as jnp\nimport numpy as np\n\n"
                    "W = [np.random.default_rng(k).standard_normal((256, 256)).astype(np.float32) * 0.06 for k in range(6)]\n\n\n"
                    "def layers(x):\n    for w in W:\n        x = jnp.tanh(x @ w)\n    return x\n", "short.py")
    code, out, err = bench(capsys, f"{src}:layers", "--specs", "f32[256,256]")
    assert code == 0, err
    assert "ORT: jaxconv's session options (spinning during each run, stopped after it)" in out
    code, out, err = bench(capsys, f"{src}:layers", "--specs", "f32[256,256]", "--threads", "1")
    assert code == 0, err
    assert "ORT: jaxconv's session options (spinning off), 1 thread(s)" in out
