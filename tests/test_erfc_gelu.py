"""The exact GELU (``jax.nn.gelu(approximate=False)``): jax's inline erfc becomes one Gelu (or Erf) node.

``stablehlo.primitive_groups`` puts ``chlo.erfc`` back in place of the ~60-op decomposition when the
erfc is scaled by its own input; the activations rewrite turns ``0.5 * x * (1 -+ Erf(-+x / sqrt 2))``
into Gelu. Numbers are compared with jax.jit on grids that include the tails and IEEE edge values.
"""

from __future__ import annotations

import os
import tempfile

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import ml_dtypes
import numpy as np
import onnx
import pytest
from jax import lax

from tests.lowering_check import assert_same_floats, convert_and_run, x64_for
from tests.onnx_graphs import op_types

EDGES = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-40, -1e-40, 1e-30, -1e-30, 3e38, -3e38, 1e4, -1e4]
GRID = np.concatenate([np.linspace(-12, 12, 4801), EDGES]).astype(np.float32)


def gelu(x):
    return jax.nn.gelu(x, approximate=False)


def gelu_by_hand(x):
    return x * 0.5 * (1 + lax.erf(x / jnp.sqrt(2.0)))


def _jit(fn, *args):
    with x64_for(*args):
        return [np.asarray(a) for a in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]


def test_exact_gelu_float32_is_one_gelu_node():
    ops, (got,) = convert_and_run(gelu, GRID)
    assert ops == {"Gelu": 1}
    assert_same_floats(got, _jit(gelu, GRID)[0], rtol=1e-4, atol=1e-5)


def test_exact_gelu_below_opset_20_is_the_form_ort_fuses():
    import onnxruntime as ort

    import jaxconv

    ops, (got,) = convert_and_run(gelu, GRID, opset=18)
    assert ops == {"Div": 1, "Erf": 1, "Add": 1, "Mul": 2}
    assert_same_floats(got, _jit(gelu, GRID)[0], rtol=1e-4, atol=1e-5)
    model = jaxconv.to_onnx(gelu, jax.ShapeDtypeStruct((8, 16), np.float32), opset=18, check=False)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    with tempfile.TemporaryDirectory() as tmp:
        options.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        fused = [n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node]
    assert fused == ["Gelu"]  # ORT's contrib Gelu


def test_gelu_written_with_erf_becomes_gelu():
    ops, (got,) = convert_and_run(gelu_by_hand, GRID)
    assert ops == {"Gelu": 1}
    assert_same_floats(got, _jit(gelu_by_hand, GRID)[0], rtol=1e-4, atol=1e-5)


def test_gelu_erfc_written_by_hand_becomes_gelu():
    def fn(x):
        return x * 0.5 * jsp.erfc(-x / jnp.sqrt(2.0))

    ops, (got,) = convert_and_run(fn, GRID)
    assert ops == {"Gelu": 1}
    assert_same_floats(got, _jit(fn, GRID)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype, tol", [(np.float16, (1e-2, 1e-3)), (ml_dtypes.bfloat16, (2e-2, 1e-2))])
def test_half_float_gelu_is_gelu_in_float32(dtype, tol):
    x = np.concatenate([np.linspace(-8, 8, 641), [0.0, -0.0, np.inf, -np.inf, np.nan]]).astype(dtype)
    ops, (got,) = convert_and_run(gelu, x)
    assert ops == {"Cast": 2, "Gelu": 1}  # tests/test_erfc_gelu_half.py for the rest
    want = _jit(gelu, x)[0]
    assert_same_floats(got.astype(np.float32), want.astype(np.float32), *tol)


def test_float64_gelu_keeps_the_decomposition():
    x = np.concatenate([np.linspace(-12, 12, 961), [0.0, -0.0, np.inf, -np.inf, np.nan]])
    with x64_for(x):
        ops, (got,) = convert_and_run(gelu, x)
    assert "Erf" not in ops and "Gelu" not in ops and ops["Exp"] >= 1  # ORT has no float64 Erf
    assert_same_floats(got, _jit(gelu, x)[0], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("fn", [lax.erfc, jsp.erfc], ids=["lax", "scipy"])
def test_bare_erfc_keeps_its_relative_accuracy_in_the_tail(fn):
    x = np.concatenate([np.linspace(-4, 9, 521), [0.0, -0.0, np.inf, -np.inf, np.nan]]).astype(np.float32)
    ops, (got,) = convert_and_run(fn, x)
    assert "Erf" not in ops and ops["Exp"] >= 1
    want = _jit(fn, x)[0]
    assert want[np.searchsorted(x[:521], 5.0)] > 1e-12  # erfc(5) = 1.5e-12: 1 - erf(5) would be 0
    tail = np.isfinite(x) & (x > 3)
    np.testing.assert_allclose(got[tail], want[tail], rtol=1e-4, atol=0)
    assert_same_floats(got, want, rtol=1e-4, atol=1e-5)


def test_two_gelus_and_one_inside_a_scan_body():
    def fn(x):
        def body(carry, row):
            return carry + gelu(row), gelu(row * 2.0)

        total, ys = lax.scan(body, jnp.zeros(x.shape[1:], x.dtype), x)
        return gelu(total) + gelu(x[0] - 1.0), ys

    x = GRID[:4800].reshape(40, 120)
    model_ops, got = convert_and_run(fn, x)
    want = _jit(fn, x)
    for g, w in zip(got, want):
        assert_same_floats(g, w, rtol=1e-4, atol=1e-5)
    import jaxconv

    model = jaxconv.to_onnx(fn, jax.ShapeDtypeStruct(x.shape, x.dtype), check=False)
    types = op_types(model.graph)
    assert types.count("Gelu") == 4 and "Exp" not in types and "Erf" not in types


def test_symbolic_batch():
    (b,) = jax.export.symbolic_shape("b")
    spec = jax.ShapeDtypeStruct((b, 24), np.float32)
    for rows in (1, 5):
        x = GRID[: rows * 24].reshape(rows, 24)
        ops, (got,) = convert_and_run(gelu, x, specs=[spec])
        assert ops["Gelu"] == 1 and "Exp" not in ops
        assert_same_floats(got, _jit(gelu, x)[0], rtol=1e-4, atol=1e-5)


def _module(fn, *specs):
    from jaxconv.stablehlo.reader import read_module

    return read_module(jax.export.export(jax.jit(fn))(*specs).mlir_module_serialized)


def _collapse(module) -> int:
    from jaxconv.onnx.ops.composites import collapse_erfc_groups

    return collapse_erfc_groups(module)


def test_named_scope_called_erfc_is_not_the_primitive():
    from jaxconv.stablehlo.primitive_groups import primitive_of

    def fn(x):
        with jax.named_scope("erfc"):
            return x * 0.5 * (x * 2.0 + 1.0)

    module = _module(fn, jax.ShapeDtypeStruct((4,), np.float32))
    locations = [op.location for op in module.entry().body.ops if op.name == "stablehlo.multiply"]
    assert locations and all('/erfc/mul"' in loc for loc in locations)
    assert {primitive_of(loc) for loc in locations} == {"mul"}
    assert _collapse(module) == 0


def test_a_changed_constant_in_the_group_is_left_alone():
    from jaxconv.stablehlo import ir as hir
    from jaxconv.stablehlo.primitive_groups import primitive_of

    spec = jax.ShapeDtypeStruct((4,), np.float32)
    assert _collapse(_module(gelu, spec)) == 1
    module = _module(gelu, spec)
    ops = list(hir.walk_ops(module.entry().body))
    constants = {id(v): op for op in ops if op.name == "stablehlo.constant" for v in op.results}
    in_group = [constants[id(v)] for op in ops if primitive_of(op.location) == "erfc"
                for v in op.operands if id(v) in constants]
    tampered = next(op for op in in_group if float(op.attrs["value"].reshape(-1)[0]) == 2.0)
    tampered.attrs["value"] = np.full_like(tampered.attrs["value"], 2.5)
    before = len(module.entry().body.ops)
    assert _collapse(module) == 0 and len(module.entry().body.ops) == before


HAND_WRITTEN = """
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c = stablehlo.constant dense<0.5> : tensor<4xf32>
  %n = stablehlo.negate %x : tensor<4xf32> loc("jit(f)/neg")
  %s = stablehlo.multiply %n, %n : tensor<4xf32> loc("jit(f)/erfc")
  %t = stablehlo.exponential %s : tensor<4xf32> loc("jit(f)/erfc")
  %h = stablehlo.multiply %c, %x : tensor<4xf32> loc("jit(f)/mul")
  %r = stablehlo.multiply %h, %t : tensor<4xf32> loc("jit(f)/mul")
  return %r : tensor<4xf32>
}
"""


def test_a_hand_written_group_named_erfc_is_left_alone(tmp_path):
    from jaxconv.onnx.convert import stablehlo_file_to_onnx
    from jaxconv.runtimes.onnxrt import OnnxRunner
    from jaxconv.stablehlo.reader import read_module

    module = read_module(HAND_WRITTEN)
    assert _collapse(module) == 0 and len(module.entry().body.ops) == 6
    path = tmp_path / "m.mlir"
    path.write_text(HAND_WRITTEN)
    model = stablehlo_file_to_onnx(str(path))
    x = np.array([-2.0, -0.5, 0.5, 3.0], np.float32)
    (got,) = OnnxRunner(model.SerializeToString()).run([x])
    np.testing.assert_allclose(got, 0.5 * x * np.exp(x * x), rtol=1e-6)


def test_gelu_of_a_value_read_elsewhere_still_matches():
    def fn(x):
        y = x * 3.0
        return gelu(y), y * 0.5, jsp.erfc(y)  # the scale and erfc's input feed other outputs too

    x = GRID[:4800]
    ops, got = convert_and_run(fn, x)
    assert ops["Gelu"] == 1
    for g, w in zip(got, _jit(fn, x)):
        assert_same_floats(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.tf
def test_tflite_tf_ops_route_runs_an_exact_gelu_mlp():
    pytest.importorskip("tensorflow")
    pytest.importorskip("ai_edge_litert")
    from jaxconv import api

    w1 = np.random.default_rng(1).normal(size=(16, 32)).astype(np.float32)
    w2 = np.random.default_rng(2).normal(size=(32, 8)).astype(np.float32)

    def mlp(x):
        return gelu(gelu(x @ w1) @ w2)

    reports: list = []
    api.to_tflite(mlp, "f32[4,16]", route="tf-ops", report_to=reports)
    assert reports[0].ok
