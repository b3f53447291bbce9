"""Gather, scatter and argmax/argmin lowerings against jax.jit, out-of-range indices included."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lowering_check import assert_onnx_matches_jax, onnx_op_types

DTYPES = ["float32", "float16", "bfloat16", "float64", "int8", "int16", "int32", "int64",
          "uint8", "uint16", "uint32", "uint64", "bool"]
NUMERIC = [d for d in DTYPES if d != "bool"]


from dtype_support import WIDE, data, np_dtype, x64_for  # noqa: E402,F401

IDX = np.array([0, 4, -1, 7, -9, 2], np.int32)  # in range, negative (wrapped by jnp), too large, too small


# ---- gather --------------------------------------------------------------------------------------
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


def test_take_modes_and_out_of_range():
    x = data((5, 6), "float32")

    def f(x, i):
        return (jnp.take(x, i, axis=0, mode="clip"), jnp.take(x, i, axis=0, mode="wrap"),
                jnp.take(x, i, axis=1, mode="fill", fill_value=-1.0), x.at[i].get(mode="clip"))

    big = np.array([100, -100, 2**30, -2**31, 2**31 - 1, 5], np.int32)
    assert_onnx_matches_jax(f, x, IDX, inputs_for_run=[[x, big]])


def test_raw_gather_clamps_whole_window():
    """lax.gather with slice size 3: starts clamp to [0, dim - 3] (no jnp index wrapping in between)."""
    dn = jax.lax.GatherDimensionNumbers(offset_dims=(1, 2), collapsed_slice_dims=(), start_index_map=(0,))

    def f(x, i):
        return jax.lax.gather(x, i[:, None], dn, slice_sizes=(3, 4), mode=jax.lax.GatherScatterMode.CLIP)

    x = data((6, 4), "float32")
    assert_onnx_matches_jax(f, x, np.array([0, 3, 4, 5, -2, 99], np.int32))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "uint64", "bool"])
def test_two_index_arrays(dtype):
    def f(x, i, j):
        return x[i, j], x[i[:, None], j[None, :]], x[:, i, j], x[i, :, j]

    i = np.array([0, 2, -1, 5], np.int32)
    j = np.array([3, -4, 1, 9], np.int32)
    with x64_for(dtype):
        assert_onnx_matches_jax(f, data((3, 4, 5), dtype), i, j)


def test_take_along_axis_3d_middle_axis():
    def f(x, i):
        return jnp.take_along_axis(x, i, axis=1)

    i = np.random.default_rng(1).integers(-6, 6, size=(2, 4, 3)).astype(np.int32)
    assert_onnx_matches_jax(f, data((2, 5, 3), "float32"), i)


def test_batched_gather_vmap():
    """vmap of a per-example gather produces operand_batching_dims."""
    def one(x, i):
        return x[i, :2]

    f = jax.vmap(one, in_axes=(0, 0))
    i = np.array([[0, 2], [3, -1], [9, 1]], np.int32)
    assert_onnx_matches_jax(f, data((3, 4, 5), "float32"), i)
    g = jax.vmap(lambda x, i: x[:, i], in_axes=(1, 0), out_axes=1)
    assert_onnx_matches_jax(g, data((4, 3, 5), "float32"), i)


def test_one_hot_and_embedding_lookup():
    def f(table, ids):
        return table[ids] * 2.0, jax.nn.one_hot(ids, 7), jnp.take(table, ids.reshape(-1), axis=0)

    ids = np.array([[1, 6, 0], [3, 3, 2]], np.int32)
    assert_onnx_matches_jax(f, data((7, 4), "float32"), ids)


def test_gather_scalar_and_empty_indices():
    x = data((5, 3), "float32")
    assert_onnx_matches_jax(lambda x, i: jnp.take(x, i, axis=0), x, np.int32(7))
    assert_onnx_matches_jax(lambda x, i: x[i], x, np.zeros((0,), np.int32))
    assert_onnx_matches_jax(lambda x, i: x[i], data((0, 3), "float32")[:0], np.zeros((0,), np.int32))


def test_gather_window_not_full():
    """A gather whose window does not cover the non-indexed dims takes the general GatherND path."""
    dn = jax.lax.GatherDimensionNumbers(offset_dims=(1, 2), collapsed_slice_dims=(1,), start_index_map=(1, 0))

    def f(x, i):
        return jax.lax.gather(x, i, dn, slice_sizes=(2, 1, 3), mode=jax.lax.GatherScatterMode.CLIP)

    i = np.array([[1, 0], [4, 3], [-1, 9], [2, 2]], np.int32)
    model = assert_onnx_matches_jax(f, data((4, 5, 6), "float32"), i)
    assert "GatherND" in onnx_op_types(model)


# ---- scatter -------------------------------------------------------------------------------------
SCATTER_IDX = np.array([1, 4, -1, 7, -9, 1, 1], np.int32)  # duplicates, negative, out of range


@pytest.mark.parametrize("dtype", DTYPES)
def test_at_methods_every_dtype(dtype):
    methods = ["set", "min", "max"] if dtype == "bool" else ["set", "min", "max", "add", "mul"]

    def f(x, i, u):
        return [getattr(x.at[i], m)(u) for m in methods]

    x = data((5, 3), dtype)
    u = data((7, 3), dtype, 2)
    # XLA rounds half-precision sums after every duplicate; ONNX Runtime accumulates them in f32.
    tol = 2e-2 if dtype in ("float16", "bfloat16") else None
    with x64_for(dtype):
        assert_onnx_matches_jax(f, x, SCATTER_IDX, u, rtol=tol, atol=tol)


def test_at_methods_2d_points_with_duplicates():
    def f(x, i, j, u):
        return [getattr(x.at[i, j], m)(u) for m in ("set", "add", "mul", "min", "max")]

    i = np.array([0, 0, 3, -1, 5, 2, 2], np.int32)
    j = np.array([1, 1, 2, -3, 0, 9, 1], np.int32)
    assert_onnx_matches_jax(f, data((4, 3), "float32"), i, j, data((7,), "float32", 3))


def test_set_duplicates_last_wins_like_jax():
    def f(x, i, u):
        return x.at[i].set(u)

    assert_onnx_matches_jax(f, np.zeros(4, np.float32), np.array([1, 1, 1, 2, 2, 0], np.int32),
                            np.arange(1, 7, dtype=np.float32))


def test_scatter_max_min_nan():
    nan = np.nan
    x = np.array([nan, 2, 3, 4, 5], np.float32)
    u = np.array([9, nan, 5, 1, nan], np.float32)
    i = np.array([0, 1, 1, 2, 2], np.int32)
    assert_onnx_matches_jax(lambda x, i, u: (x.at[i].max(u), x.at[i].min(u)), x, i, u)


def test_scatter_column_and_window():
    def f(x, i, u, v):
        return x.at[:, i].set(u), x.at[1:3, i].add(v)

    i = np.array([0, 5, -2], np.int32)
    assert_onnx_matches_jax(f, data((4, 6), "float32"), i, data((4, 3), "float32", 1), data((2, 3), "float32", 2))


def test_raw_scatter_drops_partial_windows():
    """Windows of size 2 that would cross the end (start 4 of 5) are dropped, not clamped."""
    dn = jax.lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(),
                                         scatter_dims_to_operand_dims=(0,))

    def f(x, i, u):
        return (jax.lax.scatter(x, i[:, None], u, dn, mode=jax.lax.GatherScatterMode.FILL_OR_DROP),
                jax.lax.scatter_add(x, i[:, None], u, dn, mode=jax.lax.GatherScatterMode.FILL_OR_DROP))

    i = np.array([0, 3, 4, -1, 2], np.int32)
    assert_onnx_matches_jax(f, np.zeros(5, np.float32), i, np.arange(10, dtype=np.float32).reshape(5, 2) + 1)


DN_ROWS = jax.lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                          scatter_dims_to_operand_dims=(0,))


def test_scatter_constant_indices_need_no_mask():
    def f(x, u):
        return jax.lax.scatter(x, np.array([[0], [2]], np.int32), u, DN_ROWS)

    model = assert_onnx_matches_jax(f, data((4, 3), "float32"), data((2, 3), "float32", 1))
    assert "Pad" not in onnx_op_types(model)


def test_batched_scatter_vmap():
    def one(x, i, u):
        return x.at[i].add(u)

    f = jax.vmap(one)
    i = np.array([[0, 2, 2], [3, -1, 7], [1, 1, 0]], np.int32)
    assert_onnx_matches_jax(f, data((3, 4), "float32"), i, data((3, 3), "float32", 1))


def test_segment_sum_and_histogram():
    def f(v, seg):
        return jax.ops.segment_sum(v, seg, num_segments=4), jnp.zeros(5, jnp.int32).at[seg].add(1)

    seg = np.array([0, 0, 3, 1, 3, 9, -1], np.int32)
    assert_onnx_matches_jax(f, data((7,), "float32"), seg)


def test_scatter_empty_updates():
    assert_onnx_matches_jax(lambda x, i, u: x.at[i].add(u), data((4, 2), "float32"), np.zeros((0,), np.int32),
                            np.zeros((0, 2), np.float32))


def test_scatter_apply_is_reported_unsupported():
    from jaxconv.errors import UnsupportedError

    with pytest.raises(UnsupportedError, match="scatter combiner"):
        assert_onnx_matches_jax(lambda x, i: x.at[i].apply(jnp.sin), data((4,), "float32"), np.array([1], np.int32))


# ---- argmax / argmin -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_argmax_argmin_dtypes(dtype):
    def f(x):
        return jnp.argmax(x, axis=1), jnp.argmin(x, axis=0), jnp.argmax(x), jnp.max(x, axis=1)

    x = data((4, 6), dtype)
    if dtype != "bool":
        x[1, :] = x[1, 0]  # ties: first index wins
    with x64_for(dtype):
        assert_onnx_matches_jax(f, x)


def test_argmax_nan_and_infinities():
    nan, inf = np.nan, np.inf
    x = np.array([[1, nan, nan, 3], [nan, 1, 2, nan], [-inf, -inf, -inf, -inf], [inf, 0, inf, -0.0],
                  [0.0, -0.0, 0.0, -0.0]], np.float32)

    def f(x):
        return jnp.argmax(x, axis=1), jnp.argmin(x, axis=1), jnp.argmax(x, axis=0), jnp.argmin(x, axis=0)

    assert_onnx_matches_jax(f, x)
    assert_onnx_matches_jax(f, x.astype(np.float16))


def test_argmax_integer_extremes_and_keepdims():
    info = np.iinfo(np.int32)
    x = np.array([[info.min, info.min, 0], [info.max, 5, info.max]], np.int32)
    assert_onnx_matches_jax(lambda x: (jnp.argmax(x, 1, keepdims=True), jnp.argmin(x, 1)), x)
    u = np.array([[0, 2**64 - 1, 2**63], [2**63, 2**63 - 1, 1]], np.uint64)
    with x64_for("int64"):
        assert_onnx_matches_jax(lambda x: (jnp.argmax(x, 1), jnp.argmin(x, 1)), u)


def test_argmax_3d_and_int64_index():
    x = data((3, 4, 5), "float32")
    assert_onnx_matches_jax(lambda x: (jnp.argmax(x, axis=1), jnp.argmin(x, axis=-1)), x)
    with x64_for("int64"):
        assert_onnx_matches_jax(lambda x: jnp.argmax(x, axis=2), x)


def test_argmax_of_empty_batch():
    assert_onnx_matches_jax(lambda x: jnp.argmax(x, axis=1), np.zeros((0, 3), np.float32))


def test_float16_argmax_after_log_chain():
    a = np.random.default_rng(0).uniform(0.05, 0.95, (5, 4)).astype(np.float16)
    assert_onnx_matches_jax(lambda a: jnp.argmax(-jnp.log(-jnp.log(a)), -1), a)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "int32"])
@pytest.mark.parametrize("how", ["add", "multiply", "set", "max", "min"])
def test_scatter_into_a_scalar(dtype, how):
    """``x.at[()].add(y)`` on a rank-0 operand: no index at all, one update."""
    x = np.array(1.5 if dtype != "int32" else 3, np_dtype(dtype))
    y = np.array(-2.25 if dtype != "int32" else -2, np_dtype(dtype))
    assert_onnx_matches_jax(lambda a, b: getattr(a.at[()], how)(b), x, y)
    if dtype != "int32":
        assert_onnx_matches_jax(lambda a, b: getattr(a.at[()], how)(b), x, np.array(np.nan, np_dtype(dtype)))


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
