"""ONNX Runtime session settings measured both ways: the model's own speed, and what it costs the next caller.

    .venv/bin/python scripts/bench_sessions.py [--models transformer,bert] [--settings off,spin,spin+stop]
                                               [--iters 15] [--idle 10]

For each setting (below) and model (scripts/bench_models.py) it prints:

- ``ORT/jit``: jaxconv's ONNX in ORT with that setting over ``jax.jit``, alternating in a rotation of
  their own (a spinning pool would slow any third contender);
- ``jit after``: one ``jax.jit`` call of the MLP 4x1024 right after ``--idle`` sessions with that setting
  each ran once (the case where ORT's pool keeps spinning after its run and takes the CPU from the
  caller), beside ``jit before``, the same call before those runs.

Settings, joined with ``+``: ``off`` (no spinning: jaxconv's for long calls, ``session_options(spinning=False)``), ``spin``
(ORT's default), ``stop`` (``session.force_spinning_stop``: spin during a run, stop after it),
``usN`` (``session.intra_op.spin_duration_us``: spin N microseconds before sleeping), ``Nt``
(N intra-op threads; without it, one per physical core, set explicitly; ``0t`` lets ORT pick the
count, and then ORT pins its threads to cores), ``dbN`` (``session.dynamic_block_base``: a parallel
loop's blocks shrink as it runs, from N-th parts of the work).
The load average is printed with every row: compare settings from one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "converter"))
sys.path.insert(0, HERE)

import bench  # noqa: E402
import bench_models  # noqa: E402

DEFAULT_SETTINGS = "off,off+0t,spin,spin+stop,spin+us100,spin+us1000"


def options(setting: str):
    """ORT SessionOptions for a setting string such as ``spin+us100`` (see the module docstring).

    Raises:
        ValueError: an unknown part.
    """
    from jaxconv.runtimes.onnxrt import session_options

    parts = setting.split("+")
    threads = next((int(p[:-1]) for p in parts if p.endswith("t") and p[:-1].isdigit()), None)
    if ("off" in parts) == ("spin" in parts):
        raise ValueError(f"setting {setting!r}: name exactly one of 'off' and 'spin'")
    opts = session_options(threads, spinning="spin" in parts)
    for p in parts:
        if p == "stop":
            opts.add_session_config_entry("session.force_spinning_stop", "1")
        elif p.startswith("us") and p[2:].isdigit():
            opts.add_session_config_entry("session.intra_op.spin_duration_us", p[2:])
        elif p.startswith("db") and p[2:].isdigit() and int(p[2:]) > 0:
            opts.add_session_config_entry("session.dynamic_block_base", p[2:])
        elif p not in ("off", "spin") and not (p.endswith("t") and p[:-1].isdigit()):
            raise ValueError(f"setting {setting!r}: unknown part {p!r} (off, spin, stop, usN, dbN, Nt)")
    return opts


def _session(model: Any, setting: str):
    import onnxruntime as ort

    return ort.InferenceSession(model, options(setting), providers=["CPUExecutionProvider"])


def _jit_call(m: bench_models.Model) -> Callable[[], Any]:
    import jax

    jitted = jax.jit(m.fn)
    args = [jax.device_put(a) for a in m.inputs]
    call = lambda: jax.block_until_ready(jitted(*args))  # noqa: E731
    call()
    return call


def after_idle_sessions(setting: str, source: bytes, m: bench_models.Model, call: Callable[[], Any],
                        count: int, reps: int) -> tuple[float, float]:
    """Median seconds of ``call`` before and right after ``count`` sessions with ``setting`` each ran once."""
    sessions = [_session(source, setting) for _ in range(count)]
    runs = [bench.ort_call(s, m.inputs) for s in sessions]
    before, after = [], []
    for _ in range(reps):
        t = time.perf_counter()
        call()
        before.append(time.perf_counter() - t)
        for run in runs:
            run()
        t = time.perf_counter()
        call()
        after.append(time.perf_counter() - t)
        time.sleep(0.02)
    return statistics.median(before), statistics.median(after)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="transformer,bert", help="comma-separated, from bench_models")
    parser.add_argument("--settings", default=DEFAULT_SETTINGS, help=f"comma-separated (default {DEFAULT_SETTINGS})")
    parser.add_argument("--iters", type=int, default=15, help="rotations per setting and model (default 15)")
    parser.add_argument("--idle", type=int, default=10, help="sessions run before the jax.jit call (default 10)")
    parser.add_argument("--idle-model", default="mlp", help="model of those sessions and that call (default mlp)")
    args = parser.parse_args(argv)
    import jaxconv

    models = [m for m in args.models.split(",") if m]
    settings = [s for s in args.settings.split(",") if s]
    for name in models + [args.idle_model]:
        if name not in bench_models.BUILDERS:
            parser.error(f"unknown model {name!r}; known: {', '.join(bench_models.NAMES + bench_models.EXTRA)}")
    for s in settings:
        try:
            options(s)
        except ValueError as e:
            parser.error(str(e))
    print(f"Machine: {bench.machine()}")
    print(f"Command: scripts/bench_sessions.py {' '.join(sys.argv[1:] if argv is None else argv)}\n", flush=True)
    built = {}
    for name in dict.fromkeys(models + [args.idle_model]):
        m = bench_models.build(name)
        built[name] = (m, jaxconv.to_onnx(m.fn, *m.specs, check=False).SerializeToString(), _jit_call(m))
    idle_m, idle_src, idle_call = built[args.idle_model]
    head = "| setting | " + " | ".join(f"{n} ORT/jit" for n in models) + " | jit before ms | jit after ms | load |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for setting in settings:
        cells = [setting]
        for name in models:
            m, src, call = built[name]
            run = bench.ort_call(_session(src, setting), m.inputs)
            run()
            med = bench.alternate({"jax": call, "ort": run}, args.iters, 1e9)
            cells.append(f"{med['ort'] / med['jax']:.2f}")
        before, after = after_idle_sessions(setting, idle_src, idle_m, idle_call, args.idle, max(3, args.iters))
        cells += [f"{before * 1e3:.2f}", f"{after * 1e3:.2f}", f"{os.getloadavg()[0]:.1f}"]
        print("| " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
