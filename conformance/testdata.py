"""The StableHLO test data suite: self-checking modules from openxla/stablehlo, run through ONNX.

Each top-level file's ``@main`` calls ``@inputs`` and ``@expected`` (constants), computes a
result and checks it with ``custom_call @check.*``. Here ``@main`` is rebuilt as a new entry
function whose arguments are the values ``@inputs`` returns (real graph inputs, never folded
into constants) and whose results are the checked values; it is lowered with jaxconv's
StableHLO -> ONNX lowering, run in ONNX Runtime on the ``@inputs`` values, and each result is
compared with ``@expected`` as its check says (``expect_eq``/``eq`` exactly,
``expect_close``/``expect_almost_eq`` within the dtype's tolerance).

A ``dynamic/`` file that checks its results (``@expected``, ``check.*``) is compared the same
way. One without expectations runs on inputs whose ``?`` dimensions (and scalar integer
dimension arguments) are all ``DYNAMIC_SIZE``, and its results are compared with XLA's on the
same inputs (``conformance.xla_reference``); where XLA cannot run the specialized module there
is nothing to compare with, and the file counts as ``ran`` ("ran, no expectations"), never as
``pass``. A ``quantized/`` file holds several modules (``-split-input-file``); the one that
defines ``@main`` is run, and having no ``@inputs``, the constants its computation uses become
its inputs (as StableHLO's test data generator reads them).

The data is read in place from ``../shared/stablehlo-testdata`` (relative to the repository
root) or ``$JAXCONV_STABLEHLO_TESTDATA``; it is never copied into the project.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from conformance.results import one_line

ENV = "JAXCONV_STABLEHLO_TESTDATA"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DYNAMIC_SIZE = 3
BITCAST_OPSET = 26  # the first opset whose ONNX can read a float's bits (BitCast)
FILE_TIMEOUT_S = 60.0
ENTRY = "conformance_entry"
EXACT_CHECKS = frozenset({"check.expect_eq", "check.eq"})
CLOSE_CHECKS = frozenset({"check.expect_close", "check.expect_almost_eq"})
STATUSES = ("pass", "ran", "fail", "unsupported")
RAN_LABEL = "ran, no expectations"
_DTYPE_WORDS = ("bfloat16", "float16", "float32", "float64", "float8", "int8", "int16", "int32", "int64", "uint8", "uint16",
                "uint32", "uint64", "bool", "complex64", "complex128", "i1", "ui", "si")


def default_root() -> str:
    """Where the test data lives: $JAXCONV_STABLEHLO_TESTDATA, else ../shared/stablehlo-testdata."""
    env = os.environ.get(ENV)
    if env:
        return os.path.abspath(env)
    return os.path.normpath(os.path.join(REPO_ROOT, "..", "shared", "stablehlo-testdata"))


@dataclass
class FileResult:
    """The outcome of one test data file.

    Attributes:
        file: path relative to the data root (``dynamic/add_dynamic.mlir``).
        family: op family (file name before the dtype), e.g. ``cumsum``, ``scatter_add``.
        kind: ``checked``, ``dynamic`` or ``quantized``.
        status: ``pass`` (every checked result matched), ``ran`` (converted and ran; the file has no
            expectations to compare with), ``fail`` or ``unsupported``.
        stage: where it stopped (read, build, convert, validate, load, run, compare); "" on pass.
        error: one line; "" on pass.
        checks: number of checked results compared.
        max_abs: worst absolute error over the close checks.
        reference: what the results were compared with: ``expected`` (the file's own
            ``@expected``), ``xla`` (XLA's result for a dynamic/ file at ``DYNAMIC_SIZE``), or ""
            (nothing: ``ran``; ``error`` then says why XLA gave no reference).
    """

    file: str
    family: str
    kind: str
    status: str = "fail"
    stage: str = ""
    error: str = ""
    checks: int = 0
    max_abs: float | None = None
    reference: str = ""
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        if d["max_abs"] is not None and d["max_abs"] != d["max_abs"]:
            d["max_abs"] = "nan"
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> "FileResult":
        known = set(FileResult.__dataclass_fields__)
        return FileResult(**{k: v for k, v in d.items() if k in known})


def family_of(rel: str) -> str:
    """The op family: the file name before its dtype token (``add_any_float32_2_float32_2`` -> ``add_any``)."""
    stem = os.path.basename(rel)[: -len(".mlir")] if rel.endswith(".mlir") else os.path.basename(rel)
    tokens = stem.split("_")
    if rel.startswith("dynamic/") and tokens[-1] == "dynamic":
        tokens = tokens[:-1]
    if rel.startswith("quantized/") and tokens and re.fullmatch(r"q[ui]\d+", tokens[-1]):
        tokens = tokens[:-1]
    cut = next((i for i, t in enumerate(tokens) if i > 0 and (t.startswith(_DTYPE_WORDS) or t.isdigit() or t == "")), len(tokens))
    return "_".join(tokens[:cut]) or stem


def list_files(root: str) -> list[str]:
    """Every ``.mlir`` under ``root`` as relative paths: top level, then dynamic/, then quantized/."""
    out: list[str] = []
    for sub in ("", "dynamic", "quantized"):
        folder = os.path.join(root, sub)
        if not os.path.isdir(folder):
            continue
        out.extend(os.path.join(sub, f) if sub else f for f in sorted(os.listdir(folder)) if f.endswith(".mlir"))
    return out


def kind_of(rel: str) -> str:
    if rel.startswith("quantized/"):
        return "quantized"
    if rel.startswith("dynamic/"):
        return "dynamic"
    return "checked"


class _Stop(Exception):
    def __init__(self, stage: str, error: BaseException | str, unsupported: bool = False) -> None:
        super().__init__(str(error))
        self.stage, self.error, self.unsupported = stage, error, unsupported


def _staged(stage: str, fn, *args: Any) -> Any:
    try:
        return fn(*args)
    except _Stop:
        raise
    except Exception as e:  # noqa: BLE001  (every failure is a result)
        from jaxconv.errors import UnsupportedError

        raise _Stop(stage, e, isinstance(e, UnsupportedError)) from e


def constant_values(fn: Any) -> list[np.ndarray]:
    """The values a constant-only function (``@inputs``/``@expected``) returns."""
    values: dict[int, np.ndarray] = {}
    for op in fn.body.ops:
        if op.name != "stablehlo.constant":
            raise ValueError(f"@{fn.name} computes its values ({op.name}); only constants are read")
        values[op.results[0].id] = np.asarray(op.attrs["value"])
    out = []
    for v in fn.body.returns:
        if v.id not in values:
            raise ValueError(f"@{fn.name} returns an argument")
        out.append(np.broadcast_to(values[v.id], tuple(v.type.shape)).copy() if values[v.id].shape != tuple(v.type.shape)
                   else values[v.id])
    return out


@dataclass
class CheckedEntry:
    """An entry function built from a self-checking ``@main``.

    Attributes:
        inputs: the ``@inputs`` values, one per entry argument.
        checks: (check name, index of the entry result that is checked, expected value or the
            index of an entry result that computes it).
    """

    inputs: list[np.ndarray]
    checks: list[tuple[str, int, Any]] = field(default_factory=list)


def build_checked_entry(module: Any) -> CheckedEntry:
    """Add ``conformance_entry`` to ``module``: the @main computation with @inputs as arguments."""
    from jaxconv.stablehlo import ir as hir

    main = module.functions["main"]
    args: list[Any] = []
    inputs: list[np.ndarray] = []
    known: dict[int, np.ndarray] = {}
    kept: list[Any] = []
    raw_checks: list[tuple[str, Any, Any]] = []
    for op in main.body.ops:
        callee = op.attrs.get("callee") if op.name == "func.call" else None
        if callee == "inputs":
            values = constant_values(module.functions["inputs"])
            args.extend(op.results)
            inputs.extend(values)
        elif callee == "expected":
            for v, value in zip(op.results, constant_values(module.functions["expected"])):
                known[v.id] = value
        elif op.name == "stablehlo.custom_call" and str(op.attrs.get("call_target_name", "")).startswith("check."):
            if len(op.operands) != 2:
                raise ValueError(f"{op.attrs['call_target_name']} with {len(op.operands)} operands")
            raw_checks.append((op.attrs["call_target_name"], op.operands[0], op.operands[1]))
        else:
            if op.name == "stablehlo.constant":
                known[op.results[0].id] = np.asarray(op.attrs["value"])
            kept.append(op)
    if not raw_checks:
        raise ValueError("@main has no check.* custom_call")
    if not any(op.name == "func.call" and op.attrs.get("callee") == "inputs" for op in main.body.ops):
        kept = _constants_as_inputs(kept, args, inputs, known)
    returns: list[Any] = []
    entry = CheckedEntry(inputs=inputs)
    for name, actual, expected in raw_checks:
        returns.append(actual)
        index = len(returns) - 1
        if expected.id in known:
            entry.checks.append((name, index, known[expected.id]))
        else:
            returns.append(expected)
            entry.checks.append((name, index, len(returns) - 1))
    module.functions[ENTRY] = hir.Function(name=ENTRY, body=hir.Block(args=args, ops=kept, returns=returns))
    return entry


def _constants_as_inputs(kept: list[Any], args: list[Any], inputs: list[np.ndarray],
                         known: dict[int, np.ndarray]) -> list[Any]:
    """Without ``@inputs``, the constants the computation uses are its inputs (as StableHLO's
    test data generator reads them); constants only a check uses stay expected values."""
    used = {v.id for op in kept for v in op.operands}
    out = []
    for op in kept:
        if op.name == "stablehlo.constant" and op.results[0].id in used:
            args.append(op.results[0])
            inputs.append(np.asarray(op.attrs["value"]))
            known.pop(op.results[0].id, None)
        else:
            out.append(op)
    return out


def _graph_io(fn: Any) -> tuple[list[Any], list[Any]]:
    from jaxconv.onnx.driver import GraphIO

    inputs = [GraphIO(f"input_{i}", a.type.dtype, tuple(d if d is not None else f"d{i}_{k}" for k, d in enumerate(a.type.shape)), i)
              for i, a in enumerate(fn.body.args)]
    outputs = [GraphIO(f"result_{i}", v.type.dtype, tuple(d if d is not None else f"r{i}_{k}" for k, d in enumerate(v.type.shape)))
               for i, v in enumerate(fn.body.returns)]
    return inputs, outputs


def _lower(module: Any, entry: str, opset: int | None = None) -> Any:
    from jaxconv.onnx.convert import validate
    from jaxconv.onnx.driver import DEFAULT_OPSET, lower_module

    inputs, outputs = _graph_io(module.functions[entry])
    model = _staged("convert", lambda: lower_module(module, inputs=inputs, outputs=outputs, entry=entry,
                                                    opset=opset or DEFAULT_OPSET, graph_name="testdata"))
    _staged("validate", validate, model)
    return model


def _as_float(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) if a.dtype.kind != "c" else a.astype(np.complex128)


def compare_check(check: str, expected: np.ndarray, actual: np.ndarray) -> tuple[bool, float, str]:
    """(ok, max abs error, note) for one check."""
    from jaxconv.compare import compare

    actual = np.asarray(actual)
    if actual.shape != expected.shape:
        return False, float("inf"), f"shape {list(actual.shape)} != {list(expected.shape)}"
    if check in EXACT_CHECKS:
        if expected.dtype.kind in "fc" or expected.dtype.name == "bfloat16":
            e, a = _as_float(expected), _as_float(actual)
            with np.errstate(invalid="ignore"):
                diff = np.where(np.isnan(e) & np.isnan(a), 0.0, np.abs(e - a))
            worst = float(np.nanmax(diff)) if diff.size else 0.0
            ok = bool(np.array_equal(e, a, equal_nan=True))
        else:
            diff = np.abs(expected.astype(np.float64) - actual.astype(np.float64))
            worst = float(diff.max()) if diff.size else 0.0
            ok = bool(np.array_equal(expected, actual))
        return ok, worst, "" if ok else f"not exactly equal (max abs err {worst:.3g})"
    with np.errstate(all="ignore"):
        row = compare("result", expected, actual)
    return row.ok, row.max_abs, "" if row.ok else f"max abs err {row.max_abs:.3g}, max rel err {row.max_rel:.3g} {row.note}".strip()


def _dynamic_inputs(fn: Any, rng: np.random.Generator) -> list[np.ndarray]:
    from jaxconv.check_inputs import random_array

    out = []
    for a in fn.body.args:
        shape = tuple(DYNAMIC_SIZE if d is None else d for d in a.type.shape)
        if not shape and a.type.dtype.startswith(("int", "uint")):
            out.append(np.array(DYNAMIC_SIZE, dtype=a.type.dtype))
        else:
            out.append(random_array(_Info(a.type.dtype), shape, rng))
    return out


@dataclass(frozen=True)
class _Info:
    dtype: str


def run_file(path: str, root: str | None = None) -> FileResult:
    """Convert, run and check one test data file; never raises for a failing file."""
    root = root or default_root()
    full = path if os.path.isabs(path) else os.path.join(root, path)
    rel = os.path.relpath(full, root)
    result = FileResult(file=rel, family=family_of(rel), kind=kind_of(rel))
    start = time.perf_counter()
    try:
        result.status = _run(full, result)
    except _Stop as stop:
        text = _stop_text(stop)
        result.status = "unsupported" if stop.unsupported else "fail"
        result.stage, result.error = stop.stage, text
        opset = _higher_opset(stop, text)
        if opset is not None:
            result = _retry(full, rel, result, opset)
    result.seconds = round(time.perf_counter() - start, 3)
    return result


def _stop_text(stop: "_Stop") -> str:
    err = stop.error
    if isinstance(err, BaseException):
        own = type(err).__module__.startswith("jaxconv")
        return one_line(str(err)) if own else one_line(f"{type(err).__name__}: {err}")
    return one_line(err)


def _higher_opset(stop: "_Stop", text: str) -> int | None:
    """The opset to try again at: the one an unsupported construct asks for, or BitCast's for a
    result that differs (a NaN's sign bit can only be read from opset 26 on)."""
    from jaxconv.onnx.driver import DEFAULT_OPSET

    m = re.search(r"use --opset (\d+)", text)
    if stop.stage == "convert" and m:
        return int(m.group(1))
    if stop.stage == "compare" and DEFAULT_OPSET < BITCAST_OPSET:
        return BITCAST_OPSET
    return None


def _retry(full: str, rel: str, first: FileResult, opset: int) -> FileResult:
    """Run the file again at ``opset``; a pass there is kept, with the default opset's failure noted."""
    again = FileResult(file=rel, family=first.family, kind=first.kind)
    try:
        again.status = _run(full, again, opset)
    except _Stop:
        return first
    again.error = one_line(f"passes at opset {opset} only; at the default opset: {first.stage}: {first.error}")
    return again


def main_module_text(text: str) -> str:
    """The module holding ``@main`` in a ``-split-input-file`` file (quantized/ files hold several)."""
    chunks = [c for c in text.split("\n// -----") if "func.func @main" in c or "func.func public @main" in c]
    if len(chunks) != 1:
        raise ValueError(f"{len(chunks)} modules define @main")
    return chunks[0]


def has_expectations(module: Any) -> bool:
    """Whether ``@main`` checks its results (a ``check.*`` custom_call)."""
    main = module.functions.get("main")
    return main is not None and any(
        op.name == "stablehlo.custom_call" and str(op.attrs.get("call_target_name", "")).startswith("check.")
        for op in main.body.ops)


def _run(full: str, result: FileResult, opset: int | None = None) -> str:
    """Convert, run and (where the file has expectations) compare; returns ``pass`` or ``ran``."""
    from jaxconv.runtimes.onnxrt import OnnxRunner
    from jaxconv.stablehlo.reader import read_module

    def read() -> str:
        with open(full, encoding="utf-8") as f:
            return f.read()

    text = _staged("read", read)
    if result.kind == "quantized":
        text = _staged("read", main_module_text, text)
    module = _staged("read", read_module, text)
    if result.kind == "dynamic" and not has_expectations(module):
        return _run_dynamic(text, module, result, opset)
    entry = _staged("build", build_checked_entry, module)
    model = _lower(module, ENTRY, opset)
    runner = _staged("load", OnnxRunner, model.SerializeToString())
    outputs = _staged("run", runner.run, entry.inputs)
    result.reference = "expected"
    _compare_all(result, outputs, entry.checks)
    return "pass"


def _run_dynamic(text: str, module: Any, result: FileResult, opset: int | None = None) -> str:
    """Run a dynamic/ file without expectations; compare with XLA's result when XLA gives one."""
    from conformance.xla_reference import reference
    from jaxconv.runtimes.onnxrt import OnnxRunner

    if "main" not in module.functions:
        raise _Stop("build", "no @main function")
    model = _lower(module, "main", opset)
    runner = _staged("load", OnnxRunner, model.SerializeToString())
    feeds = _dynamic_inputs(module.functions["main"], np.random.default_rng(0))
    outputs = _staged("run", runner.run, feeds)
    expected, why = reference(text, feeds, DYNAMIC_SIZE)
    if expected is None or len(expected) != len(outputs):
        result.error = one_line(f"no reference: {why or f'XLA gives {len(expected or [])} results'}")
        return "ran"
    result.reference = "xla"
    checks = [("check.expect_eq" if e.dtype.kind in "biu" else "check.expect_close", i, e) for i, e in enumerate(expected)]
    _compare_all(result, outputs, checks)
    return "pass"


def _compare_all(result: FileResult, outputs: Sequence[Any], checks: Sequence[tuple[str, int, Any]]) -> None:
    """Compare every check; stops at the first that differs."""
    worst = 0.0
    for check, index, expected in checks:
        want = np.asarray(outputs[expected]) if isinstance(expected, int) else np.asarray(expected)
        ok, err, note = compare_check(check, want, outputs[index])
        if err == err:
            worst = max(worst, err)
        result.checks += 1
        if not ok:
            result.max_abs = worst
            raise _Stop("compare", f"{check} on result {index}{' (vs XLA)' if result.reference == 'xla' else ''}: {note}")
    result.max_abs = worst


def summarize(results: Sequence[FileResult]) -> dict[str, Any]:
    """Counts per kind and per family, and the most common failure reasons."""
    by_family: dict[str, dict[str, int]] = {}
    by_kind: dict[str, dict[str, int]] = {}
    reasons: dict[str, int] = {}
    for r in results:
        for table, key in ((by_family, r.family), (by_kind, r.kind)):
            row = table.setdefault(key, {s: 0 for s in STATUSES})
            row[r.status] = row.get(r.status, 0) + 1
        if r.status in ("fail", "unsupported"):
            key = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", f"{r.stage}: {r.error}")[:110]
            reasons[key] = reasons.get(key, 0) + 1
    top = sorted(reasons.items(), key=lambda kv: -kv[1])[:25]
    return {"by_kind": by_kind, "by_family": dict(sorted(by_family.items())), "top_reasons": top,
            "total": {s: sum(1 for r in results if r.status == s) for s in STATUSES}}
