"""``scripts/fuzz.py``: run N random programs, print the summary, write reproducers.

Exit status: 0 when every mismatch is of a known class and nothing crashed the converter,
1 otherwise, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from typing import Any, Sequence

from conformance.fuzz.driver import program_seed
from conformance.fuzz.generate import FAMILIES
from conformance.fuzz.run import TARGETS

TASK_TIMEOUT_S = 300.0  # a mismatch is minimised and explained (dot-order converts each dot step): 150 s lost some on a busy machine


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="fuzz.py", description="Differential fuzzing of jaxconv against jax.jit.")
    p.add_argument("--count", type=int, default=100, help="programs to run (default 100)")
    p.add_argument("--seed", type=int, default=0, help="run seed; program k uses a seed derived from it")
    p.add_argument("--start", type=int, default=0, help="first program index (continue an earlier run)")
    p.add_argument("--time-budget", type=float, default=None, help="stop starting programs after SECONDS")
    p.add_argument("-j", "--jobs", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--targets", default="onnx", help=f"comma-separated, from {','.join(TARGETS)} (default onnx)")
    p.add_argument("--family", choices=FAMILIES, default="mixed",
                   help="programs: mixed (one in four model-shaped, default), random (2-8 ops) or model")
    p.add_argument("--kinds", default="",
                   help="comma-separated model kinds the model-shaped programs draw from (default: all; "
                        "conformance/fuzz/models.py KINDS)")
    p.add_argument("--symbolic-batch", action="store_true",
                   help="model-shaped programs exported with a symbolic batch (f32[b, ...]) and run at their own "
                        "batch and at others")
    p.add_argument("-o", "--output", default="fuzz-out", help="folder for reproducers and results (default fuzz-out)")
    p.add_argument("--no-minimise", action="store_true", help="classify without shrinking (faster, coarser classes)")
    p.add_argument("-q", "--quiet", action="store_true", help="no line per failing program")
    p.add_argument("--recheck", metavar="FOLDER", help="re-run the reproducers under FOLDER and say which still fail")
    p.add_argument("--summarise", metavar="FOLDER", nargs="+",
                   help="print the summary of earlier runs (their results.jsonl) against today's known table")
    args = p.parse_args(argv)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    bad = [t for t in targets if t not in TARGETS]
    if bad or not targets:
        p.error(f"unknown target(s) {', '.join(bad) or '(none)'}; choose from {', '.join(TARGETS)}")
    if args.count < 0 or args.jobs < 1:
        p.error("--count must be >= 0 and -j >= 1")
    args.target_list = targets
    from conformance.fuzz.models import KINDS

    args.kind_list = [k.strip() for k in args.kinds.split(",") if k.strip()] or None
    unknown = sorted(set(args.kind_list or ()) - set(KINDS))
    if unknown:
        p.error(f"unknown model kind(s) {', '.join(unknown)}; choose from {', '.join(KINDS)}")
    return args


class Tally:
    """Counts for the summary, kept as records arrive."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.programs = 0

    def add(self, records: list[dict[str, Any]]) -> None:
        self.programs += 1
        self.records.extend(records)

    def by_status(self, target: str) -> collections.Counter:
        return collections.Counter(r["status"] for r in self.records if r["target"] == target)

    def classes(self) -> dict[str, dict[str, Any]]:
        """Counts per class; a class seen both as known (its facts matched a row) and not is listed twice."""
        out: dict[str, dict[str, Any]] = {}
        for r in self.records:
            if "class" not in r:
                continue
            key = r["class"] + (" (known)" if r.get("known") else "")
            c = out.setdefault(key, {"silent": 0, "caught": 0, "crash": 0, "known": r.get("known", ""),
                                     "reproducer": "", "description": r.get("description", ""), "seeds": []})
            c[r["verdict"]] += 1
            c["seeds"].append(r["seed"])
            if r.get("reproducer") and not c["reproducer"]:
                c["reproducer"], c["description"] = r["reproducer"], r.get("description", "")
        return out

    def failing(self) -> list[str]:
        return sorted(k for k, c in self.classes().items() if not c["known"])


def summary(tally: Tally, targets: Sequence[str], seconds: float) -> str:
    lines = [f"fuzz: {tally.programs} programs in {seconds:.0f} s"]
    for t in targets:
        s = tally.by_status(t)
        converted = s["ok"] + s["mismatch"]
        lines.append(f"  {t:<12} run {sum(s.values()) - s['not-run']:>6}  converted {converted:>6}  ok {s['ok']:>6}  "
                     f"mismatch {s['mismatch']:>5}  unsupported {s['unsupported']:>5}  crash {s['crash']:>4}  "
                     f"invalid (jax rejects) {s['invalid']:>4}  lost {s['lost']:>3}")
    rules = rule_hits(tally.records)
    if rules:
        lines.append("rewrites fired (programs): " + ", ".join(f"{k} {n}" for k, n in rules.items()))
    unsupported = collections.Counter(_unsupported_key(r["detail"]) for r in tally.records if r["status"] == "unsupported")
    if unsupported:
        lines.append("unsupported (top): " + "; ".join(f"{k} x{n}" for k, n in unsupported.most_common(6)))
    classes = tally.classes()
    if classes:
        lines.append(f"{'class':<48} {'silent':>6} {'caught':>6} {'crash':>5}  status")
        for k in sorted(classes, key=lambda k: (bool(classes[k]["known"]), k)):
            c = classes[k]
            status = f"known: {c['known']}" if c["known"] else "NEW"
            lines.append(f"{k:<48} {c['silent']:>6} {c['caught']:>6} {c['crash']:>5}  {status[:90]}")
    lost = [r for r in tally.records if r["status"] == "lost"]
    for r in lost[:5]:
        lines.append(f"lost: seed {r['seed']}: {r['detail'][:150]}")
    return "\n".join(lines)


def rule_hits(records: Sequence[dict[str, Any]]) -> dict[str, int]:
    """How many converted programs each ONNX rewrite rule fired in (rules that never fired: 0), most first."""
    hits: collections.Counter = collections.Counter()
    for r in records:
        hits.update({rule: 0 for rule in r.get("rules_known", ())})
        hits.update({rule: 1 for rule in r.get("rules", {})})
    return dict(sorted(hits.items(), key=lambda kv: (-kv[1], kv[0])))


def _unsupported_key(detail: str) -> str:
    return detail.split(":")[0][:70] if detail else "?"


def findings(tally: Tally) -> str:
    lines = ["# Fuzz findings", ""]
    for k, c in sorted(tally.classes().items()):
        tag = f"known ({c['known']})" if c["known"] else "NEW"
        lines.append(f"- `{k}` [{tag}] silent {c['silent']}, caught {c['caught']}, crash {c['crash']}; "
                     f"reproducer: {c['reproducer'] or '-'}\n  {c['description']}")
    return "\n".join(lines) + "\n"


_JAX_ONLY = """
import sys
sys.path[:0] = sys.argv[5:]
from conformance.fuzz.generate import INPUT_SETS, generate, input_values
from conformance.fuzz.run import Invalid, reference
seed = int(sys.argv[1])
program = generate(seed, family=sys.argv[2], kinds=sys.argv[3].split(",") if sys.argv[3] else None,
                   symbolic=sys.argv[4] == "symbolic")
for kind in INPUT_SETS:
    try:
        reference(program, input_values(program, kind, seed))
    except Invalid:
        pass
"""


def jax_aborts(seed: int, family: str = "mixed", kinds: Sequence[str] | None = None, symbolic: bool = False) -> str:
    """When program ``seed`` kills its worker: the fatal line if jax.jit alone kills a process, else ''.

    XLA can abort (a failed CHECK) while compiling a valid program; that is jax's bug, not a converter crash.
    """
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        command = [sys.executable, "-c", _JAX_ONLY, str(seed), family, ",".join(kinds or ()),
                   "symbolic" if symbolic else "static", root,
                   os.path.join(root, "converter")]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return ""
    if done.returncode >= 0:
        return ""
    fatal = [line for line in done.stderr.splitlines() if line.startswith(("F", "Check failed")) and "]" in line]
    return (fatal[0].split("]", 1)[1].strip() if fatal else f"signal {-done.returncode}")[:200]


def recheck(folder: str) -> int:
    """Run every reproducer under ``folder`` in a fresh process; 1 when any still fails."""
    import subprocess

    paths = sorted(os.path.join(d, f) for d, _, files in os.walk(folder) for f in files if f.endswith(".py"))
    if not paths:
        print(f"fuzz.py: no reproducers under {folder}", file=sys.stderr)
        return 2
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.path.join(root, "converter"), "TF_CPP_MIN_LOG_LEVEL": "3"}
    failing = 0
    for path in paths:
        try:
            done = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=300, env=env)
            code, last = done.returncode, (done.stdout.strip().splitlines() or done.stderr.strip().splitlines() or [""])[-1]
        except subprocess.TimeoutExpired:
            code, last = 1, "timed out"
        failing += code != 0
        print(f"{'FAILS' if code else 'fixed'}  {os.path.relpath(path, folder)}: {last[:160]}", flush=True)
    print(f"recheck: {len(paths) - failing} of {len(paths)} reproducers pass now")
    return 1 if failing else 0


def resummarise(folders: Sequence[str], targets: Sequence[str]) -> int:
    """The summary of finished runs, their classes matched against the current known table."""
    from conformance.fuzz import known

    tally = Tally()
    for folder in folders:
        path = os.path.join(folder, "results.jsonl")
        if not os.path.exists(path):
            print(f"fuzz.py: no results.jsonl in {folder}", file=sys.stderr)
            return 2
        by_seed: dict[int, list[dict[str, Any]]] = {}
        for line in open(path):
            r = json.loads(line)
            if "class" in r:
                row = known.match(r["class"], frozenset(r.get("facts", ())))
                r["known"] = row.reason if row else ""
            by_seed.setdefault(r["seed"], []).append(r)
        for records in by_seed.values():
            tally.add(records)
    seconds = sum(r.get("seconds", 0.0) for r in tally.records)
    print(summary(tally, [t for t in targets if any(r["target"] == t for r in tally.records)] or targets, seconds))
    return 1 if tally.failing() else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.recheck:
        return recheck(args.recheck)
    if args.summarise:
        return resummarise(args.summarise, args.target_list)
    from conformance.pool import NOT_STARTED, run_tasks

    os.makedirs(args.output, exist_ok=True)
    out = os.path.abspath(args.output)
    tasks = [{"seed": program_seed(args.seed, k), "targets": args.target_list, "out": out, "minimise": not args.no_minimise,
              "family": args.family, "kinds": args.kind_list, "symbolic": args.symbolic_batch}
             for k in range(args.start, args.start + args.count)]
    tally = Tally()
    started = time.monotonic()
    deadline = started + args.time_budget if args.time_budget else None
    log = open(os.path.join(out, "results.jsonl"), "a" if args.start else "w")  # --start continues a run

    def on_result(task: dict[str, Any], records: list[dict[str, Any]]) -> None:
        if records and records[0]["status"] == "not-run":
            return
        tally.add(records)
        for r in records:
            log.write(json.dumps(r) + "\n")
            if not args.quiet and r["status"] in ("mismatch", "crash", "lost"):
                tag = "known" if r.get("known") else "NEW"
                print(f"seed {r['seed']} {r['target']}: {r['status']} {r.get('class', '')} [{r.get('verdict', '')}, {tag}]"
                      f" {r.get('reproducer', '')}", flush=True)
        log.flush()
        if tally.programs % 100 == 0:
            print(f"... {tally.programs} programs, {time.monotonic() - started:.0f} s", flush=True)

    def on_lost(task: dict[str, Any], why: str) -> list[dict[str, Any]]:
        status = "not-run" if why == NOT_STARTED else "lost"
        if why.startswith("worker process died"):
            aborted = jax_aborts(task["seed"], task.get("family", "mixed"), task.get("kinds"), task.get("symbolic", False))
            if aborted:
                status, why = "invalid", f"jax.jit aborts the process: {aborted}"
        return [{"seed": task["seed"], "target": t, "status": status, "detail": why, "ops": []} for t in task["targets"]]

    env = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    run_tasks("conformance.fuzz.driver:fuzz_task", tasks, jobs=args.jobs, timeout=lambda t: TASK_TIMEOUT_S,
              on_result=on_result, on_lost=on_lost, env=env, deadline=deadline)
    log.close()
    text = summary(tally, args.target_list, time.monotonic() - started)
    print(text)
    with open(os.path.join(out, "summary.txt"), "w") as fh:
        fh.write(text + "\n")
    with open(os.path.join(out, "findings.md"), "w") as fh:
        fh.write(findings(tally))
    crashed = any(r["status"] in ("crash", "lost") for r in tally.records)
    return 1 if tally.failing() or crashed else 0
