"""Differential fuzzing: random JAX programs through jaxconv, compared with jax.jit.

    .venv/bin/python scripts/fuzz.py --count 80 --seed 1 --time-budget 30 -j 2   # what CI runs
    .venv/bin/python scripts/fuzz.py --count 10000 --seed 7 -j 2 -o /tmp/fuzz     # a long run
    .venv/bin/python scripts/fuzz.py --targets onnx,tflite,saved-model --count 50

Each program (2-8 lax/jnp ops over every dtype, with control flow) is converted, run on a
normal, an edge-value and a mixed input set, and compared element by element with jax.jit.
Mismatches and converter crashes are minimised into standalone reproducers under the output
folder (default fuzz-out/) and classified op/dtype/kind, silent (jaxconv's own check passed the
artifact) or caught. Known limitations (conformance/fuzz/known.py) are counted apart; the exit
status is 1 when any other mismatch or a crash was found.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (ROOT, os.path.join(ROOT, "converter")):
    if path not in sys.path:
        sys.path.insert(0, path)

from conformance.fuzz.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
