"""Reductions, arg-reductions, windows (pools, cumulative ops) and sorting."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from conformance.case import arg, case

X = arg("f32[4,6]")
IMG = arg("f32[2,8,8,3]")
T = {"float32": (1e-4, 1e-5)}

case("op.reduce.sum", lambda x: (jnp.sum(x, axis=0), jnp.sum(x)), X, family="reduce")
case("op.reduce.prod", lambda x: jnp.prod(x, axis=1), arg("f32[4,6]", "uniform", low=0.5, high=1.5), family="reduce")
case("op.reduce.max_min", lambda x: (jnp.max(x, axis=1), jnp.min(x, axis=0)), X, family="reduce")
case("op.reduce.mean_var", lambda x: (jnp.mean(x, axis=-1), jnp.var(x, axis=0)), X, family="reduce", tol=T)
case("op.reduce.logsumexp", lambda x: jax.nn.logsumexp(x, axis=1), X, family="reduce")
case("op.reduce.softmax", lambda x: jax.nn.softmax(x, axis=-1), X, family="reduce")
case("op.reduce.argmax", lambda x: jnp.argmax(x, axis=1), X, family="reduce")
case("op.reduce.argmin", lambda x: jnp.argmin(x, axis=0), X, family="reduce")
case("op.reduce.any_all", lambda x: (jnp.any(x > 1, axis=0), jnp.all(x > -2, axis=1)), X, family="reduce")
case("op.reduce.i32_sum", lambda x: jnp.sum(x, axis=1), arg("i32[4,6]"), family="reduce")
case("op.reduce.norm", lambda x: jnp.linalg.norm(x, axis=-1), X, family="reduce")
case("op.reduce.multi_axis", lambda x: jnp.sum(x, axis=(0, 2)), arg("f32[2,3,4]"), family="reduce")
case("op.reduce.variadic_max_index", lambda x: lax.reduce((x, lax.broadcasted_iota(jnp.int32, x.shape, 1)),
     (-jnp.inf, 0), lambda a, b: (jnp.maximum(a[0], b[0]), jnp.where(a[0] >= b[0], a[1], b[1])), (1,)), X, family="reduce")

case("op.reduce_window.max_pool", lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
     IMG, family="reduce_window")
case("op.reduce_window.max_pool_same", lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME"),
     IMG, family="reduce_window")
case("op.reduce_window.avg_pool", lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4.0,
     IMG, family="reduce_window")
case("op.reduce_window.sum_padded", lambda x: lax.reduce_window(x, 0.0, lax.add, (3, 3), (1, 1), ((1, 1), (1, 1))),
     arg("f32[5,5]"), family="reduce_window")
case("op.reduce_window.min_dilated", lambda x: lax.reduce_window(x, jnp.inf, lax.min, (2, 2), (1, 1), "VALID",
     window_dilation=(2, 1)), arg("f32[6,5]"), family="reduce_window")
case("op.reduce_window.cumsum", lambda x: jnp.cumsum(x, axis=1), X, family="reduce_window")
case("op.reduce_window.cumprod", lambda x: jnp.cumprod(x, axis=0), arg("f32[4,6]", "uniform", low=0.5, high=1.5),
     family="reduce_window")
case("op.reduce_window.cummax", lambda x: lax.cummax(x, axis=1), X, family="reduce_window")
case("op.reduce_window.cumsum_i32", lambda x: jnp.cumsum(x, axis=0), arg("i32[5,3]"), family="reduce_window")
case("op.select_and_scatter.max_pool_grad",
     lambda x: jax.grad(lambda y: jnp.sum(lax.reduce_window(y, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") ** 2))(x),
     IMG, family="select_and_scatter")

case("op.sort.f32", lambda x: jnp.sort(x, axis=1), X, family="sort")
case("op.sort.descending", lambda x: -jnp.sort(-x, axis=0), X, family="sort")
case("op.sort.argsort", lambda x: jnp.argsort(x, axis=-1), X, family="sort")
case("op.sort.key_value", lambda k, v: lax.sort((k, v), num_keys=1), arg("i32[10]", "perm"), arg("f32[10]"), family="sort")
case("op.sort.lexsort", lambda a, b: jnp.lexsort((a, b)), arg("i32[9]", "int", low=0, high=2), arg("i32[9]", "int", low=0, high=2),
     family="sort")
case("op.sort.top_k", lambda x: lax.top_k(x, 3), X, family="sort")
case("op.sort.median", lambda x: jnp.median(x, axis=1), X, family="sort")
