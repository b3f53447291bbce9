"""Time jaxconv's ONNX in ONNX Runtime against jax.jit in one process (``jaxconv bench``, scripts/bench.py).

The contenders run alternately, one call each in turn with the order rotating, on the same inputs;
medians of wall time and of process CPU time per call (every thread of the process) are compared
with jax.jit's. ORT runs with jaxconv's session options (``runtimes.onnxrt.session_options``:
as the model records: spinning during each run for a model of short calls, else off) at the default
thread count and with one thread; ORT's own default (spinning on) is
timed in a rotation of its own beside jax.jit, because spinning slows whatever runs next.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

_BF16 = 16  # TensorProto.BFLOAT16


SETTLE_S = 0.001  # after each call, before its CPU time is read and the next call starts


def alternate(fns: dict[str, Callable[[], Any]], iters: int, budget_s: float,
              cpu: dict[str, float] | None = None, settle_s: float = SETTLE_S) -> dict[str, float]:
    """Median seconds per call of each function, calling them in turn (rotating the order).

    At least 5 rotations run (fewer only when ``iters`` asks for fewer), then at most ``iters``
    while the whole stays within ``budget_s``.

    After each call the process sleeps ``settle_s`` (outside the wall time) before the call's CPU time
    is read and the next call starts. jax.jit's CPU client returns from ``block_until_ready`` while its
    worker thread still spins for the next task, and the kernel (HZ 250 here) adds a thread's running
    time to the process's CPU time only at a 4 ms tick or when the thread sleeps: read at once, that
    time goes to whatever runs next, and the spinning thread slows it down. Alternating with ORT on
    one thread (HF Flax Mistral, 60 pairs, 2 cores), jax.jit's CPU time per call read at once had a
    median of 0.65 ms and a 10th percentile of 0.08 ms (1.37 ms alone), ORT's 2.0 ms (1.35 ms alone):
    a CPU ratio of 3.1 for a wall ratio of 1.04. With 0.5-10 ms of settling, 1.7-2.4 ms and 1.6-2.2 ms
    (0.93-0.99), and the wall ratio 0.94-1.01.

    Args:
        cpu: when given, filled with each function's median process CPU seconds per call (all
            threads of the process: jax.jit's and ORT's pools included). On a busy machine the
            CPU time moves far less than the wall time, so it compares graph forms there.
    """
    names = list(fns)
    times: dict[str, list[float]] = {n: [] for n in names}
    cpus: dict[str, list[float]] = {n: [] for n in names}
    start = time.perf_counter()
    for i in range(iters):
        order = names[i % len(names):] + names[:i % len(names)]
        for n in order:
            c, t = time.process_time(), time.perf_counter()
            fns[n]()
            times[n].append(time.perf_counter() - t)
            time.sleep(settle_s)
            cpus[n].append(time.process_time() - c)
        if i >= 4 and time.perf_counter() - start > budget_s:
            break
    if cpu is not None:
        cpu.update({n: statistics.median(v) for n, v in cpus.items()})
    return {n: statistics.median(v) for n, v in times.items()}


def ort_session(model: Any, threads: int | None, spinning: bool | None, profile: str | None = None,
                inputs: Sequence[np.ndarray] | None = None, spin_during_run: bool | None = None) -> Any:
    """An ORT CPU session on ``model`` (path or bytes) with jaxconv's options.

    Args:
        threads: intra-op threads (None: jaxconv's default: the count the model records, else one
            per physical core).
        spinning: True: ORT's own default (spinning during and between runs); None: jaxconv's (as the model
            records: spinning during each run for a model of short calls, else off); False: off.
        spin_during_run: instead of what ``model`` records (a peer's graph timed with the settings ours records).
        profile: path prefix: ORT writes its profile there, and the optimized graph to PREFIX.optimized.onnx.
        inputs: the inputs it will run on (the count a model records may depend on their sizes).
    """
    import onnxruntime as ort

    from jaxconv.onnx.thread_count import Record
    from jaxconv.runtimes.onnxrt import session_options

    record = None if spin_during_run is None else Record(spin=spin_during_run)
    opts = session_options(threads, spinning, model=model if isinstance(model, (str, bytes)) else None,
                           shapes=None if inputs is None else [np.shape(a) for a in inputs], record=record)
    if profile:
        opts.enable_profiling = True
        opts.profile_file_prefix = profile
        opts.optimized_model_filepath = profile + ".optimized.onnx"
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def ort_call(session: Any, inputs: Sequence[np.ndarray]) -> Callable[[], Any]:
    """A call of ``session`` on ``inputs`` (flat, in the session's input order) with no arguments.

    A model with a bfloat16 input or output, which numpy feeds cannot carry, runs on ORT values
    made once (``run_with_ort_values``); others run as an application would, on numpy arrays.
    Complex inputs go in as jaxconv's models take them, (re, im) pairs on a trailing axis.
    """
    from jaxconv.onnx.complex_layout import to_pairs

    feed = {i.name: to_pairs(a) if np.asarray(a).dtype.kind == "c" and "complex" not in i.type else a
            for i, a in zip(session.get_inputs(), inputs)}
    if not any(t.type == "tensor(bfloat16)" for t in (*session.get_inputs(), *session.get_outputs())):
        return lambda: session.run(None, feed)
    import onnxruntime as ort

    def value(a: np.ndarray) -> Any:
        a = np.asarray(a)
        if a.dtype.name == "bfloat16":
            return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(a.view(np.uint16), onnx_element_type=_BF16)
        return ort.OrtValue.ortvalue_from_numpy(a)

    values = {n: value(a) for n, a in feed.items()}
    return lambda: session.run_with_ort_values(None, values)


def jit_call(fn: Callable[..., Any], arg_specs: Sequence[Any],
             inputs: Sequence[np.ndarray]) -> Callable[[], Any]:
    """A call of ``jax.jit(fn)`` on flat ``inputs``, rebuilt into the argument pytrees on the device."""
    import jax

    jitted = jax.jit(fn)
    tree = jax.tree_util.tree_structure(list(arg_specs))
    args = jax.tree_util.tree_unflatten(tree, [jax.device_put(a) for a in inputs])
    return lambda: jax.block_until_ready(jitted(*args))


def warm_up(fns: dict[str, Callable[[], Any]], notes: list[str], calls: int = 2) -> None:
    """Call each function ``calls`` times; one that fails is dropped from ``fns`` with a note."""
    for name, fn in list(fns.items()):
        try:
            for _ in range(calls):
                fn()
        except Exception as e:
            notes.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}")
            del fns[name]


@dataclass
class Rotation:
    """Medians of one rotation: ms per call, ratios to jax.jit, process CPU ms per call."""

    jax_ms: float
    ms: dict[str, float] = field(default_factory=dict)
    ratio: dict[str, float] = field(default_factory=dict)
    cpu_ms: dict[str, float] = field(default_factory=dict)


def rotate(fns: dict[str, Callable[[], Any]], iters: int, budget_s: float) -> Rotation:
    """``alternate`` over ``fns`` (one of them named ``jax``), as milliseconds and ratios to jax.jit."""
    cpu: dict[str, float] = {}
    med = alternate(fns, iters, budget_s, cpu)
    jax_s = med.pop("jax")
    return Rotation(jax_s * 1e3, {n: s * 1e3 for n, s in med.items()}, {n: s / jax_s for n, s in med.items()},
                    {n: s * 1e3 for n, s in cpu.items()})


def spin_ratio(jax_fn: Callable[[], Any], source: Any, inputs: Sequence[np.ndarray], iters: int,
               budget_s: float) -> tuple[float, float]:
    """(ms, ratio to jax.jit) of ORT's own default (spinning on), in a rotation beside jax.jit alone."""
    spin = ort_call(ort_session(source, None, True, inputs=inputs), inputs)
    spin()
    r = rotate({"jax": jax_fn, "ort spin": spin}, iters, budget_s)
    return r.ms["ort spin"], r.ratio["ort spin"]


def kernel_profile(source: Any, inputs: Sequence[np.ndarray], prefix: str, runs: int = 10,
                   top: int = 8) -> tuple[str, list[tuple[str, float]]]:
    """Profile ``runs`` calls on one thread: (ORT's trace file, the ``top`` op types by share of kernel time).

    The optimized graph is written beside the trace, to PREFIX.optimized.onnx.
    """
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    session = ort_session(source, 1, None, profile=prefix)
    run = ort_call(session, inputs)
    for _ in range(runs):
        run()
    trace = session.end_profiling()
    totals: dict[str, float] = {}
    with open(trace) as f:
        events = json.load(f)
    for ev in events:
        if ev.get("cat") == "Node" and ev["name"].endswith("_kernel_time"):
            op = ev.get("args", {}).get("op_name", "?")
            totals[op] = totals.get(op, 0.0) + ev["dur"]
    whole = sum(totals.values()) or 1.0
    ranked = sorted(totals.items(), key=lambda kv: -kv[1])[:top]
    return trace, [(k, v / whole) for k, v in ranked]


def machine() -> str:
    """The CPU, the core count, the OS, the versions that matter and the load average, on one line."""
    import jax
    import onnxruntime

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"{cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}; "
            f"Python {platform.python_version()}, jax {jax.__version__}, "
            f"onnxruntime {onnxruntime.__version__}; load average {load}")


def fmt(x: float | None, spec: str = ".2f") -> str:
    """A table cell: ``–`` for a missing or NaN figure."""
    return "–" if x is None or x != x else format(x, spec)


@dataclass
class Result:
    """What ``jaxconv bench`` measured for one function.

    Attributes:
        rotation: jax.jit and ORT's medians (contenders ``ort``, ``ort 1t``, and ``ort spin`` when timed).
        threads: ORT's intra-op threads for ``ort`` (None: ORT chose).
        max_abs: the largest absolute difference between ORT's and jax.jit's outputs.
        mismatches: a line for each output beyond the converter's tolerance.
        load: the 1-minute load average before and after.
        kernels: with a profile, the top op types by share of ORT's kernel time.
    """

    name: str
    rotation: Rotation
    threads: int | None
    nodes: int
    size_mb: float
    max_abs: float
    mismatches: list[str] = field(default_factory=list)
    load: tuple[float, float] = (0.0, 0.0)
    notes: list[str] = field(default_factory=list)
    trace: str | None = None
    kernels: list[tuple[str, float]] = field(default_factory=list)

    def cpu_ratio(self, contender: str) -> float | None:
        """The contender's process CPU time per call over jax.jit's, or None when either is missing."""
        jax_cpu, cpu = self.rotation.cpu_ms.get("jax"), self.rotation.cpu_ms.get(contender)
        return None if not jax_cpu or cpu is None else cpu / jax_cpu

    def table(self) -> str:
        """The Markdown table: one row."""
        r = self.rotation
        head = ("| function | jax.jit ms | ORT ms | ORT/jit | ORT 1t ms | ORT 1t/jit | ORT spin/jit "
                "| CPU: ORT/jit | CPU: ORT 1t/jit | max abs error | nodes | ONNX MB | load |")
        error = f"{self.max_abs:.2g}" + (" (mismatch)" if self.mismatches else "")
        cells = [self.name, fmt(r.jax_ms, ".4g"), fmt(r.ms.get("ort"), ".4g"), fmt(r.ratio.get("ort")),
                 fmt(r.ms.get("ort 1t"), ".4g"), fmt(r.ratio.get("ort 1t")), fmt(r.ratio.get("ort spin")),
                 fmt(self.cpu_ratio("ort")), fmt(self.cpu_ratio("ort 1t")), error, str(self.nodes),
                 fmt(self.size_mb, ".3g"), f"{self.load[0]:.1f}→{self.load[1]:.1f}"]
        return "\n".join([head, "|" + "---|" * head.count(" | ") + "---|", "| " + " | ".join(cells) + " |"])

    def to_json(self) -> dict[str, Any]:
        r = self.rotation
        cpu_ratio = {c: self.cpu_ratio(c) for c in r.ms if c in r.cpu_ms}
        return {"function": self.name, "threads": self.threads, "jax_ms": r.jax_ms, "ms": r.ms,
                "ratio": r.ratio, "cpu_ms": r.cpu_ms, "cpu_ratio": cpu_ratio,
                "max_abs_error": self.max_abs, "mismatches": self.mismatches, "nodes": self.nodes,
                "onnx_mb": self.size_mb, "load": list(self.load), "notes": self.notes,
                "profile": None if self.trace is None else {"trace": self.trace,
                                                            "kernels": dict(self.kernels)}}


def measure(name: str, jax_fn: Callable[[], Any], source: Any, inputs: Sequence[np.ndarray], *, nodes: int,
            size_mb: float, max_abs: float, mismatches: Sequence[str] = (), threads: int | None = None,
            iters: int = 100, budget_s: float = 3.0, spin: bool = False,
            profile: str | None = None) -> Result:
    """Time ``jax_fn`` against the ONNX model ``source`` (path or bytes) on ``inputs``, alternately.

    Args:
        budget_s: seconds per contender, about (the rotation stops after 5 rounds once they are spent).
        spin: also time ORT's own default (spinning on), in a second rotation beside jax.jit.
        profile: path prefix for ORT's profile of 10 calls on one thread (``kernel_profile``).
    """
    load0 = os.getloadavg()[0]
    notes: list[str] = []
    fns: dict[str, Callable[[], Any]] = {"jax": jax_fn,
                                         "ort": ort_call(ort_session(source, threads, None, inputs=inputs), inputs),
                                         "ort 1t": ort_call(ort_session(source, 1, None, inputs=inputs), inputs)}
    warm_up(fns, notes)
    if "jax" not in fns:
        raise RuntimeError(notes[0])
    rotation = rotate(fns, iters, budget_s * len(fns))
    if spin:
        spun = spin_ratio(jax_fn, source, inputs, iters, budget_s * 2)
        rotation.ms["ort spin"], rotation.ratio["ort spin"] = spun
    result = Result(name, rotation, threads, nodes, size_mb, max_abs, list(mismatches), notes=notes)
    if profile:
        result.trace, result.kernels = kernel_profile(source, inputs, profile)
    result.load = (load0, os.getloadavg()[0])
    return result
