"""Shape-polymorphic cases: symbolic dimensions (jax.export) run at several sizes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from conformance.case import arg, case

T = {"float32": (1e-4, 1e-4)}

case("sym.elementwise", lambda x, y: jnp.tanh(x) * y + 1.0, arg("f32[b,4]"), arg("f32[b,4]"), family="add")
case("sym.broadcast_row", lambda x, v: x - v[None, :], arg("f32[b,4]"), arg("f32[4]"), family="broadcast_in_dim")
case("sym.matmul", lambda x, w: x @ w, arg("f32[b,5]"), arg("f32[5,3]"), family="dot_general", tol=T)
case("sym.batched_matmul", jnp.matmul, arg("f32[b,n,4]"), arg("f32[b,4,n]"), family="dot_general", tol=T)
case("sym.reshape_flatten", lambda x: x.reshape(x.shape[0], -1), arg("f32[b,3,4]"), family="reshape")
case("sym.reshape_merge", lambda x: x.reshape(-1), arg("f32[b,3]"), family="reshape")
case("sym.transpose", lambda x: x.T, arg("f32[b,3]"), family="transpose")
case("sym.reduce", lambda x: (jnp.sum(x, axis=0), jnp.max(x, axis=1)), arg("f32[b,4]"), family="reduce")
case("sym.softmax", lambda x: jax.nn.softmax(x, axis=-1), arg("f32[b,n]"), family="reduce")
case("sym.iota", lambda x: x + jnp.arange(x.shape[0], dtype=jnp.float32)[:, None], arg("f32[b,2]"), family="iota")
case("sym.concatenate", lambda x, y: jnp.concatenate([x, y], axis=0), arg("f32[b,3]"), arg("f32[2,3]"), family="concatenate")
case("sym.slice", lambda x: x[1:, ::2], arg("f32[b,6]"), family="slice", constraints=("b >= 2",))
case("sym.gather", lambda t, i: t[i], arg("f32[7,3]"), arg("i32[b]", "int", low=0, high=6), family="gather")
case("sym.conv_batch", lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")),
     arg("f32[b,6,6,2]"), arg("f32[3,3,2,3]"), family="convolution", tol=T)
case("sym.scan", lambda x: lax.scan(lambda c, v: (c + v, c), jnp.zeros(x.shape[1:]), x)[1], arg("f32[t,3]"), family="while")
case("sym.cumsum", lambda x: jnp.cumsum(x, axis=0), arg("f32[b,3]"), family="reduce_window")
case("sym.mean_pool", lambda x: jnp.mean(x, axis=1), arg("f32[b,n,4]"), family="reduce")
case("sym.pad", lambda x: jnp.pad(x, ((1, 1), (0, 2))), arg("f32[b,3]"), family="pad")
case("sym.two_dims_expr", lambda x: x.reshape(x.shape[0] * 2, x.shape[1] // 2), arg("f32[b,2*n]"), family="reshape")
case("sym.mlp", lambda x, w1, w2: jax.nn.relu(x @ w1) @ w2, arg("f32[b,8]"), arg("f32[8,16]"), arg("f32[16,2]"),
     family="model", tags={"model"}, tol=T)
case("sym.slice_symbolic_size", lambda x: lax.dynamic_slice_in_dim(x, 1, x.shape[0] - 1, 0), arg("f32[b,3]"),
     family="real_dynamic_slice", constraints=("b >= 2",))
case("sym.slice_drop_last", lambda x: x[:-1] * 2.0, arg("f32[b,3]"), family="slice", constraints=("b >= 2",))
case("sym.slice_strided", lambda x: x[::2], arg("f32[b,3]"), family="slice")
case("sym.slice_half", lambda x: x[: x.shape[0] // 2], arg("f32[b,3]"), family="slice")
