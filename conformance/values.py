"""Edge-value inputs and helpers for op rows: every dtype's NaN, ±inf, ±0, halves, extremes.

``patched`` runs StableHLO that JAX never emits (integer power, logistic, TOTALORDER compares,
scalar clamp bounds) on XLA itself, so rows for such ops are still compared with XLA.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import jax
import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
FLOATS = [F32, F16, BF16]
INTS = [np.dtype(t) for t in (np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32)]
X64_FLOATS = [F64]
X64_INTS = [np.dtype(np.int64), np.dtype(np.uint64)]
Spec = jax.ShapeDtypeStruct

TRANSCENDENTAL_TOL = {F32: (2e-6, 1e-30), F16: (1e-3, 1e-7), BF16: (8e-3, 1e-30), F64: (1e-13, 1e-300)}
# sin/cos/tan near their roots: libm and XLA differ by an ulp of the argument's reduction.
PERIODIC_ATOL = {F32: 1e-7, F16: 1e-3, BF16: 1e-2, F64: 1e-15}


def float_values(dtype: np.dtype) -> np.ndarray:
    """Edge values representable (as normal numbers, zero, inf or NaN) in ``dtype``."""
    v = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5,
         0.49999997, -0.49999997, 3.7, -3.7, 1e-3, -1e-3, 100.25, -7.0, 1e4, 6e4, -6e4, 1e30, -3e38]
    with np.errstate(over="ignore"):
        a = np.array(v, np.float64).astype(dtype)
    keep = ~np.isfinite(a.astype(np.float64)) | (a == 0) | (np.abs(a.astype(np.float64)) >= float(ml_dtypes.finfo(dtype).tiny))
    return a[keep]


def int_values(dtype: np.dtype) -> np.ndarray:
    """MIN, MIN + 1, small values of both signs, MAX - 1, MAX of an integer dtype."""
    info = np.iinfo(dtype)
    v = [info.min, info.min + 1, -100, -7, -2, -1, 0, 1, 2, 3, 7, 100, info.max - 1, info.max]
    return np.array(sorted({x for x in v if info.min <= x <= info.max}), dtype)


def values(dtype: np.dtype) -> np.ndarray:
    return float_values(dtype) if dtype.kind == "f" or dtype == BF16 else int_values(dtype)


def grid(v: np.ndarray, w: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Every pair (v[i], w[j]) as two flat arrays."""
    w = v if w is None else w
    a, b = np.meshgrid(v, w, indexing="ij")
    return a.ravel(), b.ravel()


def each(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` applied to each argument (or argument pair): one export covers several dtypes."""
    def many(*args):
        return tuple(fn(*a) if isinstance(a, tuple) else fn(a) for a in args)

    return many


def patched(fn: Callable[..., Any], specs: Sequence[Any], edit: Callable[[str], str]) -> jax.export.Exported:
    """Export ``fn`` and rewrite its StableHLO text with ``edit``; calling the result runs the rewritten
    module on XLA."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo as shlo

    from jaxconv.stablehlo.reader import make_context

    exp = jax.export.export(jax.jit(fn))(*specs)
    text = edit(exp.mlir_module())
    with make_context():
        module = ir.Module.parse(text)
        version = shlo.get_version_from_compatibility_requirement(shlo.StablehloCompatibilityRequirement.WEEK_4)
        data = shlo.serialize_portable_artifact_str(str(module), version)
    return dataclasses.replace(exp, mlir_module_serialized=data)


class Patched:
    """A callable that runs ``patched(fn, specs, edit)``, exported on first call (under the caller's x64
    scope), so declaring a row costs nothing."""

    def __init__(self, fn: Callable[..., Any], specs: Sequence[Any], edit: Callable[[str], str]) -> None:
        self.fn, self.specs, self.edit = fn, list(specs), edit
        self._exported: jax.export.Exported | None = None

    def __call__(self, *args: Any) -> Any:
        if self._exported is None:
            self._exported = patched(self.fn, self.specs, self.edit)
        return self._exported.call(*args)


def replace_op(old: str, new: str) -> Callable[[str], str]:
    """An edit for ``patched``: replace ``old`` (which must be in the module) with ``new``."""
    def edit(text: str) -> str:
        assert old in text, f"{old} not in the exported module"
        return text.replace(old, new)

    return edit
