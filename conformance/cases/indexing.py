"""Indexing: dynamic_slice, dynamic_update_slice, gather and scatter in their usual forms."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from conformance.case import arg, case

X = arg("f32[5,6]")
IDX = arg("i32[4]", "int", low=0, high=4)

case("op.dynamic_slice.f32", lambda x, i: lax.dynamic_slice(x, (i, i + 1), (2, 3)), X, arg("i32[]", "int", low=0, high=2),
     family="dynamic_slice")
case("op.dynamic_slice.clamped", lambda x, i: lax.dynamic_slice(x, (i, -i), (3, 4)), X, arg("i32[]", "values", values=(4,)),
     family="dynamic_slice", tags={"edge"})
case("op.dynamic_update_slice.f32", lambda x, u, i: lax.dynamic_update_slice(x, u, (i, 2)), X, arg("f32[2,3]"),
     arg("i32[]", "int", low=0, high=3), family="dynamic_update_slice")
case("op.dynamic_update_slice.clamped", lambda x, u, i: lax.dynamic_update_slice(x, u, (i, i)), X, arg("f32[2,3]"),
     arg("i32[]", "values", values=(9,)), family="dynamic_update_slice", tags={"edge"})
case("op.gather.take", lambda x, i: jnp.take(x, i, axis=0), X, IDX, family="gather")
case("op.gather.take_axis1", lambda x, i: jnp.take(x, i, axis=1), X, arg("i32[2,3]", "int", low=0, high=5), family="gather")
case("op.gather.negative_index", lambda x, i: x[i], X, arg("i32[4]", "int", low=-5, high=4), family="gather")
case("op.gather.take_along_axis", lambda x, i: jnp.take_along_axis(x, i, axis=1), X, arg("i32[5,2]", "int", low=0, high=5),
     family="gather")
case("op.gather.fancy_2d", lambda x, i, j: x[i, j], X, IDX, arg("i32[4]", "int", low=0, high=5), family="gather")
case("op.gather.embedding", lambda table, ids: table[ids], arg("f32[10,4]"), arg("i32[2,3]", "int", low=0, high=9), family="gather")
case("op.gather.out_of_bounds", lambda x, i: x.at[i].get(mode="clip"), X, arg("i32[3]", "values", values=(7, -9, 2)),
     family="gather", tags={"edge"})
case("op.gather.fill_oob", lambda x, i: x.at[i].get(mode="fill", fill_value=-1.0), X, arg("i32[3]", "values", values=(7, 1, 2)),
     family="gather", tags={"edge"})
case("op.scatter.set", lambda x, i, u: x.at[i].set(u), X, arg("i32[2]", "values", values=(3, 1)), arg("f32[2,6]"), family="scatter")
case("op.scatter.add", lambda x, i, u: x.at[i].add(u), X, arg("i32[4]", "values", values=(0, 2, 0, 4)), arg("f32[4,6]"),
     family="scatter")
case("op.scatter.mul", lambda x, i, u: x.at[i].multiply(u), X, arg("i32[2]", "values", values=(1, 3)), arg("f32[2,6]"), family="scatter")
case("op.scatter.max", lambda x, i, u: x.at[:, i].max(u), X, arg("i32[3]", "values", values=(0, 5, 0)), arg("f32[5,3]"),
     family="scatter")
case("op.scatter.min", lambda x, i, u: x.at[i, 2].min(u), X, arg("i32[2]", "values", values=(4, 0)), arg("f32[2]"), family="scatter")
case("op.scatter.out_of_bounds", lambda x, i, u: x.at[i].set(u, mode="drop"), X, arg("i32[2]", "values", values=(9, 1)),
     arg("f32[2,6]"), family="scatter", tags={"edge"})
case("op.scatter.segment_sum", lambda v, s: jnp.zeros(4).at[s].add(v), arg("f32[8]"), arg("i32[8]", "int", low=0, high=3),
     family="scatter")
case("op.scatter.i32", lambda x, i, u: x.at[i].add(u), arg("i32[5,6]"), arg("i32[2]", "values", values=(0, 4)), arg("i32[2,6]"),
     family="scatter")
case("op.one_hot.f32", lambda i: jnp.eye(6)[i], arg("i32[4]", "int", low=0, high=5), family="gather")
