"""``python -m conformance``: run the suite and regenerate (or ``--check``) the committed report.

Exit status: 0 when every cell passes or fails as declared; 1 when a cell fails without a
limitation or a limited cell passes (strict); with ``--check``, 1 when any status differs from
the committed report.json; 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Sequence

from conformance.targets import DEVICES, TARGETS, gpu_device


def _csv(value: str, known: Sequence[str], what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in known]
    if bad or not items:
        raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(bad) or value!r}; choose from {', '.join(known)}")
    return items


# The last GPU run's cells (scripts/device_check.sh), committed: the GPU column of a run on a machine without one.
GPU_RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_results.json")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m conformance", description=(
        "Run jaxconv's conformance cases on every target x device and the StableHLO test data through ONNX, "
        "then write conformance/REPORT.md, report.json and report.html."))
    p.add_argument("--targets", type=lambda v: _csv(v, TARGETS, "target"), default=list(TARGETS),
                   help=f"comma-separated targets (default: {','.join(TARGETS)})")
    p.add_argument("--devices", type=lambda v: _csv(v, DEVICES, "device"), default=list(DEVICES),
                   help="comma-separated devices (default: cpu,gpu; gpu cells are skipped without a GPU)")
    p.add_argument("-k", dest="keyword", default=None,
                   help="only cases whose name contains one of these comma-separated words, globs or tags")
    p.add_argument("-j", "--jobs", type=int, default=max(1, min(os.cpu_count() or 1, 4)),
                   help="worker processes (each imports JAX/TF once); 0 runs in this process")
    p.add_argument("--testdata", dest="testdata", action="store_true", default=True,
                   help="also run the StableHLO test data suite (default)")
    p.add_argument("--no-testdata", dest="testdata", action="store_false", help="skip the StableHLO test data suite")
    p.add_argument("--testdata-root", default=None, help="test data folder (default: $JAXCONV_STABLEHLO_TESTDATA or "
                   "../shared/stablehlo-testdata from the repository root)")
    p.add_argument("--no-cases", action="store_true", help="run only the StableHLO test data suite")
    p.add_argument("--no-slow", action="store_true", help="leave out cases tagged slow")
    p.add_argument("--check", action="store_true",
                   help="compare this run with the committed report.json and fail when a status differs; writes nothing")
    p.add_argument("--gpu-results", default=None, help="JSON written by scripts/device_check.sh: fills the GPU column "
                   "(default where JAX sees no GPU: conformance/gpu_results.json, the last GPU run, committed)")
    p.add_argument("--output", default=None, help="folder for the report files (default: conformance/ for a full run; "
                   "filtered runs write nothing unless this is given)")
    p.add_argument("--suggest-limitations", action="store_true",
                   help="print limitation rows for the cells that fail now (to review, not to paste blindly)")
    p.add_argument("--list", action="store_true", help="list the selected cases and exit")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    return p


def _progress(quiet: bool):
    if quiet or not sys.stderr.isatty():
        return None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("{task.fields[last]}"), transient=False)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from conformance import limitations, report, runner
    from conformance.case import load_all

    cases = load_all()
    selected = runner.select_cases(cases, args.keyword, include_slow=not args.no_slow)
    if args.list:
        for c in selected:
            print(f"{c.name:<44} {c.family:<22} {','.join(sorted(c.tags))}")
        return 0
    if args.no_cases:
        selected = []
    elif not selected and args.keyword:
        print(f"no case matches -k {args.keyword!r}", file=sys.stderr)
        return 2
    cells = runner.expand(selected, args.targets, args.devices)
    files: list[str] = []
    root = None
    if args.testdata:
        from conformance import testdata

        root = os.path.abspath(args.testdata_root) if args.testdata_root else testdata.default_root()
        if not os.path.isdir(root):
            print(f"StableHLO test data not found at {root}: set {testdata.ENV} or pass --no-testdata", file=sys.stderr)
            return 2
        files = testdata.list_files(root)
    gpu_file = None
    gpu_path = args.gpu_results
    if gpu_path is None and "gpu" in args.devices and os.path.exists(GPU_RESULTS) and gpu_device() is None:
        gpu_path = GPU_RESULTS
    if gpu_path:
        try:
            with open(gpu_path, encoding="utf-8") as f:
                gpu_file = json.load(f)
        except (OSError, ValueError) as e:
            print(f"cannot read --gpu-results {gpu_path}: {e}", file=sys.stderr)
            return 2

    start = time.perf_counter()
    progress = _progress(args.quiet)
    cell_results, file_results = [], None
    if progress is not None:
        progress.start()
    try:
        bar = progress.add_task("cases", total=len(cells), last="") if progress else None

        def cell_done(r) -> None:
            if progress is not None:
                progress.update(bar, advance=1, last=f"{r.symbol} {r.case} [{r.target}/{r.device}]"[:70])

        cell_results = runner.run_cells(cells, jobs=args.jobs, on_done=cell_done,
                                        gpu=False if gpu_file is not None else None, cases=cases)
        if files:
            from conformance import testdata

            tbar = progress.add_task("stablehlo testdata", total=len(files), last="") if progress else None
            file_results = []

            def file_done(path: str, value: dict) -> None:
                r = testdata.FileResult.from_json(value)
                file_results.append(r)
                if progress is not None:
                    progress.update(tbar, advance=1, last=f"{r.status} {r.file}"[:70])

            def lost(path: str, why: str) -> dict:
                return testdata.FileResult(file=path, family=testdata.family_of(path), kind=testdata.kind_of(path),
                                           stage="run", error=why).to_json()

            if args.jobs <= 0:
                for path in files:
                    file_done(path, testdata.run_file(path, root).to_json())
            else:
                from conformance.pool import run_tasks

                run_tasks("conformance.worker:run_testdata_task", files, jobs=args.jobs,
                          timeout=lambda _: testdata.FILE_TIMEOUT_S, on_result=file_done, on_lost=lost,
                          env={testdata.ENV: root})
            order = {f: i for i, f in enumerate(files)}
            file_results.sort(key=lambda r: order.get(r.file, 0))
    finally:
        if progress is not None:
            progress.stop()
    elapsed = time.perf_counter() - start

    data = report.build(cell_results, {c.name: c for c in selected}, file_results, targets=args.targets,
                        devices=args.devices, gpu_file=gpu_file, seconds=elapsed)
    _print_summary(data, elapsed)
    if args.suggest_limitations:
        for c in cell_results:
            if c.status == "fail":
                print(limitations.suggest(c))
    filtered = bool(args.keyword) or args.no_cases or args.targets != list(TARGETS) or args.devices != list(DEVICES) or args.no_slow \
        or not args.testdata
    if args.check:
        committed_path = os.path.join(args.output or report.HERE, "report.json")
        try:
            committed = report.load(committed_path)
        except (OSError, ValueError) as e:
            print(f"--check: cannot read {committed_path}: {e}", file=sys.stderr)
            return 1
        diffs = report.compare_reports(data, committed)
        if diffs:
            print(f"--check: {len(diffs)} result(s) differ from {committed_path}:", file=sys.stderr)
            for d in diffs[:200]:
                print(f"  {d}", file=sys.stderr)
            return 1
        print(f"--check: every result agrees with {committed_path}")
        return 0
    if args.output or not filtered:
        folder = args.output or report.HERE
        os.makedirs(folder, exist_ok=True)
        for path in report.write_all(data, folder):
            print(f"wrote {os.path.relpath(path)}")
    bad = runner.unexpected(cell_results)
    xpass = [r for r in bad if r.status == "xpass"]
    for r in xpass:
        print(f"XPASS (strict): {r.case} on {r.target}/{r.device} passes but limitations.py says: {r.reason}", file=sys.stderr)
    for r in bad:
        if r.status == "fail" and r.reason:
            print(f"FAIL: {r.case} on {r.target}/{r.device} is {r.reason}", file=sys.stderr)
    limitations.validate(limitations.LIMITATIONS)
    return 1 if bad else 0


def _print_summary(data: dict, elapsed: float) -> None:
    from conformance import testdata

    print(f"conformance: {len(data['cells'])} cells in {elapsed:.0f} s; GPU: {data['gpu']}")
    for target, devices in data["summary"].items():
        for device, row in devices.items():
            print(f"  {target:<12} {device:<4} " + "  ".join(f"{k} {v}" for k, v in row.items()))
    td = data.get("testdata")
    if td:
        t = td["summary"]["total"]
        print(f"  stablehlo testdata: pass {t['pass']}  {testdata.RAN_LABEL} {t['ran']}  fail {t['fail']}  "
              f"unsupported {t['unsupported']}")
