"""The lowering context on onnx_ir: names map to typed ir.Values, nodes carry their StableHLO origin."""

import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import onnx_ir as ir

from jaxconv.onnx.context import SAME_SHAPE_KEY, GraphScope, LoweringContext
from jaxconv.stablehlo import ir as hir
from lowering_check import assert_onnx_matches_jax


def _ctx() -> LoweringContext:
    return LoweringContext(module=None, opset=21)  # type: ignore[arg-type]


def test_scalar_constants_stay_zero_dimensional():
    ctx = _ctx()
    name = ctx.const(np.float32(2.0))
    value = ctx.values[name]
    assert value.shape == ir.Shape([]) and value.const_value.shape == ir.Shape([])
    assert ctx.constant_value(name).shape == ()


def test_small_constants_are_shared_and_keep_their_dtype():
    ctx = _ctx()
    a, b = ctx.i64([1, 2]), ctx.i64([1, 2])
    bf = ctx.const(np.array([1.5, -2.0]), "bfloat16")
    assert a == b and len(ctx.initializers) == 2
    assert ctx.values[bf].dtype == ir.DataType.BFLOAT16
    assert ctx.constant_value(bf).dtype == np.dtype(ml_dtypes.bfloat16)


def test_nodes_are_ir_nodes_with_typed_outputs_and_markers():
    ctx = _ctx()
    x = ctx.value("x")
    x.dtype = ir.DataType.FLOAT
    y = ctx.op("Add", ["x", ctx.scalar(1.0, "float32")], same_shape_inputs=True)
    z = ctx.cast(y, "int32")
    node = ctx.producer(y)
    assert isinstance(node, ir.Node) and node.op_type == "Add" and node.inputs[0] is x
    assert node.metadata_props[SAME_SHAPE_KEY] == "1"
    assert ctx.values[z].dtype == ir.DataType.INT32
    assert [n.op_type for n in ctx.scope.nodes] == ["Add", "Cast"]


def test_bound_values_take_the_stablehlo_dtype():
    ctx = _ctx()
    out = ctx.op("Neg", ["x"])
    ctx.bind(hir.Value(id=7, type=hir.TensorType("float16", (3,))), out)
    assert ctx.values[out].dtype == ir.DataType.FLOAT16
    assert ctx.values[out].shape is None  # shapes come from inference: region bodies run on whole tensors


def test_fold_evaluates_constant_chains_only():
    ctx = _ctx()
    c = ctx.op("Mul", [ctx.const(np.arange(3, dtype=np.float32)), ctx.scalar(2.0, "float32")])
    folded = ctx.fold(ctx.op("Reshape", [c, ctx.i64([3, 1])]))
    np.testing.assert_array_equal(folded, np.array([[0.0], [2.0], [4.0]], np.float32))
    assert ctx.fold(ctx.op("Add", [c, "x"])) is None


def test_pruned_subgraph_nodes_stop_using_outer_values():
    ctx = _ctx()
    outer = ctx.op("Exp", ["x"])
    scope = GraphScope(parent=ctx.scope)
    ctx.scope = scope
    kept = ctx.op("Neg", [outer])
    ctx.op("Abs", [outer])  # nothing reads it
    ctx.scope = scope.parent
    needed = scope.prune([kept])
    assert [n.op_type for n in scope.nodes] == ["Neg"]
    assert outer in needed
    assert [u.node.op_type for u in ctx.values[outer].uses()] == ["Neg"]


def test_nodes_record_their_stablehlo_op():
    model = assert_onnx_matches_jax(lambda x: jnp.sin(x) * 2.0, np.ones(3, np.float32))
    sin = next(n for n in model.graph.node if n.op_type == "Sin")
    props = {p.key: p.value for p in sin.metadata_props}
    assert props["stablehlo.op"] == "stablehlo.sine"
    assert "test_graph_layer.py" in props.get("source", "")
    assert all(p.key != SAME_SHAPE_KEY for n in model.graph.node for p in n.metadata_props)


def test_scan_with_outer_weights_round_trips():
    w = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)

    def f(xs):
        return jax.lax.scan(lambda h, x: (jnp.tanh(h @ w + x), h), jnp.zeros(4, jnp.float32), xs)

    assert_onnx_matches_jax(f, np.random.default_rng(1).standard_normal((6, 4)).astype(np.float32), rtol=1e-5, atol=1e-6)


def test_conversion_does_not_import_sympy_and_symbolic_dims_still_compute():
    # onnx_ir imports sympy (a fifth of a conversion's CPU time) for dimension arithmetic jaxconv never does
    code = ("import sys, jax.numpy as jnp, jaxconv\n"
            "jaxconv.to_onnx(lambda x: jnp.tanh(x) * 2, 'f32[b,3]', check=False)\n"
            "print('sympy.core' in sys.modules)\n"
            "import onnx_ir as ir\n"
            "print(ir.SymbolicDim('t') + 1, ir.SymbolicDim('max(t, 2)').evaluate({'t': 5}))\n")
    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).parents[1] / "converter")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[:2] == ["False", "t + 1 5"]
