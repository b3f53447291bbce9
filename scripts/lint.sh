#!/usr/bin/env bash
# Lint (ruff: pyflakes, pycodestyle errors and warnings, import order) and types (mypy on converter/),
# configured in pyproject.toml; no tracked file over 2 MiB (check_sizes.sh). Any finding fails.
# `ruff check --fix .` repairs import order and unused imports.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/check_sizes.sh
.venv/bin/ruff check .
.venv/bin/mypy
