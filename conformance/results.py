"""Result records: one per (case, target, device) cell, and the status rules.

A cell's raw outcome is ``ok`` (every output within tolerance) or a failure at a stage. The
limitation table then decides its status:

========  ===========================  =================================================
ok        limited                      status
========  ===========================  =================================================
yes       no                           ``pass``
no        no                           ``fail``
no        yes, fails as the row says   ``xfail`` (the reason is shown)
no        yes, fails another way       ``fail`` (the reason says what the row expected)
yes       yes                          ``xpass``: strict, fails the run (remove the row);
                                       ``pass`` where the row says the cell may pass
========  ===========================  =================================================

``skip`` cells (no GPU, runtime not installed) never count either way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

STAGES = ("export", "convert", "validate", "load", "run", "compare")
SYMBOLS = {"pass": "✓", "fail": "✗", "xfail": "xfail", "xpass": "XPASS", "skip": "skip", "not run": "–"}
BAD = frozenset({"fail", "xpass"})


@dataclass
class CellResult:
    """The outcome of one case on one target and device.

    Attributes:
        case, target, device: the cell.
        ok: True when every output matched the reference.
        stage: where it stopped (one of STAGES); "" when ok.
        error: one line; "" when ok.
        max_abs, max_rel: worst errors over all outputs and sizes (None when nothing was compared).
        seconds: wall time of the cell.
        status: pass / fail / xfail / xpass / skip (set by ``classify``).
        reason: the limitation's reason (xfail/xpass), what a limitation expected instead (fail),
            or why it was skipped.
        diffs: for a compare failure, one record per differing output and size set:
            ``{"output": i, "classes": [...], "count": n, "max_abs": x}`` (see ``conformance.elements``).
        route: the route the artifact was converted by (TFLite: ``xla`` or ``tf-ops``), '' for none.
    """

    case: str
    target: str
    device: str
    ok: bool = False
    stage: str = ""
    error: str = ""
    max_abs: float | None = None
    max_rel: float | None = None
    seconds: float = 0.0
    status: str = ""
    reason: str = ""
    ops: list[str] = field(default_factory=list)
    diffs: list[dict[str, Any]] = field(default_factory=list)
    route: str = ""

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("max_abs", "max_rel"):
            if d[k] is not None and d[k] != d[k]:  # NaN -> string, JSON has no NaN
                d[k] = "nan"
        for diff in d["diffs"]:
            if diff.get("max_abs") is not None and diff["max_abs"] != diff["max_abs"]:
                diff["max_abs"] = "nan"
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> "CellResult":
        d = dict(d)
        for k in ("max_abs", "max_rel"):
            if d.get(k) == "nan":
                d[k] = float("nan")
        d["diffs"] = [{**x, "max_abs": float("nan")} if x.get("max_abs") == "nan" else x for x in d.get("diffs", [])]
        known = set(CellResult.__dataclass_fields__)
        return CellResult(**{k: v for k, v in d.items() if k in known})

    @property
    def symbol(self) -> str:
        return SYMBOLS.get(self.status, self.status)


def one_line(text: str, limit: int = 240) -> str:
    """First non-empty line of ``text``, shortened to ``limit`` characters."""
    for line in str(text).strip().splitlines():
        if line.strip():
            line = " ".join(line.split())
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def failure(result: CellResult, stage: str, error: BaseException | str) -> CellResult:
    """Mark ``result`` as stopped at ``stage`` with a one-line error."""
    result.ok = False
    result.stage = stage
    if isinstance(error, BaseException):
        text = one_line(str(error))
        own = type(error).__module__.startswith("jaxconv")
        result.error = text if own and text else one_line(f"{type(error).__name__}: {text}")
    else:
        result.error = one_line(error)
    return result


class Expectation(Protocol):
    """What ``classify`` needs of a limitation row (``conformance.limitations.Limitation``)."""

    reason: str
    may_pass: bool

    def unexpected(self, result: CellResult) -> str | None:
        """None when ``result`` fails the way the row says; otherwise what was expected and what came."""


def classify(result: CellResult, limitation: Expectation | None) -> CellResult:
    """Set ``status`` (and ``reason``) from the raw outcome and the limitation row, if any.

    A limited cell is ``xfail`` only when it fails the way its row names (stage and message, or
    the outputs and element classes that differ); any other failure is a ``fail`` whose reason
    says what the row expected, so a new bug in a limited cell is seen.
    """
    if result.status == "skip":
        return result
    if limitation is None:
        result.status = "pass" if result.ok else "fail"
    elif result.ok:
        result.reason, result.status = ("", "pass") if limitation.may_pass else (limitation.reason, "xpass")
    else:
        why = limitation.unexpected(result)
        result.status = "fail" if why else "xfail"
        result.reason = f"limited ({limitation.reason}) but {why}" if why else limitation.reason
    return result
