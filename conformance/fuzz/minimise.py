"""Shrink a failing program to a small reproducer, keeping the failure's kind.

Delta debugging in four passes, each keeping a change only when the same kind of failure
remains:

1. keep only the failing output, or the earliest intermediate value that already differs, and
   drop the steps it does not need;
2. replace steps by inputs holding the values jax.jit computed for them, so the steps left
   are the ones whose conversion is wrong (usually one);
3. shrink input shapes (all inputs of one shape together), axis by axis;
4. replace input elements by a plain value (1, or index 0), chunk by chunk, keeping the
   offending ones.
"""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from conformance.fuzz.compare import Diff, compare_all
from conformance.fuzz.program import FLOATS, FuzzProgram, Step, infer_types
from conformance.fuzz.run import Invalid, attempt, reference


@dataclass
class Failure:
    """A program, inputs and what goes wrong (a Diff for mismatches, a message for crashes)."""

    program: FuzzProgram
    inputs: list[np.ndarray]
    status: str
    diff: Diff | None = None
    detail: str = ""
    expected: list[np.ndarray] = field(default_factory=list)
    actual: list[np.ndarray] = field(default_factory=list)


def signature(detail: str) -> str:
    """A crash message without numbers, addresses and node names, to tell one crash from another."""
    text = re.sub(r"0x[0-9a-fA-F]+|n_\w+", "N", detail)
    return re.sub(r"\d+", "#", text)[:90]


class Minimiser:
    """Runs candidates through ``attempt`` with a budget of tries and seconds."""

    def __init__(self, target: str, max_tries: int = 120, max_seconds: float = 40.0,
                 try_fn: Callable[..., tuple] = attempt) -> None:
        self.target = target
        self.tries_left = max_tries
        self.deadline = time.monotonic() + max_seconds
        self.try_fn = try_fn

    def exhausted(self) -> bool:
        return self.tries_left <= 0 or time.monotonic() > self.deadline

    def still_fails(self, program: FuzzProgram, inputs: list[np.ndarray], like: Failure) -> Failure | None:
        """The failure of the candidate when it is of the same kind as ``like``, else None."""
        if self.exhausted():
            return None
        self.tries_left -= 1
        try:
            status, diff, expected, actual, detail = self.try_fn(program, self.target, inputs)
        except Exception:  # noqa: BLE001  (a candidate the tools choke on is not a reduction)
            return None
        if status != like.status:
            return None
        if status == "crash" and signature(detail) != signature(like.detail):
            return None
        if status == "mismatch" and (diff is None or like.diff is None or not _same_kind(diff.kind, like.diff.kind)):
            return None
        return Failure(program, list(inputs), status, diff, detail, expected, actual)

    def structure(self, failure: Failure) -> Failure:
        """Passes 1 and 2: one output, and as few steps as still fail."""
        best = failure
        if len(best.program.outputs) > 1:
            if best.status == "mismatch" and best.diff is not None and best.diff.kind not in ("load-error", "run-error"):
                choices = [best.program.outputs[best.diff.output]]
            else:
                choices = list(reversed(best.program.outputs))
            for out in choices:
                p = best.program.copy()
                p.outputs = [out]
                got = self.still_fails(*_compact(p.prune(), best.inputs), best)
                if got is not None:
                    best = got
                    break
        best = self.earliest(best)
        changed = True
        while changed and not self.exhausted():
            changed = False
            try:
                values = intermediates(best.program, best.inputs)
            except Invalid:
                break
            for step in list(best.program.steps):
                if step.out in best.program.outputs and len(best.program.steps) == 1:
                    continue
                candidate = substitute(best.program, step, values)
                if candidate is None:
                    continue
                cand_prog, cand_inputs = _compact(candidate, best.inputs + [values[step.out]])
                got = self.still_fails(cand_prog, cand_inputs, best)
                if got is not None:
                    best, changed = got, True
                    break
        return self.earliest(best)

    def earliest(self, failure: Failure) -> Failure:
        """The program cut at the earliest value that already differs (or crashes), if any does.

        Run again after steps were replaced by values and after shapes shrank: a difference a later
        step only passes on (a -0 from a dot through top_k, where XLA's dot emitter depends on the
        shape) then shows at its source.
        """
        if failure.status not in ("mismatch", "crash"):
            return failure
        for step in failure.program.steps[:-1]:
            p = failure.program.copy()
            p.outputs = [step.out]
            got = self.still_fails(*_compact(p.prune(), failure.inputs), failure)
            if got is not None:
                return got
        return failure

    def shapes(self, failure: Failure) -> Failure:
        """Pass 3: slice inputs (grouped by shape) down along each axis."""
        best = failure
        progress = True
        while progress and not self.exhausted():
            progress = False
            groups: dict[tuple[int, ...], list[int]] = {}
            for k, i in enumerate(best.program.inputs):
                if not best.program.types[i].role:
                    groups.setdefault(best.program.types[i].shape, []).append(k)
            for shape, members in sorted(groups.items(), key=lambda kv: -int(np.prod(kv[0]) if kv[0] else 1)):
                for axis, extent in enumerate(shape):
                    if extent <= 1:
                        continue
                    for keep in _slices(extent, best, axis):
                        cand = _sliced(best, members, axis, keep)
                        if cand is None:
                            continue
                        got = self.still_fails(cand[0], cand[1], best)
                        if got is not None:
                            best, progress = got, True
                            break
                    if progress:
                        break
                if progress:
                    break
        return best

    def values(self, failure: Failure) -> Failure:
        """Pass 4: plain values wherever the failure does not need the original ones."""
        best = failure
        for k, i in enumerate(best.program.inputs):
            t = best.program.types[i]
            if t.dtype == "bool" or t.size <= 1 and not t.role:
                continue
            plain = 0 if t.role else 1
            chunk = max(1, t.size // 2)
            while chunk >= 1 and not self.exhausted():
                start = 0
                while start < t.size and not self.exhausted():
                    flat = np.array(best.inputs[k]).reshape(-1).copy()
                    before = flat[start:start + chunk].copy()
                    flat[start:start + chunk] = plain
                    if not np.array_equal(before, flat[start:start + chunk], equal_nan=False):
                        inputs = list(best.inputs)
                        inputs[k] = flat.reshape(best.inputs[k].shape).astype(best.inputs[k].dtype)
                        got = self.still_fails(best.program, inputs, best)
                        if got is not None:
                            best = got
                    start += chunk
                chunk //= 2
        return best


def _same_kind(new: str, old: str) -> bool:
    """Bitcast kinds (``last-bit``, ``nan-bits``) are refinements of ``value`` made after comparing."""
    return new == old or (new in ("value", "nan", "inf") and old in ("last-bit", "nan-bits"))


def _slices(extent: int, failure: Failure, axis: int) -> list[slice]:
    """Candidate ranges along an axis: the element the difference is at, then the first, then halves."""
    out: list[slice] = []
    if failure.diff is not None and len(failure.diff.index) > axis and failure.diff.index[axis] < extent:
        j = failure.diff.index[axis]
        out.append(slice(j, j + 1))
    out += [slice(0, 1), slice(extent - 1, extent), slice(0, extent // 2), slice(extent // 2, extent)]
    seen: list[slice] = []
    for s in out:
        if s not in seen and s.stop - s.start < extent:
            seen.append(s)
    return seen


def _sliced(failure: Failure, members: list[int], axis: int, keep: slice) -> tuple[FuzzProgram, list[np.ndarray]] | None:
    p = failure.program.copy()
    inputs = list(failure.inputs)
    for k in members:
        i = p.inputs[k]
        t = p.types[i]
        shape = list(t.shape)
        shape[axis] = keep.stop - keep.start
        p.types[i] = dataclasses.replace(t, shape=tuple(shape))
        index = [slice(None)] * len(t.shape)
        index[axis] = keep
        inputs[k] = np.asarray(inputs[k])[tuple(index)]
    typed = infer_types(p)
    if typed is None:
        return None
    return typed, inputs


def intermediates(program: FuzzProgram, inputs: list[np.ndarray]) -> dict[int, np.ndarray]:
    """jax.jit's value of every step."""
    p = program.copy()
    p.outputs = [s.out for s in p.steps]
    outs = reference(p, inputs)
    return dict(zip(p.outputs, outs))


def substitute(program: FuzzProgram, step: Step, values: dict[int, np.ndarray]) -> FuzzProgram | None:
    """The program with ``step`` replaced by a new last input holding its value."""
    if step.out not in values:
        return None
    p = program.copy()
    p.steps = [s for s in p.steps if s is not step]
    p.inputs = p.inputs + [step.out]
    return p


def replays(program: FuzzProgram | None, failure: "Failure", value: np.ndarray) -> bool | None:
    """Whether jax.jit runs ``program`` (from ``substitute``) to the artifact's outputs when the replaced
    step's value is ``value``; None when JAX rejects the program."""
    try:
        moved = reference(program, list(failure.inputs) + [value])
    except Invalid:
        return None
    return compare_all(moved, failure.actual) is None


def _compact(program: FuzzProgram, inputs: list[np.ndarray]) -> tuple[FuzzProgram, list[np.ndarray]]:
    """Prune dead steps and unread inputs, keeping ``inputs`` aligned."""
    pruned, keep = program.prune().drop_unused_inputs()
    return pruned, [inputs[k] for k in keep]


def minimise(failure: Failure, target: str, full: bool = True, max_tries: int = 120, max_seconds: float = 40.0,
             try_fn: Callable[..., tuple] = attempt) -> Failure:
    """A smaller program and inputs with the same kind of failure (``full=False``: structure only)."""
    m = Minimiser(target, max_tries, max_seconds, try_fn)
    best = m.structure(failure)
    if full:
        best = m.shapes(best)
        best = m.values(best)
        best = m.earliest(best)  # smaller shapes can make an earlier value differ on its own
    return best


def flush_subnormals(inputs: list[np.ndarray], below: str = "tiny") -> list[np.ndarray] | None:
    """Inputs with subnormal floats replaced by zeros of the same sign; None when there are none.

    ``below="sqrt-tiny"`` flushes every magnitude whose square is subnormal: inputs that make
    subnormal intermediates.
    """
    import ml_dtypes

    out, changed = [], False
    for a in inputs:
        a = np.asarray(a)
        if a.dtype.name in FLOATS:
            tiny = float(ml_dtypes.finfo(a.dtype).tiny)
            if below == "sqrt-tiny":
                tiny = float(np.sqrt(tiny))
            wide = a.astype(np.float64)
            sub = (wide != 0) & (np.abs(wide) < tiny)
            if sub.any():
                changed = True
                a = np.where(sub, np.copysign(0.0, wide), wide).astype(a.dtype)
        out.append(a)
    return out if changed else None
