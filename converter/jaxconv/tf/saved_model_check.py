"""Check an ONNX model converted from a SavedModel signature against that signature run by TensorFlow.

The inputs are ``check``'s (seeded random values at each symbolic size, then its edge sets, through
loops as ``edge_loops`` allows) and every
output is judged by ``compare.judge`` with ``check``'s tolerances; the report prints ``check``'s
table and ``verify.raise_on_mismatch`` gives its exit codes. Only the reference differs: TensorFlow
running the SavedModel, not jax.jit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from jaxconv.errors import ArtifactError, MismatchError, UsageError
from jaxconv.tf.saved_model import import_tensorflow, quiet_stderr
from jaxconv.verify import CheckReport

# TF's message when sizes break a module's shape assertions (``2*b`` at an odd size).
_SHAPE_ASSERTION = "do not match the polymorphic shapes"


class TFCheckReport(CheckReport):
    """A CheckReport whose reference is the SavedModel run by TensorFlow, not jax.jit."""

    reference = "TensorFlow"

    def table(self) -> str:
        return super().table().replace("jax.jit", self.reference)

    def warning(self) -> str | None:
        text = super().warning()
        return text.replace("jax.jit", self.reference) if text else text


@dataclass
class Reference:
    """One input set and TensorFlow's outputs on it.

    Attributes:
        label: the input set (``random``, ``edge``).
        arrays: the inputs, in the model's order.
        outputs: TensorFlow's outputs, in the model's order.
        notes: what the check left out, for the report.
    """

    label: str
    arrays: list[np.ndarray]
    outputs: list[np.ndarray]
    notes: list[str] = field(default_factory=list)


def model_signature(model: Any) -> Any:
    """An ONNX model's inputs and outputs as a jaxconv Signature (dimension names as the model has them)."""
    from jaxconv.onnx.dtypes import ONNX_TYPE
    from jaxconv.signature import Signature, TensorInfo

    by_type = {v: k for k, v in ONNX_TYPE.items()}

    def info(v: Any) -> TensorInfo:
        t = v.type.tensor_type
        if t.elem_type not in by_type:
            raise UsageError(f"the check cannot make values for {v.name} (ONNX type {t.elem_type}); "
                             "pass --no-check")
        dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or f"{v.name}_d{i}")
                     for i, d in enumerate(t.shape.dim))
        return TensorInfo(v.name, by_type.get(t.elem_type, "float32"), dims, v.name)

    return Signature(tuple(info(v) for v in model.graph.input), tuple(info(v) for v in model.graph.output))


class TFRunError(ArtifactError):
    """TensorFlow failed to run a signature; ``cause`` is TF's reason in one line."""

    def __init__(self, message: str, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


class SignatureRunner:
    """Runs one signature of a loaded SavedModel in TensorFlow, inputs and outputs by key."""

    def __init__(self, imported: Any, path: str, signature: str, inputs: list[str],
                 outputs: list[str]) -> None:
        self.fn = imported.signatures[signature]
        self.path, self.signature, self.inputs, self.outputs = path, signature, inputs, outputs

    def run(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The signature's outputs on ``arrays``.

        Raises:
            TFRunError: naming TF's cause, and saying that jaxconv's lowering does not need TF.
        """
        tf = import_tensorflow()
        from jaxconv.runtimes.tf import error_cause

        try:
            with quiet_stderr():
                out = self.fn(**{k: tf.constant(np.asarray(a)) for k, a in zip(self.inputs, arrays)})
        except Exception as e:  # noqa: BLE001
            cause = f"{type(e).__name__}: {error_cause(e)}"
            raise TFRunError(
                f"TensorFlow cannot run signature {self.signature!r} of {self.path} ({cause}), so the ONNX "
                "cannot be checked against it. jaxconv's lowering does not need TensorFlow's XLA and "
                "converted it: rerun with --no-check to write it unchecked", cause) from e
        return [np.asarray(out[k].numpy()) for k in self.outputs]


def open_loop(model: Any) -> list[str]:
    """The model's ``Loop`` nodes whose trip count may depend on the inputs' values (``edge_loops``'
    rule, which ``check`` follows on the traced program): empty when edge values may run. The ONNX
    model mirrors the SavedModel's graph, so TensorFlow's loops end on them when the model's do."""
    from jaxconv.edge_loops import onnx_open_loops

    return onnx_open_loops(model)


def tf_references(runner: SignatureRunner, signature: Any, seed: int = 0,
                  loops: Sequence[str] | bool = ()) -> list[Reference]:
    """TensorFlow's outputs on every input set of the check: random at each size, then ``check``'s edge
    sets (``check_inputs.edge_input_sets``) at the largest size TensorFlow runs.

    A size the SavedModel's shape assertions refuse (``2*b`` at an odd size) is left out with a
    note; edge values are left out, with ``edge_loops.skip_note``, when ``loops`` names loops whose
    trip count depends on the inputs (``open_loop``), and when TensorFlow raises on them.

    Raises:
        UsageError: the inputs and outputs would exceed the check's memory limit.
        ArtifactError: TensorFlow fails otherwise.
    """
    from jaxconv.check_context import current_options
    from jaxconv.check_inputs import (
        DEFAULT_SIZES,
        SYMBOLIC_SIZES,
        edge_input_sets,
        random_set,
        require_small_enough,
        size_sets,
    )
    from jaxconv.edge_loops import skip_note

    options = current_options()
    sizes = size_sets(signature, options.sizes or DEFAULT_SIZES) or size_sets(signature, SYMBOLIC_SIZES)
    require_small_enough(signature, sizes)
    notes: list[str] = []
    out: list[Reference] = []
    runnable: list[dict[str, int]] = []
    for k, s in enumerate(sizes):
        inputs = random_set(signature, s, seed + k)
        try:
            out.append(Reference(inputs.label, inputs.arrays, runner.run(inputs.arrays)))
            runnable.append(s)
        except TFRunError as e:
            if _SHAPE_ASSERTION not in e.cause:
                raise
            notes.append(f"sizes {s} skipped: the SavedModel's shape assertions refuse them")
    loop_note = skip_note(["?"] if loops is True else list(loops or ()), "the model")
    if options.edge and runnable and loop_note:
        notes.append(loop_note)
    elif options.edge and runnable:
        for edge in edge_input_sets(signature, runnable, seed):
            try:
                out.append(Reference(edge.label, edge.arrays, runner.run(edge.arrays)))
            except TFRunError as e:  # as check does when jax.jit raises on them
                notes.append(f"edge values skipped: TensorFlow raises on them ({e.cause[:160]})")
                break
    elif not options.edge and options.edge_skipped:
        notes.append(f"edge values skipped: {options.edge_skipped}")
    if out:
        out[0].notes = notes
    return out


def check_against_tf(model: Any, artifact: str, outputs: Sequence[str], references: list[Reference],
                     rtol: float | None = None, atol: float | None = None) -> TFCheckReport:
    """Run ``model`` (a path, or a ModelProto) in ONNX Runtime on the references' inputs and judge
    every output.

    Differences on the edge-value set only are ``differs on edge values`` rows (TensorFlow's XLA
    computed the reference; see ``verify.as_edge_difference``).

    Raises:
        ArtifactError: ONNX Runtime cannot load or run the model.
    """
    from jaxconv.compare import judge
    from jaxconv.known_differences import as_edge_difference
    from jaxconv.runtimes.onnxrt import OnnxRunner

    report = TFCheckReport(artifact=artifact, runtime="onnx")
    runner = OnnxRunner(model if isinstance(model, str) else model.SerializeToString())
    for ref in references:
        report.notes.extend(ref.notes)
        actual = runner.run(ref.arrays)
        if len(actual) != len(ref.outputs):
            raise ArtifactError(f"{artifact} returned {len(actual)} outputs, the signature has "
                                f"{len(ref.outputs)}")
        for name, e, a in zip(outputs, ref.outputs, actual):
            row, cls = judge(name, e, a, rtol, atol, inputs=ref.label)
            report.rows.append(as_edge_difference(row, "saved-model", e, a, cls))
    return report


def raise_on_mismatch(report: TFCheckReport, strict: bool | None = None) -> None:
    """``verify.raise_on_mismatch`` (same rules and exit codes), naming TensorFlow as the reference."""
    from jaxconv.verify import raise_on_mismatch as raise_for

    try:
        raise_for(report, strict)
    except MismatchError as e:
        raise MismatchError(str(e).replace("jax.jit", report.reference)) from e
