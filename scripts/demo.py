"""Convert every function in examples/ to StableHLO, SavedModel, TFLite and ONNX; compare each with jax.jit."""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "converter"))

# example file -> specs (one per argument)
EXAMPLES = {
    "mlp.py": ['{"w1": "f32[784,64]", "b1": "f32[64]", "w2": "f32[64,10]", "b2": "f32[10]"}', "f32[b,784]"],
    "cnn.py": ['{"conv1": "f32[3,3,1,8]", "conv2": "f32[3,3,8,16]", "dense": "f32[784,10]", "bias": "f32[10]"}',
               "f32[b,28,28,1]"],
}
TARGETS = ("stablehlo", "saved-model", "tflite", "onnx")


def convert(target: str, program, out: str):
    import jaxconv

    reports: list = []
    if target == "stablehlo":
        jaxconv.to_stablehlo(program, path=out, report_to=reports)
        path = out + ".jaxexport"
    elif target == "saved-model":
        jaxconv.to_saved_model(program, path=out + "_saved_model", report_to=reports)
        path = out + "_saved_model"
    elif target == "tflite":
        jaxconv.to_tflite(program, path=out + ".tflite", report_to=reports)
        path = out + ".tflite"
    else:
        jaxconv.to_onnx(program, path=out + ".onnx", report_to=reports)
        path = out + ".onnx"
    return path, reports


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-o", "--out", default=os.path.join(ROOT, "demo-out"), help="output folder")
    parser.add_argument("--targets", default=",".join(TARGETS))
    args = parser.parse_args()
    from jaxconv.errors import JaxconvError
    from jaxconv.loading import load_function
    from jaxconv.program import trace

    os.makedirs(args.out, exist_ok=True)
    rows = []
    failures = 0
    for file, specs in EXAMPLES.items():
        path = os.path.join(ROOT, "examples", file)
        if not os.path.exists(path):
            continue
        loaded = load_function(path)
        program = trace(loaded.fn, specs, name=loaded.name, param_names=loaded.param_names, source_path=path)
        for target in args.targets.split(","):
            start = time.perf_counter()
            base = os.path.join(args.out, os.path.splitext(file)[0])
            try:
                artifact, reports = convert(target, program, base)
                worst = max((r.max_abs for rep in reports for r in rep.rows), default=0.0)
                status = _status(reports)
                rows.append((file, target, status, f"{worst:.2e}", f"{time.perf_counter() - start:.1f}s", os.path.relpath(artifact, ROOT)))
            except JaxconvError as e:
                failures += 1
                rows.append((file, target, "FAILED", "-", f"{time.perf_counter() - start:.1f}s", str(e)[:80]))
    head = ("example", "target", "vs jax.jit", "max abs err", "time", "artifact")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    print()
    for r in [head] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    return 1 if failures else 0


def _status(reports) -> str:
    """ok, MISMATCH, or ok with what the check could not confirm (undecided or edge-value differences)."""
    if not all(rep.ok for rep in reports):
        return "MISMATCH"
    notes = []
    if any(rep.undecided for rep in reports):
        notes.append("undecided on edge values")
    if any(rep.edge_differences for rep in reports):
        notes.append("differs on edge values")
    return f"ok ({', '.join(notes)})" if notes else "ok"


if __name__ == "__main__":
    sys.exit(main())
