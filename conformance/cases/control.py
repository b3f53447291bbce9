"""Control flow: while (fori_loop, scan), conditionals (cond, switch), and randomness."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from conformance.case import arg, case

case("op.while.fori_loop", lambda x: lax.fori_loop(0, 5, lambda i, c: c * 0.9 + i, x), arg("f32[3]"), family="while")
case("op.while.dynamic_bound", lambda x, n: lax.fori_loop(0, n, lambda i, c: c + jnp.sin(c), x), arg("f32[4]"),
     arg("i32[]", "int", low=0, high=6), family="while")
case("op.while.while_loop", lambda x: lax.while_loop(lambda c: c[1] < 100.0, lambda c: (c[0] + 1, c[1] * 2.0 + 1.0),
     (0, jnp.sum(jnp.abs(x))))[0], arg("f32[5]"), family="while")
case("op.while.scan_cumsum", lambda x: lax.scan(lambda c, v: (c + v, c * v), jnp.zeros(x.shape[1:]), x), arg("f32[6,3]"),
     family="while")
case("op.while.scan_reverse", lambda x: lax.scan(lambda c, v: (c * 0.5 + v, c), 0.0, x, reverse=True)[1], arg("f32[7]"),
     family="while")
case("op.case.cond", lambda p, x: lax.cond(p > 0, lambda v: v * 2.0, lambda v: v - 1.0, x), arg("f32[]"), arg("f32[3]"),
     family="case")
case("op.case.switch", lambda i, x: lax.switch(i, [jnp.sin, jnp.cos, lambda v: v * 3.0], x), arg("i32[]", "int", low=-1, high=4),
     arg("f32[3]"), family="case")
case("op.case.cond_tuple", lambda p, x, y: lax.cond(p, lambda a, b: (a + b, a), lambda a, b: (a - b, b), x, y), arg("bool[]"),
     arg("f32[2]"), arg("f32[2]"), family="case")

case("op.rng.threefry_key_input", lambda k: jax.random.normal(jax.random.wrap_key_data(k), (3, 4)),
     arg("u32[2]", "int", low=0, high=2**31), family="rng", tags={"random"})
case("op.rng.threefry_fixed_seed", lambda x: x + jax.random.uniform(jax.random.key(42), x.shape), arg("f32[3,4]"), family="rng",
     tags={"random"})
case("op.rng.bernoulli", lambda k: jax.random.bernoulli(jax.random.wrap_key_data(k), 0.3, (8,)),
     arg("u32[2]", "int", low=0, high=2**31), family="rng", tags={"random"})
case("op.rng.permutation", lambda k, x: jax.random.permutation(jax.random.wrap_key_data(k), x),
     arg("u32[2]", "int", low=0, high=2**31), arg("f32[6]"), family="rng", tags={"random"})
case("op.rng_bit_generator.rbg", lambda k: jax.random.bits(jax.random.wrap_key_data(k, impl="rbg"), (4,)),
     arg("u32[4]", "int", low=0, high=2**31), family="rng_bit_generator", tags={"random"})
