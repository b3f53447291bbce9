#!/usr/bin/env bash
# Set up .venv, then run lint and type checks, the test suite and the conformance check.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/lint.sh
export JAXCONV_TEST=1
set +e
.venv/bin/python -m pytest -n 2 -p no:cacheprovider "$@" tests
code=$?
set -e
if [ "$code" = 5 ]; then
  echo "test.sh: pytest collected no tests" >&2
  exit 1
fi
if [ "$code" != 0 ]; then
  exit "$code"
fi
if [ $# = 0 ] && [ -f conformance/__main__.py ]; then
  .venv/bin/python -m conformance --check -j 2
fi
if [ $# = 0 ] && [ -f scripts/fuzz.py ]; then
  .venv/bin/python scripts/fuzz.py --count 80 --seed 1 --time-budget 30 -j 2 -q
fi
