"""Check an artifact against jax.jit, output by output, on seeded random inputs."""

from __future__ import annotations

import re

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from jaxconv.errors import ArtifactError, MismatchError, UsageError
from jaxconv.signature import Signature, TensorInfo

# (rtol, atol) per dtype; integers and bools must match exactly.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-9, 1e-12), "float32": (1e-4, 1e-5), "float16": (1e-2, 1e-3), "bfloat16": (2e-2, 1e-2),
}
SYMBOLIC_SIZES = (2, 5)


@dataclass(frozen=True)
class OutputCheck:
    name: str
    dtype: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    ok: bool
    note: str = ""


@dataclass
class CheckReport:
    """Result of comparing one artifact with jax.jit (possibly at several symbolic sizes)."""

    artifact: str
    runtime: str
    rows: list[OutputCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(r.ok for r in self.rows)

    def table(self) -> str:
        head = f"{'output':<14} {'dtype':<9} {'shape':<16} {'max abs err':>12} {'max rel err':>12}  result"
        lines = [f"check {self.artifact} ({self.runtime}) against jax.jit", head]
        for r in self.rows:
            lines.append(f"{r.name:<14} {r.dtype:<9} {str(list(r.shape)):<16} {r.max_abs:>12.3g} {r.max_rel:>12.3g}  "
                         f"{'ok' if r.ok else 'MISMATCH'}{' ' + r.note if r.note else ''}")
        return "\n".join(lines)


_LOWER_BOUND = re.compile(r"^\s*([A-Za-z_]\w*)\s*(>=|>)\s*(\d+)\s*$")


def _dim_sizes(signature: Signature, size: int, constraints: Sequence[str] = ()) -> dict[str, int]:
    """A value for each symbolic name, raised to satisfy ``name >= N`` / ``name > N`` constraints.

    Expressions (2*b) are evaluated from their names by concrete_shape.
    """
    bounds: dict[str, int] = {}
    for c in constraints:
        m = _LOWER_BOUND.match(c)
        if m:
            low = int(m.group(3)) + (1 if m.group(2) == ">" else 0)
            bounds[m.group(1)] = max(bounds.get(m.group(1), 0), low)
    names: dict[str, int] = {}
    for t in signature.inputs:
        for d in t.shape:
            for name in re.findall(r"[A-Za-z_]\w*", d) if isinstance(d, str) else ():
                if name not in ("floordiv", "mod", "max", "min"):
                    names.setdefault(name, max(size, bounds.get(name, 0) + size - SYMBOLIC_SIZES[0]))
    return names


def concrete_shape(shape: Sequence[int | str], sizes: dict[str, int]) -> tuple[int, ...]:
    out = []
    for d in shape:
        if isinstance(d, int):
            out.append(d)
        elif d in sizes:
            out.append(sizes[d])
        else:
            out.append(int(eval(d.replace("floordiv", "_fd").replace("mod", "_md"), {"__builtins__": {}},  # noqa: S307
                                {**sizes, "_fd": lambda a, b: a // b, "_md": lambda a, b: a % b, "max": max, "min": min})))
    return tuple(out)


def random_array(info: TensorInfo, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Seeded values suited to the dtype (normal floats, small ints, random bools)."""
    from jaxconv.onnx.dtypes import numpy_dtype

    dtype = numpy_dtype(info.dtype)
    if info.dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        lo = 0 if dtype.kind == "u" else -8
        return rng.integers(lo, 9, size=shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def make_inputs(signature: Signature, seed: int = 0, size: int = SYMBOLIC_SIZES[0],
                constraints: Sequence[str] = ()) -> list[np.ndarray]:
    """Seeded random inputs; symbolic dimensions take ``size`` (or more, to satisfy constraints)."""
    rng = np.random.default_rng(seed)
    sizes = _dim_sizes(signature, size, constraints)
    return [random_array(t, concrete_shape(t.shape, sizes), rng) for t in signature.inputs]


def load_inputs(path: str, signature: Signature) -> list[np.ndarray]:
    """Inputs from an .npz keyed by input name (or arr_0.. in order)."""
    try:
        data = np.load(path, allow_pickle=False)
    except Exception as e:
        raise UsageError(f"cannot read inputs from {path}: {e}") from None
    out = []
    for i, t in enumerate(signature.inputs):
        key = t.name if t.name in data else f"arr_{i}"
        if key not in data:
            raise UsageError(f"{path} has no array named {t.name!r} (has: {', '.join(data.files)})")
        out.append(np.asarray(data[key]))
    return out


def reference_outputs(fn: Callable[..., Any], arg_specs: Sequence[Any], flat_inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """jax.jit(fn) on flat inputs rebuilt into the argument pytrees."""
    import jax

    treedef = jax.tree_util.tree_structure(list(arg_specs))
    args = jax.tree_util.tree_unflatten(treedef, [jax.numpy.asarray(a) for a in flat_inputs])
    out = jax.jit(fn)(*args)
    return [np.asarray(o) for o in jax.tree_util.tree_leaves(out)]


def compare(name: str, expected: np.ndarray, actual: np.ndarray, rtol: float | None = None,
            atol: float | None = None) -> OutputCheck:
    """Compare one output; NaNs must sit in the same places, dtypes and shapes must agree."""
    dtype = expected.dtype.name
    if actual.shape != expected.shape:
        return OutputCheck(name, dtype, expected.shape, float("inf"), float("inf"), False,
                           f"shape {list(actual.shape)} != {list(expected.shape)}")
    note = ""
    if actual.dtype != expected.dtype:
        note = f"(dtype {actual.dtype.name})"
    default_rtol, default_atol = TOLERANCES.get(dtype, (0.0, 0.0))
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    if expected.size == 0:
        return OutputCheck(name, dtype, expected.shape, 0.0, 0.0, actual.dtype == expected.dtype or not note, note)
    if expected.dtype.kind in "fcV" or dtype == "bfloat16":
        e = expected.astype(np.float64) if expected.dtype.kind != "c" else expected.astype(np.complex128)
        a = actual.astype(e.dtype)
        nan_e, nan_a = np.isnan(e), np.isnan(a)
        same_nan = bool(np.array_equal(nan_e, nan_a))
        numbers = ~nan_e & ~nan_a
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.where(e == a, 0.0, np.abs(e - a))  # equal infinities differ by 0, not NaN
        diff = np.where(numbers, diff, 0.0)
        with np.errstate(invalid="ignore"):
            rel = np.nan_to_num(diff / np.maximum(np.abs(e), np.finfo(np.float64).tiny), nan=np.inf)
        max_abs = float(diff.max()) if diff.size else 0.0
        max_rel = float(np.where(diff > 0, rel, 0).max()) if diff.size else 0.0
        # An infinite expected value must be matched exactly; tolerance scales with finite values only.
        tol = atol + rtol * np.abs(np.where(np.isfinite(e), e, 0))
        ok = same_nan and bool(np.all(diff <= tol))
        if not same_nan:
            note = (note + " NaN positions differ").strip()
    else:
        diff = np.abs(expected.astype(np.float64) - actual.astype(np.float64))
        max_abs = float(diff.max())
        max_rel = float((diff / np.maximum(np.abs(expected.astype(np.float64)), 1)).max())
        ok = bool(np.all(diff <= atol + rtol * np.abs(expected.astype(np.float64))))
    return OutputCheck(name, dtype, expected.shape, max_abs, max_rel, ok and not note.startswith("(dtype"), note)


def check_runner(runner: Any, artifact: str, fn: Callable[..., Any], arg_specs: Sequence[Any], signature: Signature,
                 *, inputs: Sequence[np.ndarray] | None = None, seed: int = 0, rtol: float | None = None,
                 atol: float | None = None, constraints: Sequence[str] = ()) -> CheckReport:
    """Run ``runner`` and jax.jit on the same inputs and compare every output.

    Symbolic dimensions are tried at each size in SYMBOLIC_SIZES.
    """
    report = CheckReport(artifact=artifact, runtime=runner.kind)
    symbolic = any(t.symbolic for t in signature.inputs)
    trials = [list(inputs)] if inputs is not None else [
        make_inputs(signature, seed + k, size, constraints) for k, size in enumerate(SYMBOLIC_SIZES if symbolic else SYMBOLIC_SIZES[:1])]
    for flat in trials:
        expected = reference_outputs(fn, arg_specs, flat)
        actual = runner.run(flat)
        if len(actual) != len(expected):
            raise ArtifactError(f"{artifact} returned {len(actual)} outputs, jax.jit returns {len(expected)}")
        rows = [compare(info.name, e, np.asarray(a), rtol, atol) for info, e, a in zip(signature.outputs, expected, actual)]
        if rtol is None and atol is None and any(not r.ok and _is_narrow_float(e) for r, e in zip(rows, expected)):
            rows = _arbitrate_with_float64(fn, arg_specs, flat, expected, actual, rows)
        report.rows.extend(rows)
    return report


def _is_narrow_float(a: np.ndarray) -> bool:
    return a.dtype.name in ("float32", "float16", "bfloat16")


def _arbitrate_with_float64(fn: Callable[..., Any], arg_specs: Sequence[Any], flat: Sequence[np.ndarray],
                            expected: Sequence[np.ndarray], actual: Sequence[Any], rows: list[OutputCheck]) -> list[OutputCheck]:
    """For float outputs outside tolerance, ask a float64 run which side is off.

    Ill-conditioned programs (attention with large logits, long reductions) make jax.jit and any
    other runtime differ by more than the default tolerance while both are as accurate as float32
    allows. When the artifact is no further from the float64 result than twice jax.jit's own error,
    the output counts as matching, with a note giving both errors.
    """
    import jax

    try:
        with jax.enable_x64(True):
            wide = [np.asarray(a).astype(np.float64) if np.asarray(a).dtype.kind == "f" or np.asarray(a).dtype.name == "bfloat16"
                    else np.asarray(a) for a in flat]
            truth = reference_outputs(fn, arg_specs, wide)
    except Exception:
        return rows
    out = []
    for row, e, a, t in zip(rows, expected, actual, truth):
        if row.ok or not _is_narrow_float(e) or t.shape != e.shape or np.asarray(a).shape != e.shape:
            out.append(row)
            continue
        t = t.astype(np.float64)
        with np.errstate(invalid="ignore"):
            err_jax = np.nan_to_num(np.abs(e.astype(np.float64) - t), nan=0.0)
            err_art = np.nan_to_num(np.abs(np.asarray(a).astype(np.float64) - t), nan=0.0)
        _, default_atol = TOLERANCES[e.dtype.name]
        same_nan = np.array_equal(np.isnan(e.astype(np.float64)), np.isnan(np.asarray(a).astype(np.float64)))
        if same_nan and float(err_art.max()) <= 2 * float(err_jax.max()) + default_atol:
            note = f"within float32 accuracy: vs float64, jax.jit is off by {float(err_jax.max()):.2g}, this artifact by {float(err_art.max()):.2g}"
            out.append(OutputCheck(row.name, row.dtype, row.shape, row.max_abs, row.max_rel, True, note))
        else:
            out.append(row)
    return out


def raise_on_mismatch(report: CheckReport) -> None:
    if report.ok:
        return
    bad = [r for r in report.rows if not r.ok]
    first = bad[0]
    raise MismatchError(
        f"{report.artifact} was written but is WRONG: output {first.name} differs from jax.jit "
        f"(max abs err {first.max_abs:.3g}, max rel err {first.max_rel:.3g}{', ' + first.note if first.note else ''}); "
        f"{len(bad)} of {len(report.rows)} output checks failed")
