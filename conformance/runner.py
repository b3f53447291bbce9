"""Expand cases over targets x devices, run the cells in workers, classify the results."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from conformance.case import Case, load_all
from conformance.limitations import LIMITATIONS, Limitation, lookup
from conformance.results import CellResult, classify, failure
from conformance.targets import DEVICES, TARGETS, TF_TARGETS

CELL_TIMEOUT_S = 180.0
SLOW_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Cell:
    case: str
    target: str
    device: str


def select_cases(cases: Mapping[str, Case], keyword: str | None = None, include_slow: bool = True) -> list[Case]:
    """Cases whose name contains ``keyword`` (or matches it as a glob), slow ones optional."""
    out = []
    for c in cases.values():
        if keyword:
            words = [w.strip() for w in keyword.split(",") if w.strip()]
            if not any(w in c.name or fnmatch.fnmatchcase(c.name, w) or w in c.tags for w in words):
                continue
        if c.slow and not include_slow:
            continue
        out.append(c)
    return out


def expand(cases: Iterable[Case], targets: Sequence[str] = TARGETS, devices: Sequence[str] = DEVICES) -> list[Cell]:
    """Cells in run order: TF targets first (slowest), then by case."""
    cells = [Cell(c.name, t, d) for c in cases for t in targets for d in devices]
    return sorted(cells, key=lambda x: (x.target not in TF_TARGETS, x.case, x.target, x.device))


def _gpu_available() -> bool:
    from conformance.targets import gpu_device

    return gpu_device() is not None


def run_cells(cells: Sequence[Cell], *, jobs: int = 2, limitations: Mapping[tuple[str, ...], Limitation] | None = None,
              on_done: Callable[[CellResult], None] | None = None, gpu: bool | None = None,
              cases: Mapping[str, Case] | None = None) -> list[CellResult]:
    """Run every cell; returns classified results in ``cells`` order.

    Args:
        jobs: worker processes; 0 runs in this process (tests, debugging).
        limitations: the table to classify with (default: ``LIMITATIONS``).
        gpu: whether a GPU is available (detected when None); GPU cells are skipped without one.
    """
    table = LIMITATIONS if limitations is None else limitations
    cases = load_all() if cases is None else cases
    if gpu is None:
        gpu = any(c.device == "gpu" for c in cells) and _gpu_available()
    results: dict[Cell, CellResult] = {}

    def finish(cell: Cell, result: CellResult) -> None:
        classify(result, lookup(cell.case, cell.target, cell.device, table))
        results[cell] = result
        if on_done is not None:
            on_done(result)

    todo: list[Cell] = []
    for cell in cells:
        if cell.device == "gpu" and not gpu:
            finish(cell, CellResult(cell.case, cell.target, cell.device, status="skip", reason="no GPU"))
        else:
            todo.append(cell)
    ops_cell: dict[str, Cell] = {}
    for c in todo:  # one cell per case lists the case's StableHLO ops (the ONNX one when run)
        if c.case not in ops_cell or (c.target == "onnx" and ops_cell[c.case].target != "onnx"):
            ops_cell[c.case] = c
    tasks = [(c.case, c.target, c.device, ops_cell[c.case] == c) for c in todo]
    by_task = dict(zip(tasks, todo))

    if jobs <= 0:
        from conformance.targets import run_cell

        for task in tasks:
            finish(by_task[task], run_cell(cases[task[0]], task[1], task[2], with_ops=task[3]))
    else:
        from conformance.pool import run_tasks

        def timeout(task: tuple) -> float:
            return SLOW_TIMEOUT_S if cases[task[0]].slow else CELL_TIMEOUT_S

        def lost(task: tuple, why: str) -> dict:
            return failure(CellResult(task[0], task[1], task[2]), "run", why).to_json()

        run_tasks("conformance.worker:run_case_task", tasks, jobs=jobs, timeout=timeout,
                  on_result=lambda task, value: finish(by_task[task], CellResult.from_json(value)), on_lost=lost)
    return [results[c] for c in cells]


def unexpected(results: Iterable[CellResult]) -> list[CellResult]:
    """Results that fail the run: failures not as declared, and strict passes of limited cells."""
    return [r for r in results if r.status in ("fail", "xpass")]
