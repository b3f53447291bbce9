#!/usr/bin/env bash
# Set up .venv, then convert the examples to all four targets and print a comparison table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python scripts/demo.py "$@"
