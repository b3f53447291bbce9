"""Op rows: every lowering handles a dimension of size 0 (conversion passes onnx.checker, ONNX Runtime runs
it), compared bit for bit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from conformance.case import op_row

E = np.zeros((0, 3), np.float32)
EI = np.zeros((0, 3), np.int32)
X = np.arange(12, dtype=np.float32).reshape(4, 3)

CASES = {
    "add": (lambda x: x + 1.0, E),
    "exp_where": (lambda x: jnp.where(x > 0, jnp.exp(x), -x), E),
    "int_div": (lambda x: x // 2 + x % 3, EI),
    "compare_select": (lambda x, y: jnp.maximum(x, y), E, E),
    "sum_over_empty": (lambda x: x.sum(axis=0), E),
    "sum_of_empty_rows": (lambda x: x.sum(axis=1), E),
    "max_over_empty": (lambda x: x.max(axis=0, initial=-np.inf), E),
    "mean_all": (lambda x: x.mean(), E),
    "prod_int": (lambda x: x.prod(axis=0), EI),
    "argmax": (lambda x: jnp.argmax(x, axis=1), E),
    "dot_empty_batch": (lambda x, w: x @ w, E, np.ones((3, 2), np.float32)),
    "dot_empty_contraction": (lambda x, w: x @ w, np.ones((2, 0), np.float32), np.ones((0, 4), np.float32)),
    "dot_empty_contraction_scalar_i16": (lambda x, y: x @ y, np.zeros((0,), np.int16), np.zeros((0,), np.int16)),
    "dot_int": (lambda x, w: x @ w, EI, np.ones((3, 2), np.int32)),
    "conv": (lambda x, w: lax.conv_general_dilated(x, w, (1,), "SAME"), np.zeros((0, 1, 5), np.float32),
             np.ones((2, 1, 3), np.float32)),
    "conv_empty_spatial": (lambda x, w: lax.conv_general_dilated(x, w, (1,), [(1, 1)]), np.zeros((1, 1, 0), np.float32),
                           np.ones((2, 1, 1), np.float32)),
    "gather": (lambda x, i: x[i], X, np.zeros((0,), np.int32)),
    "gather_from_empty_rows": (lambda x, i: x[:, i], E, np.array([0, 2], np.int32)),
    "take_along_axis": (lambda x, i: jnp.take_along_axis(x, i, axis=1), E, np.zeros((0, 2), np.int32)),
    "scatter_set_empty_updates": (lambda x, i: x.at[i].set(5.0), X, np.zeros((0,), np.int32)),
    "scatter_add_empty_updates": (lambda x, i: x.at[i].add(1.0), X, np.zeros((0,), np.int32)),
    "scatter_into_empty": (lambda x, i: x.at[:, i].set(1.0), E, np.array([0], np.int32)),
    "concatenate": (lambda x, y: jnp.concatenate([x, y], axis=0), E, X),
    "concatenate_all_empty": (lambda x: jnp.concatenate([x, x], axis=1), E),
    "pad": (lambda x: jnp.pad(x, ((1, 2), (0, 1)), constant_values=7.0), E),
    "slice": (lambda x: x[1:1, ::2], X),
    "sort": (lambda x: jnp.sort(x, axis=0), E),
    "argsort": (lambda x: jnp.argsort(x, axis=1), E),
    "top_k": (lambda x: lax.top_k(x, 2)[0], np.zeros((0, 4), np.float32)),
    "cumsum": (lambda x: jnp.cumsum(x, axis=0), E),
    "cumsum_rows": (lambda x: jnp.cumsum(x, axis=1), E),
    "cumprod": (lambda x: jnp.cumprod(x, axis=0), E),
    "reduce_window_max": (lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 2), (1, 1), "SAME"), E),
    "reduce_window_sum": (lambda x: lax.reduce_window(x, 0.0, lax.add, (2, 1), (1, 1), "VALID"), np.zeros((1, 3), np.float32)),
    "reduce_window_padded_empty_f16": (lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 2), (1, 1), [(0, 0), (1, 1)]),
                                       np.zeros((1, 0), np.float16)),
    "reduce_window_empty_output_f16": (lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (3,), (2,), "VALID"),
                                       np.ones((1,), np.float16)),
    "reduce_window_general_body": (lambda x: lax.reduce_window((x, x), (0.0, 1.0), lambda a, b: (a[0] + b[0], a[1] * b[1]),
                                                               (2,), (1,), "VALID"), np.ones((1,), np.float32)),
    "scatter_max_i16_into_empty": (lambda x, i, u: x.at[i].max(u), np.zeros((0, 2), np.int16), np.array([0], np.int32),
                                   np.ones((1, 2), np.int16)),
    "scatter_max_u32_into_empty": (lambda x, i, u: x.at[i].max(u), np.zeros((0,), np.uint32), np.array([0, 1], np.int32),
                                   np.ones((2,), np.uint32)),
    "select_and_scatter_empty_rows": (lambda x: jax.grad(lambda v: lax.reduce_window(v, -jnp.inf, lax.max, (2,), (1,), "VALID").sum())(x),
                                      np.ones((1,), np.float32)),
    "dynamic_slice": (lambda x, i: lax.dynamic_slice(x, (i, 0), (0, 3)), X, np.int32(1)),
    "dynamic_update_slice": (lambda x, i: lax.dynamic_update_slice(x, jnp.zeros((0, 3)), (i, 0)), X, np.int32(1)),
    "dynamic_slice_of_empty": (lambda x, i: lax.dynamic_slice(x, (0, i), (0, 2)), E, np.int32(1)),
    "iota": (lambda x: x + jnp.arange(0, dtype=jnp.float32)[:, None], E),
    "broadcast": (lambda x: jnp.broadcast_to(x[:, None, :], (0, 2, 3)), E),
    "transpose": (lambda x: x.T, E),
    "reshape": (lambda x: x.reshape(3, 0, 1), E),
    "reverse": (lambda x: x[::-1], E),
    "clamp": (lambda x: jnp.clip(x, 0.0, 1.0), E),
    "convert": (lambda x: x.astype(jnp.int32), E),
    "bf16": (lambda x: (x.astype(jnp.bfloat16) * 2).astype(jnp.float32), E),
    "cond": (lambda x, p: lax.cond(p, lambda v: v + 1, lambda v: v - 1, x), E, np.array(True)),
    "scan": (lambda x: lax.scan(lambda c, v: (c + v, c), jnp.zeros(3), x)[1], E),
    "while": (lambda x: lax.fori_loop(0, 3, lambda i, v: v * 2, x), E),
    "matrix_inverse": (lambda x: jnp.linalg.inv(x), np.zeros((0, 2, 2), np.float32)),
    "select_and_scatter": (lambda x: jax.grad(lambda v: lax.reduce_window(v, -jnp.inf, lax.max, (1, 2), (1, 1), "SAME").sum())(x),
                           np.zeros((0, 4), np.float32)),
    "one_hot": (lambda i: jax.nn.one_hot(i, 4), np.zeros((0,), np.int32)),
    "softmax": (lambda x: jax.nn.softmax(x, axis=0), E),
    "layer_norm_axis_empty": (lambda x: (x - x.mean(0)) / (x.std(0) + 1.0), E),
}

for _name, (_fn, *_args) in sorted(CASES.items()):
    op_row(f"zero_size.{_name}", _fn, *_args, expect="exact")
