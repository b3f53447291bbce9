"""The GPU half of the suite, for a machine with a GPU (``scripts/device_check.sh`` runs it).

For every case it runs the ``stablehlo`` target on the GPU (exported for CUDA, called through
the deserialized ``.jaxexport``) and the ``onnx`` target (ONNX Runtime on the CPU) against
``jax.jit`` on the GPU, and writes one JSON file that ``python -m conformance --gpu-results``
merges into the report's GPU column. TensorFlow is not needed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Sequence

GPU_TARGETS = ("stablehlo", "onnx")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m conformance.gpu_check", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("-k", dest="keyword", default=None, help="only cases matching these comma-separated words/globs/tags")
    p.add_argument("-j", "--jobs", type=int, default=4, help="worker processes (0: in this process)")
    p.add_argument("--budget-s", type=float, default=420.0, help="stop starting cells after this many seconds")
    args = p.parse_args(argv)

    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax

    from conformance import runner
    from conformance.case import load_all
    from conformance.report import today, versions
    from conformance.results import CellResult
    from conformance.targets import gpu_device

    dev = gpu_device()
    if dev is None:
        print("no GPU visible to JAX: nothing to check", file=sys.stderr)
        return 2
    cases = load_all()
    selected = runner.select_cases(cases, args.keyword)
    cells = runner.expand(selected, GPU_TARGETS, ("gpu",))
    start = time.monotonic()
    done = [0]

    def progress(r: CellResult) -> None:
        done[0] += 1
        if done[0] % 50 == 0 or r.status in ("fail", "xpass"):
            print(f"[{done[0]}/{len(cells)} {time.monotonic() - start:.0f}s] {r.status} {r.case} {r.target}"
                  f"{' ' + r.stage + ': ' + r.error[:120] if r.error else ''}", flush=True)

    if args.jobs > 0:
        results = _run_with_budget(cells, cases, args.jobs, start + args.budget_s, progress)
    else:
        results = runner.run_cells(cells, jobs=0, on_done=progress, gpu=True, cases=cases)
    data = {"device": f"{getattr(dev, 'device_kind', 'GPU')} (jax {jax.__version__})", "date": today(),
            "versions": versions(), "targets": list(GPU_TARGETS), "seconds": round(time.monotonic() - start, 1),
            "cells": [r.to_json() for r in results]}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    print(f"wrote {args.out}: {len(results)} GPU cells in {data['seconds']} s: {counts}")
    return 0


def _run_with_budget(cells, cases, jobs, deadline, progress):
    """runner.run_cells with a deadline: cells not started in time are recorded as skipped."""
    from conformance.limitations import lookup
    from conformance.pool import NOT_STARTED, run_tasks
    from conformance.results import CellResult, classify, failure

    tasks = [(c.case, c.target, c.device, False) for c in cells]
    out: dict[tuple, CellResult] = {}

    def lost(task, why):
        r = CellResult(task[0], task[1], task[2])
        if why == NOT_STARTED:
            r.status, r.reason = "skip", NOT_STARTED
            return r.to_json()
        return failure(r, "run", why).to_json()

    def finish(task, value):
        r = CellResult.from_json(value)
        classify(r, lookup(r.case, r.target, r.device))
        out[task] = r
        progress(r)

    def timeout(task):
        return 600.0 if cases[task[0]].slow else 180.0

    run_tasks("conformance.worker:run_case_task", tasks, jobs=jobs, timeout=timeout, on_result=finish, on_lost=lost,
              env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, deadline=deadline)
    return [out[t] for t in tasks]


if __name__ == "__main__":
    sys.exit(main())
