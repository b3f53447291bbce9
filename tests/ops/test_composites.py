"""stablehlo.composite: chlo.* by name (native ONNX op, or the decomposition where ONNX Runtime has
no kernel), user composites through their decomposition: the ONNX ops chosen (float16 comparisons are rows
in conformance/cases/op_composites.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax
from onnx_graphs import op_types

from conformance.cases.op_composites import COMPOSITES
from jaxconv.errors import UnsupportedError
from lowering_check import assert_onnx_matches_jax, onnx_op_types

CASES = COMPOSITES


def _composite_names(fn, x) -> list[str]:
    text = jax.export.export(jax.jit(fn))(jax.ShapeDtypeStruct(x.shape, x.dtype)).mlir_module()
    return [line.split('"')[1] for line in text.splitlines() if "stablehlo.composite" in line]


@pytest.mark.parametrize("name", sorted(CASES))
def test_jax_emits_the_composite(name):
    fn, values, _ = CASES[name]
    assert _composite_names(fn, values.astype(np.float32)) == [name]


@pytest.mark.parametrize("name", sorted(CASES))
def test_float32_uses_the_onnx_op(name):
    fn, values, onnx_op = CASES[name]
    model = assert_onnx_matches_jax(fn, values.astype(np.float32))
    assert onnx_op in onnx_op_types(model)


@pytest.mark.parametrize("name", sorted(CASES))
def test_bfloat16_computed_in_float32(name):
    fn, values, onnx_op = CASES[name]
    # bf16 outputs are compared as f32 (exact widening) within one bf16 rounding step.
    model = assert_onnx_matches_jax(lambda x: fn(x).astype(jnp.float32), values.astype(ml_dtypes.bfloat16),
                                    rtol=1e-2, atol=1e-2)
    assert onnx_op in onnx_op_types(model)


@pytest.mark.parametrize("name", sorted(CASES))
def test_float64_inlines_the_decomposition(name):
    # ONNX Runtime has no float64 kernel for these ops: the decomposition keeps full precision.
    fn, values, onnx_op = CASES[name]
    model = assert_onnx_matches_jax(fn, values.astype(np.float64))
    assert onnx_op not in onnx_op_types(model)


def test_top_k_composite_maps_to_one_top_k():
    x = np.random.default_rng(0).normal(size=(3, 9)).astype(np.float32)
    fn = lambda v: lax.top_k(v, 4)  # noqa: E731
    assert _composite_names(fn, x) == ["chlo.top_k"]
    model = assert_onnx_matches_jax(fn, x)
    ops = op_types(model.graph)  # the sign-of-zero pass runs inside an If (rewrites/sort_zeros.py)
    assert ops.count("TopK") >= 1 and "Loop" not in ops


def test_user_composite_inlines_its_decomposition():
    scaled = lax.composite(lambda x, y: x * 2.0 + jnp.tanh(y), name="my_project.scaled_tanh")
    x = np.linspace(-3, 3, 7).astype(np.float32)
    assert _composite_names(lambda a: scaled(a, a), x) == ["my_project.scaled_tanh"]
    assert_onnx_matches_jax(lambda a, b: scaled(a, b), x, x[::-1].copy())


def test_composite_without_decomposition_is_reported():
    from jaxconv.onnx.ops.composites import _check
    from jaxconv.stablehlo import ir as hir

    x = hir.Value(hir.TensorType("float32", (3,)))
    out = hir.Value(hir.TensorType("float32", (3,)))
    op = hir.Op("stablehlo.composite", [x], [out], {"name": "vendor.fused_thing"}, [])
    assert _check(op) == "composite vendor.fused_thing has no decomposition"


def test_unsupported_op_inside_a_decomposition_is_reported_by_name():
    from jaxconv.onnx.convert import stablehlo_file_to_onnx

    mlir = """
    module {
      func.func public @main(%x: tensor<2xcomplex<f32>>) -> tensor<2xcomplex<f32>> {
        %0 = stablehlo.composite "chlo.asin" %x {decomposition = @asin_impl} : (tensor<2xcomplex<f32>>) -> tensor<2xcomplex<f32>>
        return %0 : tensor<2xcomplex<f32>>
      }
      func.func private @asin_impl(%x: tensor<2xcomplex<f32>>) -> tensor<2xcomplex<f32>> {
        %0 = stablehlo.remainder %x, %x : tensor<2xcomplex<f32>>
        return %0 : tensor<2xcomplex<f32>>
      }
    }
    """
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "c.mlir")
        with open(path, "w") as f:
            f.write(mlir)
        with pytest.raises(UnsupportedError, match=r"stablehlo.remainder x1 \(no ONNX lowering for this op on complex"):
            stablehlo_file_to_onnx(path)
