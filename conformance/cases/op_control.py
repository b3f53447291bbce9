"""Op rows: stablehlo.while / case lowered to ONNX Loop / If (scans, fori/while loops, conds)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from conformance.case import op_row

RNG = np.random.default_rng(0)


def _f32(*shape):
    return RNG.normal(size=shape).astype(np.float32)


# ---- while -------------------------------------------------------------------------------------
def _while_stop(x, limit):
    def body(c):
        v, n = c
        return v * 1.5 + 1.0, n + 1
    return lax.while_loop(lambda c: jnp.sum(c[0]) < limit, body, (x, jnp.int32(0)))


_X = np.abs(_f32(4))
# Stops after a few steps, after many, and before the first iteration.
op_row("control.while.data_dependent_stop", _while_stop, _X, np.float32(50.0),
       runs=[[_X, np.float32(1e6)], [_X, np.float32(-1.0)]])


def _rnn(xs, h0, w, u, b):
    def cell(h, x):
        h = jnp.tanh(x @ w + h @ u + b)
        return h, h
    return lax.scan(cell, h0, xs)


op_row("control.scan.rnn_tanh_cell", _rnn, _f32(7, 2, 3), np.zeros((2, 4), np.float32), _f32(3, 4), _f32(4, 4), _f32(4),
       tol=(1e-5, 1e-5))
op_row("control.while.stacked_buffer_also_read",
       lambda x: lax.fori_loop(0, 4, lambda i, buf: buf.at[i].set(jnp.sum(buf) + x[i]), jnp.ones(4, x.dtype)), _f32(4))
_X = _f32(5)
op_row("control.while.dynamic_trip_count",
       lambda x, n: lax.fori_loop(0, n, lambda i, buf: buf.at[i].set(x[i] * 2.0), jnp.zeros_like(x)), _X, np.int32(3),
       runs=[[_X, np.int32(0)], [_X, np.int32(5)]])


def _nested(x, scale):
    def outer(i, c):
        # The inner body reads `x` and `scale` from two scopes up.
        return lax.fori_loop(0, i + 1, lambda j, d: d + x * scale * j, c)
    return lax.fori_loop(0, 4, outer, jnp.zeros_like(x))


op_row("control.while.nested_reading_outer_values", _nested, _f32(3), np.float32(0.5))


def _many_dtypes(x, flag, small, big):
    def body(c):
        i, v, b, s, u = c
        return i + 1, (v * 2).astype(jnp.bfloat16), b != (i % 2 == 0), s + small, u * big
    init = (0, x, flag, jnp.ones(2, jnp.int8), big)
    i, v, b, s, u = lax.while_loop(lambda c: c[0] < 6, body, init)
    return i, v.astype(jnp.float32), b, s, u


# Non-scalar arrays: the runner's bf16 path reshapes 0-d inputs to [1].
op_row("control.while.carries_of_many_dtypes", _many_dtypes, np.array([1.5, -2.0, 3.25], ml_dtypes.bfloat16),
       np.array([True, False]), np.array([7, -3], np.int8), np.array([2**40 + 3, 5], np.uint64))
op_row("control.while.body_returns_carry_unchanged",
       lambda x, y: lax.while_loop(lambda c: c[2] < 3, lambda c: (c[0], c[1] + c[0], c[2] + 1), (x, y, 0)), _f32(2), _f32(2))
op_row("control.while.symbolic_batch", lambda x: lax.fori_loop(0, 3, lambda i, c: jnp.sin(c) + i, x), _f32(2, 3),
       specs=[jax.ShapeDtypeStruct((jax.export.symbolic_shape("b")[0], 3), jnp.float32)], runs=[[_f32(5, 3)]])

# ---- case / cond -------------------------------------------------------------------------------
_X = _f32(3)
op_row("control.cond.several_results_passthrough",
       lambda p, x, n: lax.cond(p, lambda a, b: (a, b), lambda a, b: (a * 2.0, b + 1), x, n),
       np.array(True), _X, np.int64(4), runs=[[np.array(False), _X, np.int64(4)]])


def _cond_loop(x, p):
    def body(i, c):
        return lax.cond(i % 2 == 0, lambda v: v + i, lambda v: v * 0.5, c)
    return lax.cond(p, lambda v: lax.fori_loop(0, 5, body, v), lambda v: -v, x)


op_row("control.cond_inside_loop_inside_cond", _cond_loop, _X, np.array(True), runs=[[_X, np.array(False)]])


def _cond_bf16(p, x, m):
    y, k = lax.cond(p, lambda: (x * 2, m), lambda: (x, ~m))
    return y.astype(jnp.float32), k


_XB, _M = np.array([1.0, 2.5], ml_dtypes.bfloat16), np.array([True, False])
op_row("control.cond.bf16_and_bool", _cond_bf16, np.array(False), _XB, _M, runs=[[np.array(True), _XB, _M]])
op_row("control.while.older_opsets", lambda x: lax.fori_loop(0, 3, lambda i, c: c + jnp.cos(c), x), _f32(4), opsets=(18, 21))
# The clean-up's rewrites once gave two folded constants the same name (an internal PassError).
op_row("control.while.f16_floor_divide_after_clip",
       lambda x, y: lax.fori_loop(0, 2, lambda i, c: jnp.floor_divide(c, y), jnp.clip(x, -jnp.inf, -1.0)),
       np.array([1.0, -3.5, -0.0, 7.0, -1.25] * 4, np.float16).reshape(5, 4),
       np.array([1.0, 2.0, -0.5, 3.0] * 5, np.float16).reshape(5, 4))
