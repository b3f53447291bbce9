"""Run one case on one target and device, recording where it stopped.

Targets go through jaxconv's public entry points with ``check=False`` and are compared here
on the case's own seeded inputs, so every result carries its stage, a one-line error and
the worst absolute/relative error:

- ``stablehlo``: ``api.to_stablehlo(path=...)`` then ``JaxExportRunner`` on the ``.jaxexport``
- ``saved-model``: ``api.to_saved_model`` then TensorFlow (``SavedModelRunner``), route recorded
- ``tflite``: ``api.to_tflite(route="auto")`` then ``TFLiteRunner``; the route taken (``xla`` or
  ``tf-ops``) is recorded on the cell
- ``onnx``: ``program_to_onnx`` (at the cell's opset) + ``validate`` then ONNX Runtime (``OnnxRunner``)

The reference is ``jax.jit`` of the case's function on the same device. Each target is one row of
``ADAPTERS``: adding a target is one function and one row. A case runs under ``jax.enable_x64``
when it needs 64-bit dtypes, for its cell only (JAX's global flag is left as it was).
"""

from __future__ import annotations

import importlib.util
import math
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from conformance.case import Case
from conformance.elements import (
    describe,
    element_classes,
    explain_by_flushing,
    explain_by_precision,
    flush_subnormals,
    summarize,
)
from conformance.expect import mismatch
from conformance.results import CellResult, failure

DEVICES = ("cpu", "gpu")


class StageError(Exception):
    """Carries the stage a cell stopped at and the underlying error."""

    def __init__(self, stage: str, error: BaseException | str) -> None:
        super().__init__(str(error))
        self.stage = stage
        self.error = error


def _stage(stage: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except StageError:
        raise
    except BaseException as e:  # noqa: BLE001  (any failure is a result)
        if isinstance(e, KeyboardInterrupt):
            raise
        raise StageError(stage, e) from e


def missing_runtime(target: str) -> str | None:
    """Why ``target`` cannot run in this environment (a skip), or None."""
    needs = ADAPTERS[target].needs if target in ADAPTERS else None
    if needs is not None and importlib.util.find_spec(needs[0]) is None:
        return needs[1]
    return None


def gpu_device() -> Any | None:
    """JAX's first GPU device, or None."""
    import jax

    try:
        devices = jax.devices("gpu")
    except RuntimeError:
        return None
    return devices[0] if devices else None


def _jax_device(device: str) -> Any:
    import jax

    if device == "cpu":
        return jax.devices("cpu")[0]
    dev = gpu_device()
    if dev is None:
        raise StageError("export", "no GPU visible to JAX")
    return dev


def _export_platform(device: str) -> str:
    if device == "cpu":
        return "cpu"
    import jax

    return "rocm" if "rocm" in str(getattr(jax.devices("gpu")[0].client, "platform_version", "")).lower() else "cuda"


def reference(case: Case, args: list[Any], device: str, precision: str | None = None) -> list[np.ndarray]:
    """jax.jit(case.fn) on ``device`` (at matrix-product ``precision``, JAX's default when None); flat numpy outputs."""
    import jax

    dev = _jax_device(device)
    with jax.default_device(dev), jax.default_matmul_precision(precision):
        placed = jax.device_put(args, dev)
        out = jax.jit(case.fn)(*placed)
    return [np.asarray(o) for o in jax.tree_util.tree_leaves(out)]


def _flat(args: list[Any]) -> list[np.ndarray]:
    import jax

    return [np.asarray(a) for a in jax.tree_util.tree_leaves(args)]


def _trace(case: Case, platform: str):
    from jaxconv.program import trace

    specs = case.specs()
    return trace(case.fn, specs, name=case.name.replace(".", "_").replace("-", "_"),
                 param_names=[f"a{i}" for i in range(len(specs))], constraints=case.constraints,
                 platforms=(platform,))


def _stablehlo(case: Case, program: Any, tmp: str, result: CellResult, opset: int | None = None) -> Any:
    from jaxconv import api
    from jaxconv.runtimes.jaxexport import JaxExportRunner

    base = os.path.join(tmp, "model")
    _stage("convert", lambda: api.to_stablehlo(program, path=base, check=False))
    return _stage("load", lambda: JaxExportRunner(base + ".jaxexport"))


def _saved_model(case: Case, program: Any, tmp: str, result: CellResult, opset: int | None = None) -> Any:
    from jaxconv import api
    from jaxconv.runtimes import open_artifact
    from jaxconv.tf.saved_model import read_route

    path = os.path.join(tmp, "saved_model")
    _stage("convert", lambda: api.to_saved_model(program, path=path, check=False))
    result.route = read_route(path)
    return _stage("load", lambda: open_artifact(path))


def _tflite(case: Case, program: Any, tmp: str, result: CellResult, opset: int | None = None) -> Any:
    """``to_tflite`` with ``route="auto"``: the xla route, else tf-ops when xla fails to convert, to
    run, or to match jax.jit in the converter's own check."""
    from jaxconv import api
    from jaxconv.errors import MismatchError
    from jaxconv.runtimes import open_artifact
    from jaxconv.runtimes.tflite import read_route

    path = os.path.join(tmp, "model.tflite")

    def convert() -> None:
        try:  # auto chooses by comparing with jax.jit (check=True); the cell compares again below
            api.to_tflite(program, path=path, route="auto")
        except MismatchError:
            if not os.path.exists(path):
                raise

    _stage("convert", convert)
    result.route = read_route(path)
    return _stage("load", lambda: open_artifact(path))


def _onnx(case: Case, program: Any, tmp: str, result: CellResult, opset: int | None = None) -> Any:
    from jaxconv.onnx import convert
    from jaxconv.runtimes.onnxrt import OnnxRunner

    model = _stage("convert", lambda: convert.program_to_onnx(program, opset))
    _stage("validate", lambda: convert.validate(model))
    return _stage("load", lambda: OnnxRunner(model.SerializeToString()))


@dataclass(frozen=True)
class Adapter:
    """How the suite drives one target.

    Attributes:
        make: ``(case, program, tmp, result, opset) -> runner``: convert (and validate), then load; may
            record facts about the artifact (its route) on ``result``; ``opset`` (ONNX) may be None.
        needs: (module, skip reason) when the target's runtime may be missing.
        cpu_export: export for the CPU whatever the device (the target runs on the CPU only).
        runs_on_device: the runner runs on the cell's device (under ``jax.default_device``).
    """

    make: Callable[..., Any]
    needs: tuple[str, str] | None = None
    cpu_export: bool = False
    runs_on_device: bool = False


ADAPTERS: dict[str, Adapter] = {
    "stablehlo": Adapter(_stablehlo, runs_on_device=True),
    "saved-model": Adapter(_saved_model, needs=("tensorflow", "TensorFlow not installed")),
    "tflite": Adapter(_tflite, needs=("tensorflow", "TensorFlow not installed")),
    "onnx": Adapter(_onnx, needs=("onnxruntime", "onnxruntime not installed"), cpu_export=True),
}
TARGETS = tuple(ADAPTERS)
TF_TARGETS = frozenset(t for t, a in ADAPTERS.items() if a.needs and a.needs[0] == "tensorflow")


def _make_runner(case: Case, target: str, program: Any, tmp: str, result: CellResult,
                 opset: int | None = None) -> Any:
    """Convert (and validate) then load; returns a Runner."""
    if target not in ADAPTERS:
        raise StageError("export", f"unknown target {target!r}; known: {', '.join(TARGETS)}")
    return ADAPTERS[target].make(case, program, tmp, result, opset)


def ops_of(program: Any) -> list[str]:
    """StableHLO op names in the exported module (all functions, nested regions)."""
    from jaxconv.stablehlo import ir as hir
    from jaxconv.stablehlo.reader import read_module

    module = read_module(program.exported.mlir_module_serialized)
    names: set[str] = set()
    for fn in module.functions.values():
        names.update(op.name for op in hir.walk_ops(fn.body))
    return sorted(names)


def tolerance(case: Case, dtype: str) -> tuple[float | None, float | None]:
    """The case's ``(rtol, atol)`` for ``dtype`` (``"*"``: any dtype); None: the compare defaults."""
    if dtype in case.tol:
        return case.tol[dtype]
    return case.tol.get("*", (None, None))


def _reclassify(case: Case, failed: list[tuple[int, Any]], expected: list[np.ndarray], classes: dict[int, np.ndarray],
                run_again: Callable[[], list[Any]], explain: Callable[[int, np.ndarray, Any, Any], np.ndarray]) -> None:
    """``classes[i] = explain(i, other[i], rtol, atol)`` for each failing output, ``other`` the outputs of
    ``run_again``; nothing where it raises or gives another count (the classes are informative; the failure stands)."""
    try:
        other = run_again()
    except Exception:  # noqa: BLE001
        return
    if other is None or len(other) != len(expected):
        return
    for i, _ in failed:
        rtol, atol = tolerance(case, expected[i].dtype.name)
        with np.errstate(all="ignore"):
            classes[i] = explain(i, np.asarray(other[i]), rtol, atol)


def _classify_outputs(case: Case, runner: Any, args: list[Any], expected: list[np.ndarray], actual: list[Any],
                      failed: list[tuple[int, Any]], sizes: Any, device: str) -> list[tuple[dict[str, Any], Any]]:
    """One record per failing output: the classes of its differing elements (``conformance.elements``).

    When the inputs hold float32/float64 subnormals the artifact runs once more on the inputs
    with them flushed to zero, as XLA on the CPU reads them; elements that then agree are ``subnormal``.
    On a GPU, jax.jit runs once more at matrix-product precision HIGHEST; elements that agree with it
    are ``precision`` (jax.jit's default there computes float32 dots and convolutions in TF32).
    """
    if not failed:
        return []
    classes = {}
    for i, _ in failed:
        rtol, atol = tolerance(case, expected[i].dtype.name)
        with np.errstate(all="ignore"):
            classes[i] = element_classes(expected[i], np.asarray(actual[i]), rtol, atol)
    flushed = flush_subnormals(_flat(args))
    if flushed is not None:  # the artifact again, on the inputs XLA reads
        _reclassify(case, failed, expected, classes, lambda: runner.run(flushed),
                    lambda i, again, rtol, atol: explain_by_flushing(classes[i], expected[i], again, rtol, atol))
    if device == "gpu":  # jax.jit again, at full float32 precision
        _reclassify(case, failed, expected, classes, lambda: reference(case, args, device, precision="highest"),
                    lambda i, precise, rtol, atol: explain_by_precision(classes[i], precise, np.asarray(actual[i]),
                                                                        rtol, atol))
    return [(summarize(i, classes[i], expected[i], np.asarray(actual[i]), check.max_abs, dict(sizes)), check)
            for i, check in failed]


def run_cell(case: Case, target: str, device: str, *, with_ops: bool = False,
             opset: int | None = None) -> CellResult:
    """Export, convert, load, run and compare one cell (ONNX at ``opset``); never raises for a failing cell."""
    import jax

    result = CellResult(case=case.name, target=target, device=device)
    start = time.perf_counter()
    skip = missing_runtime(target)
    if skip is None and not case.runs_on(target):
        skip = f"the case runs on {', '.join(case.targets)} only"
    if skip is None and device == "gpu" and gpu_device() is None:
        skip = "no GPU"
    if skip is not None:
        result.status, result.reason = "skip", skip
        return result
    with jax.enable_x64(case.x64):
        _run_cell(case, target, device, result, with_ops, opset)
    result.seconds = round(time.perf_counter() - start, 3)
    return result


def _compare_outputs(case: Case, expected: list[np.ndarray], actual: list[Any]) -> tuple[list[tuple[int, Any]], float,
                                                                                          float, list[str]]:
    """(failed (index, check) pairs, worst abs, worst rel, notes of ``exact``/``allclose`` mismatches) for one run."""
    from jaxconv.compare import compare

    failed: list[tuple[int, Any]] = []
    notes: list[str] = []
    worst_abs = worst_rel = 0.0
    for i, (e, a) in enumerate(zip(expected, actual)):
        if case.expect != "close":
            why = _stage("compare", lambda: mismatch(e, np.asarray(a), case.expect, tolerance(case, "*"),
                                                      case.signed_zeros, f"output_{i} ({e.dtype})"))
            if why is not None:
                notes.append(why)
            continue
        rtol, atol = tolerance(case, e.dtype.name)
        with np.errstate(all="ignore"):
            check = _stage("compare", lambda: compare(f"output_{i}", e, np.asarray(a), rtol, atol))
        if not math.isnan(check.max_abs):
            worst_abs = max(worst_abs, check.max_abs)
        if not math.isnan(check.max_rel):
            worst_rel = max(worst_rel, check.max_rel)
        if not check.ok:
            failed.append((i, check))
    return failed, worst_abs, worst_rel, notes


def _run_cell(case: Case, target: str, device: str, result: CellResult, with_ops: bool, opset: int | None) -> None:
    import jax

    try:
        adapter = ADAPTERS.get(target)
        if adapter is None:
            raise StageError("export", f"unknown target {target!r}; known: {', '.join(TARGETS)}")
        platform = "cpu" if adapter.cpu_export else _stage("export", lambda: _export_platform(device))
        program = _stage("export", lambda: _trace(case, platform))
        if with_ops:
            try:
                result.ops = ops_of(program)
            except Exception:  # noqa: BLE001  (the op list is informative only)
                result.ops = []
        with tempfile.TemporaryDirectory(prefix="jaxconv-conf-") as tmp:
            runner = _make_runner(case, target, program, tmp, result, opset)
            worst_abs, worst_rel, ok = 0.0, 0.0, True
            notes: list[str] = []
            for sizes in case.size_sets():
                args = case.inputs(sizes)
                expected = _stage("run", lambda: reference(case, args, device))
                if device == "gpu" and adapter.runs_on_device:
                    dev = _jax_device(device)

                    def run_on_gpu() -> list[np.ndarray]:
                        with jax.default_device(dev):
                            return runner.run(_flat(args))

                    actual = _stage("run", run_on_gpu)
                else:
                    actual = _stage("run", lambda: runner.run(_flat(args)))
                if len(actual) != len(expected):
                    raise StageError("compare", f"{len(actual)} outputs, jax.jit gives {len(expected)}")
                failed, run_abs, run_rel, exact_notes = _compare_outputs(case, expected, actual)
                worst_abs, worst_rel = max(worst_abs, run_abs), max(worst_rel, run_rel)
                if failed or exact_notes:
                    ok = False
                where = f" at {dict(sizes)}" if sizes else ""
                notes.extend(f"{n}{where}" for n in exact_notes)
                records = _stage("compare", lambda: _classify_outputs(case, runner, args, expected, actual, failed, sizes,
                                                                           device))
                for record, check in records:
                    result.diffs.append(record)
                    where = f" at {dict(sizes)}" if sizes else ""
                    notes.append(f"output_{check.name[len('output_'):]} {check.dtype}{list(check.shape)}{where}: "
                                 f"max abs err {check.max_abs:.3g}, max rel err {check.max_rel:.3g}"
                                 f"{' ' + check.note if check.note else ''} [{describe(record)}]")
            result.max_abs, result.max_rel = worst_abs, worst_rel
            if ok:
                result.ok = True
            else:
                failure(result, "compare", f"{len(notes)} output check(s) differ; {notes[0]}")
    except StageError as e:
        failure(result, e.stage, e.error)
