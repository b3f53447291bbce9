#!/usr/bin/env bash
# Prepare ONNX Runtime's headers and library for building jaxconv's C++ projects, in
# <repo>/.deps/onnxruntime (or DEST): what `jaxconv cpp-runtime DEST` does, for a checkout.
# See converter/jaxconv/cpp/get_onnxruntime.sh for the sources and environment variables.
# Usage: scripts/get_onnxruntime.sh [DEST]     Prints DEST on the last line of stdout.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -z "${PYTHON:-}" && -x "$repo/.venv/bin/python" ]]; then export PYTHON=$repo/.venv/bin/python; fi
exec bash "$repo/converter/jaxconv/cpp/get_onnxruntime.sh" "${1:-$repo/.deps/onnxruntime}"
