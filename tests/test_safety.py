"""Nothing of the user's is lost: output folders are replaced safely, Ctrl-C leaves no partial artifact."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from jaxconv.artifacts import MARKER_FILE, atomic_dir
from jaxconv.cli import main
from jaxconv.errors import UsageError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FN = "def f(x):\n    return x * 2 + 1\n"


def _cli(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(err: str, code: int, exit_code: int, *words: str) -> None:
    assert code == exit_code, err
    assert err.startswith("jaxconv: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for w in words:
        assert w in err, err


def _no_staging(folder) -> None:
    assert not [p for p in os.listdir(folder) if p.startswith(".jaxconv-")], os.listdir(folder)


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A working folder holding the user's function file and one more file of theirs."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fn.py").write_text(FN)
    (tmp_path / "notes.txt").write_text("mine")
    return tmp_path


def _to_cpp(out: str, *extra: str) -> list[str]:
    return ["to-cpp", "fn.py", "--specs", "f32[3]", "-o", out, "--no-check", *extra]


@pytest.mark.parametrize("out", [".", "./", "..", os.sep])
@pytest.mark.parametrize("overwrite", [False, True])
def test_working_folder_and_its_parents_are_always_refused(work, capsys, out, overwrite):
    before = sorted(os.listdir(work))
    code, _, err = _cli(_to_cpp(out, *(["--overwrite"] if overwrite else [])), capsys)
    _one_line_error(err, code, UsageError.exit_code, f"output folder {out} ", "working folder")
    assert sorted(os.listdir(work)) == before
    assert (work / "notes.txt").read_text() == "mine"


def test_folder_holding_the_input_file_is_refused_even_with_overwrite(work, capsys):
    sub = work / "proj"
    sub.mkdir()
    (sub / "model.py").write_text(FN)
    code, _, err = _cli(["to-cpp", "proj/model.py", "--specs", "f32[3]", "-o", "proj", "--no-check", "--overwrite"],
                        capsys)
    _one_line_error(err, code, UsageError.exit_code, "holds the input file")
    assert os.listdir(sub) == ["model.py"]


def test_home_folder_is_refused(work, capsys, monkeypatch):
    home = work / "home"
    (home / "deep").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    code, _, err = _cli(_to_cpp(str(home), "--overwrite"), capsys)
    _one_line_error(err, code, UsageError.exit_code, "home folder")
    assert os.path.isdir(home / "deep")


def test_folder_with_user_files_is_refused_without_overwrite(work, capsys):
    out = work / "proj"
    out.mkdir()
    (out / "keep.txt").write_text("old")
    code, _, err = _cli(_to_cpp("proj"), capsys)
    _one_line_error(err, code, UsageError.exit_code, "holds files jaxconv did not write (keep.txt)", "--overwrite")
    assert os.listdir(out) == ["keep.txt"]
    _no_staging(work)


def test_overwrite_replaces_a_foreign_folder_as_a_whole(work, capsys):
    out = work / "proj"
    out.mkdir()
    (out / "keep.txt").write_text("old")
    code, _, err = _cli(_to_cpp("proj", "--overwrite"), capsys)
    assert code == 0, err
    assert "keep.txt" not in os.listdir(out) and "model.onnx" in os.listdir(out)
    assert (work / "notes.txt").read_text() == "mine"
    _no_staging(work)


def test_new_and_empty_folders_are_written_with_a_marker(work, capsys):
    (work / "empty").mkdir()
    for out in ("new/nested", "empty"):
        code, _, err = _cli(_to_cpp(out), capsys)
        assert code == 0, err
        names = sorted(os.listdir(work / out))
        marker = json.loads((work / out / MARKER_FILE).read_text())
        assert marker["written_by"] == "jaxconv"
        assert sorted(marker["files"] + [MARKER_FILE]) == names
        assert "model.onnx" in names and "CMakeLists.txt" in names
    _no_staging(work)


def test_earlier_output_is_replaced_and_stale_files_go(work, capsys):
    assert _cli(_to_cpp("proj", "--embed"), capsys)[0] == 0
    assert "f_data.cc" in os.listdir(work / "proj")
    code, _, err = _cli(_to_cpp("proj"), capsys)  # a second run replaces jaxconv's own output without --overwrite
    assert code == 0, err
    assert "f_data.cc" not in os.listdir(work / "proj")
    _no_staging(work)


def test_project_written_before_the_marker_existed_is_replaced(work, capsys):
    assert _cli(_to_cpp("proj"), capsys)[0] == 0
    os.remove(work / "proj" / MARKER_FILE)
    code, _, err = _cli(_to_cpp("proj"), capsys)
    assert code == 0, err
    (work / "proj" / "notes.md").write_text("mine")
    os.remove(work / "proj" / MARKER_FILE)
    code, _, err = _cli(_to_cpp("proj"), capsys)
    _one_line_error(err, code, UsageError.exit_code, "did not write (", "notes.md")


def test_earlier_output_with_a_user_file_added_is_refused(work, capsys):
    assert _cli(_to_cpp("proj"), capsys)[0] == 0
    os.makedirs(work / "proj" / "build")
    (work / "proj" / "build" / "CMakeCache.txt").write_text("user's build")
    code, _, err = _cli(_to_cpp("proj"), capsys)
    _one_line_error(err, code, UsageError.exit_code, "did not write (build, build/CMakeCache.txt)")
    assert (work / "proj" / "build" / "CMakeCache.txt").read_text() == "user's build"


def test_output_file_that_is_the_input_is_refused(work, capsys):
    code, _, err = _cli(["to-onnx", "fn.py", "--specs", "f32[3]", "-o", "fn.py"], capsys)
    _one_line_error(err, code, UsageError.exit_code, "is the input file")
    assert (work / "fn.py").read_text() == FN


def test_swap_keeps_the_old_folder_when_the_rename_fails(tmp_path, monkeypatch):
    """If the new folder cannot be renamed in, the earlier output is put back."""
    out = tmp_path / "out"
    with atomic_dir(str(out)) as tmp:
        open(os.path.join(tmp, "a.txt"), "w").write("first")
    real_replace = os.replace
    calls = []

    def flaky(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", flaky)
    with pytest.raises(UsageError, match="No space left on device"):
        with atomic_dir(str(out)) as tmp:
            open(os.path.join(tmp, "a.txt"), "w").write("second")
    monkeypatch.setattr(os, "replace", real_replace)
    assert (out / "a.txt").read_text() == "first"
    assert os.listdir(tmp_path) == ["out"]


def test_symlinked_output_folder_is_replaced_behind_the_link(tmp_path):
    target = tmp_path / "real"
    with atomic_dir(str(target)) as tmp:
        open(os.path.join(tmp, "a.txt"), "w").write("first")
    link = tmp_path / "link"
    link.symlink_to(target)
    with atomic_dir(str(link)) as tmp:
        open(os.path.join(tmp, "b.txt"), "w").write("second")
    assert link.is_symlink() and sorted(os.listdir(link)) == [MARKER_FILE, "b.txt"]
    assert sorted(os.listdir(tmp_path)) == ["link", "real"]


def test_folder_that_gains_user_files_during_conversion_is_kept(tmp_path):
    out = tmp_path / "out"
    with atomic_dir(str(out)) as tmp:
        open(os.path.join(tmp, "a.txt"), "w").write("first")
    with pytest.raises(UsageError, match="did not write"):
        with atomic_dir(str(out)) as tmp:
            (out / "late.txt").write_text("user")
    assert (out / "late.txt").read_text() == "user" and (out / "a.txt").read_text() == "first"
    assert sorted(os.listdir(tmp_path)) == ["out"]


@pytest.mark.tf
def test_saved_model_refuses_a_user_folder_and_replaces_its_own(work, capsys):
    pytest.importorskip("tensorflow")
    out = work / "sm"
    out.mkdir()
    (out / "data.csv").write_text("1,2")
    args = ["to-saved-model", "fn.py", "--specs", "f32[3]", "-o", "sm", "--no-check"]
    code, _, err = _cli(args, capsys)
    _one_line_error(err, code, UsageError.exit_code, "did not write (data.csv)")
    assert os.listdir(out) == ["data.csv"]
    code, _, err = _cli([*args, "--overwrite"], capsys)
    assert code == 0, err
    assert "saved_model.pb" in os.listdir(out) and "data.csv" not in os.listdir(out)
    code, _, err = _cli(args, capsys)  # jaxconv's own output: replaced without --overwrite
    assert code == 0, err
    os.remove(out / MARKER_FILE)  # as written before the marker existed
    code, _, err = _cli(args, capsys)
    assert code == 0, err
    code, _, err = _cli(["to-saved-model", "fn.py", "--specs", "f32[3]", "-o", ".", "--overwrite"], capsys)
    _one_line_error(err, code, UsageError.exit_code, "working folder")
    _no_staging(work)


# ---------------------------------------------------------------- Ctrl-C

SLEEPY = textwrap.dedent("""\
    import os
    import time

    _calls = 0


    def f(x):
        global _calls
        _calls += 1
        if _calls == int(os.environ["SLEEP_ON_TRACE"]):
            open(os.environ["SLEEP_MARKER"], "w").close()
            time.sleep(120)
        return x * 2
""")


def _interrupt(tmp_path, args, trace_number, sig=signal.SIGINT):
    """Run the CLI in a new process, send ``sig`` while the function sleeps in its n-th trace."""
    (tmp_path / "sleepy.py").write_text(SLEEPY)
    marker = tmp_path / "sleeping"
    env = dict(os.environ, SLEEP_ON_TRACE=str(trace_number), SLEEP_MARKER=str(marker),
               PYTHONPATH=os.path.join(ROOT, "converter"))
    # Python raises KeyboardInterrupt on SIGINT unless the parent ignored the signal: make sure it does.
    entry = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
             "from jaxconv.cli import main; sys.exit(main(sys.argv[1:]))")
    proc = subprocess.Popen([sys.executable, "-c", entry, *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while not marker.exists():
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"the function never slept (rc {proc.returncode}): {err}")
        time.sleep(0.05)
    staging = [p for p in os.listdir(tmp_path) if p.startswith(".jaxconv-")]
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, err, staging


@pytest.mark.parametrize("command, trace_number, staged", [
    (["to-onnx", "sleepy.py", "--specs", "f32[b]", "-o", "m.onnx"], 1, False),
    (["to-stablehlo", "sleepy.py", "--specs", "f32[b]", "-o", "m"], 1, False),
    (["to-cpp", "sleepy.py", "--specs", "f32[b]", "-o", "proj"], 2, True),  # during the check, staging folder exists
])
def test_ctrl_c_interrupts_cleanly(tmp_path, command, trace_number, staged):
    code, err, staging = _interrupt(tmp_path, command, trace_number)
    assert code == 130, err
    assert err == "jaxconv: interrupted\n", err
    assert bool(staging) == staged, staging
    assert sorted(os.listdir(tmp_path)) == ["sleeping", "sleepy.py"]


def test_sigterm_cleans_up_like_ctrl_c(tmp_path):
    code, err, staging = _interrupt(tmp_path, ["to-cpp", "sleepy.py", "--specs", "f32[b]", "-o", "proj"], 2,
                                    signal.SIGTERM)
    assert code == 143, err
    assert err == "jaxconv: terminated\n", err
    assert staging
    assert sorted(os.listdir(tmp_path)) == ["sleeping", "sleepy.py"]


def test_sigterm_handler_is_restored_after_main(tmp_path, capsys):
    before = signal.getsignal(signal.SIGTERM)
    (tmp_path / "fn.py").write_text(FN)
    assert main(["to-onnx", str(tmp_path / "fn.py"), "--specs", "f32[3]", "-o", str(tmp_path / "m.onnx"),
                 "--no-check"]) == 0
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.tf
@pytest.mark.parametrize("command", [
    ["to-saved-model", "sleepy.py", "--specs", "f32[b]", "-o", "sm"],
    ["to-tflite", "sleepy.py", "--specs", "f32[4]", "-o", "m.tflite"],
])
def test_ctrl_c_inside_jax2tf_restores_stderr(tmp_path, command):
    """The second trace runs inside jax2tf, where TensorFlow's stderr is captured: the message must still show."""
    pytest.importorskip("tensorflow")
    code, err, _ = _interrupt(tmp_path, command, 2)
    assert code == 130, err
    assert err == "jaxconv: interrupted\n", err
    assert sorted(os.listdir(tmp_path)) == ["sleeping", "sleepy.py"]
