"""Fast checks of the conformance suite: result records, strict limitations, test data loader, report."""

from __future__ import annotations

import ast
import os
import re
import sys

import jax.numpy as jnp
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from conformance import limitations, report, runner, testdata  # noqa: E402
from conformance.case import Case, arg, load_all  # noqa: E402
from conformance.results import CellResult  # noqa: E402
from conformance.targets import run_cell  # noqa: E402

TESTDATA = testdata.default_root()
needs_testdata = pytest.mark.skipif(not os.path.isdir(TESTDATA), reason=f"no StableHLO test data at {TESTDATA}")


def _fake(name: str, fn, *args) -> Case:
    return Case(name=name, fn=fn, args=tuple(args), family="add")


ADD = _fake("fake.add", lambda x, y: x * 2.0 + y, arg("f32[3,4]"), arg("f32[3,4]"))


def test_suite_is_large_and_covers_dtypes_symbolic_edges_models():
    cases = load_all()
    assert len(cases) >= 200
    assert sum(1 for c in cases.values() if "model" in c.tags and not c.symbolic) >= 10
    assert sum(1 for c in cases.values() if c.symbolic) >= 10
    assert sum(1 for c in cases.values() if "edge" in c.tags) >= 10
    dtypes = {a.long_dtype for c in cases.values() for a in c.args if hasattr(a, "long_dtype")}
    for dt in ("float32", "float16", "bfloat16", "float64", "int8", "int16", "int32", "int64", "uint8", "uint32", "bool"):
        assert dt in dtypes


def test_inputs_are_seeded_and_symbolic_cases_run_at_several_sizes():
    case = load_all()["sym.matmul"]
    a, b = case.inputs(case.size_sets()[0]), case.inputs(case.size_sets()[0])
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    shapes = {case.inputs(s)[0].shape for s in case.size_sets()}
    assert len(shapes) == len(case.size_sets()) >= 2


@pytest.mark.parametrize("target", ["stablehlo", "onnx"])
def test_passing_cell_records_errors(target):
    r = run_cell(ADD, target, "cpu", with_ops=target == "onnx")
    assert r.ok, r.error
    assert (r.stage, r.error) == ("", "")
    assert r.max_abs is not None and r.max_abs <= 1e-5 and r.seconds > 0
    if target == "onnx":
        assert "stablehlo.multiply" in r.ops and "stablehlo.add" in r.ops


@pytest.mark.parametrize("target", ["saved-model", "tflite"])
def test_tf_targets_pass_a_plain_cell(target):
    pytest.importorskip("tensorflow")
    r = run_cell(ADD, target, "cpu")
    assert (r.ok, r.stage, r.error) == (True, "", ""), r.error
    assert r.max_abs is not None and r.max_abs <= 1e-5


REFUSAL = "the module holds complex constants: ONNX Runtime has no complex tensor type"


@pytest.fixture
def onnx_refuses(monkeypatch):
    """The ONNX conversion fails with a multi-line error, whatever the converter learns later.

    The tests of failure records and limitation rows need a cell that fails the same way every time;
    a construct the converter does not support today (complex values) may be supported tomorrow.
    """
    from jaxconv.errors import UnsupportedError
    from jaxconv.onnx import convert

    def refuse(program, *args, **kwargs):
        raise UnsupportedError(REFUSAL + "\n" + "  the constant at line 3 of the module " * 10)

    monkeypatch.setattr(convert, "program_to_onnx", refuse)


def test_failing_cell_has_stage_and_one_line_error(onnx_refuses):
    r = run_cell(ADD, "onnx", "cpu")
    assert (r.ok, r.stage) == (False, "convert")
    assert r.error.startswith(REFUSAL) and "\n" not in r.error and len(r.error) <= 240, r.error


def test_empty_outputs_compare_equal():
    empty = _fake("fake.empty", lambda x: (x[2:2], jnp.exp(x[:, :0])), arg("f32[4,3]"))
    r = run_cell(empty, "stablehlo", "cpu")
    assert (r.ok, r.stage, r.error) == (True, "", "")


def test_wrong_numbers_stop_at_compare(monkeypatch):
    import conformance.targets as targets

    real = targets.reference
    monkeypatch.setattr(targets, "reference", lambda case, args, device: [o + 1.0 for o in real(case, args, device)])
    r = run_cell(ADD, "stablehlo", "cpu")
    assert (r.ok, r.stage) == (False, "compare")
    assert r.max_abs == pytest.approx(1.0)
    assert "max abs err 1" in r.error


def test_strict_limitations():
    cases = {ADD.name: ADD}
    cells = runner.expand([ADD], ["stablehlo"], ["cpu", "gpu"])
    table = {("fake.add", "stablehlo"): limitations.fails("run", "boom", "declared broken to test strictness")}
    results = runner.run_cells(cells, jobs=0, limitations=table, cases=cases, gpu=False)
    by_device = {r.device: r for r in results}
    assert by_device["cpu"].status == "xpass"
    assert by_device["cpu"].reason == "declared broken to test strictness"
    assert runner.unexpected(results) == [by_device["cpu"]]
    assert (by_device["gpu"].status, by_device["gpu"].reason) == ("skip", "no GPU")


REFUSED = _fake("fake.refused", lambda x: x * 2.0, arg("f32[3]"))


def _classified(case: Case, target: str, row: limitations.Limitation) -> CellResult:
    table = {(case.name, target, "cpu"): row}
    [result] = runner.run_cells(runner.expand([case], [target], ["cpu"]), jobs=0, limitations=table, cases={case.name: case})
    return result


def test_limited_cell_failing_as_its_row_says_is_xfail(onnx_refuses):
    r = _classified(REFUSED, "onnx", limitations.fails("convert", r"no complex tensor type", "complex values"))
    assert (r.stage, r.status, r.reason) == ("convert", "xfail", "complex values"), r.error
    assert runner.unexpected([r]) == []


@pytest.mark.parametrize("row,expected", [
    (limitations.fails("run", r"no complex tensor type", "complex values"), "expected run error matching"),
    (limitations.fails("convert", r"tfl\.add", "complex values"), "expected convert error matching /tfl\\.add/"),
    (limitations.differs("complex values", outputs=(0,), classes=("nan",)), "expected compare: output(s) 0"),
])
def test_limited_cell_failing_another_way_is_a_failure(onnx_refuses, row, expected):
    r = _classified(REFUSED, "onnx", row)
    assert r.status == "fail" and runner.unexpected([r]) == [r]
    assert r.reason.startswith("limited (complex values) but " + expected), r.reason
    assert r.reason.endswith(f"got convert: {r.error}")
    assert "limited (complex values)" in report.markdown(report.build([r], {}, None, targets=["onnx"], devices=["cpu"]))


def _off_by(monkeypatch, delta: float, output: int = 0):
    import conformance.targets as targets

    real = targets.reference

    def shifted(case, args, device):
        out = real(case, args, device)
        out[output] = out[output] + delta
        return out

    monkeypatch.setattr(targets, "reference", shifted)


TWO = _fake("fake.two", lambda x: (x * 2.0, x + 1.0), arg("f32[4]"))


@pytest.mark.parametrize("row,status", [
    (limitations.differs("off by one", outputs=(1,), classes=("value",)), "xfail"),
    (limitations.differs("off by one", classes=("value",), max_abs=1.5), "xfail"),
    (limitations.differs("off by one", outputs=(0,), classes=("value",)), "fail"),
    (limitations.differs("off by one", outputs=(1,), classes=("nan", "subnormal")), "fail"),
    (limitations.differs("off by one", outputs=(1,), classes=("value",), max_abs=0.5), "fail"),
    (limitations.fails("run", r"off", "off by one"), "fail"),
])
def test_compare_rows_name_the_outputs_and_element_classes(monkeypatch, row, status):
    _off_by(monkeypatch, 1.0, output=1)
    r = _classified(TWO, "stablehlo", row)
    assert r.stage == "compare"
    assert [(d["output"], d["classes"], d["count"]) for d in r.diffs] == [(1, ["value"], 4)]
    assert r.status == status, r.reason
    if status == "fail":
        assert "got" in r.reason and "limited (off by one) but expected" in r.reason


def test_element_classes():
    from conformance.elements import element_classes

    nan, inf = float("nan"), float("inf")
    e = np.array([1.0, nan, inf, -0.0, 0.0, 2.0, -inf, 1.0], np.float32)
    a = np.array([1.0, 1.0, -inf, 0.0, 1e-40, 2.5, -inf, nan], np.float32)
    assert element_classes(e, a).tolist() == ["", "nan", "inf", "signed-zero", "", "value", "", "nan"]
    assert element_classes(e, a, atol=0.0, rtol=0.0)[4] == "subnormal"
    assert element_classes(np.array([1, 2], np.int32), np.array([1, 3], np.int32)).tolist() == ["", "value"]
    assert element_classes(np.zeros(3), np.zeros(2)).tolist() == ["shape"]
    from conformance.elements import summarize

    same = element_classes(np.zeros(2, np.float32), np.zeros(2, np.float32))
    assert summarize(0, same, np.zeros(2, np.float32), np.zeros(2, np.float64), 0.0)["classes"] == ["dtype"]
    assert summarize(0, same, np.zeros(2, np.float32), np.zeros(2, np.float32), 0.0)["classes"] == ["other"]


SIGN = _fake("fake.sign_subnormal", lambda x: (jnp.sign(x), x * 3.0), arg("f32[4]", "values", values=(1e-40, -1e-40, 2.0, -0.5)))


class _UnflushedRunner:
    """An artifact that reads subnormal inputs as they are (numpy), as ONNX Runtime does on most CPUs."""

    def run(self, args):
        x = np.asarray(args[0], np.float32)
        return [np.sign(x), x * np.float32(3.0)]


def test_differences_that_flushing_subnormal_inputs_removes_are_subnormal(monkeypatch):
    import conformance.targets as targets
    from conformance.elements import flush_subnormals

    # jax.jit on the CPU reads subnormal inputs as zeros; the artifact does not: planted on both sides so that
    # the test does not depend on what this CPU's ONNX Runtime does with them.
    monkeypatch.setattr(targets, "_make_runner", lambda *args: _UnflushedRunner())
    monkeypatch.setattr(targets, "reference", lambda case, args, device: _UnflushedRunner().run(flush_subnormals(args)))
    r = run_cell(SIGN, "onnx", "cpu")
    assert r.stage == "compare"
    assert [(d["output"], d["classes"], d["count"]) for d in r.diffs] == [(0, ["subnormal"], 2)]
    assert "[2 subnormal element(s)]" in r.error


def test_limitation_rows_need_a_reason_and_an_expected_failure():
    with pytest.raises(ValueError, match="no reason"):
        limitations.validate({("x", "onnx"): limitations.fails("run", "boom", " ")})
    with pytest.raises(ValueError, match="must be"):
        limitations.validate({("x",): limitations.fails("run", "boom", "why")})
    with pytest.raises(ValueError, match="must name its expected failure"):
        limitations.validate({("x", "onnx"): "why"})
    with pytest.raises(ValueError, match="unknown stage"):
        limitations.validate({("x", "onnx"): limitations.fails("lowering", "boom", "why")})
    with pytest.raises(ValueError, match="give a pattern"):
        limitations.validate({("x", "onnx"): limitations.fails("convert", "", "why")})
    with pytest.raises(ValueError, match="bad pattern"):
        limitations.validate({("x", "onnx"): limitations.fails("convert", "(", "why")})
    with pytest.raises(ValueError, match="name the outputs or element classes"):
        limitations.validate({("x", "onnx"): limitations.differs("why")})
    with pytest.raises(ValueError, match="unknown element class"):
        limitations.validate({("x", "onnx"): limitations.differs("why", classes=("denormal",))})
    assert limitations.lookup("op.rng_bit_generator.rbg", "onnx", "gpu") is not None
    assert limitations.lookup("op.rng_bit_generator.rbg", "stablehlo", "cpu") is None


def test_every_limitation_row_limits_a_declared_case():
    import fnmatch

    names = list(load_all())
    stale = [k for k in limitations.LIMITATIONS if not any(fnmatch.fnmatchcase(n, k[0]) for n in names)]
    assert stale == []


def test_suggested_rows_are_valid_rows():
    failed = CellResult("a.b", "tflite", "cpu", stage="run", error="LiteRT failed while running /tmp/x-1/m.tflite: bad 42")
    line = limitations.suggest(failed)
    assert line.startswith('    ("a.b", "tflite", "cpu"): fails("run", r"')
    row = eval(line.strip().split(": ", 1)[1].rstrip(","), {"fails": limitations.fails})  # noqa: S307
    assert row.unexpected(failed) is None
    differing = CellResult("a.b", "onnx", "cpu", stage="compare", error="x",
                           diffs=[{"output": 1, "classes": ["nan"], "count": 1, "max_abs": 0.0}])
    assert 'differs("REASON", outputs=(1,), classes=(\'nan\',))' in limitations.suggest(differing)


def test_edge_values_keep_subnormals_in_their_own_cases():
    cases = load_all()
    for name, c in cases.items():
        if not name.startswith("edge.") or name.startswith("edge.subnormal.") or name == "edge.bf16_rounding":
            continue
        for a in c.args:
            x = a.generate(np.random.default_rng(0), {}) if hasattr(a, "generate") else None
            if x is not None and x.dtype.kind == "f":
                assert not np.any((x != 0) & (np.abs(x) < np.finfo(x.dtype).tiny)), name
    assert len([n for n in cases if n.startswith("edge.subnormal.")]) >= 5


def test_pool_survives_a_dying_worker():
    from conformance.pool import run_tasks

    got = {}
    run_tasks("test_conformance:_task", [1, -1, 2], jobs=1, timeout=lambda t: 60,
              on_result=lambda t, v: got.__setitem__(t, v), on_lost=lambda t, why: f"lost: {why}")
    assert got[1] == 2 and got[2] == 4
    assert got[-1].startswith("lost: worker process died")


def _task(x: int) -> int:
    if x < 0:
        os._exit(3)
    return 2 * x


def test_family_names():
    assert testdata.family_of("add_any_float32_2_float32_2.mlir") == "add_any"
    assert testdata.family_of("cumsum_float32_8_9.mlir") == "cumsum"
    assert testdata.family_of("iota_.mlir") == "iota"
    assert testdata.family_of("dynamic/argmax_0_dynamic.mlir") == "argmax"
    assert testdata.family_of("quantized/add_qi8.mlir") == "add"


@needs_testdata
def test_testdata_entry_takes_inputs_as_graph_inputs():
    from jaxconv.stablehlo.reader import read_module

    with open(os.path.join(TESTDATA, "add_any_float32_2_float32_2.mlir")) as f:
        module = read_module(f.read())
    entry = testdata.build_checked_entry(module)
    fn = module.functions[testdata.ENTRY]
    assert len(fn.body.args) == len(entry.inputs) == 2
    assert [a.type.shape for a in fn.body.args] == [x.shape for x in entry.inputs]
    model = testdata._lower(module, testdata.ENTRY)
    assert [i.name for i in model.graph.input] == ["input_0", "input_1"]
    from jaxconv.runtimes.onnxrt import OnnxRunner

    out = OnnxRunner(model.SerializeToString()).run(entry.inputs)
    check, index, expected = entry.checks[0]
    np.testing.assert_allclose(out[index], entry.inputs[0] + entry.inputs[1])
    np.testing.assert_allclose(out[index], expected)


@needs_testdata
@pytest.mark.parametrize("name,status,family", [
    ("abs_float32_20_20.mlir", "pass", "abs"), ("add_any_int32_2_int32_2.mlir", "pass", "add_any"),
    ("dynamic/add_dynamic.mlir", "pass", "add"), ("quantized/add_qi8.mlir", "pass", "add")])
def test_testdata_files(name, status, family):
    r = testdata.run_file(name)
    assert (r.status, r.family) == (status, family), f"{r.stage}: {r.error}"
    if status == "pass" and r.kind == "checked":
        assert r.checks == 1 and r.max_abs == 0.0


@needs_testdata
def test_testdata_wrong_expected_value_fails_compare(tmp_path):
    src = os.path.join(TESTDATA, "add_any_int32_2_int32_2.mlir")
    text = open(src).read()
    head, _, tail = text.partition("func.func private @expected()")
    tail = re.sub(r"dense<(\[?)(-?\d+)", lambda m: f"dense<{m.group(1)}{int(m.group(2)) + 1}", tail, count=1)
    (tmp_path / "x.mlir").write_text(head + "func.func private @expected()" + tail)
    r = testdata.run_file("x.mlir", root=str(tmp_path))
    assert (r.status, r.stage) == ("fail", "compare")
    assert "check.expect_eq" in r.error


def _dynamic_copy(tmp_path, name: str, edit=None) -> str:
    text = open(os.path.join(TESTDATA, name)).read()
    (tmp_path / "dynamic").mkdir(exist_ok=True)
    (tmp_path / "dynamic" / name).write_text(edit(text) if edit else text)
    return f"dynamic/{name}"


@needs_testdata
def test_dynamic_file_with_expectations_is_compared(tmp_path):
    rel = _dynamic_copy(tmp_path, "add_any_int32_2_int32_2.mlir")
    r = testdata.run_file(rel, root=str(tmp_path))
    assert (r.kind, r.status, r.checks, r.max_abs) == ("dynamic", "pass", 1, 0.0), f"{r.stage}: {r.error}"

    def wrong(text: str) -> str:
        head, _, tail = text.partition("func.func private @expected()")
        return head + "func.func private @expected()" + tail.replace("dense<[1, -4]>", "dense<[1, -5]>", 1)

    rel = _dynamic_copy(tmp_path, "add_any_int32_2_int32_2.mlir", wrong)
    r = testdata.run_file(rel, root=str(tmp_path))
    assert (r.status, r.stage) == ("fail", "compare") and "check.expect_eq" in r.error


@needs_testdata
def test_dynamic_file_without_expectations_is_compared_with_xla(monkeypatch):
    from conformance import xla_reference

    text = open(os.path.join(TESTDATA, "dynamic", "add_dynamic.mlir")).read()
    x, y = np.arange(12, dtype=np.float32).reshape(3, 4), np.ones((2, 3, 4), np.float32)
    [out] = xla_reference.run_with_xla(text, [np.array(3), x, y], 3)
    np.testing.assert_array_equal(out, x[None] + y)  # add_dynamic broadcasts its (?, 4) operand over the leading 2

    r = testdata.run_file("dynamic/add_dynamic.mlir")
    assert (r.status, r.reference, r.checks, r.max_abs) == ("pass", "xla", 1, 0.0), f"{r.stage}: {r.error}"

    real = xla_reference.reference
    monkeypatch.setattr(xla_reference, "reference", lambda *a: ([o + 1 for o in real(*a)[0]], ""))
    r = testdata.run_file("dynamic/add_dynamic.mlir")
    assert (r.status, r.stage) == ("fail", "compare") and "(vs XLA)" in r.error

    monkeypatch.setattr(xla_reference, "reference", lambda *a: (None, "RuntimeError: refinement failed"))
    r = testdata.run_file("dynamic/add_dynamic.mlir")
    assert (r.status, r.reference, r.error) == ("ran", "", "no reference: RuntimeError: refinement failed")


def test_ran_without_expectations_is_counted_apart_from_pass():
    files = [testdata.FileResult("a.mlir", "add", "checked", status="pass"),
             testdata.FileResult("dynamic/b.mlir", "add", "dynamic", status="ran"),
             testdata.FileResult("dynamic/c.mlir", "mul", "dynamic", status="ran"),
             testdata.FileResult("dynamic/d.mlir", "mul", "dynamic", status="fail", stage="run", error="boom")]
    s = testdata.summarize(files)
    assert s["total"] == {"pass": 1, "ran": 2, "fail": 1, "unsupported": 0}
    assert s["by_kind"]["dynamic"] == {"pass": 0, "ran": 2, "fail": 1, "unsupported": 0}
    assert s["by_family"]["mul"]["ran"] == 1 and s["top_reasons"] == [("run: boom", 1)]
    data = report.build([], {}, files, targets=["onnx"], devices=["cpu"])
    md = report.markdown(data)
    assert "**1 pass, 1 fail, 0 unsupported, 2 ran with no expectations to compare**" in md
    assert "| dynamic | 0 | 2 | 1 | 0 |" in md
    changed = report.build([], {}, [testdata.FileResult("dynamic/b.mlir", "add", "dynamic", status="pass")],
                           targets=["onnx"], devices=["cpu"])
    assert report.compare_reports(changed, data) == ["testdata dynamic/b.mlir: committed ran, now pass"]
    no_reference = testdata.FileResult("dynamic/b.mlir", "add", "dynamic", status="ran", error="no reference: why")
    assert report.compare_reports(report.build([], {}, [no_reference], targets=["onnx"], devices=["cpu"]), changed) == [
        "testdata dynamic/b.mlir: committed pass, now ran (no reference: why)"]


def test_report_gpu_column_and_check():
    cells = [CellResult("a", "onnx", "cpu", ok=True, status="pass"),
             CellResult("a", "onnx", "gpu", status="skip", reason="no GPU")]
    data = report.build(cells, {}, None, targets=["onnx"], devices=["cpu", "gpu"])
    assert data["gpu"] == f"not run: no GPU lent ({report.today()})"
    md = report.markdown(data)
    assert "not run: no GPU lent" in md and "| `a` |" in md
    assert report.compare_reports(data, data) == []
    changed = report.build([CellResult("a", "onnx", "cpu", stage="run", error="boom", status="fail"), cells[1]], {}, None,
                           targets=["onnx"], devices=["cpu", "gpu"])
    diffs = report.compare_reports(changed, data)
    assert len(diffs) == 1 and "committed pass, now fail" in diffs[0]
    page = report.html_page(data)
    assert "<table>" in page
    assert [line for line in page.splitlines() if line.startswith("<tr><th class='r'>a</th>")] == [
        "<tr><th class='r'>a</th><td class='c' style='background:%s'></td></tr>" % report._COLORS["pass"]]


def test_cli_check_fails_on_disagreement(tmp_path, capsys):
    from conformance.cli import main

    out = tmp_path / "rep"
    assert main(["-k", "op.add.f32", "--targets", "stablehlo", "--devices", "cpu", "--no-testdata", "-j", "0", "-q",
                 "--output", str(out)]) == 0
    assert (out / "REPORT.md").exists() and (out / "report.html").exists()
    assert main(["-k", "op.add.f32", "--targets", "stablehlo", "--devices", "cpu", "--no-testdata", "-j", "0", "-q",
                 "--check", "--output", str(out)]) == 0
    data = report.load(str(out / "report.json"))
    data["cells"][0]["status"] = "fail"
    report.write_json(data, str(out / "report.json"))
    assert main(["-k", "op.add.f32", "--targets", "stablehlo", "--devices", "cpu", "--no-testdata", "-j", "0", "-q",
                 "--check", "--output", str(out)]) == 1
    assert "committed fail, now pass" in capsys.readouterr().err


def test_converter_never_imports_conformance():
    pkg = os.path.join(ROOT, "converter", "jaxconv")
    for folder, _, files in os.walk(pkg):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            tree = ast.parse(open(path).read(), path)
            for node in ast.walk(tree):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                assert not any(m == "conformance" or m.startswith("conformance.") for m in mods), path



def _pretend_cpu_is_gpu(monkeypatch):
    import jax

    import conformance.targets as targets

    monkeypatch.setattr(targets, "gpu_device", lambda: jax.devices("cpu")[0])
    monkeypatch.setattr(targets, "_export_platform", lambda device: "cpu")


@pytest.mark.parametrize("target", ["stablehlo", "onnx"])
def test_gpu_cells_use_the_gpu_path(monkeypatch, target):
    _pretend_cpu_is_gpu(monkeypatch)
    r = run_cell(ADD, target, "gpu")
    assert (r.ok, r.device, r.status) == (True, "gpu", ""), r.error


def test_gpu_check_writes_results_the_report_merges(monkeypatch, tmp_path):
    import json

    from conformance import gpu_check

    _pretend_cpu_is_gpu(monkeypatch)
    out = tmp_path / "gpu.json"
    assert gpu_check.main(["--out", str(out), "-k", "op.add.f32", "-j", "0"]) == 0
    data = json.loads(out.read_text())
    assert {(c["case"], c["target"], c["status"]) for c in data["cells"]} == {
        ("op.add.f32", "stablehlo", "pass"), ("op.add.f32", "onnx", "pass")}
    cells = [CellResult("op.add.f32", "onnx", "gpu", status="skip", reason="no GPU")]
    merged = report.build(cells, {}, None, targets=["onnx"], devices=["gpu"], gpu_file=data)
    assert merged["gpu"].startswith("run on ")
    assert [c["status"] for c in merged["cells"]] == ["pass"]


def _tf32_like(monkeypatch, wrong_too: bool = False):
    """jax.jit "on the GPU" off by a TF32-sized error at the default precision, exact at HIGHEST
    (and off by 1 at both with ``wrong_too``: a difference the precision does not explain)."""
    import conformance.targets as targets

    real = targets.reference

    def reference(case, args, device, precision=None):
        out = real(case, args, device)
        shift = (0.0 if precision == "highest" else 1e-3) + (1.0 if wrong_too else 0.0)
        return [o + np.float32(shift) * (1 + np.abs(o)) for o in out]

    monkeypatch.setattr(targets, "reference", reference)


@pytest.mark.parametrize("wrong_too,classes,status", [(False, ["precision"], "xfail"), (True, ["value"], "fail")])
def test_gpu_differences_that_precision_highest_removes_are_precision(monkeypatch, wrong_too, classes, status):
    from conformance.results import classify

    _pretend_cpu_is_gpu(monkeypatch)
    _tf32_like(monkeypatch, wrong_too)
    r = run_cell(TWO, "onnx", "gpu")
    assert r.stage == "compare"
    assert [(d["output"], d["classes"]) for d in r.diffs] == [(0, classes), (1, classes)]
    row = limitations.lookup(TWO.name, "onnx", "gpu")
    assert row is not None and "TF32" in row.reason
    assert classify(r, row).status == status, r.reason
    on_cpu = run_cell(TWO, "onnx", "cpu")  # no second reference on the CPU: the same shift is a value difference
    assert [d["classes"] for d in on_cpu.diffs] == [["value"], ["value"]]


def test_a_gpu_cell_the_tf32_row_limits_may_pass_and_the_merge_classifies_again():
    from conformance.results import classify

    row = limitations.lookup("fake.two", "onnx", "gpu")
    assert classify(CellResult("fake.two", "onnx", "gpu", ok=True), row).status == "pass"
    strict = limitations.differs("strict", classes=("precision",))
    assert classify(CellResult("fake.two", "onnx", "gpu", ok=True), strict).status == "xpass"
    # A GPU run's raw cell, judged again by today's table when the report merges it.
    raw = CellResult("op.add.f32", "onnx", "gpu", stage="compare", error="1 output check(s) differ", status="fail",
                     diffs=[{"output": 0, "classes": ["precision"], "count": 3, "max_abs": 1e-3}])
    merged = report.build([CellResult("op.add.f32", "onnx", "gpu", status="skip", reason="no GPU"),
                           CellResult("op.add.f32", "tflite", "gpu", status="skip", reason="no GPU")], {}, None,
                          targets=["onnx", "tflite"], devices=["gpu"],
                          gpu_file={"device": "G", "targets": ["stablehlo", "onnx"], "cells": [raw.to_json()]})
    assert [(c["status"], "TF32" in c["reason"]) for c in merged["cells"]] == [("xfail", True), ("skip", False)]
    assert merged["cells"][1]["reason"] == "not in the GPU run (it ran stablehlo, onnx)"


def test_a_run_without_a_gpu_takes_the_gpu_column_from_the_committed_gpu_run(tmp_path):
    import json

    from conformance.cli import GPU_RESULTS, main

    committed = json.loads(open(GPU_RESULTS).read())
    [cell] = [c for c in committed["cells"] if (c["case"], c["target"]) == ("model.mlp", "onnx")]
    out = tmp_path / "rep"
    assert main(["-k", "model.mlp", "--targets", "onnx", "--devices", "cpu,gpu", "--no-testdata", "-j", "0", "-q",
                 "--output", str(out)]) == 0
    data = report.load(str(out / "report.json"))
    assert data["gpu"].startswith(f"run on {committed['device']}")
    gpu = {c["case"]: c for c in data["cells"] if c["device"] == "gpu"}
    assert gpu["model.mlp"]["max_abs"] == cell["max_abs"] and gpu["model.mlp"]["status"] in ("pass", "xfail")
