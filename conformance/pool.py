"""A small worker pool that survives crashing and hanging tasks.

Each worker is a spawned process that imports the heavy libraries once and runs tasks one
at a time. A task that exceeds its timeout, or kills its worker (ONNX Runtime can abort the
process), becomes a failed result from ``on_lost`` and the worker is replaced.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Sequence

NOT_STARTED = "not started: time budget spent"
QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3", "GRPC_VERBOSITY": "ERROR", "ABSL_MIN_LOG_LEVEL": "3",
             "XLA_FLAGS": os.environ.get("XLA_FLAGS", "")}


def _resolve(path: str) -> Callable[..., Any]:
    module, name = path.rsplit(":", 1)
    return getattr(importlib.import_module(module), name)


def _worker(conn: Connection, func_path: str, env: dict[str, str]) -> None:
    os.environ.update(env)
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except Exception:  # noqa: BLE001  (best effort: no core dumps from a crashing runtime)
        pass
    func = _resolve(func_path)
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        try:
            conn.send(("ok", func(task)))
        except BaseException as e:  # noqa: BLE001  (report, keep serving)
            conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"))


@dataclass
class _Slot:
    proc: Any
    conn: Connection
    task: Any = None
    started: float = 0.0


def run_tasks(func_path: str, tasks: Sequence[Any], *, jobs: int, timeout: Callable[[Any], float],
              on_result: Callable[[Any, Any], None], on_lost: Callable[[Any, str], Any],
              env: dict[str, str] | None = None, deadline: float | None = None) -> None:
    """Run ``func(task)`` for every task in ``jobs`` worker processes.

    Args:
        func_path: ``"module:function"``, imported in each worker.
        tasks: picklable task descriptions, run in order.
        timeout: seconds allowed for a task.
        on_result: called in this process as ``on_result(task, value)``.
        on_lost: ``on_lost(task, why)`` returns the value for a task that timed out, crashed its
            worker or raised; it is then passed to ``on_result``.
        deadline: a ``time.monotonic()`` instant after which no new task starts; the tasks left
            are given to ``on_lost`` with why = ``NOT_STARTED``.
    """
    ctx = mp.get_context("spawn")
    environment = {**QUIET_ENV, **(env or {})}
    pending: list[Any] = list(tasks)
    pending.reverse()
    slots: list[_Slot] = []

    def spawn() -> _Slot:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(child, func_path, environment), daemon=True)
        proc.start()
        child.close()
        return _Slot(proc, parent)

    def retire(slot: _Slot) -> None:
        try:
            slot.conn.close()
        except OSError:
            pass
        if slot.proc.is_alive():
            slot.proc.kill()
        slot.proc.join(timeout=5)

    for _ in range(max(1, min(jobs, len(pending)))):
        slots.append(spawn())
    try:
        while pending or any(s.task is not None for s in slots):
            if deadline is not None and time.monotonic() > deadline:
                while pending:
                    task = pending.pop()
                    on_result(task, on_lost(task, NOT_STARTED))
            for s in slots:
                if s.task is None and pending:
                    s.task = pending.pop()
                    s.started = time.monotonic()
                    s.conn.send(s.task)
            busy = [s for s in slots if s.task is not None]
            ready = wait([s.conn for s in busy], timeout=0.5)
            now = time.monotonic()
            for i, s in enumerate(list(slots)):
                if s.task is None:
                    continue
                lost = None
                if s.conn in ready:
                    try:
                        kind, value = s.conn.recv()
                    except (EOFError, OSError):
                        code = s.proc.exitcode if not s.proc.is_alive() else None
                        s.proc.join(timeout=2)
                        code = s.proc.exitcode if code is None else code
                        lost = f"worker process died (exit code {code})"
                    else:
                        task, s.task = s.task, None
                        if kind == "ok":
                            on_result(task, value)
                        else:
                            on_result(task, on_lost(task, value.strip().splitlines()[0]))
                        continue
                elif now - s.started > timeout(s.task):
                    lost = f"timed out after {timeout(s.task):.0f} s"
                elif not s.proc.is_alive():
                    lost = f"worker process died (exit code {s.proc.exitcode})"
                if lost is not None:
                    task = s.task
                    retire(s)
                    slots[slots.index(s)] = spawn()
                    on_result(task, on_lost(task, lost))
    finally:
        for s in slots:
            try:
                s.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        deadline = time.monotonic() + 10
        for s in slots:
            s.proc.join(timeout=max(0.1, deadline - time.monotonic()))
            retire(s)

