#!/usr/bin/env bash
# Create .venv and install jaxconv with everything the demo and the tests need. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.jaxconv-setup-stamp
want=$(cat setup.cfg pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[tf,test,models,bench]"
  echo "$want" > "$stamp"
fi
# Bytecode for jaxconv's own modules: an editable install leaves none, and with PYTHONDONTWRITEBYTECODE
# set every cold `jaxconv` process would compile its 48k lines again (0.4 s of a 2.5 s to-onnx call).
.venv/bin/python -m compileall -q converter/jaxconv conformance >/dev/null
# C++ toolchain for `jaxconv to-cpp` and its tests.
if ! command -v cmake >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1 || ! command -v pkg-config >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq cmake g++ pkg-config >/dev/null
  else
    echo "setup: cmake, g++ or pkg-config is missing; install them to build the C++ examples" >&2
  fi
fi
