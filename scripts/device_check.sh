#!/usr/bin/env bash
# GPU check for the conformance report. Run from the repository root on the GPU machine
# (jax with CUDA, onnx, onnxruntime on the CPU; TensorFlow is not needed):
#
#   bash scripts/device_check.sh            # every case; JSON under $OUT
#   JOBS=4 BUDGET_S=300 bash scripts/device_check.sh -k model
#
# It runs the stablehlo target on the GPU and compares ONNX Runtime (CPU) outputs with jax.jit
# on the GPU, then writes $OUT/gpu_results.json. Merge it into the report with:
#
#   python -m conformance --gpu-results path/to/gpu_results.json
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/device-out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
# Wheels carried in .whl/ (the machine has no package index): onnx-ir >= 1.1 and the ONNX Runtime the
# report was measured with; see DEVELOPERS.md, "The GPU machine".
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/jaxconv-site .whl/*.whl
  export PYTHONPATH="/tmp/jaxconv-site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$ROOT/converter:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export XLA_PYTHON_CLIENT_PREALLOCATE=false
export TF_CPP_MIN_LOG_LEVEL=3

"$PY" - <<'PYEOF'
import importlib.util, jax
print("jax", jax.__version__, "devices:", jax.devices())
for mod in ("onnx", "onnxruntime", "ml_dtypes"):
    print(mod, "found" if importlib.util.find_spec(mod) else "MISSING")
PYEOF

"$PY" -m conformance.gpu_check --out "$OUT/gpu_results.json" --jobs "${JOBS:-4}" --budget-s "${BUDGET_S:-360}" "$@" \
  2>&1 | tee "$OUT/gpu_check.log"
