"""scripts/bench_sessions.py: the session settings it builds and the table it prints."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(os.path.dirname(HERE), "scripts")
sys.path.insert(0, SCRIPTS)

import bench_sessions  # noqa: E402


def _entry(opts, key):
    return opts.get_session_config_entry(key)


def test_off_is_jaxconvs_session_options():
    opts = bench_sessions.options("off")
    assert _entry(opts, "session.intra_op.allow_spinning") == "0"
    assert _entry(opts, "session.inter_op.allow_spinning") == "0"
    from jaxconv.runtimes.onnxrt import default_threads

    assert opts.intra_op_num_threads == (default_threads() or 0)


def test_spin_parts_set_ort_config_entries():
    opts = bench_sessions.options("spin+stop+us100+2t")
    assert _entry(opts, "session.intra_op.allow_spinning") == "1"
    assert _entry(opts, "session.force_spinning_stop") == "1"
    assert _entry(opts, "session.intra_op.spin_duration_us") == "100"
    assert opts.intra_op_num_threads == 2
    assert bench_sessions.options("off+0t").intra_op_num_threads == 0
    assert _entry(bench_sessions.options("off+db4"), "session.dynamic_block_base") == "4"


@pytest.mark.parametrize("setting, message", [("spin+foo", "unknown part 'foo'"), ("off+spin", "exactly one"),
                                              ("stop", "exactly one"), ("off+db0", "unknown part 'db0'")])
def test_bad_settings_are_refused(setting, message):
    with pytest.raises(ValueError, match=message):
        bench_sessions.options(setting)


def test_quick_run_prints_one_row_per_setting():
    proc = subprocess.run([sys.executable, os.path.join(SCRIPTS, "bench_sessions.py"), "--models", "tiny",
                           "--idle-model", "tiny", "--settings", "off,spin+stop", "--iters", "3", "--idle", "2"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| setting |"))
    rows = [line.split("|") for line in lines[head + 2:head + 4]]
    assert [r[1].strip() for r in rows] == ["off", "spin+stop"]
    assert all(float(r[2]) > 0 and float(r[4]) > 0 for r in rows)


def test_bad_setting_is_a_usage_error():
    proc = subprocess.run([sys.executable, os.path.join(SCRIPTS, "bench_sessions.py"), "--settings", "spin+foo"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown part 'foo'" in proc.stderr
