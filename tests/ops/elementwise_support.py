"""Shared helpers for the elementwise, bitwise and convert lowering tests.

Exact ops are compared bit for bit (signed zeros included); ``patched`` runs StableHLO that JAX
never emits on XLA itself, so such ops are still compared with XLA.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import jax
import ml_dtypes
import numpy as np

from lowering_check import record_ops

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
FLOATS = [F32, F16, BF16]
INTS = [np.dtype(t) for t in (np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32)]
X64_FLOATS = [F64]
X64_INTS = [np.dtype(np.int64), np.dtype(np.uint64)]
Spec = jax.ShapeDtypeStruct


# ---- helpers -----------------------------------------------------------------------------------
def float_values(dtype: np.dtype) -> np.ndarray:
    """Edge values representable (as normal numbers, zero, inf or NaN) in ``dtype``."""
    v = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5,
         0.49999997, -0.49999997, 3.7, -3.7, 1e-3, -1e-3, 100.25, -7.0, 1e4, 6e4, -6e4, 1e30, -3e38]
    with np.errstate(over="ignore"):
        a = np.array(v, np.float64).astype(dtype)
    keep = ~np.isfinite(a.astype(np.float64)) | (a == 0) | (np.abs(a.astype(np.float64)) >= float(ml_dtypes.finfo(dtype).tiny))
    return a[keep]


def int_values(dtype: np.dtype) -> np.ndarray:
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


def _spec(a: Any) -> Any:
    return jax.tree_util.tree_map(lambda x: Spec(np.shape(x), np.asarray(x).dtype), a)


def _bf16_outputs_to_f32(model):
    """Append exact bfloat16 -> float32 Casts to bfloat16 graph outputs (ORT's Python API cannot return bf16)."""
    from onnx import TensorProto, helper

    for out in model.graph.output:
        if out.type.tensor_type.elem_type == TensorProto.BFLOAT16:
            inner = out.name + "__bf16"
            for node in model.graph.node:
                for i, o in enumerate(node.output):
                    if o == out.name:
                        node.output[i] = inner
            model.graph.node.append(helper.make_node("Cast", [inner], [out.name], to=TensorProto.FLOAT))
            out.type.tensor_type.elem_type = TensorProto.FLOAT
    return model


def _as_comparable(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    return x.astype(np.float32) if x.dtype == BF16 else x


def assert_same(expected: np.ndarray, actual: np.ndarray, tol: tuple[float, float] | None, what: str,
                signed_zeros: bool = True) -> None:
    """Bit-exact (NaN positions, values, signed zeros) when ``tol`` is None, else within (rtol, atol)."""
    e, a = _as_comparable(expected), _as_comparable(actual)
    assert e.shape == a.shape, f"{what}: shape {a.shape} != {e.shape}"
    if e.dtype.kind != "f":
        assert a.dtype == e.dtype, f"{what}: dtype {a.dtype} != {e.dtype}"
        bad = np.flatnonzero(e != a)
        assert bad.size == 0, f"{what}: {bad.size} mismatches, first at {bad[0]}: expected {e.flat[bad[0]]!r}, got {a.flat[bad[0]]!r}"
        return
    assert a.dtype == e.dtype, f"{what}: dtype {a.dtype} != {e.dtype}"
    if tol is not None:
        np.testing.assert_allclose(a, e, rtol=tol[0], atol=tol[1], equal_nan=True, err_msg=what)
        if signed_zeros:
            zeros = np.flatnonzero((e == 0) & (a == 0) & (np.signbit(e) != np.signbit(a)))
            assert zeros.size == 0, f"{what}: sign of zero differs at {zeros[:5]}"
        return
    same = (e == a) | (np.isnan(e) & np.isnan(a))
    if signed_zeros:
        same &= (np.signbit(e) == np.signbit(a)) | np.isnan(e)
    # XLA on CPU flushes subnormal results to zero; ONNX Runtime keeps them.
    tiny = float(ml_dtypes.finfo(np.asarray(expected).dtype).tiny)
    same |= (e == 0) & (np.abs(a) < tiny) & (np.signbit(e) == np.signbit(a))
    bad = np.flatnonzero(~same)
    assert bad.size == 0, (f"{what}: {bad.size} mismatches, first at {bad[0]}: expected {e.flat[bad[0]]!r}, "
                           f"got {a.flat[bad[0]]!r}")


def check(fn: Callable[..., Any], *args: Any, specs: Sequence[Any] | None = None, opset: int | None = None,
          tol: tuple[float, float] | None = None, signed_zeros: bool = True, inputs: Sequence[Any] | None = None):
    """Lower ``fn`` to ONNX, run ONNX Runtime and jax.jit on ``args``, compare every output.

    ``fn`` may be a jax.export.Exported (its ``call`` is used). Returns the ONNX model.
    """
    from jaxconv.onnx.convert import program_to_onnx, validate
    from jaxconv.program import trace
    from jaxconv.runtimes.onnxrt import OnnxRunner
    from jaxconv.verify import reference_outputs

    if isinstance(fn, jax.export.Exported):
        fn = fn.call
    program = trace(fn, list(specs) if specs is not None else [_spec(a) for a in args])
    record_ops(program)
    model = program_to_onnx(program, opset)
    validate(model)
    runner = OnnxRunner(_bf16_outputs_to_f32(model).SerializeToString())
    flat = [np.asarray(a) for a in jax.tree_util.tree_leaves(list(args))]
    expected = reference_outputs(fn, program.arg_specs, flat)
    actual = runner.run(flat)
    assert len(actual) == len(expected)
    for i, (e, a) in enumerate(zip(expected, actual)):
        assert_same(e, a, tol, f"output {i} ({e.dtype})", signed_zeros)
    return model


def patched(fn: Callable[..., Any], specs: Sequence[Any], edit: Callable[[str], str]) -> jax.export.Exported:
    """Export ``fn`` and rewrite its StableHLO text with ``edit``; calling the result runs the rewritten
    module on XLA, so ops JAX itself never emits (integer power, logistic, TOTALORDER compares,
    scalar clamp bounds) are still checked against XLA."""
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


def replace_op(old: str, new: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        assert old in text, f"{old} not in the exported module"
        return text.replace(old, new)

    return edit


TRANSCENDENTAL_TOL = {F32: (2e-6, 1e-30), F16: (1e-3, 1e-7), BF16: (8e-3, 1e-30), F64: (1e-13, 1e-300)}
# sin/cos/tan near their roots: libm and XLA differ by an ulp of the argument's reduction.
PERIODIC_ATOL = {F32: 1e-7, F16: 1e-3, BF16: 1e-2, F64: 1e-15}


def each(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` applied to each argument (or argument pair): one export covers several dtypes."""
    def many(*args):
        return tuple(fn(*a) if isinstance(a, tuple) else fn(a) for a in args)

    return many


# ---- binary arithmetic ------------------------------------------------------------------------
