"""The conformance report: report.json (the record), REPORT.md (the matrix) and report.html (a heatmap).

``compare_reports`` backs ``--check``: CI re-runs the suite and fails when a cell's status
differs from the committed report.json.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import os
from typing import Any, Iterable, Mapping, Sequence

from conformance.limitations import lookup
from conformance.results import BAD, CellResult, classify
from conformance.targets import TARGETS
from conformance.testdata import DYNAMIC_SIZE, RAN_LABEL, FileResult, summarize
from conformance.testdata import STATUSES as TESTDATA_STATUSES

HERE = os.path.dirname(os.path.abspath(__file__))
JSON_PATH = os.path.join(HERE, "report.json")
MD_PATH = os.path.join(HERE, "REPORT.md")
HTML_PATH = os.path.join(HERE, "report.html")
STATUSES = ("pass", "fail", "xfail", "xpass", "skip")


def today() -> str:
    return _dt.date.today().isoformat()


def versions() -> dict[str, str]:
    """Versions of the libraries the results depend on (absent ones are left out)."""
    from importlib import metadata

    out = {}
    for dist in ("jax", "jaxlib", "tensorflow-cpu", "tensorflow", "onnx", "onnxruntime", "ai-edge-litert", "flax", "equinox"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def summary(cells: Iterable[CellResult]) -> dict[str, dict[str, dict[str, int]]]:
    """Counts of each status per target and device."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for c in cells:
        row = out.setdefault(c.target, {}).setdefault(c.device, {s: 0 for s in STATUSES})
        row[c.status] = row.get(c.status, 0) + 1
    return out


def route_table(cells: Iterable[CellResult]) -> list[str]:
    """REPORT.md lines: per target with routes (TFLite: xla, tf-ops), how many cells of each status each
    route gave; "none" counts cells where every route failed before an artifact existed."""
    counts: dict[tuple[str, str, str], dict[str, int]] = {}
    routed = {c.target for c in cells if c.route}
    for c in cells:
        if c.target in routed and c.status != "skip":
            row = counts.setdefault((c.target, c.device, c.route or "none"), {s: 0 for s in STATUSES})
            row[c.status] = row.get(c.status, 0) + 1
    if not counts:
        return []
    lines = ["", "### Per route", "",
             "`tflite` runs `to_tflite(route=\"auto\")`: the xla route (jax2tf), else tf-ops (jaxconv's "
             "ONNX as plain TF ops) when xla fails to convert, to run, or to match jax.jit; `saved-model` takes "
             "tf-ops for LAPACK calls. Each cell counts under the route its artifact came from.", "",
             "| target | device | route | ✓ pass | ✗ fail | xfail | XPASS |",
             "|---|---|---|---|---|---|---|"]
    for (t, d, r), row in sorted(counts.items()):
        lines.append(f"| {t} | {d} | {r} | {row['pass']} | {row['fail']} | {row['xfail']} | {row['xpass']} |")
    return lines


def coverage(cells: Iterable[CellResult]) -> dict[str, list[str]]:
    """Registered lowerings no case exercises, and ops the cases meet that have no lowering."""
    from jaxconv.onnx.registry import all_lowerings

    seen: set[str] = set()
    for c in cells:
        seen.update(c.ops)
    registered = set(all_lowerings())
    return {"registered_not_exercised": sorted(registered - seen),
            "seen_not_registered": sorted(seen - registered - {"func.call", "func.return", "stablehlo.return"})}


def gpu_note(cells: Sequence[CellResult], date: str, gpu_file: Mapping[str, Any] | None) -> str:
    if gpu_file is not None:
        return f"run on {gpu_file.get('device', 'a GPU')} ({gpu_file.get('date', date)})"
    if any(c.device == "gpu" and c.status not in ("skip",) for c in cells):
        return f"run ({date})"
    return f"not run: no GPU lent ({date})"


def _not_in_the_gpu_run(cell: CellResult, ran: str) -> CellResult:
    """A GPU cell the GPU run did not hold: skipped, saying which targets that run covered."""
    if cell.status != "skip":
        return cell
    return CellResult(cell.case, cell.target, cell.device, status="skip",
                      reason=f"not in the GPU run (it ran {ran or 'no target'})")


def build(cells: Sequence[CellResult], cases: Mapping[str, Any], testdata: Sequence[FileResult] | None, *,
          targets: Sequence[str], devices: Sequence[str], gpu_file: Mapping[str, Any] | None = None,
          seconds: float = 0.0) -> dict[str, Any]:
    """The report as a JSON-ready dict."""
    date = today()
    cells = list(cells)
    if gpu_file is not None:
        # Classified again by today's limitation table: a row added after the GPU run applies to its cells.
        gpu_cells = {(c["case"], c["target"]): classify(r, lookup(r.case, r.target, r.device))
                     for c in gpu_file.get("cells", []) for r in [CellResult.from_json(c)]}
        ran = ", ".join(gpu_file.get("targets", []))
        cells = [gpu_cells.get((c.case, c.target), _not_in_the_gpu_run(c, ran)) if c.device == "gpu" else c
                 for c in cells]
    ops: dict[str, list[str]] = {}
    for c in cells:
        if c.ops:
            ops[c.case] = c.ops
    return {
        "date": date,
        "versions": versions(),
        "targets": list(targets),
        "devices": list(devices),
        "gpu": gpu_note(cells, date, gpu_file),
        "seconds": round(seconds, 1),
        "summary": summary(cells),
        "coverage": coverage(cells),
        "cases": {name: {"family": c.family, "tags": sorted(c.tags), "ops": ops.get(name, [])}
                  for name, c in sorted(cases.items())},
        "cells": [_record(c.to_json(), drop=("ops",)) for c in cells],
        "testdata": None if testdata is None else {
            "root": "../shared/stablehlo-testdata",
            "summary": summarize(testdata),
            "files": [_record(r.to_json()) for r in testdata],
        },
    }


def dumps(value: Any, indent: int = 0, width: int = 160) -> str:
    """JSON with one short container per line (records stay on one line: small, readable diffs)."""
    flat = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if not isinstance(value, (dict, list)) or len(flat) + indent <= width:
        return flat
    pad = " " * (indent + 1)
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(k, ensure_ascii=False)}: {dumps(v, indent + 1, width)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + dumps(v, indent + 1, width) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


_DEFAULTS = {"ok": False, "stage": "", "error": "", "reason": "", "max_abs": None, "max_rel": None, "checks": 0, "diffs": [],
             "reference": ""}


def _record(d: Mapping[str, Any], drop: Sequence[str] = ()) -> dict[str, Any]:
    """A result without timing and default-valued fields (smaller, stable diffs between runs)."""
    return {k: v for k, v in d.items() if k not in drop and k != "seconds" and not (k in _DEFAULTS and v == _DEFAULTS[k])}


def write_json(report: Mapping[str, Any], path: str = JSON_PATH) -> None:
    from jaxconv.artifacts import atomic_file

    with atomic_file(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(dumps(report) + "\n")


def _write_text(path: str, text: str) -> None:
    from jaxconv.artifacts import atomic_file

    with atomic_file(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)


def _cells(report: Mapping[str, Any]) -> list[CellResult]:
    return [CellResult.from_json(c) for c in report["cells"]]


def _symbol(c: CellResult | None) -> str:
    if c is None:
        return ""
    return {"pass": "✓", "fail": "✗", "xfail": "xfail", "xpass": "XPASS", "skip": "skip"}.get(c.status, c.status)


def markdown(report: Mapping[str, Any]) -> str:
    """REPORT.md: summary per target, the case x target x device matrix, failures, limitations, test data."""
    cells = _cells(report)
    targets, devices = report["targets"], report["devices"]
    gpu_ran = any(c.device == "gpu" and c.status != "skip" for c in cells)
    lines = ["# jaxconv conformance report", "",
             f"Generated {report['date']} by `python -m conformance` "
             f"({', '.join(f'{k} {v}' for k, v in report['versions'].items())}).", "",
             "Each case is declared once (`conformance/cases/`) and run on every target; the reference is `jax.jit` on the "
             "same device. ✓ matches, ✗ differs or fails (the stage and error are listed below), xfail is a declared "
             "limitation (`conformance/limitations.py`) failing the way its row names (stage and error, or the outputs and "
             "element classes that differ; failing any other way is ✗), XPASS is a limitation that now passes (it fails the run).", "",
             f"GPU: {report['gpu']}.", "", "## Summary per target", "",
             "| target | device | ✓ pass | ✗ fail | xfail | XPASS | skip | pass rate |", "|---|---|---|---|---|---|---|---|"]
    for t in targets:
        for d in devices:
            row = report["summary"].get(t, {}).get(d)
            if not row or (d == "gpu" and not gpu_ran):
                continue
            run = row["pass"] + row["fail"] + row["xfail"] + row["xpass"]
            rate = f"{100.0 * (row['pass'] + row['xpass']) / run:.1f}%" if run else "–"
            lines.append(f"| {t} | {d} | {row['pass']} | {row['fail']} | {row['xfail']} | {row['xpass']} | {row['skip']} | {rate} |")
    if "gpu" in devices and not gpu_ran:
        lines.append(f"| all | gpu | {report['gpu']} | | | | | |")
    lines += route_table(cells)
    cov = report.get("coverage", {})
    if cov:
        lines += ["", f"Registered ONNX lowerings no case exercises: {', '.join(cov['registered_not_exercised']) or 'none'}.", "",
                  f"StableHLO ops the cases use that have no ONNX lowering: {', '.join(cov['seen_not_registered']) or 'none'}."]
    lines += ["", "## Matrix", ""]
    cpu_cols = [(t, "cpu") for t in targets if "cpu" in devices]
    gpu_cols = [(t, "gpu") for t in targets if "gpu" in devices] if gpu_ran else []
    head = ["case", "family"] + [f"{t}" for t, _ in cpu_cols] + [f"{t} (gpu)" for t, _ in gpu_cols]
    if "gpu" in devices and not gpu_ran:
        head.append(f"gpu: {report['gpu']}")
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    index = {(c.case, c.target, c.device): c for c in cells}
    case_names = list(dict.fromkeys(c.case for c in cells))
    for name in sorted(case_names):
        family = report["cases"].get(name, {}).get("family", "")
        row = [f"`{name}`", family] + [_symbol(index.get((name, t, d))) for t, d in cpu_cols + gpu_cols]
        if "gpu" in devices and not gpu_ran:
            row.append("skip")
        lines.append("| " + " | ".join(row) + " |")
    bad = [c for c in cells if c.status in BAD]
    lines += ["", f"## Failures ({len(bad)})", ""]
    if bad:
        lines += ["| case | target | device | stage | error |", "|---|---|---|---|---|"]
        for c in sorted(bad, key=lambda c: (c.target, c.case)):
            err = "limitation passes: delete its row in limitations.py" if c.status == "xpass" else \
                f"{c.error} ({c.reason})" if c.reason else c.error
            lines.append(f"| `{c.case}` | {c.target} | {c.device} | {c.stage} | {_md(err)} |")
    xf = [c for c in cells if c.status == "xfail"]
    lines += ["", f"## Expected failures ({len(xf)})", ""]
    if xf:
        lines += ["| case | target | device | reason | stage: error |", "|---|---|---|---|---|"]
        for c in sorted(xf, key=lambda c: (c.target, c.case)):
            lines.append(f"| `{c.case}` | {c.target} | {c.device} | {_md(c.reason)} | {c.stage}: {_md(c.error)} |")
    lines += testdata_markdown(report.get("testdata"))
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def testdata_markdown(td: Mapping[str, Any] | None) -> list[str]:
    if not td:
        return ["", "## StableHLO test data", "", "Not run (`--no-testdata`)."]
    s = td["summary"]
    t = {k: s["total"].get(k, 0) for k in TESTDATA_STATUSES}
    n = sum(t.values())
    lines = ["", "## StableHLO test data", "",
             f"{n} modules from `{td['root']}` lowered to ONNX and run in ONNX Runtime on their own `@inputs`, each checked "
             f"result compared with `@expected`: **{t['pass']} pass, {t['fail']} fail, {t['unsupported']} unsupported, "
             f"{t['ran']} ran with no expectations to compare**. A file passes only when its results match its expectations: "
             "its own `@expected`, or, for a dynamic/ file without one, XLA's results on the CPU for the same inputs (every "
             f"dynamic dimension {DYNAMIC_SIZE}). A file XLA cannot run that way only converts and runs ({RAN_LABEL}); "
             "quantized/ files run the module that defines `@main`, its constants as inputs.", "",
             f"| kind | pass | {RAN_LABEL} | fail | unsupported |", "|---|---|---|---|---|"]
    for kind, row in s["by_kind"].items():
        lines.append(f"| {kind} | " + " | ".join(str(row.get(k, 0)) for k in TESTDATA_STATUSES) + " |")
    lines += ["", "Most common reasons:", "", "| files | stage: reason |", "|---|---|"]
    for reason, count in s["top_reasons"]:
        lines.append(f"| {count} | {_md(reason)} |")
    lines += ["", "Per op family:", "", f"| family | pass | {RAN_LABEL} | fail | unsupported |", "|---|---|---|---|---|"]
    for fam, row in s["by_family"].items():
        lines.append(f"| {fam} | " + " | ".join(str(row.get(k, 0)) for k in TESTDATA_STATUSES) + " |")
    return lines


_COLORS = {"pass": "#2e7d32", "ran": "#90caf9", "fail": "#c62828", "xfail": "#f9a825", "xpass": "#6a1b9a", "skip": "#bdbdbd", "": "#eeeeee"}


def html_page(report: Mapping[str, Any]) -> str:
    """report.html: a heatmap of the matrix and of the test data families (no extra packages)."""
    cells = _cells(report)
    index = {(c.case, c.target, c.device): c for c in cells}
    gpu_ran = any(c.device == "gpu" and c.status != "skip" for c in cells)
    cols = [(t, d) for d in report["devices"] for t in report["targets"] if d != "gpu" or gpu_ran]
    out = ["<!doctype html><meta charset='utf-8'><title>jaxconv conformance</title><style>",
           "body{font:13px sans-serif;margin:20px}table{border-collapse:collapse}td,th{padding:1px 4px}"
           "td.c{width:34px;height:12px}th.r{text-align:left;font-weight:normal;font-family:monospace}"
           ".k span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}</style>",
           f"<h1>jaxconv conformance</h1><p>{html.escape(report['date'])} · GPU: {html.escape(report['gpu'])}</p><p class='k'>",
           "".join(f"<span style='background:{_COLORS[s]}'></span>{s}" for s in STATUSES), "</p><table><tr><th></th>",
           "".join(f"<th>{html.escape(t)}<br>{d}</th>" for t, d in cols), "</tr>"]
    for name in sorted(dict.fromkeys(c.case for c in cells)):
        row = [f"<tr><th class='r'>{html.escape(name)}</th>"]
        for t, d in cols:
            c = index.get((name, t, d))
            status = c.status if c else ""
            tip = "" if status == "pass" else f"{status}" + (f" at {c.stage}: {c.error}" if c and c.error else "") + \
                (f" ({c.reason})" if c and c.reason else "")
            title = f" title='{html.escape(tip, quote=True)}'" if tip else ""
            row.append(f"<td class='c' style='background:{_COLORS.get(status, '#eee')}'{title}></td>")
        out.append("".join(row) + "</tr>")
    out.append("</table>")
    td = report.get("testdata")
    if td:
        out.append("<h2>StableHLO test data per family</h2><table>")
        for fam, row in td["summary"]["by_family"].items():
            n = max(1, sum(row.get(k, 0) for k in TESTDATA_STATUSES))
            bar = "".join(f"<span style='display:inline-block;height:10px;width:{200 * row.get(k, 0) / n:.0f}px;background:{col}'></span>"
                          for k, col in (("pass", _COLORS["pass"]), ("ran", _COLORS["ran"]), ("fail", _COLORS["fail"]),
                                         ("unsupported", _COLORS["skip"])))
            out.append(f"<tr><th class='r'>{html.escape(fam)}</th><td>{bar}</td><td>{row['pass']}/{n}</td></tr>")
        out.append("</table>")
    return "\n".join(out) + "\n"  # one line per table row: a readable file, and diffs of one row


def write_all(report: Mapping[str, Any], folder: str = HERE) -> list[str]:
    """Write report.json, REPORT.md and report.html into ``folder``; returns their paths."""
    paths = [os.path.join(folder, "report.json"), os.path.join(folder, "REPORT.md"), os.path.join(folder, "report.html")]
    write_json(report, paths[0])
    _write_text(paths[1], markdown(report))
    _write_text(paths[2], html_page(report))
    return paths


def load(path: str = JSON_PATH) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _detail(record: Mapping[str, Any]) -> str:
    """`` at stage: error`` (or `` (error)`` when there is no stage) for a --check line."""
    error, stage = record.get("error", ""), record.get("stage", "")
    return f" at {stage}: {error}" if error and stage else f" ({error})" if error else ""


def compare_reports(run: Mapping[str, Any], committed: Mapping[str, Any]) -> list[str]:
    """Differences in status between a run and the committed report (only what the run covered)."""
    diffs: list[str] = []
    old = {(c["case"], c["target"], c["device"]): c for c in committed.get("cells", [])}
    for c in run.get("cells", []):
        key = (c["case"], c["target"], c["device"])
        before = old.get(key)
        if before is None:
            diffs.append(f"{'/'.join(key)}: {c['status']} (not in the committed report)")
        elif before["status"] != c["status"]:
            diffs.append(f"{'/'.join(key)}: committed {before['status']}, now {c['status']}{_detail(c)}")
    if run.get("testdata") and committed.get("testdata"):
        old_files = {f["file"]: f for f in committed["testdata"]["files"]}
        for f in run["testdata"]["files"]:
            before = old_files.get(f["file"])
            if before is None:
                diffs.append(f"testdata {f['file']}: {f['status']} (not in the committed report)")
            elif before["status"] != f["status"]:
                diffs.append(f"testdata {f['file']}: committed {before['status']}, now {f['status']}{_detail(f)}")
    return diffs


__all__ = ["TARGETS", "build", "compare_reports", "html_page", "load", "markdown", "write_all"]
