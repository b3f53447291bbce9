"""The same small set of ops over every dtype jaxconv claims.

f32, f16, bf16, f64 (with x64), int8/16/32/64, uint8/32 and bool; 64-bit dtypes turn on
``jax_enable_x64`` for their cells only.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from conformance.case import SHORT, arg, case

FLOATS = ("float32", "float16", "bfloat16", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint32")
ALL = FLOATS + INTS + ("bool",)
LOOSE = {"float16": (1e-2, 1e-2), "bfloat16": (3e-2, 3e-2)}


def _a(dt: str, shape: str = "3,5", **kw) -> object:
    return arg(f"{SHORT[dt]}[{shape}]", **kw)


for dt in ALL:
    s = SHORT[dt]
    is_bool, is_int, is_float = dt == "bool", dt in INTS, dt in FLOATS
    case(f"dtype.{s}.add", (jnp.logical_or if is_bool else jnp.add), _a(dt), _a(dt), family="add", tags={"dtype"}, tol=LOOSE)
    case(f"dtype.{s}.multiply", (jnp.logical_and if is_bool else jnp.multiply), _a(dt), _a(dt), family="multiply",
         tags={"dtype"}, tol=LOOSE)
    case(f"dtype.{s}.maximum", jnp.maximum, _a(dt), _a(dt), family="maximum", tags={"dtype"})
    case(f"dtype.{s}.compare", lambda x, y: (x < y, x == y), _a(dt), _a(dt), family="compare", tags={"dtype"})
    case(f"dtype.{s}.select", lambda c, x, y: jnp.where(c, x, y), _a("bool"), _a(dt), _a(dt), family="select", tags={"dtype"})
    case(f"dtype.{s}.shape_ops", lambda x, y: jnp.concatenate([x.T, y.T[::-1]], axis=0).reshape(2, 15)[:, 1:9:2],
         _a(dt), _a(dt), family="concatenate", tags={"dtype"})
    case(f"dtype.{s}.to_f32", lambda x: x.astype(jnp.float32), _a(dt), family="convert", tags={"dtype"})
    if dt != "float32":
        unsigned = dt.startswith("u") or dt == "bool"
        src = arg("f32[3,5]", "uniform", low=-3, high=120) if unsigned else arg("f32[3,5]", "uniform", low=-100, high=100)
        case(f"dtype.{s}.from_f32", lambda x, _t=np.dtype(jnp.dtype(dt)): x.astype(_t), src, family="convert", tags={"dtype"})
    if is_bool:
        case(f"dtype.{s}.reduce", lambda x: (jnp.any(x, axis=1), jnp.all(x, axis=0)), _a(dt), family="reduce", tags={"dtype"})
    else:
        case(f"dtype.{s}.reduce", lambda x: (jnp.sum(x, axis=1), jnp.max(x, axis=0), jnp.min(x)), _a(dt), family="reduce",
             tags={"dtype"}, tol={"float16": (1e-2, 3e-2), "bfloat16": (3e-2, 1e-1)})
        case(f"dtype.{s}.dot", lambda x, y: jnp.dot(x, y), _a(dt, "3,5", **({"kind": "int", "low": 0, "high": 3} if is_int else {})),
             _a(dt, "5,4", **({"kind": "int", "low": 0, "high": 3} if is_int else {})), family="dot_general", tags={"dtype"},
             tol={"float16": (1e-2, 3e-2), "bfloat16": (3e-2, 1e-1)})
        case(f"dtype.{s}.sort", lambda x: jnp.sort(x, axis=-1), _a(dt), family="sort", tags={"dtype"})
    if is_float or dt.startswith("int"):
        case(f"dtype.{s}.negate_abs", lambda x: (-x, jnp.abs(x)), _a(dt), family="negate", tags={"dtype"})
    if is_float:
        case(f"dtype.{s}.divide", jnp.divide, _a(dt), _a(dt, kind="uniform", low=0.5, high=4), family="divide",
             tags={"dtype"}, tol=LOOSE)
        case(f"dtype.{s}.exp_tanh", lambda x: (jnp.exp(x), jnp.tanh(x)), _a(dt), family="exponential", tags={"dtype"}, tol=LOOSE)
    elif is_int:
        case(f"dtype.{s}.divide_remainder", lambda x, y: (x // y, x % y, lax.div(x, y), lax.rem(x, y)), _a(dt),
             _a(dt, kind="int", low=1, high=7), family="divide", tags={"dtype"})
