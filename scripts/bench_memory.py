"""Peak memory of a cold ``jaxconv to-onnx`` on an MLP whose weights are closed over by the function.

Closed-over weights become initializers in the ONNX model, so every copy the conversion makes of
them shows in the converting process's peak RSS (VmHWM). The figures printed are that peak divided
by the weight bytes, and what converting adds to the peak of a process that only imports the same
modules and builds the model (jax and the libraries take about 200 MB of their own).

    python scripts/bench_memory.py --mb 200 800 [--check] [--weights jax]

``--weights jax`` closes over jax arrays (as Flax and Haiku parameters are) instead of numpy
arrays. The check's jax.jit reference takes jax arrays as they are. A numpy array whose data is
not 64-byte aligned (numpy's big arrays are not) jax would copy whole; the reference borrows it
instead (``jaxconv.jit_borrow``: a zero-copy view of all but its first few elements, rebuilt
inside the compiled program one weight at a time), so with numpy weights too the check adds a
fraction of the weights: ``--mb 1372 --check`` 2,991 MB (2.18x) before, 1,969 MB (1.44x) with it,
against 1,868 MB (1.36x) for building the model alone.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_MODEL = """import jax.numpy as jnp
import numpy as np

_LAYERS = 4
_WIDTH = {width}
_rng = np.random.default_rng(0)
_W = [(_rng.standard_normal((_WIDTH, _WIDTH), dtype=np.float32) / _WIDTH ** 0.5) for _ in range(_LAYERS)]


def predict(x):
    for w in _W:
        x = jnp.tanh(x @ w)
    return x
"""

_JAX_WEIGHTS = """
import jax

for _i in range(_LAYERS):  # one layer at a time: a numpy layer goes as soon as its jax copy is made
    _W[_i] = jax.block_until_ready(jax.device_put(_W[_i]))
"""

_HWM = """import atexit, os, sys
def _hwm():
    with open(os.environ["BENCH_HWM_FILE"], "w") as f:
        f.write(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1])
atexit.register(_hwm)
"""


def width_for(mb: float, layers: int = 4) -> int:
    """Width of a square float32 layer so that ``layers`` of them weigh about ``mb`` MiB."""
    return max(8, int((mb * 2**20 / 4 / layers) ** 0.5))


def peak_rss(mb: float, check: bool, workdir: str, convert: bool = True,
             weights: str = "numpy") -> tuple[int, int]:
    """(weight bytes, peak RSS bytes) of one cold ``jaxconv to-onnx`` process; without ``convert``, of a
    process that imports the model and jaxconv's ONNX modules and stops there. ``weights``: ``numpy``
    or ``jax`` arrays closed over."""
    width = width_for(mb)
    src = os.path.join(workdir, f"mlp_{width}.py")
    with open(src, "w") as f:
        model = _MODEL.format(width=width)
        f.write(model.replace("\n\ndef predict", _JAX_WEIGHTS + "\n\ndef predict") if weights == "jax" else model)
    out = os.path.join(workdir, f"mlp_{width}.onnx")
    argv = ["jaxconv", "to-onnx", f"{src}:predict", "-o", out, "--specs", f"f32[8,{width}]"]
    if not check:
        argv.append("--no-check")
    hwm = os.path.join(workdir, "hwm.txt")
    code = _HWM + f"sys.argv = {argv!r}\nfrom jaxconv.cli import main\nsys.exit(main())\n"
    if not convert:
        code = _HWM + f"sys.path.insert(0, {workdir!r})\nimport mlp_{width}\nimport jaxconv.api, jaxconv.onnx.convert\n"
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "converter"), "BENCH_HWM_FILE": hwm}
    proc = subprocess.run([sys.executable, "-c", code], cwd=workdir, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"to-onnx failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    with open(hwm) as f:
        rss = int(f.read()) * 1024
    for name in os.listdir(workdir):
        if name.startswith(f"mlp_{width}.onnx"):
            os.remove(os.path.join(workdir, name))
    return 4 * 4 * width * width, rss


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, nargs="+", default=[200.0], help="weight MiB of each model (default 200)")
    parser.add_argument("--check", action="store_true", help="also run the check against jax.jit (default --no-check)")
    parser.add_argument("--weights", choices=("numpy", "jax"), default="numpy",
                        help="arrays the function closes over (default numpy)")
    args = parser.parse_args(argv)
    print(f"closed-over weights: {args.weights} arrays")
    print("| weights MB | check | peak RSS MB | RSS / weights | model alone MB | added / weights |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="jaxconv-mem-") as workdir:
        for mb in args.mb:
            weights, rss = peak_rss(mb, args.check, workdir, weights=args.weights)
            _, alone = peak_rss(mb, args.check, workdir, convert=False, weights=args.weights)
            print(f"| {weights / 2**20:.0f} | {'yes' if args.check else 'no'} | {rss / 2**20:.0f} | {rss / weights:.2f} "
                  f"| {alone / 2**20:.0f} | {(rss - alone) / weights:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
