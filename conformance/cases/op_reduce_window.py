"""Op rows: reduce_window and select_and_scatter: pooling, cumulative scans, dilations, NaN, max-pool gradients."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from conformance.case import op_row

RNG = np.random.default_rng(2)
Spec = jax.ShapeDtypeStruct
BF16 = ml_dtypes.bfloat16


def _f(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _i(shape, dtype, lo=-20, hi=20):
    return RNG.integers(lo, hi, size=shape).astype(dtype)


def max_pool(x, window, strides, padding):
    """flax.linen.max_pool on NHWC."""
    return lax.reduce_window(x, -jnp.inf, lax.max, (1,) + window + (1,), (1,) + strides + (1,), padding)


def avg_pool(x, window, strides, padding):
    """flax.linen.avg_pool on NHWC (count_include_pad=True)."""
    return lax.reduce_window(x, 0.0, lax.add, (1,) + window + (1,), (1,) + strides + (1,), padding) / np.prod(window)


def rw(init, op, dims, strides, padding, **kw):
    return lambda x: lax.reduce_window(x, init, op, dims, strides, padding, **kw)


for padding in ["SAME", "VALID"]:
    for window, strides in [((2, 2), (2, 2)), ((3, 3), (1, 1))]:
        op_row(f"reduce_window.avg_pool.{padding}.{window[0]}x{window[1]}s{strides[0]}",
               lambda x, w=window, s=strides, p=padding: avg_pool(x, w, s, p), _f((2, 7, 8, 3)))

_X = _f((1, 6, 6, 2))
_X[0, 1, 1, 0] = np.nan
_X[0, 4, 5, 1] = np.nan
op_row("reduce_window.max_pool.nan.2x2", lambda x: max_pool(x, (2, 2), (2, 2), "SAME"), _X)
op_row("reduce_window.max_pool.nan.3x3", lambda x: max_pool(x, (3, 3), (1, 1), "SAME"), _X)
_X = _f((2, 9, 4))
_X[1, 3, 2] = np.nan
op_row("reduce_window.min_pool.nan", rw(jnp.inf, lax.min, (1, 3, 1), (1, 2, 1), "SAME"), _X)
op_row("reduce_window.pool_1d", rw(-jnp.inf, lax.max, (1, 3, 1), (1, 2, 1), "SAME"), _f((2, 11, 3)))
_X3 = _f((1, 5, 6, 7, 2))
op_row("reduce_window.sum_3d", rw(0.0, lax.add, (1, 2, 2, 2, 1), (1, 2, 1, 2, 1), "VALID"), _X3)
op_row("reduce_window.max_3d", rw(-jnp.inf, lax.max, (1, 2, 3, 2, 1), (1, 1, 2, 2, 1), "SAME"), _X3)
op_row("reduce_window.nchw", rw(-jnp.inf, lax.max, (1, 1, 3, 3), (1, 1, 2, 2), "SAME"), _f((2, 3, 8, 8)))
_X = _f((1, 9, 8, 2))
op_row("reduce_window.window_dilation", rw(-jnp.inf, lax.max, (1, 2, 2, 1), (1, 1, 2, 1), "SAME",
                                           window_dilation=(1, 2, 3, 1)), _X)
op_row("reduce_window.base_and_window_dilation", rw(0.0, lax.add, (1, 3, 2, 1), (1, 2, 1, 1), "SAME",
                                                    base_dilation=(1, 2, 1, 1), window_dilation=(1, 1, 2, 1)), _X)
op_row("reduce_window.base_dilation", rw(-jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME",
                                         base_dilation=(1, 2, 2, 1)), _X)
_X = _f((2, 10, 6))
op_row("reduce_window.negative_padding.max", rw(-jnp.inf, lax.max, (1, 3, 2), (1, 2, 1), ((0, 0), (2, -1), (-1, 3))), _X)
op_row("reduce_window.negative_padding.sum", rw(0.0, lax.add, (1, 3, 2), (1, 2, 1), ((0, 0), (2, -1), (-1, 3))), _X)
_X = _f((2, 7, 5))
op_row("reduce_window.init_fills_padding.max", rw(0.0, lax.max, (1, 3, 3), (1, 2, 2), "SAME"), _X)
op_row("reduce_window.init_fills_padding.sum", rw(1.5, lax.add, (1, 3, 3), (1, 1, 1), "SAME"), _X)

for dtype in [np.int8, np.int16, np.uint8, np.int32, np.uint32]:
    info = np.iinfo(dtype)
    op_row(f"reduce_window.integer.{np.dtype(dtype).name}",
           lambda x, dtype=dtype, info=info: (
               lax.reduce_window(x, dtype(info.min), lax.max, (1, 3, 2), (1, 2, 1), "SAME"),
               lax.reduce_window(x, dtype(0), lax.add, (1, 3, 2), (1, 1, 2), "VALID"),
               lax.reduce_window(x, dtype(info.max), lax.min, (1, 2, 2), (1, 2, 2), "SAME")),
           _i((2, 7, 6), dtype, 0, 120))

_X = _f((2, 8, 8, 2), np.float64)
_X[0, 2, 2, 0] = np.nan
op_row("reduce_window.float64", lambda x: (max_pool(x, (2, 2), (2, 2), "SAME"), avg_pool(x, (3, 3), (1, 1), "SAME")), _X)
for dtype in [np.float16, BF16]:
    op_row(f"reduce_window.half.{np.dtype(dtype).name}",
           lambda x: (max_pool(x, (2, 2), (2, 2), "SAME").astype(jnp.float32),
                      avg_pool(x, (3, 3), (1, 1), "SAME").astype(jnp.float32)), _f((2, 6, 6, 3), dtype), tol=(2e-2, 2e-2))
op_row("reduce_window.bool", lambda x: (lax.reduce_window(x, False, lax.bitwise_or, (1, 3), (1, 1), "SAME"),
                                        lax.reduce_window(x, True, lax.bitwise_and, (1, 2), (1, 2), "VALID")),
       RNG.random((3, 8)) < 0.3)

for dtype in [np.int8, np.int32, np.uint8]:
    op_row(f"reduce_window.cumsum_wraps.{np.dtype(dtype).name}", lambda x, dtype=dtype: jnp.cumsum(x, axis=1, dtype=dtype),
           _i((3, 40), dtype, 0, 100))
op_row("reduce_window.reverse_cumulative", lambda x: (lax.cumsum(x, axis=1, reverse=True), lax.cummax(x, axis=0, reverse=True),
                                                      lax.cumprod(x, axis=1, reverse=True)), _f((4, 6)))
for axis in [0, 1, 2]:
    _X = _f((5, 6, 9))
    _X[2, 3, 4] = np.nan
    op_row(f"reduce_window.cummax_cummin.axis{axis}", lambda x, axis=axis: (lax.cummax(x, axis=axis), lax.cummin(x, axis=axis)),
           _X)
op_row("reduce_window.cummax.int16", lambda x: (lax.cummax(x, axis=1), lax.cummin(x, axis=1)), _i((3, 11), np.int16, -300, 300))

_B, _H, _W = jax.export.symbolic_shape("b, h, w")
op_row("reduce_window.cumsum.dynamic_batch", lambda x: (jnp.cumsum(x, axis=1), lax.cummax(x, axis=1)), _f((2, 6)),
       specs=[Spec((_B, 6), np.float32)], runs=[[_f((5, 6))]])
op_row("reduce_window.max_pool.dynamic_batch",
       lambda x: (max_pool(x, (2, 2), (2, 2), "VALID"), avg_pool(x, (3, 3), (2, 2), "SAME")), _f((2, 8, 8, 3)),
       specs=[Spec((_B, 8, 8, 3), np.float32)], runs=[[_f((3, 8, 8, 3))]])

for window, strides, padding in [((2, 2), (2, 2), "VALID"), ((3, 3), (2, 2), "SAME"), ((3, 3), (1, 1), "SAME")]:
    op_row(f"reduce_window.max_pool_grad.{window[0]}s{strides[0]}.{padding}",
           jax.grad(lambda x, w=window, s=strides, p=padding: jnp.sum(max_pool(x, w, s, p) ** 2)), _f((2, 6, 7, 3)))

_X = np.round(_f((1, 6, 6, 2)))  # many equal values: the first max in each window is picked
_X[0, 3, 3, 1] = np.nan
op_row("reduce_window.max_pool_grad.ties_nan",
       jax.grad(lambda x: jnp.sum(max_pool(x, (3, 3), (2, 2), "SAME") * jnp.arange(1.0, 19.0).reshape(1, 3, 3, 2))), _X)
op_row("reduce_window.max_pool_grad.1d_nchw",
       jax.grad(lambda x: jnp.sum(lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 3), (1, 1, 2), "SAME") ** 2)), _f((2, 3, 9)))
_X = _f((2, 8, 7, 3))
_X[0, 1, 1, 0] = np.nan
op_row("reduce_window.symbolic_spatial",
       lambda x: (max_pool(x, (2, 2), (2, 2), "SAME"), avg_pool(x, (3, 3), (2, 2), "SAME"), max_pool(x, (3, 3), (1, 1), "VALID")),
       _X, specs=[Spec((_B, _H, _W, 3), np.float32)], runs=[[_f((1, 5, 9, 3))]])

# ---- XLA CPU's evaluation order: f16/bf16 sums and products, general and multi-operand bodies --------
for dtype in [BF16, np.float16]:
    for n, reverse in [(9, False), (9, True), (100, False), (300, True)]:
        # Each step rounds to the narrow type; past 16 elements XLA tiles the scan. Both orders are matched exactly.
        op_row(f"reduce_window.narrow_cumsum_cumprod.{np.dtype(dtype).name}.{n}.{'rev' if reverse else 'fwd'}",
               lambda x, p, reverse=reverse: (lax.cumsum(x, 0, reverse=reverse), lax.cumprod(p, 0, reverse=reverse)),
               _f((n, 3)).astype(dtype), (1 + 0.05 * _f((n, 3))).astype(dtype), tol=(0, 0))

# XLA folds each bf16 window row-major from the init value, rounding after every addition
# (fuzz reduce_window_add/bf16/value: a 3x3 SAME sum gave 1.109 where jax.jit gives 1.141)
_BX = np.array([-1.359375, 0.498046875, 5.96875, 0.490234375, -2.09375, -2.390625, 1.0, 1.0], BF16).reshape(4, 2)
for k, (window, strides, padding) in enumerate([((3, 3), (1, 2), "SAME"), ((2, 3), (1, 1), "VALID"),
                                                 ((1, 3), (1, 1), ((0, 0), (2, 1)))]):
    fn = rw(np.array(0, BF16), lax.add, window, strides, padding)
    op_row(f"reduce_window.bf16_window_sum.{k}.fixed", fn, _BX, tol=(0, 0))
    op_row(f"reduce_window.bf16_window_sum.{k}.random", fn, (3 * _f((5, 7))).astype(BF16), tol=(0, 0))

op_row("reduce_window.bf16_cumsum.dynamic_batch", lambda x: jnp.cumsum(x, axis=1), _f((2, 40)).astype(BF16), tol=(0, 0),
       specs=[Spec((_B, 40), BF16)], runs=[[_f((5, 40)).astype(BF16)]])
for n in [8, 40]:
    op_row(f"reduce_window.cumlogsumexp.{n}.axis0", lambda x: lax.cumlogsumexp(x, axis=0), _f((n, 5)))
    op_row(f"reduce_window.cumlogsumexp.{n}.axis1_reverse", lambda x: lax.cumlogsumexp(x, axis=1, reverse=True), _f((3, n)))


def min_with_payload(a, b):
    """Pairs (key, payload): keep the pair with the smaller key (the select_and_gather_add body)."""
    take = a[0] <= b[0]
    return lax.select(take, a[0], b[0]), lax.select(take, a[1], b[1])


_INITS = (np.float32(np.inf), np.float32(0))
for window, strides, padding in [((2, 2), (2, 3), "VALID"), ((3, 2), (1, 1), "SAME")]:
    op_row(f"reduce_window.two_operand.{window[0]}x{window[1]}.{padding}",
           lambda k, p, w=window, s=strides, pd=padding: lax.reduce_window((k, p), _INITS, min_with_payload, w, s, pd),
           _f((5, 6)), _f((5, 6)))
op_row("reduce_window.two_operand.cumulative_tiled",
       lambda k, p: lax.reduce_window((k, p), _INITS, min_with_payload, (1, 37), (1, 1), ((0, 0), (36, 0))),
       _f((3, 37)), _f((3, 37)))
op_row("reduce_window.general_body.dilations_dynamic_batch",
       lambda k, p: lax.reduce_window((k, p), _INITS, min_with_payload, (1, 2, 2), (1, 1, 1), "VALID",
                                      window_dilation=(1, 2, 3))[1],
       _f((2, 4, 6)), _f((2, 4, 6)), specs=[Spec((_B, 4, 6), np.float32)] * 2, runs=[[_f((3, 4, 6)), _f((3, 4, 6))]])


# ---- select_and_scatter: padding, other scatter bodies, bool, dynamic batch --------------------------
def _select_and_scatter(operand, source, init, select, scatter, window, strides, padding):
    from jax._src.lax.windowed_reductions import _select_and_scatter as sas

    return sas(operand, select, window, strides, padding, source, init, scatter)


for k, padding in enumerate([((0, 0), (1, 1)), ((1, 0), (0, 2))]):
    n = [(5 + padding[0][0] + padding[0][1] - 2) // 2 + 1, (6 + padding[1][0] + padding[1][1] - 3) // 2 + 1]
    op_row(f"reduce_window.select_and_scatter.padding{k}",
           lambda x, s, padding=padding: _select_and_scatter(x, s, np.float32(0), lax.ge, lax.add, (2, 3), (2, 2), padding),
           _f((5, 6)), _f(tuple(n)))
op_row("reduce_window.select_and_scatter.max_body",
       lambda x, s: _select_and_scatter(x, s, np.float32(-1), lax.ge, lax.max, (2, 2), (2, 2), ((0, 0), (0, 0))),
       _f((4, 6)), _f((2, 3)))
op_row("reduce_window.select_and_scatter.bool",
       lambda x, s: _select_and_scatter(x, s, np.bool_(False), lax.ge, lax.bitwise_or, (2, 2, 2), (1, 1, 1), ((0, 0),) * 3),
       RNG.random((2, 4, 6)) > 0.5, RNG.random((1, 3, 5)) > 0.5)
op_row("reduce_window.max_pool_grad.dynamic_batch", jax.grad(lambda x: max_pool(x, (2, 2), (2, 2), "VALID").sum()),
       _f((2, 4, 6, 3)), specs=[Spec((_B, 4, 6, 3), np.float32)], runs=[[_f((3, 4, 6, 3))]])


def _inf_pools(x):
    return (lax.reduce_window(x, -jnp.inf, lax.max, (2,), (1,), "VALID"),
            lax.reduce_window(-x, jnp.inf, lax.min, (2,), (1,), "VALID"),
            lax.reduce_window(x, -jnp.inf, lax.max, (3,), (2,), "SAME"),
            lax.reduce_window(x, -jnp.inf, lax.max, (2,), (1,), [(3, 3)]))


# ONNX Runtime's MaxPool starts from the lowest finite value; a window of -inf alone is -inf.
for dtype in [np.float32, np.float16, BF16]:
    name = np.dtype(dtype).name
    op_row(f"reduce_window.infinities_only.{name}", _inf_pools,
           np.array([-np.inf, -np.inf, 1.0, np.inf, np.inf, np.nan, -np.inf], dtype), expect="exact")
    _G = np.full((1, 4, 4, 1), -np.inf, dtype)
    _G[0, 3, 3, 0] = -0.0
    op_row(f"reduce_window.infinities_only.grid.{name}",
           lambda g: (max_pool(g, (2, 2), (1, 1), "SAME"), -max_pool(-g, (3, 3), (2, 2), "VALID")), _G, expect="exact")

# The pooling guard's If branch and the scatter's lowering used to give two values the same name.
op_row("reduce_window.min_pool_beside_scatter_min",
       lambda i, u, x, y: (lax.reduce_window(x, jnp.inf, lax.min, (3, 1), (1, 1), "VALID"), y.at[i].min(u, mode="drop")),
       np.array([0], np.int8), np.full((1, 1, 1), 0.4453125, BF16), np.ones((4, 1), BF16), np.full((1, 1, 1), -0.6171875, BF16))
