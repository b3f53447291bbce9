"""Real third-party models: jaxconv's ONNX and jax2onnx's in ONNX Runtime, against jax.jit.

    .venv/bin/python scripts/bench_zoo.py [--models bert,gpt2 | --more | --served | --training] [--quick]
                                          [--profile DIR]
                                          [--symbolic-batch] [--symbolic-length]

The models (scripts/zoo_models.py) are Hugging Face Flax, Haiku, keras-hub, Flax linen and NNX and
Equinox models in small configurations, built as their users build them; the libraries are the
``zoo`` extra (``pip install -e .[zoo]``; keras-hub runs on Keras 3's JAX backend). A model whose
library is missing, or that fails to build, is listed with a note. For each model, one process:
jax.jit, jaxconv's ONNX and jax2onnx's ONNX (when jax2onnx is installed) run alternately on the same
inputs, ORT with jaxconv's session options (the recorded threads and spinning, which jax2onnx's
graph gets too). Ratios are medians over
jax.jit's median; "CPU" ratios are process CPU time per call, steadier on a busy machine. "max err"
is the largest |jaxconv's ONNX - jax.jit| over the outputs. Models marked "erf" use the exact GELU
(erf/erfc). --profile DIR writes ORT's profiles, optimized graphs and node-type counts of both ONNX
graphs, and prints the kernels that dominate. --symbolic-batch converts every model with its batch
symbolic (``f32[b, ...]``), as a model exported for any batch is, and times it at the model's batch;
--symbolic-length names the sequence axis of token ids and masks (``i32[2, s]``) for a model exported
for any length.
"""

from __future__ import annotations

import argparse
import collections
import gc
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("KERAS_BACKEND", "jax")

import bench  # noqa: E402  (puts converter/ on sys.path)
import count_nodes  # noqa: E402
import zoo_models  # noqa: E402

from jaxconv.onnx.thread_count import read_record  # noqa: E402


@dataclass
class ZooRow:
    """Everything measured for one model."""

    name: str
    library: str = ""
    jax_ms: float | None = None
    ratio: dict[str, float] = field(default_factory=dict)  # "ours"/"jax2onnx" -> median / jax.jit median
    cpu: dict[str, float] = field(default_factory=dict)  # same, process CPU time
    nodes: dict[str, int] = field(default_factory=dict)  # top-level nodes
    nodes_all: dict[str, int] = field(default_factory=dict)  # Loop/Scan/If bodies included
    err: float | None = None
    convert_s: float | None = None
    erf: bool = False
    notes: list[str] = field(default_factory=list)

    def vs_peer(self) -> float | None:
        """Our time over jax2onnx's, when both ran."""
        if "ours" in self.ratio and "jax2onnx" in self.ratio:
            return self.ratio["ours"] / self.ratio["jax2onnx"]
        return None


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0][:110] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}"


def uses_erf(fn: Callable[..., Any], inputs: tuple[np.ndarray, ...]) -> bool:
    """Whether the function's jaxpr calls erf or erfc (the exact GELU)."""
    import jax

    text = str(jax.make_jaxpr(fn)(*inputs))
    return " erf " in text or "erf[" in text or " erfc " in text or "erfc[" in text or "= erf" in text


def node_types(model: Any) -> collections.Counter:
    """Node-type counts of a ModelProto's main graph."""
    return collections.Counter(n.op_type for n in model.graph.node)


def _max_err(outs: list[np.ndarray], ref: list[np.ndarray]) -> float:
    if len(outs) != len(ref):
        return float("nan")
    return max(
        (
            float(np.max(np.abs(np.asarray(o, np.float64) - np.asarray(r, np.float64)))) if r.size else 0.0
            for o, r in zip(outs, ref)
        ),
        default=0.0,
    )


def _profile(name: str, models: dict[str, Any], m: Any, directory: str) -> None:
    """ORT profiles and optimized graphs of both ONNX graphs, and their node types, under ``directory``."""
    types = {k: node_types(v) for k, v in models.items()}
    for k, proto in models.items():
        bench.profile(proto.SerializeToString(), m, os.path.join(directory, f"{name}.{k}"))
    keys = sorted(set().union(*types.values()), key=lambda t: -max(c[t] for c in types.values()))
    with open(os.path.join(directory, f"{name}.nodes.txt"), "w") as f:
        f.write("op " + " ".join(types) + "\n")
        for t in keys:
            f.write(f"{t} " + " ".join(str(c[t]) for c in types.values()) + "\n")


def measure(name: str, args: argparse.Namespace) -> ZooRow:
    """Build, convert and time one model; failures become notes."""
    import jax

    import jaxconv

    row = ZooRow(name)
    try:
        m = zoo_models.build(name)
    except Exception as e:  # a missing library or a model that does not build is a result
        row.notes.append(f"build: {_short(e)}")
        return row
    row.library = m.title
    jitted = jax.jit(m.fn)
    try:
        ref = [np.asarray(x) for x in jax.tree_util.tree_leaves(jitted(*m.inputs))]
        row.erf = uses_erf(m.fn, m.inputs)
    except Exception as e:
        row.notes.append(f"jax.jit: {_short(e)}")
        return row
    jin = [jax.device_put(a) for a in m.inputs]
    fns: dict[str, Callable[[], Any]] = {"jax": lambda: jax.block_until_ready(jitted(*jin))}
    protos: dict[str, Any] = {}
    try:
        t = time.perf_counter()
        symbolic = args.symbolic_batch or args.symbolic_length
        specs = symbolic_specs(m, args.symbolic_batch, args.symbolic_length) if symbolic else m.specs
        protos["ours"] = jaxconv.to_onnx(m.fn, *specs, check=False)
        row.convert_s = time.perf_counter() - t
    except Exception as e:
        row.notes.append(f"jaxconv: {_short(e)}")
    try:
        peer = bench.jax2onnx_model(m)
        if peer is not None:
            protos["jax2onnx"] = peer
    except Exception as e:
        row.notes.append(f"jax2onnx: {_short(e)}")
    # jax2onnx's graph runs with the spinning ours records (the same session settings for both)
    spins = "ours" in protos and read_record(protos["ours"].SerializeToString()).spins([np.shape(a) for a in m.inputs])
    for k, proto in protos.items():
        row.nodes[k], row.nodes_all[k] = len(proto.graph.node), count_nodes.count(proto.graph)
        try:
            session = bench.ort_session(proto.SerializeToString(), None, None, inputs=m.inputs,
                                        spin_during_run=None if k == "ours" else spins)
            call = bench.ort_call(session, m.inputs)
            outs = call()
            if k == "ours":
                row.err = _max_err(outs, ref)
            fns[k] = call
        except Exception as e:
            row.notes.append(f"{k} in ORT: {_short(e)}")
    for f in fns.values():
        f()
    iters, budget = (15, 0.5) if args.quick else (args.iters, args.budget)
    cpu: dict[str, float] = {}
    med = bench.alternate(fns, iters, budget * len(fns), cpu)
    row.jax_ms = med["jax"] * 1e3
    for k in fns:
        if k != "jax":
            row.ratio[k] = med[k] / med["jax"]
            row.cpu[k] = cpu[k] / cpu["jax"] if cpu["jax"] else float("nan")
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
        _profile(name, {k: p for k, p in protos.items() if k in fns}, m, args.profile)
    return row


def symbolic_specs(m: Any, batch: bool = True, length: bool = False) -> tuple[str, ...]:
    """The model's specs with the batch (a leading dimension of ``zoo_models.BATCH``) named ``b`` and, with
    ``length``, the sequence axis of integer inputs ``[batch, zoo_models.SEQ]`` (token ids, masks, positions)
    named ``s``, as users export a model for any batch or any length; time-major inputs, float inputs'
    other axes and other dimensions stay as they are."""
    out = []
    for spec, x in zip(m.specs, m.inputs):
        dtype, dims = spec.split("[", 1)
        parts = dims.rstrip("]").split(",")
        if batch and parts and x.ndim and x.shape[0] == zoo_models.BATCH and parts[0] == str(zoo_models.BATCH):
            parts[0] = "b"
        if length and x.ndim == 2 and x.dtype.kind in "iu" and x.shape[1] == zoo_models.SEQ \
                and parts[1] == str(zoo_models.SEQ):
            parts[1] = "s"
        out.append(f"{dtype}[{','.join(parts)}]")
    return tuple(out)


def _f(x: float | None, spec: str = ".2f") -> str:
    return "–" if x is None or x != x else format(x, spec)


def _nodes(row: ZooRow, key: str) -> str:
    if key not in row.nodes:
        return "–"
    return f"{row.nodes[key]} ({row.nodes_all.get(key, row.nodes[key])})"


def table(rows: list[ZooRow]) -> str:
    """The Markdown table of ``rows``."""
    head = (
        "| model | library | jax.jit ms | ours/jit | jax2onnx/jit | ours/jax2onnx | CPU: ours/jit "
        "| CPU: jax2onnx/jit | nodes ours (with bodies) | nodes jax2onnx (with bodies) | max err | convert s | notes |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in rows:
        notes = "; ".join(n.replace("|", "/") for n in r.notes)
        lines.append(
            "| "
            + " | ".join(
                [
                    r.name + (" (erf)" if r.erf else ""),
                    r.library,
                    _f(r.jax_ms),
                    _f(r.ratio.get("ours")),
                    _f(r.ratio.get("jax2onnx")),
                    _f(r.vs_peer()),
                    _f(r.cpu.get("ours")),
                    _f(r.cpu.get("jax2onnx")),
                    _nodes(r, "ours"),
                    _nodes(r, "jax2onnx"),
                    _f(r.err, ".1e"),
                    _f(r.convert_s, ".1f"),
                    notes,
                ]
            )
            + " |"
        )
    return "\n".join(lines)


def _median(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f}" if xs else "–"


def summary(rows: list[ZooRow]) -> str:
    """Medians and counts over the models."""
    built = [r for r in rows if r.library]
    ours = [r.ratio["ours"] for r in built if "ours" in r.ratio]
    peer = [r.ratio["jax2onnx"] for r in built if "jax2onnx" in r.ratio]
    both = [r.vs_peer() for r in built if r.vs_peer() is not None]
    plain = [r.ratio["ours"] for r in built if "ours" in r.ratio and not r.erf]
    plain_peer = [r.vs_peer() for r in built if r.vs_peer() is not None and not r.erf]
    return "\n".join(
        [
            f"- models built: {len(built)} of {len(rows)}; converted and ran in ORT: jaxconv {len(ours)}, "
            f"jax2onnx {len(peer)}; both {len(both)}",
            f"- median ours/jax.jit {_median(ours)}, jax2onnx/jax.jit {_median(peer)}; "
            f"median ours/jax2onnx {_median(both)}, ours faster on {sum(v < 1 for v in both)} of {len(both)}",
            f"- without the exact-GELU (erf) models: median ours/jax.jit {_median(plain)} over {len(plain)}, "
            f"ours/jax2onnx {_median(plain_peer)} over {len(plain_peer)}, ours faster on "
            f"{sum(v < 1 for v in plain_peer)} of {len(plain_peer)}",
        ]
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    known = zoo_models.ALL
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--models", default=",".join(zoo_models.NAMES), help=f"comma-separated, from {', '.join(known)}"
    )
    parser.add_argument(
        "--more", action="store_true",
        help="the second battery instead (zoo_models.MORE: 48 models of kinds the first lacks)",
    )
    parser.add_argument(
        "--served", action="store_true",
        help=f"the third battery instead (zoo_models.SERVED: {len(zoo_models.SERVED)} models called as served: "
             "masks as inputs, more keras-hub backbones)",
    )
    parser.add_argument(
        "--training", action="store_true",
        help=f"the fourth battery instead (zoo_models.TRAINING: {len(zoo_models.TRAINING)} Optax updates and "
             "training steps of Flax models)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="few iterations (15 rotations, about 0.5 s each)"
    )
    parser.add_argument("--iters", type=int, default=100, help="rotations at most (default 100)")
    parser.add_argument(
        "--budget", type=float, default=2.0, help="seconds per contender per model, about (default 2)"
    )
    parser.add_argument(
        "--profile", metavar="DIR", help="write ORT profiles, optimized graphs and node counts to DIR"
    )
    parser.add_argument(
        "--symbolic-batch", action="store_true",
        help="convert with the batch as a symbolic dimension (f32[b,...]; timed at the model's batch)",
    )
    parser.add_argument(
        "--symbolic-length", action="store_true",
        help="convert with the sequence axis of integer inputs symbolic (i32[2,s]; timed at the model's length)",
    )
    args = parser.parse_args(argv)
    batteries = {"--more": zoo_models.MORE, "--served": zoo_models.SERVED, "--training": zoo_models.TRAINING}
    chosen = [flag for flag in batteries if getattr(args, flag[2:])]
    if len(chosen) > 1:
        parser.error(f"{' and '.join(chosen)} name {len(chosen)} batteries; run them one at a time")
    if chosen and "--models" not in (argv if argv is not None else sys.argv):
        args.models = ",".join(batteries[chosen[0]])
    args.models = [m for m in args.models.split(",") if m]
    unknown = [m for m in args.models if m not in known]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return args


def main(argv: list[str] | None = None) -> int:
    import warnings

    import jax

    warnings.filterwarnings("ignore")
    args = parse_args(argv)
    print(f"Machine: {bench.machine()}")
    print(f"Command: scripts/bench_zoo.py {' '.join(sys.argv[1:] if argv is None else argv)}\n", flush=True)
    rows = []
    for name in args.models:
        load = os.getloadavg()[0]
        row = measure(name, args)
        rows.append(row)
        print(
            f"  {name}: ours/jit {_f(row.ratio.get('ours'))}, jax2onnx/jit {_f(row.ratio.get('jax2onnx'))}, "
            f"load {load:.1f}->{os.getloadavg()[0]:.1f} {'; '.join(row.notes)}",
            file=sys.stderr,
            flush=True,
        )
        jax.clear_caches()
        gc.collect()
    print(table(rows))
    print("\n" + summary(rows))
    print(f"\nload average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
