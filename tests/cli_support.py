"""Helpers for tests that drive the CLI in-process: a user-file factory and a runner."""

from __future__ import annotations

import textwrap

import pytest

from jaxconv.cli import main


@pytest.fixture
def user_file(tmp_path):
    """A factory writing dedented source text to ``tmp_path/name`` and returning its path."""
    def make(text, name="fn.py"):
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return str(path)
    return make


def run_cli(args, capsys):
    """``jaxconv ARGS`` in this process: (exit code, stdout, stderr)."""
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err
