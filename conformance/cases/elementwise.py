"""Elementwise StableHLO ops on float32 (math, arithmetic, comparisons, bit ops)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from conformance.case import arg, case

X = arg("f32[4,6]")
POS = arg("f32[4,6]", "positive")
UNIT = arg("f32[4,6]", "uniform", low=-0.95, high=0.95)

UNARY = {
    "abs": (jnp.abs, X), "negate": (jnp.negative, X), "sign": (jnp.sign, X), "exponential": (jnp.exp, X),
    "log": (jnp.log, POS), "sqrt": (jnp.sqrt, POS), "rsqrt": (lax.rsqrt, POS), "tanh": (jnp.tanh, X),
    "sine": (jnp.sin, X), "cosine": (jnp.cos, X), "tan": (jnp.tan, UNIT), "floor": (jnp.floor, X),
    "ceil": (jnp.ceil, X), "round_nearest_even": (jnp.round, arg("f32[4,6]", "uniform", low=-4, high=4)),
    "round_nearest_afz": (lax.round, arg("f32[4,6]", "uniform", low=-4, high=4)),
    "logistic": (lax.logistic, X), "exponential_minus_one": (jnp.expm1, X), "log_plus_one": (jnp.log1p, POS),
    "cbrt": (jnp.cbrt, X), "is_finite": (jnp.isfinite, X), "erf": (jax.scipy.special.erf, X),
    "asin": (jnp.arcsin, UNIT), "acos": (jnp.arccos, UNIT), "atan": (jnp.arctan, X), "sinh": (jnp.sinh, X),
    "cosh": (jnp.cosh, X), "asinh": (jnp.arcsinh, X), "acosh": (jnp.arccosh, arg("f32[4,6]", "uniform", low=1.1, high=5)),
    "atanh": (jnp.arctanh, UNIT), "erf_inv": (jax.scipy.special.erfinv, UNIT), "lgamma": (jax.scipy.special.gammaln, POS),
    "digamma": (jax.scipy.special.digamma, POS), "square": (jnp.square, X), "reciprocal": (jnp.reciprocal, POS),
    "relu": (jax.nn.relu, X), "gelu_tanh": (lambda x: jax.nn.gelu(x, approximate=True), X),
    "gelu_erf": (lambda x: jax.nn.gelu(x, approximate=False), X), "softplus": (jax.nn.softplus, X),
    "silu": (jax.nn.silu, X), "reduce_precision": (lambda x: lax.reduce_precision(x, 8, 7), X),
}
for name, (fn, a) in UNARY.items():
    case(f"op.{name}.f32", fn, a, family=name, tags={"unary"}, tol={"float32": (2e-4, 2e-5)})

Y = arg("f32[4,6]")
NZ = arg("f32[4,6]", "uniform", low=0.5, high=3)
BINARY = {
    "add": (jnp.add, X, Y), "subtract": (jnp.subtract, X, Y), "multiply": (jnp.multiply, X, Y),
    "divide": (jnp.divide, X, NZ), "remainder": (jnp.remainder, X, NZ), "fmod": (jnp.fmod, X, NZ),
    "power": (jnp.power, POS, Y), "maximum": (jnp.maximum, X, Y), "minimum": (jnp.minimum, X, Y),
    "atan2": (jnp.arctan2, X, Y), "floor_divide": (jnp.floor_divide, X, NZ), "hypot": (jnp.hypot, X, Y),
    "nextafter": (jnp.nextafter, X, Y), "copysign": (jnp.copysign, X, Y),
}
for name, (fn, a, b) in BINARY.items():
    case(f"op.{name}.f32", fn, a, b, family=name, tags={"binary"}, tol={"float32": (2e-4, 2e-5)})

for direction, fn in {"EQ": jnp.equal, "NE": jnp.not_equal, "LT": jnp.less, "LE": jnp.less_equal,
                      "GT": jnp.greater, "GE": jnp.greater_equal}.items():
    ints = arg("i32[4,6]", "int", low=-2, high=2)
    case(f"op.compare.{direction}.i32", fn, ints, ints, family="compare", tags={"binary"})
    case(f"op.compare.{direction}.f32", fn, X, arg("f32[4,6]", "values", values=(0.0, 1.0, -1.0, 0.5)),
         family="compare", tags={"binary"})

case("op.select.f32", lambda c, a, b: jnp.where(c, a, b), arg("bool[4,6]"), X, Y, family="select")
case("op.clamp.f32", lambda x: jnp.clip(x, -0.5, 0.7), X, family="clamp")
case("op.clamp.tensor_bounds", lambda lo, x, hi: lax.clamp(lo, x, hi), arg("f32[]", "values", values=(-0.3,)), X,
     arg("f32[]", "values", values=(0.4,)), family="clamp")
case("op.integer_pow.f32", lambda x: x ** 3 + x ** -2, POS, family="multiply")
case("op.logaddexp.f32", jnp.logaddexp, X, Y, family="log_plus_one")

I8 = arg("i32[4,6]", "int", low=-100, high=100)
SH = arg("i32[4,6]", "int", low=0, high=33)
U = arg("u32[4,6]", "int", low=0, high=2**31)
BITS = {
    "and": (jnp.bitwise_and, I8, arg("i32[4,6]", "int", low=-100, high=100)),
    "or": (jnp.bitwise_or, I8, arg("i32[4,6]", "int", low=-100, high=100)),
    "xor": (jnp.bitwise_xor, I8, arg("i32[4,6]", "int", low=-100, high=100)),
    "shift_left": (lax.shift_left, I8, SH),
    "shift_right_arithmetic": (lax.shift_right_arithmetic, I8, SH),
    "shift_right_logical": (lax.shift_right_logical, I8, SH),
}
for name, (fn, a, b) in BITS.items():
    case(f"op.{name}.i32", fn, a, b, family=name, tags={"bitwise"})
case("op.not.i32", jnp.bitwise_not, I8, family="not", tags={"bitwise"})
case("op.not.bool", jnp.logical_not, arg("bool[4,6]"), family="not", tags={"bitwise"})
case("op.and.bool", jnp.logical_and, arg("bool[4,6]"), arg("bool[4,6]"), family="and", tags={"bitwise"})
case("op.or.bool", jnp.logical_or, arg("bool[4,6]"), arg("bool[4,6]"), family="or", tags={"bitwise"})
case("op.xor.bool", jnp.logical_xor, arg("bool[4,6]"), arg("bool[4,6]"), family="xor", tags={"bitwise"})
case("op.popcnt.u32", lax.population_count, U, family="popcnt", tags={"bitwise"})
case("op.count_leading_zeros.u32", lax.clz, U, family="count_leading_zeros", tags={"bitwise"})
case("op.bitcast_convert.f32_i32", lambda x: lax.bitcast_convert_type(x, jnp.int32), X, family="bitcast_convert")
case("op.bitcast_convert.u32_f32", lambda x: lax.bitcast_convert_type(x & 0x3FFFFFFF, jnp.float32), U,
     family="bitcast_convert")
case("op.bitcast_convert.f32_u8x4", lambda x: lax.bitcast_convert_type(x, jnp.uint8), X, family="bitcast_convert")
case("op.optimization_barrier.f32", lambda x, y: lax.optimization_barrier((x * 2, y))[0] + y, X, Y,
     family="optimization_barrier")
case("op.map.f32", lambda x: lax.map(lambda r: r * 2.0 + 1.0, x), X, family="while")
