"""Data movement: reshape, transpose, broadcast, concatenate, slice, reverse, pad, iota."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from conformance.case import arg, case

X = arg("f32[2,3,4]")

case("op.reshape.f32", lambda x: x.reshape(6, 4), X, family="reshape")
case("op.transpose.f32", lambda x: jnp.transpose(x, (2, 0, 1)), X, family="transpose")
case("op.broadcast_in_dim.f32", lambda v: jnp.broadcast_to(v[:, None], (4, 5)), arg("f32[4]"), family="broadcast_in_dim")
case("op.broadcast_in_dim.scalar", lambda s, x: x + s, arg("f32[]"), X, family="broadcast_in_dim")
case("op.concatenate.f32", lambda a, b: jnp.concatenate([a, b, a], axis=1), X, arg("f32[2,1,4]"), family="concatenate")
case("op.slice.f32", lambda x: x[:, 1:, ::2], X, family="slice")
case("op.slice.strided", lambda x: x[::2, 1:7:3], arg("f32[9,8]"), family="slice")
case("op.reverse.f32", lambda x: jnp.flip(x, axis=(0, 2)), X, family="reverse")
case("op.pad.edge", lambda x: jnp.pad(x, ((1, 2), (0, 3))), arg("f32[3,4]"), family="pad")
case("op.pad.interior", lambda x: lax.pad(x, 1.5, ((1, 0, 2), (0, 1, 1))), arg("f32[3,4]"), family="pad")
case("op.pad.negative", lambda x: lax.pad(x, 0.0, ((-1, 1, 0), (2, -2, 0))), arg("f32[3,4]"), family="pad")
case("op.pad.reflect", lambda x: jnp.pad(x, ((2, 2), (1, 1)), mode="reflect"), arg("f32[4,5]"), family="pad")
case("op.iota.i32", lambda x: x + jnp.arange(4, dtype=jnp.int32)[None, :], arg("i32[3,4]"), family="iota")
case("op.iota.f32_2d", lambda x: x * lax.broadcasted_iota(jnp.float32, (3, 4), 1), arg("f32[3,4]"), family="iota")
case("op.squeeze_expand.f32", lambda x: jnp.expand_dims(jnp.squeeze(x[:, :1]), 0), X, family="reshape")
case("op.tile_repeat.f32", lambda x: (jnp.tile(x, (2, 1)), jnp.repeat(x, 2, axis=1)), arg("f32[2,3]"), family="broadcast_in_dim")
case("op.roll.f32", lambda x: jnp.roll(x, 2, axis=1), arg("f32[3,7]"), family="slice")
case("op.stack_split.f32", lambda x: jnp.stack(jnp.split(x, 3, axis=1), axis=0), arg("f32[2,6]"), family="concatenate")
case("op.tril_triu.f32", lambda x: (jnp.tril(x), jnp.triu(x, 1)), arg("f32[4,4]"), family="select")
case("op.meshgrid_outer.f32", lambda a, b: jnp.outer(a, b) + jnp.meshgrid(a, b)[0].T, arg("f32[3]"), arg("f32[5]"),
     family="broadcast_in_dim")
