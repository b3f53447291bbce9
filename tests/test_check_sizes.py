"""scripts/check_sizes.sh: lint fails on a tracked file larger than the repository keeps."""

from __future__ import annotations

import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "check_sizes.sh")


def _run(limit_kib: int | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("JAXCONV_MAX_FILE_KIB", None)
    if limit_kib is not None:
        env["JAXCONV_MAX_FILE_KIB"] = str(limit_kib)
    return subprocess.run(["bash", SCRIPT], capture_output=True, text=True, env=env, cwd=ROOT)


def _tracked_kib() -> dict[str, int]:
    names = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT, check=True).stdout.split()
    return {n: os.path.getsize(os.path.join(ROOT, n)) // 1024 for n in names if os.path.exists(os.path.join(ROOT, n))}


@pytest.mark.skipif(not os.path.exists(os.path.join(ROOT, ".git")), reason="not a git checkout")
def test_the_repository_keeps_no_big_file_and_the_check_names_one():
    assert _run(None).returncode == 0
    largest, kib = max(_tracked_kib().items(), key=lambda item: item[1])
    r = _run(max(kib - 8, 1))  # a limit just under the largest tracked file
    assert r.returncode == 1
    assert largest in r.stderr and "over" in r.stderr
