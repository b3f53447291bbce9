#!/usr/bin/env bash
# Lint (ruff: pyflakes, pycodestyle errors and warnings, import order) and types (mypy on converter/),
# configured in pyproject.toml. Any finding fails. `ruff check --fix .` repairs import order and unused imports.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
.venv/bin/mypy
