"""Gather and scatter lowerings: graph structure, refusals, a test-data file (the comparisons are rows in
conformance/cases/op_indexing.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dtype_support import data, x64_for
from lowering_check import assert_onnx_matches_jax, onnx_op_types

DTYPES = ["float32", "float16", "bfloat16", "float64", "int8", "int16", "int32", "int64",
          "uint8", "uint16", "uint32", "uint64", "bool"]

IDX = np.array([0, 4, -1, 7, -9, 2], np.int32)  # in range, negative (wrapped by jnp), too large, too small


@pytest.mark.parametrize("dtype", DTYPES)
def test_gathers_every_dtype(dtype):
    def f(x, i, j, k):
        return (x[i], x[:, i], jnp.take(x, i, axis=1), x[i, 1:3],
                jnp.take_along_axis(x, j, axis=1), jnp.take_along_axis(x, k, axis=0))

    j = np.array([[0, 5, -1], [2, 2, 9], [-7, 1, 3], [4, 0, 0], [1, 1, 1]], np.int32)
    k = np.array([[0, 3, -1, 2, 9, -9], [1, 1, 1, 0, 0, 3]], np.int32)
    with x64_for(dtype):
        model = assert_onnx_matches_jax(f, data((5, 6), dtype), IDX, j, k)
    assert "GatherElements" in onnx_op_types(model)


def test_take_is_one_gather():
    model = assert_onnx_matches_jax(lambda x, i: (x[i], x[:, i]), data((5, 6), "float32"), IDX)
    assert "GatherND" not in onnx_op_types(model) and "Gather" in onnx_op_types(model)


def test_gather_window_not_full():
    """A gather whose window does not cover the non-indexed dims takes the general GatherND path."""
    dn = jax.lax.GatherDimensionNumbers(offset_dims=(1, 2), collapsed_slice_dims=(1,), start_index_map=(1, 0))

    def f(x, i):
        return jax.lax.gather(x, i, dn, slice_sizes=(2, 1, 3), mode=jax.lax.GatherScatterMode.CLIP)

    i = np.array([[1, 0], [4, 3], [-1, 9], [2, 2]], np.int32)
    model = assert_onnx_matches_jax(f, data((4, 5, 6), "float32"), i)
    assert "GatherND" in onnx_op_types(model)


DN_ROWS = jax.lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                          scatter_dims_to_operand_dims=(0,))


def test_scatter_constant_indices_need_no_mask():
    def f(x, u):
        return jax.lax.scatter(x, np.array([[0], [2]], np.int32), u, DN_ROWS)

    model = assert_onnx_matches_jax(f, data((4, 3), "float32"), data((2, 3), "float32", 1))
    assert "Pad" not in onnx_op_types(model)


def test_scatter_apply_is_reported_unsupported():
    from jaxconv.errors import UnsupportedError

    with pytest.raises(UnsupportedError, match="scatter combiner"):
        assert_onnx_matches_jax(lambda x, i: x.at[i].apply(jnp.sin), data((4,), "float32"), np.array([1], np.int32))


@pytest.mark.parametrize("op,upd,expected", [("add", "-5.117190e-01", -3.265625), ("multiply", "2.000000e+00", -5.5)])
def test_bfloat16_scatter_of_a_scalar_update_from_a_stablehlo_file(tmp_path, op, upd, expected):
    """StableHLO test data scatter_{add,mul}_bfloat16_1_bfloat16 (not in the shared copy): a scalar bf16 update."""
    from conformance import testdata

    (tmp_path / "s.mlir").write_text(f"""
module {{
  func.func public @main() -> tensor<1xbf16> {{
    %c = stablehlo.constant dense<0> : tensor<1xi64>
    %0:2 = call @inputs() : () -> (tensor<1xbf16>, tensor<bf16>)
    %1 = call @expected() : () -> tensor<1xbf16>
    %2 = "stablehlo.scatter"(%0#0, %c, %0#1) <{{scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0],
        scatter_dims_to_operand_dims = [0]>, unique_indices = true}}> ({{
    ^bb0(%arg0: tensor<bf16>, %arg1: tensor<bf16>):
      %3 = stablehlo.{op} %arg0, %arg1 : tensor<bf16>
      stablehlo.return %3 : tensor<bf16>
    }}) : (tensor<1xbf16>, tensor<1xi64>, tensor<bf16>) -> tensor<1xbf16>
    stablehlo.custom_call @check.expect_close(%2, %1) {{has_side_effect = true}} : (tensor<1xbf16>, tensor<1xbf16>) -> ()
    return %2 : tensor<1xbf16>
  }}
  func.func private @inputs() -> (tensor<1xbf16>, tensor<bf16>) {{
    %cst = stablehlo.constant dense<-2.750000e+00> : tensor<1xbf16>
    %cst_0 = stablehlo.constant dense<{upd}> : tensor<bf16>
    return %cst, %cst_0 : tensor<1xbf16>, tensor<bf16>
  }}
  func.func private @expected() -> tensor<1xbf16> {{
    %cst = stablehlo.constant dense<{expected}> : tensor<1xbf16>
    return %cst : tensor<1xbf16>
  }}
}}
""")
    r = testdata.run_file(str(tmp_path / "s.mlir"), str(tmp_path))
    assert r.status == "pass", f"{r.stage}: {r.error}"
