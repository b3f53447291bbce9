"""Shared helpers for the plain elementwise, bitwise and convert lowering tests (the edge values live in
``conformance/values.py``, shared with the op rows).

Exact ops are compared bit for bit (signed zeros included).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import ml_dtypes
import numpy as np

from conformance.values import BF16, Spec


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
    from jaxconv.references import reference_outputs
    from jaxconv.runtimes.onnxrt import OnnxRunner

    if isinstance(fn, jax.export.Exported):
        fn = fn.call
    program = trace(fn, list(specs) if specs is not None else [_spec(a) for a in args])
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


# ---- binary arithmetic ------------------------------------------------------------------------
