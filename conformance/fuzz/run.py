"""Convert one fuzz program to a target, run it on every input set, compare with jax.jit.

The result is an ``Outcome``: ``ok``, ``mismatch`` (with the first difference), ``unsupported``
(jaxconv refused the program with exit 6: a counted category, not a failure), ``crash``
(any other converter error: exit 7 or an internal exception), or ``invalid`` (jax itself
cannot trace, export or run the program: a generator miss, not counted against jaxconv).
A produced artifact that ONNX Runtime cannot load or run is a mismatch of kind
``load-error`` / ``run-error``.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from conformance.fuzz.compare import Diff, compare_all
from conformance.fuzz.generate import INPUT_SETS, input_values
from conformance.fuzz.program import FuzzProgram

TARGETS = ("onnx", "tflite", "saved-model")


class Invalid(Exception):
    """jax cannot trace, export or run the program: not a jaxconv problem."""


class Refused(Exception):
    """jaxconv refused the program as unsupported (exit 6)."""


class Crashed(Exception):
    """The converter failed: exit 7 or an internal exception."""


class LoadFailed(Exception):
    """The runtime cannot load the artifact jaxconv wrote."""


class RunFailed(Exception):
    """The runtime failed while running the artifact."""


@dataclass
class Outcome:
    status: str
    target: str
    detail: str = ""
    diff: Diff | None = None
    input_set: str = ""
    inputs: list[np.ndarray] = field(default_factory=list)
    expected: list[np.ndarray] = field(default_factory=list)
    actual: list[np.ndarray] = field(default_factory=list)
    check: str = ""
    rules: dict[str, int] = field(default_factory=dict)
    program: FuzzProgram | None = None  # the program at the batch that failed (a symbolic-batch program's other batch)


class RuleCounter:
    """Counts the ONNX rewrites that fire while active: ``rewrites.apply``'s and ``rewrites.after_clean_up``'s
    counts, summed per rule.

    The converter is unchanged: both are wrapped (looked up on their module at each conversion) and restored
    on exit.
    """

    STAGES = ("apply", "after_clean_up")

    def __init__(self) -> None:
        self.fired: dict[str, int] = {}

    def __enter__(self) -> "RuleCounter":
        from jaxconv.onnx import rewrites

        self._module = rewrites
        self._saved = {stage: getattr(rewrites, stage) for stage in self.STAGES}
        for stage, run in self._saved.items():
            setattr(rewrites, stage, self._counting(run))
        return self

    def _counting(self, run: Callable[[Any, int], dict[str, int]]) -> Callable[[Any, int], dict[str, int]]:
        def counted(model: Any, opset: int) -> dict[str, int]:
            fired = run(model, opset)
            for rule, n in fired.items():
                self.fired[rule] = self.fired.get(rule, 0) + n
            return fired

        return counted

    def __exit__(self, *exc: object) -> None:
        for stage, run in self._saved.items():
            setattr(self._module, stage, run)


def reference(program: FuzzProgram, inputs: Sequence[np.ndarray], fn: Callable[..., Any] | None = None) -> list[np.ndarray]:
    """jax.jit of the program on ``inputs`` (``fn``: an already jitted function); raises Invalid when jax fails."""
    import jax

    try:
        with jax.enable_x64(program.uses_x64()):
            out = (fn or jax.jit(program.function()))(*[np.asarray(a) for a in inputs])
            return [np.asarray(o) for o in out]
    except Exception as e:  # noqa: BLE001  (jax rejecting the program is the generator's miss)
        raise Invalid(f"jax.jit failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}") from e


def trace(program: FuzzProgram, fn: Callable[..., Any] | None = None) -> Any:
    """jaxconv's Program for the fuzz program (jax.export under the hood)."""
    import jax

    from jaxconv.errors import TraceError
    from jaxconv.program import trace as jc_trace

    try:
        with jax.enable_x64(program.uses_x64()):
            return jc_trace(fn or program.function(), program.specs(), name="f",
                            param_names=[f"v{i}" for i in program.inputs])
    except TraceError as e:
        raise Invalid(str(e)) from e


def convert(program: Any, target: str, tmp: str, opset: int | None = None) -> Any:
    """Convert a traced program (ONNX: at ``opset``) and open a runner for it; raises Refused, Crashed or
    LoadFailed."""
    from jaxconv import api
    from jaxconv.errors import ArtifactError, JaxconvError, MissingDependencyError, UnsupportedError
    from jaxconv.runtimes import open_artifact

    try:
        if target == "onnx":
            from jaxconv.onnx import convert as onnx_convert

            model = onnx_convert.program_to_onnx(program, opset)
            onnx_convert.validate(model)
            data = model.SerializeToString()
        elif target == "tflite":
            path = os.path.join(tmp, "model.tflite")
            api.to_tflite(program, path=path, check=False)
        elif target == "saved-model":
            path = os.path.join(tmp, "saved_model")
            api.to_saved_model(program, path=path, check=False)
        else:
            raise ValueError(f"unknown target {target!r}; known: {', '.join(TARGETS)}")
    except (UnsupportedError, MissingDependencyError) as e:
        raise Refused(_first_line(e)) from e
    except JaxconvError as e:
        raise Crashed(f"{type(e).__name__} (exit {e.exit_code}): {_first_line(e)}") from e
    except Exception as e:  # noqa: BLE001  (an internal error is a converter crash)
        raise Crashed(f"internal {type(e).__name__}: {_first_line(e)}") from e
    try:
        if target == "onnx":
            from jaxconv.runtimes.onnxrt import OnnxRunner

            return OnnxRunner(data)
        return open_artifact(path)
    except ArtifactError as e:
        raise LoadFailed(_first_line(e)) from e


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def run_artifact(runner: Any, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The runner's outputs; raises RunFailed."""
    try:
        return [np.asarray(o) for o in runner.run(list(inputs))]
    except Exception as e:  # noqa: BLE001
        raise RunFailed(_first_line(e)) from e


def attempt(program: FuzzProgram, target: str, inputs: Sequence[np.ndarray]) -> tuple[str, Diff | None, list, list, str]:
    """Convert and run ``program`` on one input set.

    Returns:
        (status, diff, expected, actual, detail); status is ok, mismatch, unsupported, crash or invalid.
    """
    import jax

    fn = program.function()
    try:
        expected = reference(program, inputs, jax.jit(fn))
        traced = trace(program, fn)
    except Invalid as e:
        return "invalid", None, [], [], str(e)
    with tempfile.TemporaryDirectory(prefix="jaxconv-fuzz-") as tmp:
        try:
            runner = convert(traced, target, tmp, program.opset)
        except Refused as e:
            return "unsupported", None, expected, [], str(e)
        except Crashed as e:
            return "crash", None, expected, [], str(e)
        except LoadFailed as e:
            return "mismatch", Diff(0, "load-error", expected=None, actual=str(e)), expected, [], str(e)
        try:
            actual = run_artifact(runner, inputs)
        except RunFailed as e:
            return "mismatch", Diff(0, "run-error", expected=None, actual=str(e)), expected, [], str(e)
    diff = compare_all(expected, actual)
    return ("mismatch" if diff else "ok"), diff, expected, actual, diff.line() if diff else ""


def judged_ok(program: FuzzProgram, target: str, inputs: Sequence[np.ndarray], expected: Sequence[Any],
              actual: Sequence[Any]) -> bool:
    """Whether jaxconv's own judging (the check's: the float64, op-by-op and spread references and what it
    knows of XLA's results) passes the artifact's outputs on these very inputs, at the default tolerances."""
    from jaxconv.judging import judge_set
    from jaxconv.program import x64_scope

    try:
        traced = trace(program)
    except Invalid:
        return False
    with tempfile.TemporaryDirectory(prefix="jaxconv-fuzz-") as tmp:
        try:
            runner = convert(traced, target, tmp, program.opset)
            with x64_scope(program.uses_x64() or traced.x64):
                rows = judge_set(runner, traced.fn, traced.arg_specs, traced.signature, list(inputs),
                                 [np.asarray(e) for e in expected], [np.asarray(a) for a in actual], None, None,
                                 "fuzz inputs")
        except Exception:  # noqa: BLE001  (judging that fails accepts nothing)
            return False
    return bool(rows) and all(row.verdict != "mismatch" for row in rows)


def batch_sizes(program: FuzzProgram) -> list[int | None]:
    """The batches a program runs at: a symbolic-batch program at its own, at 1 and at 3 more; else [None]."""
    own = program.batch_size()
    return [None] if own is None else list(dict.fromkeys([own, 1, own + 3]))


def evaluate(program: FuzzProgram, target: str, seed: int, sets: Sequence[str] = INPUT_SETS) -> Outcome:
    """Convert once, run every input set (a symbolic-batch program at each of its ``batch_sizes``), stop at the
    first mismatch; fills in the default check's verdict and (ONNX) how many times each rewrite rule fired in
    the conversion."""
    counter = RuleCounter()
    outcome = _evaluate(program, target, seed, sets, counter)
    outcome.rules = dict(counter.fired)
    return outcome


def _evaluate(program: FuzzProgram, target: str, seed: int, sets: Sequence[str], counter: RuleCounter) -> Outcome:
    import jax

    fn = program.function()
    jitted = jax.jit(fn)
    try:
        traced = trace(program, fn)
    except Invalid as e:
        return Outcome("invalid", target, str(e))
    with tempfile.TemporaryDirectory(prefix="jaxconv-fuzz-") as tmp:
        try:
            with counter:
                runner = convert(traced, target, tmp, program.opset)
        except Refused as e:
            return Outcome("unsupported", target, str(e))
        except Crashed as e:
            return Outcome("crash", target, str(e))
        except LoadFailed as e:
            inputs = input_values(program, sets[0], seed)
            return Outcome("mismatch", target, str(e), Diff(0, "load-error", actual=str(e)), sets[0], inputs, check="mismatch")
        for size in batch_sizes(program):
            sized = program if size in (None, program.batch_size()) else program.at_batch(size)
            for kind in sets:
                inputs = input_values(sized, kind, seed)
                try:
                    expected = reference(sized, inputs, jitted)
                except Invalid as e:
                    return Outcome("invalid", target, str(e))
                try:
                    actual = run_artifact(runner, inputs)
                except RunFailed as e:
                    diff = Diff(0, "run-error", actual=str(e))
                    return Outcome("mismatch", target, str(e), diff, kind, inputs, expected, [],
                                   default_check(traced, runner, program.uses_x64()), program=sized)
                diff = compare_all(expected, actual)
                if diff is not None:
                    return Outcome("mismatch", target, diff.line(), diff, kind, inputs, expected, actual,
                                   default_check(traced, runner, program.uses_x64()), program=sized)
    return Outcome("ok", target)


def default_check(traced: Any, runner: Any, x64: bool = False) -> str:
    """What ``jaxconv check`` (default inputs and tolerances) says about the artifact: ok or mismatch.

    ``x64``: the program was traced under ``jax.enable_x64`` (its specs may all be 32-bit: x64 still
    makes e.g. argsort's indices int64); its check runs under it too, as a caller with x64 on runs it.
    """
    from jaxconv.program import x64_scope
    from jaxconv.verify import check_runner

    try:
        with x64_scope(x64 or traced.x64):
            report = check_runner(runner, "artifact", traced.fn, traced.arg_specs, traced.signature,
                                  constraints=traced.constraints)
    except Exception:  # noqa: BLE001  (a check that errors has caught the problem)
        return "mismatch"
    return "ok" if report.ok else "mismatch"
