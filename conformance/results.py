"""Result records: one per (case, target, device) cell, and the status rules.

A cell's raw outcome is ``ok`` (every output within tolerance) or a failure at a stage. The
limitation table then decides its status:

========  ============  ===================================================
ok        limited       status
========  ============  ===================================================
yes       no            ``pass``
no        no            ``fail``
no        yes           ``xfail`` (the reason is shown)
yes       yes           ``xpass``: strict, fails the run (remove the limitation)
========  ============  ===================================================

``skip`` cells (no GPU, runtime not installed) never count either way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

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
        reason: the limitation's reason (xfail/xpass) or why it was skipped.
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

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("max_abs", "max_rel"):
            if d[k] is not None and d[k] != d[k]:  # NaN -> string, JSON has no NaN
                d[k] = "nan"
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> "CellResult":
        d = dict(d)
        for k in ("max_abs", "max_rel"):
            if d.get(k) == "nan":
                d[k] = float("nan")
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


def classify(result: CellResult, limitation: str | None) -> CellResult:
    """Set ``status`` (and ``reason``) from the raw outcome and the limitation, if any."""
    if result.status == "skip":
        return result
    if limitation is None:
        result.status = "pass" if result.ok else "fail"
    else:
        result.reason = limitation
        result.status = "xpass" if result.ok else "xfail"
    return result
