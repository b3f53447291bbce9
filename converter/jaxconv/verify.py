"""Check an artifact against jax.jit, output by output and element by element, on several input sets.

The input sets come from ``check_inputs`` (the user's examples, random values at each symbolic
size, edge values); each output is judged by ``compare.judge``: within tolerance of jax.jit, or
as close to the float64 result as jax.jit is, per element. Verdicts: ok, ok (float64), ok
(subnormal), undecided (a warning; an error with ``strict``), edge (a warning; an error with
``strict``), mismatch (an error).

The ``edge`` verdict: on targets whose kernels jaxconv does not write (``saved-model``: TensorFlow's
XLA behind XlaCallModule; ``tflite``: TFLite's converter and LiteRT's kernels), a difference on the
edge-value input set only (NaN, infinities, ±FLT_MAX, ...) is reported per output as "differs on
edge values" with the class of the differing elements, not as a mismatch. On every target a
difference on any other input set is a mismatch, and on the ONNX target (whose lowering is
jaxconv's own) so is a difference on edge values, with one exception: elements NaN in the artifact
where jax.jit has a number, in a program with max/min pooling or argmax/argmin, are ``undecided``
(XLA on the CPU keeps or drops NaN there depending on the tensor's size, so jax.jit is no reference);
and elements infinite or NaN on one side only, in a program with an FFT or a complex matrix product,
are ``undecided`` too (where their sums overflow depends on the order XLA adds them in); and so are
rows whose differing elements all have the value JAX run op by op (``jax.disable_jit``) gives, or lie
where float64 is NaN and jax.jit has a number (XLA's compiled code drops NaN, as in a Conv, ReLU and sum pooling fused together,
reorders divisions, and flushes subnormal intermediates to zero; the artifact follows the program); and so
are elements inf or NaN in jax.jit but finite in float64, when those are an output's only differences
(jax.jit's float32 overflowed, and where a sum of huge terms overflows depends on its order).
Eigenvectors and singular vectors of the other sign than LAPACK's are judged against jax.jit with the
ONNX lowering's canonical signs (``vector_signs``): ok (vector signs) when they agree.

Zero signs count: a zero of the other sign than jax.jit's is a mismatch (``1 / x`` is then the other
infinity), unless the target's kernels are not jaxconv's (a note), the program has an op after which
XLA leaves the sign open (``ZERO_SIGN_OPS``: a note), jax.jit's value moves when the inputs move by one
rounding step (a cancellation: a note), flushing subnormal inputs removes it, or JAX run op by op has
the artifact's sign (undecided). The float64 reference is the traced program with its inputs, closed-over constants and literals
widened (``jit_reference.wide_call``).

The parts: ``check_context`` (the options), ``check_inputs`` (the input sets), ``references``
(jax.jit's outputs, float64, op by op, spread), ``compare`` (one output's verdict per element),
``judging`` (one input set: the extra references, zero signs), ``known_differences`` (the edge-value
rows above that become ``edge`` or ``undecided``), ``edge_loops`` and ``loop_caps`` (which loops edge
values run through, and the capped copies for the others). This module runs them (``check_runner``),
holds the report and raises the errors. The parts' names are imported from the part that defines
them; ``check_options`` is importable from here too, as the README shows.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from jaxconv.check_context import (
    CheckOptions,
    check_options,  # noqa: F401  (README: ``from jaxconv.verify import check_options``)
    current_options,
    release_compiled,
)
from jaxconv.check_inputs import (
    DEFAULT_SIZES,
    SYMBOLIC_SIZES,
    InputSet,
    _dim_sizes,
    check_arrays,
    edge_input_sets,
    random_set,
    require_small_enough,
    size_sets,
)
from jaxconv.compare import OutputCheck
from jaxconv.edge_loops import data_dependent_loops, skip_note
from jaxconv.errors import ArtifactError, MismatchError
from jaxconv.judging import judge_set
from jaxconv.known_differences import EDGE, edge_text
from jaxconv.lapack_hangs import NOTE as HANG_NOTE
from jaxconv.lapack_hangs import SKIP_NOTE as HANG_SKIP_NOTE
from jaxconv.lapack_hangs import guarded_program, hanging_ops
from jaxconv.loop_caps import cap_hit_text, is_cap_hit, quiet_cap_hits
from jaxconv.references import reference_outputs


@dataclass
class CheckReport:
    """Result of comparing one artifact with jax.jit on every input set."""

    artifact: str
    runtime: str
    rows: list[OutputCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(r.ok for r in self.rows)

    @property
    def undecided(self) -> list[OutputCheck]:
        return [r for r in self.rows if r.verdict == "undecided"]

    @property
    def edge_differences(self) -> list[OutputCheck]:
        """Rows that differ from jax.jit on edge values only, on a target whose kernels jaxconv does not write."""
        return [r for r in self.rows if r.verdict == EDGE]

    def table(self) -> str:
        head = f"{'output':<14} {'inputs':<8} {'dtype':<9} {'shape':<16} {'max abs err':>12} {'max rel err':>12}  result"
        lines = [f"check {self.artifact} ({self.runtime}) against jax.jit", head]
        for r in self.rows:
            lines.append(f"{r.name:<14} {r.inputs:<8} {r.dtype:<9} {str(list(r.shape)):<16} {r.max_abs:>12.3g} "
                         f"{r.max_rel:>12.3g}  {_result_text(r)}{' ' + r.note if r.note else ''}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def warning(self) -> str | None:
        """Warning lines when some output is undecided or differs on edge values only (the check passed with them)."""
        lines = []
        if self.undecided:
            first = self.undecided[0]
            lines.append(f"warning: {self.artifact}: the check cannot decide {len(self.undecided)} output check(s), "
                         f"first {first.name} on {first.inputs} inputs ({first.note}); --strict makes this an error")
        for r in self.edge_differences:
            lines.append(f"warning: {self.artifact}: {edge_text(r)}; --strict makes this an error")
        return "\n".join(lines) or None


def _result_text(r: OutputCheck) -> str:
    return {"ok": "ok", "float64": "ok (float64)", "subnormal": "ok (subnormal)", "op-by-op": "ok (op by op)",
            "undecided": "UNDECIDED",
            "vector-signs": "ok (vector signs)",
            EDGE: "differs on edge values"}.get(r.verdict, "MISMATCH" if not r.ok else "ok")


def require_checkable(signature: Any, constraints: Sequence[str] = ()) -> None:
    """Raise UsageError when the check's inputs and outputs at the current sizes exceed the memory limit."""
    sizes = current_options().sizes or DEFAULT_SIZES
    require_small_enough(signature, size_sets(signature, sizes, constraints) or size_sets(signature, SYMBOLIC_SIZES, constraints))


def _input_sets(fn: Callable[..., Any], arg_specs: Sequence[Any], signature: Any, given: Sequence[np.ndarray] | None,
                seed: int, constraints: Sequence[str], options: CheckOptions) -> list[InputSet]:
    sets: list[InputSet] = []
    if given is not None:
        sets.append(InputSet("given", check_arrays(given, signature, "inputs")))
    if options.examples is not None:
        sets.append(InputSet("example", check_arrays(options.examples, signature, "example inputs")))
    sizes = (size_sets(signature, options.sizes or DEFAULT_SIZES, constraints)
             or size_sets(signature, SYMBOLIC_SIZES, constraints) or [_dim_sizes(signature, SYMBOLIC_SIZES[0], constraints)])
    require_small_enough(signature, sizes)
    sets += [random_set(signature, s, seed + k) for k, s in enumerate(sizes)]
    if options.edge:
        sets += edge_input_sets(signature, sizes, seed)
    return sets


def check_runner(runner: Any, artifact: str, fn: Callable[..., Any], arg_specs: Sequence[Any], signature: Any,
                 *, inputs: Sequence[np.ndarray] | None = None, seed: int = 0, rtol: float | None = None,
                 atol: float | None = None, constraints: Sequence[str] = ()) -> CheckReport:
    """Run ``runner`` and jax.jit on every input set and judge every output.

    jax.jit runs on the CPU, the platform jaxconv exports for, whatever JAX's default device: on a
    GPU, jax.jit computes float32 dots and convolutions in TF32 by default, so it is no reference
    for a float32 artifact (and a ``.jaxexport`` exported for the CPU runs on the CPU only).

    Input sets: ``inputs`` (when given), the examples of ``current_options()``, random values at
    each symbolic size, and edge values (skipped, with a note, when jax.jit raises on them). When the
    program holds a while loop whose condition reads the inputs' values (``data_dependent_loops``),
    the edge sets run in capped copies of the program and of an ONNX artifact (``loop_caps``): an
    edge set on which jax.jit's loop reaches the cap is skipped with a note, one on which only the
    artifact's does is a mismatch of every output; other artifacts skip edge values, with a note.

    Raises:
        UsageError: the inputs and outputs would exceed the memory limit for the check.
        ArtifactError: the artifact fails to run or returns the wrong number of outputs.
    """
    with _on_the_cpu():
        return _check_runner(runner, artifact, fn, arg_specs, signature, inputs=inputs, seed=seed, rtol=rtol,
                             atol=atol, constraints=constraints)


@contextlib.contextmanager
def _on_the_cpu() -> Iterator[None]:
    """JAX's default device is the CPU inside (unchanged where JAX has no CPU backend)."""
    import jax

    try:
        cpu = jax.devices("cpu")[0]
    except RuntimeError:
        yield
        return
    with jax.default_device(cpu):
        yield


def _check_runner(runner: Any, artifact: str, fn: Callable[..., Any], arg_specs: Sequence[Any], signature: Any,
                  *, inputs: Sequence[np.ndarray] | None, seed: int, rtol: float | None, atol: float | None,
                  constraints: Sequence[str]) -> CheckReport:
    options = current_options()
    report = CheckReport(artifact=artifact, runtime=runner.kind)
    if not options.edge and options.edge_skipped:
        report.notes.append(f"edge values skipped: {options.edge_skipped}")
    # Every jax.jit reference first, then the artifact: a runner that loads its model on the first
    # run (``OnnxRunner(path, defer=True)``) then never holds its weights while jax.jit compiles.
    referenced: list[tuple[InputSet, list[np.ndarray], Callable[..., Any], Any]] = []
    loops: list[str] | None = None
    capped: tuple[Callable[..., Any] | None, Any, str] | None = None
    hangs: bool | None = None  # an op jax.jit may never return from on edge values (lapack_hangs)
    guards: dict[tuple[tuple[int, ...], ...], Callable[..., Any] | None] = {}
    for inputs_set in _input_sets(fn, arg_specs, signature, inputs, seed, constraints, options):
        flat = inputs_set.arrays
        set_fn, set_runner = fn, runner
        if inputs_set.label == "edge":
            if any(n.startswith("edge values skipped") for n in report.notes):
                continue  # one note for the edge sets (a small input gets several: check_inputs.edge_sets)
            loops = data_dependent_loops(fn, arg_specs, flat) if loops is None else loops
            if loops:  # run in capped copies (loop_caps): no loop runs on past LOOP_CAP trips
                capped = capped or _capped_copies(fn, arg_specs, flat, runner)
                if capped[0] is None:
                    report.notes.append(f"{skip_note(loops)}; {capped[2]}")
                    continue
                set_fn, set_runner = capped[0], capped[1]
            elif loops is None:
                report.notes.append(skip_note(loops) or "")
                continue
            if hangs is None:
                hangs = hanging_ops(fn, arg_specs, flat)
            if hangs:  # jax.jit on the program with its svd operands guarded (lapack_hangs), traced at these shapes
                shapes = tuple(np.shape(a) for a in flat)
                if shapes not in guards:  # the edge sets of one size share one trace
                    guards[shapes] = guarded_program(fn, arg_specs, flat) if not loops else None
                guarded = guards[shapes]
                if guarded is None:
                    report.notes.append(HANG_SKIP_NOTE)
                    continue
                if HANG_NOTE not in report.notes:
                    report.notes.append(HANG_NOTE)
                set_fn = guarded
            try:
                with quiet_cap_hits():
                    expected = reference_outputs(set_fn, arg_specs, flat)
            except Exception as e:  # noqa: BLE001
                if is_cap_hit(e):
                    report.notes.append(f"an edge set skipped: jax.jit's {cap_hit_text(e)}, which may not end there")
                    continue
                text = str(e).strip().splitlines()
                report.notes.append(f"edge values skipped: jax.jit raises on them ({type(e).__name__}: "
                                    f"{text[0][:120] if text else ''})")
                continue
        else:
            expected = reference_outputs(fn, arg_specs, flat)
        referenced.append((inputs_set, expected, set_fn, set_runner))
    from jaxconv import jit_reference

    jit_reference.clear()  # the device copies of the constants, before the artifact's runtime loads its own
    release_compiled()
    for inputs_set, expected, set_fn, set_runner in referenced:
        flat = inputs_set.arrays
        try:
            actual = [np.asarray(a) for a in set_runner.run(flat)]
        except ArtifactError as e:
            if set_runner is runner or not is_cap_hit(e):
                raise
            report.rows.extend(_cap_rows(signature, expected, inputs_set.label, cap_hit_text(e)))
            continue
        if len(actual) != len(expected):
            raise ArtifactError(f"{artifact} returned {len(actual)} outputs, jax.jit returns {len(expected)}")
        with quiet_cap_hits():
            report.rows.extend(judge_set(set_runner, set_fn, arg_specs, signature, flat, expected, actual, rtol, atol,
                                          inputs_set.label))
    jit_reference.clear()  # the judging's extra references: no copy of the constants outlives the check
    return report


def _capped_copies(fn: Callable[..., Any], arg_specs: Sequence[Any], flat: Sequence[np.ndarray],
                   runner: Any) -> tuple[Callable[..., Any] | None, Any, str]:
    """(capped program, capped artifact, "") for the edge sets of a program whose loops may not end on
    them (``loop_caps``); (None, None, why not) when there is no such copy of either."""
    from jaxconv import loop_caps

    path = getattr(runner, "path", None)
    if getattr(runner, "kind", "") != "onnx" or not path:
        return None, None, f"no capped copy of a {getattr(runner, 'kind', '?')} artifact to run them in"
    capped_fn = loop_caps.capped_function(fn, arg_specs, flat, cap=loop_caps.LOOP_CAP)
    if capped_fn is None:
        return None, None, "the loop sits under an op the capped copy of the program does not re-evaluate"
    try:
        import onnx

        from jaxconv.runtimes.onnxrt import OnnxRunner

        model, count = loop_caps.capped_onnx(onnx.load(path), cap=loop_caps.LOOP_CAP)
        capped_runner = OnnxRunner(model.SerializeToString(), defer=True, quiet=True) if count else runner
    except Exception as e:  # noqa: BLE001  (a model too big to copy in memory, ...)
        return None, None, f"no capped copy of the model ({type(e).__name__}: {str(e)[:120]})"
    return capped_fn, capped_runner, ""


def _cap_rows(signature: Any, expected: Sequence[np.ndarray], label: str, text: str) -> list[OutputCheck]:
    """Every output a mismatch: the artifact's loop ran on past the cap where jax.jit's loops ended."""
    note = f"the artifact's {text}, where jax.jit's loops ended"
    return [OutputCheck(info.name, str(np.asarray(e).dtype), tuple(np.shape(e)), float("inf"), float("inf"), False,
                        note=note, verdict="mismatch", inputs=label) for info, e in zip(signature.outputs, expected)]


def raise_on_mismatch(report: CheckReport, strict: bool | None = None) -> None:
    """Raise MismatchError when an output differs (or, with ``strict``, when the check cannot decide)."""
    strict = current_options().strict if strict is None else strict
    bad = [r for r in report.rows if not r.ok]
    if not bad and report.rows and not (strict and (report.undecided or report.edge_differences)):
        return
    if not report.rows:
        raise MismatchError(f"{report.artifact}: the check compared nothing (every input set was skipped: "
                            f"{'; '.join(report.notes)})")
    if bad:
        first = bad[0]
        raise MismatchError(
            f"{report.artifact} was written but is WRONG: output {first.name} differs from jax.jit on {first.inputs} inputs "
            f"(max abs err {first.max_abs:.3g}, max rel err {first.max_rel:.3g}{', ' + first.note if first.note else ''}); "
            f"{len(bad)} of {len(report.rows)} output checks failed")
    if report.edge_differences:
        first = report.edge_differences[0]
        raise MismatchError(
            f"{report.artifact}: {edge_text(first)}; {len(report.edge_differences)} of "
            f"{len(report.rows)} output checks differ on edge values (--strict)")
    first = report.undecided[0]
    raise MismatchError(
        f"{report.artifact}: the check cannot decide output {first.name} on {first.inputs} inputs ({first.note}); "
        f"{len(report.undecided)} of {len(report.rows)} output checks undecided (--strict)")
