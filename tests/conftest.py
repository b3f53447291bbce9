"""Shared pytest set-up: import path, and the lowering coverage check at the end of a full run."""

from __future__ import annotations

import os
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for p in (os.path.join(ROOT, "converter"), HERE):
    if p not in sys.path:
        sys.path.insert(0, p)

from cli_support import user_file  # noqa: E402,F401  (a fixture for every test module)
from lowering_check import OPS_SEEN_ENV  # noqa: E402

# Ops the tests may meet that are deliberately not lowered, each with the reason.
KNOWN_UNSUPPORTED: dict[str, str] = {
}


@pytest.fixture
def x64():
    """jax_enable_x64 for the test only (64-bit dtypes; JAX narrows them otherwise)."""
    import jax

    with jax.enable_x64(True):
        yield


@pytest.fixture(autouse=True)
def _x64_left_alone():
    """No test, and nothing jaxconv does, leaves JAX's global jax_enable_x64 changed (jaxconv scopes it)."""
    import jax

    before = jax.config.jax_enable_x64
    yield
    after = jax.config.jax_enable_x64
    if after != before:
        jax.config.update("jax_enable_x64", before)
        pytest.fail(f"jax_enable_x64 was {before} before the test and {after} after it")


def pytest_configure(config):
    if not hasattr(config, "workerinput") and not os.environ.get(OPS_SEEN_ENV):
        os.environ[OPS_SEEN_ENV] = tempfile.mkdtemp(prefix="jaxconv-ops-seen-")


def _full_ops_run(session) -> bool:
    opt = session.config.option
    if getattr(opt, "keyword", "") or getattr(opt, "markexpr", "") or getattr(opt, "lf", False):
        return False
    args = [os.path.abspath(a.split("::")[0]) for a in session.config.args]
    ops_dir = os.path.join(HERE, "ops")
    return any(a in (HERE, ops_dir, ROOT) for a in args)


def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workerinput") or not _full_ops_run(session):
        return
    folder = os.environ.get(OPS_SEEN_ENV)
    seen: set[str] = set()
    if folder and os.path.isdir(folder):
        for name in os.listdir(folder):
            with open(os.path.join(folder, name)) as f:
                seen.update(line.strip() for line in f if line.strip())
    if not seen:
        return
    from jaxconv.onnx.registry import all_lowerings

    registered = set(all_lowerings())
    untested = sorted(registered - seen)
    unknown = sorted(seen - registered - set(KNOWN_UNSUPPORTED) - {"func.call"})
    problems = []
    if untested:
        problems.append("registered lowerings no test exercised: " + ", ".join(untested))
    if unknown:
        problems.append("ops seen in tests that are neither lowered nor in KNOWN_UNSUPPORTED: " + ", ".join(unknown))
    if problems:
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        for p in problems:
            if tr:
                tr.write_line(f"LOWERING COVERAGE: {p}", red=True)
        session.exitstatus = 1
