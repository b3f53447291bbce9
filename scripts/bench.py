"""How fast jaxconv's ONNX runs in ONNX Runtime, against jax.jit in the same process.

    .venv/bin/python scripts/bench.py [--models mlp,cnn] [--quick] [--skip-large] [--tflite]
                                      [--png bench.png] [--profile DIR]

For each model (scripts/bench_models.py) the contenders run alternately, one call each in turn, on
the same inputs: jax.jit; jaxconv's ONNX in ORT with jaxconv's session options (the thread count
the model records, else one per core; spinning during each run where the model records it, else off;
jax2onnx's ONNX gets the same spinning), with one thread, and with ORT's own defaults (spinning on, measured in a second
rotation beside jax.jit because spinning slows whatever runs next); jax2onnx's ONNX when jax2onnx
is installed; the TFLite interpreter with --tflite. Ratios are medians over jax.jit's median (below
1 means faster than jax.jit); compare ratios, not absolute times, across machines. The load average
is printed with every row because other work on the machine moves the figures. The "CPU:" columns
are process CPU time per call (every thread of the process) over jax.jit's, from the same rotation:
on a busy machine they move far less than the wall-time ratios, so they compare graph forms there.

Conversion is measured in cold processes: ``jaxconv to-onnx --no-check`` against ``jax.export``
alone on the same function, alternating, medians of ``--cli-rounds`` of each, with the converting
process's peak RSS.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "converter"))
sys.path.insert(0, HERE)

import bench_models  # noqa: E402
import count_nodes  # noqa: E402

from jaxconv import benchmark  # noqa: E402
from jaxconv.benchmark import alternate, machine, ort_call, ort_session  # noqa: E402,F401  (bench_sessions, bench_zoo)
from jaxconv.onnx.thread_count import read_record  # noqa: E402

CONTENDERS = ("ort", "ort 1t", "ort spin", "ort plain", "jax2onnx", "tflite")


@dataclass
class Row:
    """Everything measured for one model."""

    name: str
    title: str
    jax_ms: float = float("nan")
    ms: dict[str, float] = field(default_factory=dict)  # contender -> median ms
    ratio: dict[str, float] = field(default_factory=dict)  # contender -> median / jax.jit median
    cpu_ms: dict[str, float] = field(default_factory=dict)  # contender -> median process CPU ms per call
    nodes: int = 0  # top-level nodes
    peer_nodes: int | None = None
    nodes_all: int = 0  # Loop/Scan/If bodies included
    peer_nodes_all: int | None = None
    size_mb: float = 0.0
    weight_mb: float = 0.0
    to_onnx_s: float | None = None
    export_s: float | None = None
    rss_mb: float | None = None
    load: tuple[float, float] = (0.0, 0.0)  # 1-min load average before, after
    notes: list[str] = field(default_factory=list)


def jax2onnx_model(m: bench_models.Model) -> Any | None:
    """jax2onnx's ModelProto for the model, or None when jax2onnx is missing or fails."""
    try:
        import jax2onnx
    except ImportError:
        return None
    import jax

    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in m.inputs]
    return jax2onnx.to_onnx(m.fn, specs)


def tflite_call(m: bench_models.Model) -> Callable[[], Any]:
    import jaxconv
    from jaxconv.runtimes.tflite import TFLiteRunner

    runner = TFLiteRunner(bytes(jaxconv.to_tflite(m.fn, *m.concrete_specs, check=False)))
    return lambda: runner.run(list(m.inputs))


_HWM = """import atexit, os, sys
def _hwm():
    with open(os.environ["BENCH_HWM_FILE"], "w") as f:
        f.write(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1])
atexit.register(_hwm)
"""


def cold_conversion(m: bench_models.Model, workdir: str, rounds: int = 3) -> tuple[float, float, float]:
    """(to-onnx seconds, jax.export seconds, to-onnx peak RSS MB): the times are medians of ``rounds`` new
    processes each, the two alternating (one cold process takes 1-8 s, and a single one moves with the
    load); the RSS is the most any of them took."""
    src = os.path.join(workdir, f"bench_{m.name}.py")
    with open(src, "w") as f:
        f.write(f"import sys\nsys.path.insert(0, {HERE!r})\nimport bench_models\n"
                f"_m = bench_models.build({m.name!r})\n\ndef predict(*args):\n    return _m.fn(*args)\n")
    out = os.path.join(workdir, f"{m.name}.onnx")
    argv = ["jaxconv", "to-onnx", f"{src}:predict", "--no-check", "-o", out, "--specs", *m.specs]
    convert = _HWM + f"sys.argv = {argv!r}\nfrom jaxconv.cli import main\nsys.exit(main())\n"
    export = (f"import sys, jax\nsys.path.insert(0, {workdir!r})\nfrom jaxconv.specs import parse_spec, to_shape_dtype_structs\n"
              f"import bench_{m.name} as b\nspecs = to_shape_dtype_structs([parse_spec(s) for s in {list(m.specs)!r}])\n"
              f"jax.export.export(jax.jit(b.predict))(*specs).mlir_module_serialized\n")
    onnx_runs, export_runs = [], []
    for _ in range(rounds):
        onnx_runs.append(_timed([sys.executable, "-c", convert], workdir))
        export_runs.append(_timed([sys.executable, "-c", _HWM + export], workdir))
    return (statistics.median(t for t, _ in onnx_runs), statistics.median(t for t, _ in export_runs),
            max(rss for _, rss in onnx_runs))


def _timed(cmd: list[str], workdir: str) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB, the process's own VmHWM) of ``cmd`` run in a new process."""
    hwm = os.path.join(workdir, "hwm.txt")
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "converter"), "BENCH_HWM_FILE": hwm}
    with tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{cmd[0]} failed: {err.read().decode(errors='replace').strip()[-300:]}")
    with open(hwm) as f:
        return wall, int(f.read()) / 1024


def measure(m: bench_models.Model, args: argparse.Namespace, workdir: str) -> Row:
    import jax
    import onnx

    import jaxconv

    row = Row(m.name, m.title, weight_mb=m.weight_bytes / 2**20)
    load0 = os.getloadavg()[0]
    model = jaxconv.to_onnx(m.fn, *m.specs, check=False)
    row.nodes, row.nodes_all = len(model.graph.node), count_nodes.count(model.graph)
    large = model.ByteSize() > 2**31 - 2**24
    path = os.path.join(workdir, f"{m.name}.inproc.onnx")
    onnx.save(model, path, save_as_external_data=large)
    row.size_mb = sum(os.path.getsize(os.path.join(workdir, f)) for f in os.listdir(workdir) if f.startswith(f"{m.name}.inproc")) / 2**20
    source = path if large else model.SerializeToString()
    spins = read_record(source).spins([getattr(a, "shape", ()) for a in m.inputs])  # jax2onnx's graph: the spinning ours records
    del model

    jitted = jax.jit(m.fn)
    jin = [jax.device_put(a) for a in m.inputs]
    fns: dict[str, Callable[[], Any]] = {"jax": lambda: jax.block_until_ready(jitted(*jin))}
    fns["ort"] = ort_call(ort_session(source, None, None, inputs=m.inputs), m.inputs)
    fns["ort 1t"] = ort_call(ort_session(source, 1, None), m.inputs)
    if args.compare_rewrites:
        fns["ort plain"] = ort_call(ort_session(_without_rewrites(m).SerializeToString(), None, None), m.inputs)
    if not args.no_jax2onnx:
        try:
            peer = jax2onnx_model(m)
            if peer is not None:
                row.peer_nodes, row.peer_nodes_all = len(peer.graph.node), count_nodes.count(peer.graph)
                fns["jax2onnx"] = ort_call(ort_session(peer.SerializeToString(), None, None, spin_during_run=spins),
                                          m.inputs)
        except Exception as e:  # the peer failing is a result, not an error
            row.notes.append(f"jax2onnx: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}")
    if args.tflite:
        try:
            fns["tflite"] = tflite_call(m)
        except Exception as e:
            row.notes.append(f"tflite: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}")
    benchmark.warm_up(fns, row.notes)  # a contender that fails to run is dropped with a note
    iters, budget = (7, 2.0) if args.quick else (args.iters, args.budget)
    rotation = benchmark.rotate(fns, iters, budget * len(fns))
    row.jax_ms, row.ms, row.ratio, row.cpu_ms = rotation.jax_ms, rotation.ms, rotation.ratio, rotation.cpu_ms
    # ORT's own defaults (spinning on) beside jax.jit, in a rotation of their own
    row.ms["ort spin"], row.ratio["ort spin"] = benchmark.spin_ratio(fns["jax"], source, m.inputs, iters, budget * 2)
    if args.profile:
        profile(source, m, os.path.join(args.profile, m.name))
    if not args.no_cli:
        try:
            row.to_onnx_s, row.export_s, row.rss_mb = cold_conversion(m, workdir, args.cli_rounds)
        except RuntimeError as e:
            row.notes.append(str(e).splitlines()[0][:200])
    row.load = (load0, os.getloadavg()[0])
    return row


def _without_rewrites(m: bench_models.Model) -> Any:
    """The model converted with jaxconv.onnx.rewrites switched off (to measure what they gain)."""
    import jaxconv
    from jaxconv.onnx import rewrites

    real = rewrites.apply
    rewrites.apply = lambda model, opset: {}
    try:
        return jaxconv.to_onnx(m.fn, *m.specs, check=False)
    finally:
        rewrites.apply = real


def profile(source: Any, m: bench_models.Model, prefix: str, top: int = 8) -> None:
    """Write ORT's profile and optimized graph under ``prefix`` and print the dominant kernels."""
    trace, ranked = benchmark.kernel_profile(source, m.inputs, prefix, top=top)
    print(f"  profile {m.name} (1 thread, {trace}): " + ", ".join(f"{k} {v:.0%}" for k, v in ranked), file=sys.stderr)


_fmt = benchmark.fmt


def cpu_ratio(row: Row, contender: str) -> float | None:
    """The contender's process CPU time per call over jax.jit's, or None when either is missing."""
    jax_cpu, cpu = row.cpu_ms.get("jax"), row.cpu_ms.get(contender)
    return None if not jax_cpu or cpu is None else cpu / jax_cpu


def table(rows: list[Row]) -> str:
    """The Markdown table of ``rows``."""
    plain = any("ort plain" in r.ratio for r in rows)
    head = ("| model | jax.jit ms | ORT ms | ORT/jit | ORT 1t/jit | ORT spin/jit | " + ("no-rewrites/jit | " if plain else "") +
            "jax2onnx/jit | TFLite/jit | CPU: ORT/jit | CPU: ORT 1t/jit | CPU: jax2onnx/jit "
            "| nodes (with bodies) | jax2onnx nodes (with bodies) | ONNX MB | to-onnx s | jax.export s | to-onnx RSS MB | load |")
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in rows:
        cells = [r.title, _fmt(r.jax_ms), _fmt(r.ms.get("ort")), _fmt(r.ratio.get("ort")), _fmt(r.ratio.get("ort 1t")),
                 _fmt(r.ratio.get("ort spin")), *([_fmt(r.ratio.get("ort plain"))] if plain else []),
                 _fmt(r.ratio.get("jax2onnx")), _fmt(r.ratio.get("tflite")), _fmt(cpu_ratio(r, "ort")), _fmt(cpu_ratio(r, "ort 1t")),
                 _fmt(cpu_ratio(r, "jax2onnx")), f"{r.nodes} ({r.nodes_all})",
                 "–" if r.peer_nodes is None else f"{r.peer_nodes} ({r.peer_nodes_all})",
                 _fmt(r.size_mb, ".1f"), _fmt(r.to_onnx_s), _fmt(r.export_s), _fmt(r.rss_mb, ".0f"),
                 f"{r.load[0]:.1f}→{r.load[1]:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def chart(rows: list[Row], path: str) -> None:
    """A bar chart of the ratios to jax.jit, one group per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [c for c in CONTENDERS if any(c in r.ratio for r in rows)]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(rows)), 4.0))
    width = 0.8 / max(1, len(shown))
    for k, c in enumerate(shown):
        xs = [i + (k - (len(shown) - 1) / 2) * width for i in range(len(rows))]
        ax.bar(xs, [r.ratio.get(c, 0.0) for r in rows], width, label=c)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(0.9, color="gray", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(rows)), [r.name for r in rows])
    ax.set_ylabel("median time / jax.jit (lower is faster)")
    ax.set_title(f"ONNX Runtime vs jax.jit, {os.cpu_count()} CPUs")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(bench_models.NAMES),
                        help=f"comma-separated, from {', '.join(bench_models.NAMES + bench_models.EXTRA)}")
    parser.add_argument("--quick", action="store_true", help="few iterations, no cold-process conversion timing")
    parser.add_argument("--skip-large", action="store_true", help="skip mlp_large (1.4 GB of weights)")
    parser.add_argument("--tflite", action="store_true", help="also time the TFLite interpreter")
    parser.add_argument("--no-jax2onnx", action="store_true", help="do not measure jax2onnx even when installed")
    parser.add_argument("--compare-rewrites", action="store_true",
                        help="also time jaxconv's ONNX converted without its ORT rewrites (onnx/rewrites/)")
    parser.add_argument("--no-cli", action="store_true", help="skip the cold-process conversion timing")
    parser.add_argument("--cli-rounds", type=int, default=3,
                        help="cold to-onnx and jax.export processes each, alternating; medians (default 3)")
    parser.add_argument("--iters", type=int, default=100, help="rotations at most (default 100)")
    parser.add_argument("--budget", type=float, default=3.0, help="seconds per contender per model, about (default 3)")
    parser.add_argument("--png", default="bench.png", help="chart path (default bench.png; '' for none)")
    parser.add_argument("--profile", metavar="DIR", help="write ORT profiles and optimized graphs to DIR")
    args = parser.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    unknown = [m for m in args.models if m not in bench_models.BUILDERS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(bench_models.NAMES + bench_models.EXTRA)}")
    if args.cli_rounds < 1:
        parser.error("--cli-rounds must be at least 1")
    if args.skip_large or args.quick and "mlp_large" in args.models and len(args.models) > 1:
        args.models = [m for m in args.models if m != "mlp_large"]
    args.no_cli = args.no_cli or args.quick
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(f"Machine: {machine()}")
    print(f"Command: scripts/bench.py {' '.join(sys.argv[1:] if argv is None else argv)}\n", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for name in args.models:
            m = bench_models.build(name)
            print(f"  {name} ...", file=sys.stderr, flush=True)
            sub = os.path.join(workdir, name)
            os.makedirs(sub)
            rows.append(measure(m, args, sub))
            del m
    print(table(rows))
    notes = [f"- {r.name}: {n}" for r in rows for n in r.notes]
    if notes:
        print("\n" + "\n".join(notes))
    if args.png:
        chart(rows, args.png)
        print(f"\nchart: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
