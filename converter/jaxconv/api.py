"""Python API, mirroring the CLI: one function per target, plus check and load."""

from __future__ import annotations

import os
import warnings
from typing import Any, Callable, Sequence

from jaxconv.errors import CheckWarning, JaxconvWarning, UsageError
from jaxconv.program import Program, require_specs, trace
from jaxconv.verify import CheckReport, check_runner, raise_on_mismatch


def _as_program(fn: Callable[..., Any] | Program, specs: Sequence[Any], constraints: Sequence[str] = (),
                platforms: Sequence[str] = ("cpu",), hoist_constants: bool = False) -> Program:
    if isinstance(fn, Program):
        return fn
    require_specs(specs)
    program = trace(fn, specs, constraints=constraints, platforms=platforms, hoist_constants=hoist_constants)
    if program.assumed:
        for bound in program.assumed:
            warnings.warn(bound.text(python=True), JaxconvWarning, stacklevel=3)
    return program


def _refuse_a_check_too_large(program: Program, check: bool) -> None:
    """Before anything is written: a check whose inputs and outputs exceed the memory limit is a UsageError."""
    if check:
        from jaxconv.verify import require_checkable

        require_checkable(program.signature, program.constraints)


def _checkable(program: Program) -> bool:
    """Whether the check's inputs and outputs fit the memory limit (``require_checkable``)."""
    from jaxconv.verify import require_checkable

    try:
        require_checkable(program.signature, program.constraints)
    except UsageError:
        return False
    return True


def _checked(program: Program, runner: Any, artifact: str, check: bool, rtol: float | None, atol: float | None,
             report_to: list[CheckReport] | None) -> None:
    if not check:
        return
    with program.jax_scope():
        report = check_runner(runner, artifact, program.fn, program.arg_specs, program.signature, rtol=rtol,
                              atol=atol, constraints=program.constraints)
    if report_to is not None:
        report_to.append(report)
    raise_on_mismatch(report)
    said = report.warning()
    if said:  # the CLI prints it with the report's table; a Python caller hears it as a warning
        warnings.warn(said.removeprefix("warning: "), CheckWarning, stacklevel=3)


def to_stablehlo(fn: Callable[..., Any] | Program, *specs: Any, path: str | None = None,
                 platforms: Sequence[str] = ("cpu",), constraints: Sequence[str] = (), check: bool = True,
                 rtol: float | None = None, atol: float | None = None, report_to: list[CheckReport] | None = None):
    """Export with jax.export; with ``path``, write PATH.mlir, PATH.mlirbc and PATH.jaxexport.

    Returns:
        The ``jax.export.Exported``.
    """
    from jaxconv.stablehlo import export as shlo_export

    program = _as_program(fn, specs, constraints, platforms)
    _refuse_a_check_too_large(program, check and "cpu" in program.platforms)
    if path is not None:
        with program.jax_scope():
            written = shlo_export.write(program, path)
        if check and "cpu" in program.platforms:
            from jaxconv.runtimes.jaxexport import JaxExportRunner

            _checked(program, JaxExportRunner(written.exported), written.exported, check, rtol, atol, report_to)
    elif check and "cpu" in program.platforms:
        from jax import export

        from jaxconv.runtimes.jaxexport import JaxExportRunner

        round_trip = export.deserialize(program.exported.serialize())
        _checked(program, JaxExportRunner(round_trip), "jax.export", check, rtol, atol, report_to)
    return program.exported


def to_onnx(fn: Callable[..., Any] | Program, *specs: Any, path: str | None = None, opset: int | None = None,
            constraints: Sequence[str] = (), check: bool = True, rtol: float | None = None, atol: float | None = None,
            report_to: list[CheckReport] | None = None, keep_weights: bool = True):
    """Lower to ONNX through jaxconv's StableHLO -> ONNX lowering.

    The file is written from the weights' own buffers; a model over 2 GB gets them in PATH.data.

    Args:
        keep_weights: False (with ``path``): the returned model lacks the data of its big
            initializers (it is in the file), so no copy of the weights is made in memory.

    Returns:
        The ``onnx.ModelProto``.
    """
    from jaxconv.onnx import convert, stream
    from jaxconv.runtimes.onnx_borrowed import payload_buffers
    from jaxconv.runtimes.onnxrt import OnnxRunner

    program = _as_program(fn, specs, constraints, hoist_constants=True)
    _refuse_a_check_too_large(program, check)
    parts = convert.program_to_parts(program, opset)
    if not isinstance(fn, Program) or not program.keep_module:
        program.exported = None  # its module copies the weights; the check needs fn and the signature only
    convert.validate(parts.model)
    if path is not None:
        if stream.save(parts, path):
            convert.validate_file(path)
        runner = OnnxRunner(path, defer=True, weights=payload_buffers(parts.payloads)) if check else None
        name = path
    elif check:
        _check_unsaved_onnx(program, parts, rtol, atol, report_to)
        return parts.full()
    else:
        runner, name = None, "model.onnx"
    _checked(program, runner, name, check, rtol, atol, report_to)
    return parts.full() if keep_weights or path is None else parts.model


def _check_unsaved_onnx(program: Program, parts: Any, rtol: float | None, atol: float | None,
                        report_to: list[CheckReport] | None) -> None:
    """Check a model that has no path: ONNX Runtime loads it from a temporary file (removed afterwards),
    not from ``SerializeToString()``, a further copy of the weights held through the check."""
    import tempfile

    from jaxconv.onnx import stream
    from jaxconv.runtimes.onnx_borrowed import payload_buffers
    from jaxconv.runtimes.onnxrt import OnnxRunner

    with tempfile.TemporaryDirectory(prefix="jaxconv-check-") as folder:
        path = os.path.join(folder, "model.onnx")
        stream.save(parts, path)
        runner = OnnxRunner(path, defer=True, weights=payload_buffers(parts.payloads))
        _checked(program, runner, "model.onnx", True, rtol, atol, report_to)


def to_saved_model(fn: Callable[..., Any] | Program, *specs: Any, path: str, constraints: Sequence[str] = (),
                   check: bool = True, rtol: float | None = None, atol: float | None = None,
                   report_to: list[CheckReport] | None = None, overwrite: bool = False,
                   route: str = "auto") -> str:
    """Write a TF SavedModel with one ``serving_default`` signature; returns ``path``.

    ``path`` must be new, empty or an earlier jaxconv output unless ``overwrite`` (which replaces it whole).
    ``route``: ``xla`` (jax2tf), ``tf-ops`` (jaxconv's ONNX as plain TF ops) or ``auto`` (``tf-ops`` for
    LAPACK custom calls, else ``xla``, rewritten as ``tf-ops`` when the check finds it does not run in TF).
    """
    from jaxconv.errors import ArtifactError, UnsupportedError
    from jaxconv.tf import saved_model

    program = _as_program(fn, specs, constraints)
    _refuse_a_check_too_large(program, check)
    chosen = saved_model.first_route(program, route)
    with program.jax_scope():
        try:
            saved_model.write(program, path, overwrite=overwrite, route=chosen)
        except UnsupportedError:
            if route != "auto" or chosen != "tf-ops":
                raise
            chosen = "xla"  # no ONNX lowering for some op: jax2tf's model, which TF may still fail to run
            saved_model.write(program, path, overwrite=overwrite, route=chosen)
    if check:
        from jaxconv.runtimes.tf import SavedModelRunner

        try:
            _checked(program, SavedModelRunner(path), path, check, rtol, atol, report_to)
        except ArtifactError:
            if route != "auto" or chosen != "xla":
                raise
            with program.jax_scope():
                saved_model.write(program, path, overwrite=True, route="tf-ops")
            _checked(program, SavedModelRunner(path), path, check, rtol, atol, report_to)
    return path


def to_tflite(fn: Callable[..., Any] | Program, *specs: Any, path: str | None = None, allow_flex: bool = False,
              quantize: str | None = None, constraints: Sequence[str] = (), check: bool = True,
              rtol: float | None = None, atol: float | None = None, report_to: list[CheckReport] | None = None,
              route: str = "auto") -> bytes:
    """Convert to TFLite (builtins; ``allow_flex`` adds TF select ops); returns the flatbuffer bytes.

    ``route``: ``xla`` (jax2tf), ``tf-ops`` (jaxconv's ONNX as plain TF ops) or ``auto`` (``xla``,
    falling back to ``tf-ops`` when it fails to convert or run, or differs from jax.jit; with ``check``
    False nothing is compared: auto runs each model once in LiteRT on random inputs, without jax.jit,
    and falls back only when it fails to convert or run).
    """
    from jaxconv.artifacts import write_bytes
    from jaxconv.tf import tflite

    program = _as_program(fn, specs, constraints)
    _refuse_a_check_too_large(program, check)
    if quantize is not None and rtol is None and atol is None:
        rtol, atol = 5e-2, 5e-2

    def judge(data: bytes) -> CheckReport:
        from jaxconv.check_context import check_options
        from jaxconv.runtimes.tflite import TFLiteRunner

        lossy = {"edge": False, "edge_skipped": f"the model is quantized ({quantize})"} if quantize is not None else {}
        with check_options(**lossy), program.jax_scope():
            return check_runner(TFLiteRunner(data), path or "model.tflite", program.fn, program.arg_specs,
                                program.signature, rtol=rtol, atol=atol, constraints=program.constraints)

    # Without the check, auto still runs each model once in LiteRT (no jax.jit) to see that it runs.
    smoke = tflite.run_once(program) if route == "auto" and _checkable(program) else None
    data, report = tflite.convert_routed(program, route=route, allow_flex=allow_flex, quantize=quantize,
                                         judge=judge if check else smoke)
    if path is not None:
        write_bytes(path, data)
    if check and report is not None:
        if report_to is not None:
            report_to.append(report)
        raise_on_mismatch(report)
    return data


def check(artifact: str, fn: Callable[..., Any] | Program, *specs: Any, inputs: str | Sequence[Any] | None = None,
          constraints: Sequence[str] = (), seed: int = 0, rtol: float | None = None, atol: float | None = None) -> CheckReport:
    """Run ``artifact`` and jax.jit(fn) on the same inputs; returns the report (does not raise on mismatch)."""
    from jaxconv.check_inputs import load_inputs
    from jaxconv.runtimes import open_artifact

    program = _as_program(fn, specs, constraints)
    runner = open_artifact(artifact)
    flat = load_inputs(inputs, program.signature) if isinstance(inputs, str) else inputs
    with program.jax_scope():
        return check_runner(runner, artifact, program.fn, program.arg_specs, program.signature, inputs=flat,
                            seed=seed, rtol=rtol, atol=atol, constraints=program.constraints)


def load(path: str) -> Callable[..., Any]:
    """Load a ``.jaxexport`` as a callable taking the original arguments; no Python tracing of the function."""
    from jaxconv.stablehlo.export import load_exported

    if not path.endswith(".jaxexport"):
        raise UsageError(f"load() takes a .jaxexport file, got {os.path.basename(path)}")
    from jaxconv.program import x64_scope
    from jaxconv.runtimes.jaxexport import takes_x64

    exported = load_exported(path)
    x64 = takes_x64(exported)

    def call(*args: Any, **kwargs: Any) -> Any:
        with x64_scope(x64):
            return exported.call(*args, **kwargs)

    call.exported = exported  # type: ignore[attr-defined]
    call.__name__ = exported.fun_name
    return call
