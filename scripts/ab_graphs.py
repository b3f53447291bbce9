"""Two versions of jaxconv's graphs for the same models, timed against each other in ONNX Runtime alone.

    .venv/bin/python scripts/ab_graphs.py save DIR --models llama,kh_gpt2 [--opset N]
    .venv/bin/python scripts/ab_graphs.py compare DIR_A DIR_B [--models ...] [--sessions 3] [--iters 100]

``save`` converts zoo models (``scripts/zoo_models.py``: every battery's names and ``tiny``) unchecked and
writes ``NAME.onnx`` and ``NAME.inputs.npz`` to DIR. To save an earlier revision's graphs, run it from a
worktree of that revision (``git worktree add /tmp/base REV``, then ``PYTHONPATH=/tmp/base/converter``).

``compare`` makes ``--sessions`` ORT sessions of each side (jaxconv's session options) and calls them in
rotation, A1 B1 A2 B2 ..., for ``--iters`` rotations (``jaxconv.benchmark.alternate``). A session's own
memory layout moves its time by a few percent, so one session a side can show a gain that is not there: an
A/A run of one graph against itself gave 0.97-1.01 with one session a side, 0.99-1.00 with three. Per model
it prints B's median over A's (the median of each side's session medians), for wall and process CPU time,
how far apart A's own sessions are, the node counts and the largest difference between the outputs (0: the
same bits, a rewrite that keeps the numbers).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402,F401  (puts converter/ on sys.path)


def save(folder: str, names: list[str], opset: int | None) -> None:
    import zoo_models

    import jaxconv

    os.makedirs(folder, exist_ok=True)
    for name in names:
        model = zoo_models.build(name)
        proto = jaxconv.to_onnx(model.fn, *model.specs, check=False, opset=opset)
        with open(os.path.join(folder, f"{name}.onnx"), "wb") as f:
            f.write(proto.SerializeToString())
        np.savez(os.path.join(folder, f"{name}.inputs.npz"), *[np.asarray(a) for a in model.inputs])
        print(f"{name}: {len(proto.graph.node)} nodes", flush=True)


def _inputs(folder: str, name: str) -> list[np.ndarray]:
    with np.load(os.path.join(folder, f"{name}.inputs.npz")) as data:
        return [data[f"arr_{k}"] for k in range(len(data.files))]


def _largest_difference(a: list, b: list) -> float:
    worst = 0.0
    for x, y in zip(a, b):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        if x.shape != y.shape:
            return float("inf")
        if (np.isnan(x) != np.isnan(y)).any():
            return float("inf")
        same = (x == y) | (np.isnan(x) & np.isnan(y))
        if not same.all():
            worst = max(worst, float(np.nanmax(np.where(same, 0.0, np.abs(x - y)))))
    return worst


def compare(folder_a: str, folder_b: str, names: list[str], sessions: int, iters: int) -> list[str]:
    import onnx

    from jaxconv import benchmark

    rows = ["| model | nodes A -> B | B/A wall | B/A CPU | A's sessions apart | A ms | max diff | load |",
            "|---|---|---|---|---|---|---|---|"]
    for name in names:
        inputs = _inputs(folder_a, name)
        raw = {}
        for side, folder in (("A", folder_a), ("B", folder_b)):
            with open(os.path.join(folder, f"{name}.onnx"), "rb") as f:
                raw[side] = f.read()
        calls, outputs = {}, {}
        for k in range(sessions):
            for side in ("A", "B"):
                call = benchmark.ort_call(benchmark.ort_session(raw[side], None, None, inputs=inputs), inputs)
                outputs[side] = call()
                calls[f"{side}{k}"] = call
        cpu: dict[str, float] = {}
        wall = benchmark.alternate(calls, iters, 4.0 * len(calls), cpu)
        side_wall = {s: [wall[f"{s}{k}"] for k in range(sessions)] for s in "AB"}
        side_cpu = {s: [cpu[f"{s}{k}"] for k in range(sessions)] for s in "AB"}
        nodes = {s: len(onnx.load_from_string(raw[s]).graph.node) for s in "AB"}
        rows.append(
            f"| {name} | {nodes['A']} -> {nodes['B']} "
            f"| {np.median(side_wall['B']) / np.median(side_wall['A']):.3f} "
            f"| {np.median(side_cpu['B']) / np.median(side_cpu['A']):.3f} "
            f"| {min(side_wall['A']) / max(side_wall['A']):.3f} | {np.median(side_wall['A']) * 1e3:.2f} "
            f"| {_largest_difference(outputs['A'], outputs['B']):.2g} | {os.getloadavg()[0]:.1f} |")
        print(rows[-1], flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("save", help="convert zoo models into DIR")
    s.add_argument("folder", metavar="DIR")
    s.add_argument("--models", required=True, help="comma-separated zoo names")
    s.add_argument("--opset", type=int, default=None)
    c = sub.add_parser("compare", help="time DIR_B's graphs against DIR_A's")
    c.add_argument("folder_a", metavar="DIR_A")
    c.add_argument("folder_b", metavar="DIR_B")
    c.add_argument("--models", help="comma-separated (default: every model saved in both)")
    c.add_argument("--sessions", type=int, default=3, help="ORT sessions a side (default 3)")
    c.add_argument("--iters", type=int, default=100, help="rotations at most (default 100)")
    args = parser.parse_args(argv)
    if args.command == "save":
        import zoo_models

        names = [n for n in args.models.split(",") if n]
        known = set(zoo_models.ALL)
        unknown = [n for n in names if n not in known]
        if unknown:
            parser.error(f"unknown model(s) {', '.join(unknown)}")
        save(args.folder, names, args.opset)
        return 0

    def saved(folder: str) -> set[str]:
        if not os.path.isdir(folder):
            parser.error(f"{folder}: no such folder")
        return {f[:-5] for f in os.listdir(folder) if f.endswith(".onnx")
                and os.path.exists(os.path.join(folder, f[:-5] + ".inputs.npz"))}

    both = saved(args.folder_a) & saved(args.folder_b)
    names = [n for n in args.models.split(",") if n] if args.models else sorted(both)
    missing = [n for n in names if n not in both]
    if missing or not names:
        parser.error(f"not saved in both folders: {', '.join(missing) or 'any model'}")
    if args.sessions < 1 or args.iters < 1:
        parser.error("--sessions and --iters must be at least 1")
    compare(args.folder_a, args.folder_b, names, args.sessions, args.iters)
    return 0


if __name__ == "__main__":
    sys.exit(main())
