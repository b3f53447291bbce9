"""Reading StableHLO: raw CHLO from jax.jit(...).lower() is expanded like XLA does; constants of every dtype."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest

from jaxconv.cli import main
from jaxconv.stablehlo import ir
from jaxconv.stablehlo.reader import read_module


def test_raw_chlo_module_converts_and_matches_jax(tmp_path, capsys):
    def f(x):
        return jax.lax.erf_inv(x * 0.5) + jax.lax.lgamma(x + 3.0) + jnp.tan(x)

    text = jax.jit(f).lower(jax.ShapeDtypeStruct((16,), jnp.float32)).as_text()
    assert "chlo." in text
    module = read_module(text)
    assert not any(op.name.startswith("chlo.") for fn in module.functions.values() for op in ir.walk_ops(fn.body))
    src = tmp_path / "f.mlir"
    src.write_text(text)
    out = tmp_path / "f.onnx"
    assert main(["to-onnx", str(src), "-o", str(out)]) == 0
    x = np.linspace(-1.5, 1.5, 16, dtype=np.float32)
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {sess.get_inputs()[0].name: x})
    np.testing.assert_allclose(got, np.asarray(jax.jit(f)(x)), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("values", [
    np.array([1.5, -np.inf, np.nan, -0.0], np.float32),
    np.array([1.5, -np.inf, np.nan, 3.25], ml_dtypes.bfloat16),
    np.arange(200, dtype=np.float16).reshape(10, 20),          # printed as a hex blob
    np.array([[True, False]]),
    np.array([-128, 127], np.int8),
    np.array([2**64 - 1, 0], np.uint64),
    np.full((3, 3), 7, np.int32),                              # splat
])
def test_constants_of_every_dtype_are_read_exactly(values):
    with jax.enable_x64(True):
        exp = jax.export.export(jax.jit(lambda: jnp.asarray(values)))()
        module = read_module(exp.mlir_module_serialized)
    consts = [op.attrs["value"] for op in ir.walk_ops(module.entry().body) if op.name == "stablehlo.constant"]
    assert len(consts) == 1
    got = consts[0]
    assert got.dtype == values.dtype and got.shape == values.shape
    np.testing.assert_array_equal(got.view(np.uint8), values.view(np.uint8))


def test_dimension_numbers_are_typed_records_named_as_in_the_spec():
    import jax
    import jax.numpy as jnp
    from jax import export

    from jaxconv.stablehlo import ir as hir
    from jaxconv.stablehlo.reader import read_module

    def f(x, i):
        return x[i], x @ x.T, x.at[i].add(1.0)

    exported = export.export(jax.jit(f))(jax.ShapeDtypeStruct((4, 4), jnp.float32), jax.ShapeDtypeStruct((2,), jnp.int32))
    module = read_module(exported.mlir_module_serialized)
    found = {op.name: op.attrs.get("dimension_numbers", op.attrs.get("dot_dimension_numbers",
                                                                      op.attrs.get("scatter_dimension_numbers")))
             for fn in module.functions.values() for op in hir.walk_ops(fn.body)}
    gather, dot, scatter = found["stablehlo.gather"], found["stablehlo.dot_general"], found["stablehlo.scatter"]
    assert isinstance(gather, hir.GatherDimensionNumbers) and gather.index_vector_dim == 1
    assert gather.start_index_map == (0,) and gather.collapsed_slice_dims == (0,) and gather.offset_dims == (1,)
    assert isinstance(dot, hir.DotDimensionNumbers) and dot.lhs_contracting_dimensions == (1,)
    assert isinstance(scatter, hir.ScatterDimensionNumbers) and scatter.scattered_dims_to_operand_dims == (0,)
    assert dict(gather)["index_vector_dim"] == 1 and gather["offset_dims"] == (1,)  # still readable as a mapping
    assert hir.GatherDimensionNumbers.of(dict(gather)) == gather
