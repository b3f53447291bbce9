"""Start-up cost of the CLI, as wall-clock seconds and as a ratio to a bare Python start in the same run.

Also reports which heavy packages each command imported: `--help`, `to-stablehlo`, `to-onnx` and
`check` of an ONNX file must never import TensorFlow.

    .venv/bin/python scripts/bench_startup.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MLP = os.path.join(ROOT, "examples", "mlp.py")
SPECS = ['{"w1":"f32[784,64]","b1":"f32[64]","w2":"f32[64,10]","b2":"f32[10]"}', "f32[b,784]"]
PROBE = textwrap.dedent("""
    import sys, time
    t = time.perf_counter()
    from jaxconv.cli import main
    try:
        code = main(sys.argv[1:])
    except SystemExit as e:
        code = e.code or 0
    heavy = sorted({m.split('.')[0] for m in sys.modules} & {"tensorflow", "tf2onnx", "keras", "jax", "onnxruntime"})
    print("HEAVY=" + ",".join(heavy), file=sys.stderr)
    sys.exit(code)
""")


def timed(cmd: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    result = subprocess.run(cmd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"command failed: {' '.join(cmd)}\n{result.stderr[-1000:]}")
    heavy = next((line[6:] for line in result.stderr.splitlines() if line.startswith("HEAVY=")), "")
    return elapsed, heavy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp()
    onnx_path = os.path.join(tmp, "mlp.onnx")
    py = [sys.executable, "-c", PROBE]
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "jaxconv --help": py + ["--help"],
        "jaxconv to-stablehlo": py + ["to-stablehlo", MLP, "--specs", *SPECS, "-o", os.path.join(tmp, "mlp")],
        "jaxconv to-onnx": py + ["to-onnx", MLP, "--specs", *SPECS, "-o", onnx_path],
        "jaxconv check (onnx)": py + ["check", onnx_path, MLP, "--specs", *SPECS],
    }
    results = {}
    for name, cmd in commands.items():
        runs = [timed(cmd) for _ in range(args.repeat if name in ("python -c pass", "jaxconv --help") else 2)]
        results[name] = (statistics.median(r[0] for r in runs), runs[0][1])
    base = results["python -c pass"][0]
    print(f"{'command':<24} {'median s':>9} {'x python':>9}  heavy imports")
    for name, (secs, heavy) in results.items():
        print(f"{name:<24} {secs:>9.3f} {secs / base:>9.1f}  {heavy or '-'}")
    bad = [n for n, (_, heavy) in results.items() if "tensorflow" in heavy or "tf2onnx" in heavy]
    slow_help = results["jaxconv --help"][0] >= 1.0
    if bad:
        print(f"FAIL: TensorFlow imported by {', '.join(bad)}")
    if slow_help:
        print("FAIL: jaxconv --help took 1 s or more")
    return 1 if bad or slow_help else 0


if __name__ == "__main__":
    sys.exit(main())
