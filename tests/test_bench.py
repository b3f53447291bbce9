"""scripts/bench.py: the table, the chart, model selection, and the session settings it measures with."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(os.path.dirname(HERE), "scripts")
sys.path.insert(0, SCRIPTS)

import bench  # noqa: E402


def test_quick_run_prints_table_and_writes_chart(tmp_path):
    png = tmp_path / "chart.png"
    proc = subprocess.run([sys.executable, os.path.join(SCRIPTS, "bench.py"), "--models", "tiny", "--quick", "--no-jax2onnx",
                           "--compare-rewrites", "--png", str(png)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("Machine: ") and "load average" in lines[0]
    header = next(i for i, line in enumerate(lines) if line.startswith("| model |"))
    row = lines[header + 2].split("|")
    assert row[1].strip() == "MLP 2x64 b4"
    cols = [c.strip() for c in lines[header].split("|")]
    jit_ms, ratio = float(row[cols.index("jax.jit ms")]), float(row[cols.index("ORT/jit")])
    top, with_bodies = row[cols.index("nodes (with bodies)")].replace("(", "").replace(")", "").split()
    assert jit_ms > 0 and ratio > 0 and 0 < int(top) <= int(with_bodies)
    assert float(row[cols.index("no-rewrites/jit")]) > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_unknown_model_is_a_usage_error():
    proc = subprocess.run([sys.executable, os.path.join(SCRIPTS, "bench.py"), "--models", "nope"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown model(s) nope" in proc.stderr


def test_skip_large_drops_the_large_model():
    assert "mlp_large" not in bench.parse_args(["--skip-large"]).models
    assert "mlp_large" in bench.parse_args([]).models
    assert bench.parse_args(["--models", "mlp,cnn"]).models == ["mlp", "cnn"]


def test_cold_conversion_alternates_and_takes_medians(tmp_path, monkeypatch):
    runs = []
    times = iter([(5.0, 300.0), (2.0, 0.0), (1.0, 310.0), (9.0, 0.0), (3.0, 290.0), (4.0, 0.0)])

    def timed(cmd, workdir):
        runs.append("to-onnx" if "jaxconv.cli" in cmd[-1] else "export")
        return next(times)

    monkeypatch.setattr(bench, "_timed", timed)
    m = bench.bench_models.build("tiny")
    assert bench.cold_conversion(m, str(tmp_path), rounds=3) == (3.0, 4.0, 310.0)
    assert runs == ["to-onnx", "export"] * 3


def test_cli_rounds_must_be_positive(capsys):
    assert bench.parse_args(["--cli-rounds", "5"]).cli_rounds == 5
    with pytest.raises(SystemExit) as e:
        bench.parse_args(["--cli-rounds", "0"])
    assert e.value.code == 2 and "--cli-rounds must be at least 1" in capsys.readouterr().err


def test_table_shows_ratios_and_missing_contenders():
    row = bench.Row("m", "model M", jax_ms=2.0, ms={"ort": 1.0}, ratio={"ort": 0.5}, nodes=7, nodes_all=9,
                    load=(1.0, 2.0))
    line = bench.table([row]).splitlines()[2]
    assert "| model M | 2.00 | 1.00 | 0.50 |" in line and "| 7 (9) | – |" in line and "1.0→2.0" in line


def test_node_count_includes_bodies():
    """The table's second node figure counts the nodes of Loop/Scan/If bodies too."""
    import onnx
    from onnx import helper

    def body(n):
        return helper.make_graph([helper.make_node("Neg", ["a"], ["b"]) for _ in range(n)], "b", [], [])

    graph = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=body(2), else_branch=body(3)),
                               helper.make_node("Neg", ["y"], ["z"])], "g",
                              [helper.make_tensor_value_info("c", onnx.TensorProto.BOOL, [])], [])
    assert bench.count_nodes.count(graph) == 2 + 2 + 3


def test_alternate_gives_each_function_its_median():
    import time

    out = bench.alternate({"fast": lambda: None, "slow": lambda: time.sleep(0.002)}, iters=9, budget_s=10)
    assert out["slow"] >= 0.002 > out["fast"]


@pytest.mark.parametrize("spinning", [False, True])
def test_session_options_set_spinning(spinning):
    from jaxconv.runtimes.onnxrt import session_options

    opts = session_options(threads=1, spinning=spinning)
    assert opts.intra_op_num_threads == 1
    assert opts.get_session_config_entry("session.intra_op.allow_spinning") == ("1" if spinning else "0")


def test_check_runner_does_not_spin():
    import onnx
    from onnx import helper

    from jaxconv.runtimes.onnxrt import OnnxRunner

    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    runner = OnnxRunner(model.SerializeToString())
    assert runner.session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_alternate_reports_cpu_time_apart_from_wall_time():
    import time

    def busy():
        end = time.process_time() + 0.003
        while time.process_time() < end:
            pass

    cpu: dict[str, float] = {}
    wall = bench.alternate({"sleep": lambda: time.sleep(0.003), "busy": busy}, iters=7, budget_s=10, cpu=cpu)
    assert wall["sleep"] >= 0.003 and cpu["sleep"] < 0.001
    assert cpu["busy"] >= 0.003


def test_table_shows_cpu_ratios():
    row = bench.Row("m", "model M", jax_ms=2.0, ms={"ort 1t": 3.0}, ratio={"ort 1t": 1.5}, nodes=7,
                    cpu_ms={"jax": 4.0, "ort 1t": 3.0, "ort": 5.0}, load=(1.0, 1.0))
    lines = bench.table([row]).splitlines()
    cols = [c.strip() for c in lines[0].split("|")]
    cells = [c.strip() for c in lines[2].split("|")]
    assert cells[cols.index("CPU: ORT 1t/jit")] == "0.75" and cells[cols.index("CPU: ORT/jit")] == "1.25"
    assert cells[cols.index("CPU: jax2onnx/jit")] == "–"


def test_alternate_charges_work_left_running_to_the_call_that_started_it():
    """A call that returns while a thread it started still works (jax.jit's worker spinning after
    ``block_until_ready``) is charged that work once the process settles; the contender after it,
    which sleeps, is not."""
    import os
    import threading
    import time
    import zlib

    block = os.urandom(1 << 17)

    def leaves_work():
        started = threading.Event()

        def run():
            started.set()
            zlib.compress(block, 9)  # without the GIL

        threading.Thread(target=run).start()
        started.wait()

    alone: dict[str, float] = {}
    bench.alternate({"work": lambda: zlib.compress(block, 9)}, iters=5, budget_s=10, cpu=alone)
    cpu: dict[str, float] = {}
    bench.alternate({"leaves work": leaves_work, "sleeps": lambda: time.sleep(0.02)}, iters=7, budget_s=10,
                    cpu=cpu, settle_s=0.05)
    assert cpu["leaves work"] > 0.5 * alone["work"], (cpu, alone)
    assert cpu["sleeps"] < 0.25 * alone["work"], (cpu, alone)
