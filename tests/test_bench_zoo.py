"""scripts/bench_zoo.py: the plumbing on a plain-JAX model (no third-party library), the table's
columns, the summary's counts, a model whose library is missing, and model selection."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(os.path.dirname(HERE), "scripts")
sys.path.insert(0, SCRIPTS)

import bench_zoo  # noqa: E402


def _cells(lines: list[str], name: str) -> dict[str, str]:
    header = next(line for line in lines if line.startswith("| model |"))
    row = next(line for line in lines if line.startswith(f"| {name} "))
    return dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in row.split("|")]))


@pytest.mark.slow  # a subprocess that imports jax, jax2onnx and ORT, and times three contenders
def test_quick_run_of_a_plain_jax_model_prints_table_and_summary():
    proc = subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, "bench_zoo.py"), "--models", "tiny", "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("Machine: ") and "load average" in lines[0]
    row = _cells(lines, "tiny")
    assert row["library"] == "JAX"
    assert float(row["jax.jit ms"]) > 0 and float(row["ours/jit"]) > 0 and float(row["CPU: ours/jit"]) > 0
    top, with_bodies = row["nodes ours (with bodies)"].rstrip(")").split(" (")
    assert 0 < int(top) <= int(with_bodies)
    assert float(row["max err"]) < 1e-4  # our ONNX in ORT against jax.jit on the same inputs
    assert any(
        line.startswith("- models built: 1 of 1; converted and ran in ORT: jaxconv 1") for line in lines
    )


def test_missing_library_is_a_note_and_counts(monkeypatch):
    def fail(name):
        raise ImportError("No module named 'haiku'")

    monkeypatch.setattr(bench_zoo.zoo_models, "build", fail)
    args = bench_zoo.parse_args(["--models", "hk_mlp", "--quick"])
    row = bench_zoo.measure("hk_mlp", args)
    assert row.notes == ["build: ImportError: No module named 'haiku'"] and not row.ratio
    assert "| hk_mlp |  | – |" in bench_zoo.table([row])
    assert bench_zoo.summary([row]).startswith("- models built: 0 of 1;")


def test_summary_counts_and_medians():
    rows = [
        bench_zoo.ZooRow("a", "X", 1.0, {"ours": 0.8, "jax2onnx": 1.0}),
        bench_zoo.ZooRow("b", "X", 1.0, {"ours": 1.5, "jax2onnx": 1.0}, erf=True),
        bench_zoo.ZooRow("c", "X", 1.0, {"ours": 1.2}),
    ]
    text = bench_zoo.summary(rows)
    assert "converted and ran in ORT: jaxconv 3, jax2onnx 2; both 2" in text
    assert "median ours/jax.jit 1.20, jax2onnx/jax.jit 1.00" in text
    assert "ours faster on 1 of 2" in text
    assert "without the exact-GELU (erf) models: median ours/jax.jit 1.00 over 2" in text


def test_node_columns_give_top_level_and_with_bodies():
    row = bench_zoo.ZooRow("scan", "X", 1.0, {"ours": 0.5}, nodes={"ours": 13, "jax2onnx": 4},
                           nodes_all={"ours": 13, "jax2onnx": 31})
    cells = _cells(bench_zoo.table([row]).splitlines(), "scan")
    assert cells["nodes ours (with bodies)"] == "13 (13)"
    assert cells["nodes jax2onnx (with bodies)"] == "4 (31)"
    assert _cells(bench_zoo.table([bench_zoo.ZooRow("none")]).splitlines(), "none")["nodes ours (with bodies)"] == "–"


def test_unknown_model_is_a_usage_error():
    proc = subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, "bench_zoo.py"), "--models", "nope"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "unknown model(s) nope" in proc.stderr


def test_more_selects_the_second_battery_and_its_names_are_new():
    more = bench_zoo.zoo_models.MORE
    assert len(more) == 52 and len(set(more)) == len(more)
    assert not set(more) & set(bench_zoo.zoo_models.NAMES)
    assert bench_zoo.parse_args(["--more"]).models == list(more)
    assert bench_zoo.parse_args(["--more", "--models", "kh_fnet"]).models == ["kh_fnet"]
    assert bench_zoo.parse_args([]).models == list(bench_zoo.zoo_models.NAMES)


def test_served_selects_the_third_battery_of_new_names_with_masks_as_inputs():
    served = bench_zoo.zoo_models.SERVED
    assert len(set(served)) == len(served) == 28
    assert not set(served) & (set(bench_zoo.zoo_models.NAMES) | set(bench_zoo.zoo_models.MORE))
    assert bench_zoo.parse_args(["--served"]).models == list(served)
    assert bench_zoo.parse_args(["--served", "--models", "khp_gpt2"]).models == ["khp_gpt2"]
    import zoo_served

    ids = bench_zoo.zoo_models._ids()
    mask = zoo_served._mask(ids)
    assert mask.dtype == ids.dtype and mask[0].all() and mask[1].sum() == ids.shape[1] - zoo_served.PADDED


@pytest.mark.parametrize("flags", [["--more", "--served"], ["--served", "--training"], ["--more", "--training"]])
def test_two_batteries_together_is_a_usage_error(capsys, flags):
    with pytest.raises(SystemExit) as e:
        bench_zoo.parse_args(flags)
    assert e.value.code == 2 and "run them one at a time" in capsys.readouterr().err


def test_training_selects_the_fourth_battery_whose_updates_convert_to_jax_numbers():
    """An Optax update's leaves in, its new parameters and state out: jaxconv's ONNX gives jax.jit's numbers."""
    import jax

    import jaxconv
    from jaxconv.runtimes.onnxrt import OnnxRunner

    training = bench_zoo.zoo_models.TRAINING
    others = set(bench_zoo.zoo_models.NAMES) | set(bench_zoo.zoo_models.MORE) | set(bench_zoo.zoo_models.SERVED)
    assert len(set(training)) == len(training) and not set(training) & others
    assert bench_zoo.parse_args(["--training"]).models == list(training)
    m = bench_zoo.zoo_models.build("opt_adam_small")
    assert m.name == "opt_adam_small" and len(m.inputs) == 4 * 6 + 1  # gradients, two moments, parameters; count
    got = OnnxRunner(jaxconv.to_onnx(m.fn, *m.specs).SerializeToString()).run(list(m.inputs))
    want = jax.tree_util.tree_leaves(jax.jit(m.fn)(*m.inputs))
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, np.asarray(b), rtol=1e-6, atol=1e-9)


def test_symbolic_specs_name_the_leading_batch_and_the_length_of_integer_inputs():
    """--symbolic-batch names the leading batch dim only; --symbolic-length the sequence axis of integer
    ``[batch, SEQ]`` inputs (token ids, masks), not a float input's axis of that size."""
    import numpy as np

    class M:
        specs = ("i32[2,64]", "f32[64,2,8]", "f32[2]", "f32[]", "f32[2,64]")
        inputs = (np.zeros((2, 64), np.int32), np.zeros((64, 2, 8), np.float32), np.zeros(2, np.float32),
                  np.zeros((), np.float32), np.zeros((2, 64), np.float32))

    assert (bench_zoo.zoo_models.BATCH, bench_zoo.zoo_models.SEQ) == (2, 64)
    assert bench_zoo.symbolic_specs(M()) == ("i32[b,64]", "f32[64,2,8]", "f32[b]", "f32[]", "f32[b,64]")
    assert bench_zoo.symbolic_specs(M(), batch=False, length=True) == (
        "i32[2,s]", "f32[64,2,8]", "f32[2]", "f32[]", "f32[2,64]")
    assert bench_zoo.symbolic_specs(M(), length=True)[0] == "i32[b,s]"
    assert bench_zoo.parse_args(["--models", "tiny", "--symbolic-batch"]).symbolic_batch
    assert bench_zoo.parse_args(["--models", "tiny", "--symbolic-length"]).symbolic_length

