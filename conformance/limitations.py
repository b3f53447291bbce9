"""Known limitations: (case, target[, device]) -> the failure expected there, and why.

Keys may use shell-style wildcards in the case part (``dtype.bf16.*``). Every row names its
expected failure, so a new bug in a limited cell is not hidden by the known one:

- ``fails(stage, pattern, reason)``: the cell stops at ``stage`` (export, convert, validate,
  load, run) with a one-line error that ``re.search(pattern, error)`` finds;
- ``differs(reason, outputs=..., classes=...)``: the cell runs and only the named outputs
  differ from jax.jit, only in elements of the named classes (``conformance.elements``:
  nan, inf, signed-zero, subnormal, value, shape, dtype), optionally within ``max_abs``.

A limited cell that fails as its row says is ``xfail``; one that fails another way is ``fail``
(its reason says what the row expected); one that passes is ``XPASS`` and fails the run, so a
row must be deleted as soon as the converter handles it. Every row needs a reason.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any, Mapping

from conformance.elements import CLASSES
from conformance.results import STAGES

ANY_DEVICE = "*"


@dataclass(frozen=True)
class Limitation:
    """One row's expected failure.

    Attributes:
        reason: why the cell cannot pass (shown in the report).
        stage: the stage it stops at (one of ``results.STAGES``).
        pattern: a regular expression searched in the cell's one-line error ("" for compare rows
            that name outputs or classes instead).
        outputs: compare rows: the output indices allowed to differ (empty: any).
        classes: compare rows: the element classes allowed to differ (empty: any).
        max_abs: compare rows: the largest absolute error allowed (None: no bound).
        may_pass: the cell may pass too (``pass``, not XPASS): the difference comes and goes with the
            reference's kernels.
    """

    reason: str
    stage: str
    pattern: str = ""
    outputs: tuple[int, ...] = ()
    classes: frozenset[str] = frozenset()
    max_abs: float | None = None
    may_pass: bool = False

    def expected(self) -> str:
        """The expected failure in words: ``convert error matching /tfl\\.add/``."""
        if self.stage != "compare" or (self.pattern and not (self.outputs or self.classes or self.max_abs is not None)):
            return f"{self.stage} error matching /{self.pattern}/"
        parts = [f"output(s) {', '.join(map(str, self.outputs))}" if self.outputs else "any output"]
        if self.classes:
            parts.append(f"differing in {', '.join(sorted(self.classes, key=CLASSES.index))} elements only")
        if self.max_abs is not None:
            parts.append(f"max abs err <= {self.max_abs:g}")
        if self.pattern:
            parts.append(f"error matching /{self.pattern}/")
        return "compare: " + ", ".join(parts)

    def unexpected(self, result: Any) -> str | None:
        """None when the failed ``result`` (a CellResult) fails as this row says; else what differs."""
        got = f"{result.stage}: {result.error}"
        if result.stage != self.stage or (self.pattern and not re.search(self.pattern, result.error)):
            return f"expected {self.expected()}, got {got}"
        if self.stage != "compare" or not (self.outputs or self.classes or self.max_abs is not None):
            return None
        if not result.diffs:
            return f"expected {self.expected()}, got {got}"
        for d in result.diffs:
            bad = []
            if self.outputs and d["output"] not in self.outputs:
                bad.append(f"output {d['output']} differs")
            extra = sorted(set(d["classes"]) - self.classes) if self.classes else []
            if extra:
                bad.append(f"output {d['output']} has {', '.join(extra)} element(s)")
            if self.max_abs is not None and not d["max_abs"] <= self.max_abs:
                bad.append(f"output {d['output']} max abs err {d['max_abs']:.3g}")
            if bad:
                return f"expected {self.expected()}, got {'; '.join(bad)}"
        return None


def fails(stage: str, pattern: str, reason: str) -> Limitation:
    """A row whose cell stops at ``stage`` with an error matching ``pattern``."""
    return Limitation(reason=reason, stage=stage, pattern=pattern)


def differs(reason: str, outputs: tuple[int, ...] = (), classes: tuple[str, ...] = (), max_abs: float | None = None,
            pattern: str = "", may_pass: bool = False) -> Limitation:
    """A row whose cell runs and differs only in ``outputs``, only in elements of ``classes``."""
    return Limitation(reason=reason, stage="compare", pattern=pattern, outputs=tuple(outputs), classes=frozenset(classes),
                      max_abs=max_abs, may_pass=may_pass)


_TFL_COMPLEX_IO = fails("convert", r"TFLite cannot hold (input|output) \w+",
                        "TFLite models cannot take or return complex tensors (its kernels have no complex arithmetic)")
_SUBNORMAL = "subnormal inputs: XLA on the CPU flushes them to zero, {} does not"
_TF_NAN = "TF's XLA runtime does not propagate NaN through max/min like jax.jit"


def _cannot(what: str, reason: str) -> Limitation:
    """The TFLite converter stops at ``what`` (a regex of the op jaxconv names in its error)."""
    return fails("convert", rf"TFLite cannot convert:.*\b{what}", reason)


def _flex(op: str) -> Limitation:
    return _cannot(rf"tf\.{op} x\d", f"TFLite has no builtin for tf.{op} (a TF op: needs flex)")


# The TFLite converter's StableHLO legalization and LiteRT's kernels (measured with TF 2.21 and
# ai-edge-litert 2.3). These are limits of TFLite itself; jaxconv reports them at conversion.
TFLITE: tuple[tuple[Limitation, tuple[str, ...]], ...] = (
    (fails("run", r"worker process died \(exit code -8\)", "LiteRT aborts (SIGFPE) on a matmul with a zero-size contraction"),
     ("edge.empty_matmul_k0",)),
    (fails("convert", r"LiteRT failed while running .*Invalid tensor size.*the tf-ops route: LiteRT failed while running",
           "LiteRT rejects zero-size tensors (\"Invalid tensor size\") on both routes"),
     ("edge.empty_elementwise", "edge.empty_slice")),
    (_cannot(r"TFLite has no float64 kernels: float64 in",
             "float64 is a TFLite limit: no float64 kernels (xla route: tfl.* on float64; tf-ops route names where "
             "float64 is computed)"),
     ("dtype.f64.add", "dtype.f64.compare", "dtype.f64.divide", "dtype.f64.dot", "dtype.f64.exp_tanh",
      "dtype.f64.maximum", "dtype.f64.multiply", "dtype.f64.negate_abs", "dtype.f64.reduce", "dtype.f64.select",
      "dtype.f64.shape_ops", "dtype.f64.sort")),
    (differs("TFLite computes cbrt through pow: NaN for negative inputs", outputs=(0,), classes=("nan",)), ("op.cbrt.f32",)),
    (differs("TFLite's exp(NaN) is 0; its log and sqrt of 3e38 give inf and 2.6e19", outputs=(0, 1, 2),
             classes=("nan", "inf", "value")), ("edge.exp_log_special",)),
    (differs(_SUBNORMAL.format("TFLite"), outputs=(0, 1), classes=("subnormal",)), ("edge.subnormal.compare",)),
    (_cannot(r"stablehlo\.custom_call @lapack_\w*geqrf_ffi x\d",
             "the TFLite converter does not legalize JAX's LAPACK custom calls (lapack_*_ffi), and the tf-ops route's "
             "QR rounds its rank-one updates once, as LAPACK's FMA does, in float64, which TFLite has no kernels for"),
     ("op.linalg.qr",)),
    (_cannot(r"stablehlo\.dynamic_gather x\d.*the tf-ops route: LiteRT failed while running .*Invalid tensor",
             "the converter does not legalize stablehlo.dynamic_gather; the tf-ops model meets LiteRT's zero-size "
             "tensor limit"), ("sym.slice_half",)),
)

_TF32 = differs("jax.jit on the GPU computes float32 matrix products and convolutions in TF32 (matmul precision "
                "DEFAULT); ONNX Runtime computes them in float32, and agrees with jax.jit at precision HIGHEST",
                classes=("precision",), may_pass=True)

# (case pattern, target, device) -> the expected failure. Device "*" means every device.
LIMITATIONS: dict[tuple[str, str, str], Limitation] = {
    ("spectral.rfft", "tflite", ANY_DEVICE): _TFL_COMPLEX_IO,
    ("spectral.fft2", "tflite", ANY_DEVICE): _TFL_COMPLEX_IO,
    ("spectral.ifft_c128", "tflite", ANY_DEVICE): _TFL_COMPLEX_IO,
    ("spectral.complex_cumsum_symbolic", "tflite", ANY_DEVICE): _TFL_COMPLEX_IO,
    ("op.rng_bit_generator.*", "onnx", ANY_DEVICE): fails(
        "convert", r"stablehlo\.rng_bit_generator x\d+ \(rng_bit_generator with algorithm DEFAULT",
        "XLA's backend-defined (DEFAULT) bit generator cannot be reproduced bit-exactly; THREE_FRY is lowered"),
    ("edge.max_min_nan", "saved-model", "cpu"): differs(_TF_NAN, outputs=(0, 1), classes=("nan",)),
    ("edge.subnormal.add_mul", "onnx", "cpu"): differs(_SUBNORMAL.format("ONNX Runtime"), outputs=(2,), classes=("subnormal",)),
    ("edge.subnormal.compare", "onnx", "cpu"): differs(_SUBNORMAL.format("ONNX Runtime"), outputs=(0, 1), classes=("subnormal",)),
    ("edge.subnormal.divide", "onnx", "cpu"): differs(_SUBNORMAL.format("ONNX Runtime"), outputs=(0, 1), classes=("subnormal",)),
    ("edge.subnormal.exp_log", "onnx", "cpu"): differs(_SUBNORMAL.format("ONNX Runtime"), outputs=(1, 2), classes=("subnormal",)),
    ("edge.subnormal.sign", "onnx", "cpu"): differs(_SUBNORMAL.format("ONNX Runtime"), outputs=(0, 1, 2), classes=("subnormal",)),
    ("edge.subnormal.tanh_logistic", "onnx", "cpu"): differs(_SUBNORMAL.format("ONNX Runtime"), outputs=(0,),
                                                            classes=("subnormal",)),
}
for _row, _cases in TFLITE:
    for _case in _cases:
        LIMITATIONS[(_case, "tflite", ANY_DEVICE)] = _row
# Last, so a case's own row comes first. On an NVIDIA H200 (jax 0.11.2) 14 cases with products differ
# so; which ones depends on the kernels cuBLAS and cuDNN choose (a conv case passed in one run of four).
LIMITATIONS[("*", "onnx", "gpu")] = _TF32


def _key(entry: tuple[str, ...]) -> tuple[str, str, str]:
    if len(entry) == 2:
        return entry[0], entry[1], ANY_DEVICE
    if len(entry) == 3:
        return entry  # type: ignore[return-value]
    raise ValueError(f"limitation key {entry!r} must be (case, target) or (case, target, device)")


def validate(table: Mapping[tuple[str, ...], Limitation]) -> None:
    """Every row has a well-formed key, a reason and an expected failure; raises ValueError otherwise."""
    for k, row in table.items():
        _key(k)
        if not isinstance(row, Limitation):
            raise ValueError(f"limitation {k!r} must name its expected failure: fails(stage, pattern, reason) or "
                             f"differs(reason, outputs=..., classes=...), not {row!r}")
        if not isinstance(row.reason, str) or not row.reason.strip():
            raise ValueError(f"limitation {k!r} has no reason: every limitation must say why")
        if row.stage not in STAGES:
            raise ValueError(f"limitation {k!r}: unknown stage {row.stage!r}; choose from {', '.join(STAGES)}")
        try:
            re.compile(row.pattern)
        except re.error as e:
            raise ValueError(f"limitation {k!r}: bad pattern {row.pattern!r}: {e}") from None
        unknown = sorted(row.classes - set(CLASSES))
        if unknown:
            raise ValueError(f"limitation {k!r}: unknown element class {', '.join(unknown)}; choose from {', '.join(CLASSES)}")
        if row.stage == "compare":
            if not (row.outputs or row.classes):
                raise ValueError(f"limitation {k!r} expects a compare failure: name the outputs or element classes that differ")
        elif not row.pattern.strip():
            raise ValueError(f"limitation {k!r} expects a {row.stage} failure: give a pattern of its error message")


def suggest(result: Any) -> str:
    """A row for a failing CellResult, to review before pasting into ``LIMITATIONS``."""
    key = f'("{result.case}", "{result.target}", "{result.device}")'
    if result.stage == "compare" and result.diffs:
        outputs = tuple(sorted({d["output"] for d in result.diffs}))
        classes = tuple(sorted({c for d in result.diffs for c in d["classes"]}, key=CLASSES.index))
        return f'    {key}: differs("REASON", outputs={outputs!r}, classes={classes!r}),'
    head = re.split(r"[;(]", result.error, maxsplit=1)[0].strip()[:90]
    pattern = re.sub(r"\d+", r"\\d+", re.escape(head))
    pattern = re.sub(r"/tmp/\S+", ".*", pattern)
    return f'    {key}: fails("{result.stage}", r"{pattern}", "REASON"),'


def lookup(case: str, target: str, device: str,
           table: Mapping[tuple[str, ...], Limitation] | None = None) -> Limitation | None:
    """The row limiting ``case`` on ``target``/``device``, or None."""
    table = LIMITATIONS if table is None else table
    for k, row in table.items():
        pattern, t, d = _key(k)
        if t == target and d in (ANY_DEVICE, device) and fnmatch.fnmatchcase(case, pattern):
            return row
    return None


validate(LIMITATIONS)
