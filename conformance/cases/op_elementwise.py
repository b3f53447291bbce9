"""Op rows: elementwise arithmetic, math, select and compare against jax.jit, every dtype JAX uses.

Inputs cover NaN, ±inf, -0.0, halves, INT_MIN/INT_MAX and zero divisors. Exact ops are compared
bit for bit (``expect="exact"``, signed zeros included); transcendental functions within the usual
tolerances (``allclose``). Subnormal floats are left out: XLA on CPU flushes them to zero, ONNX
Runtime does not.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from conformance.case import op_row
from conformance.values import (
    BF16,
    F16,
    F32,
    F64,
    FLOATS,
    INTS,
    PERIODIC_ATOL,
    TRANSCENDENTAL_TOL,
    X64_FLOATS,
    X64_INTS,
    Patched,
    Spec,
    each,
    float_values,
    grid,
    int_values,
    replace_op,
    values,
)

EXACT_ZERO_TIES_OPSET = 26  # below it maximum/minimum of -0 and +0 may return either zero


def row(name, fn, *args, tol=None, opset=None, **kw):
    """One elementwise row: bit for bit unless ``tol`` is given (then within it)."""
    op_row(name, fn, *args, expect="exact" if tol is None else "allclose", tol=tol, opsets=(opset,), **kw)


def _pairs(dtypes):
    return [tuple(grid(values(d))) for d in dtypes]


BINARY = {"add": lax.add, "subtract": lax.sub, "multiply": lax.mul, "divide": lax.div, "remainder": lax.rem,
          "maximum": lax.max, "minimum": lax.min}

for name, fn in BINARY.items():
    ties = name in ("maximum", "minimum")
    row(f"elementwise.{name}", each(fn), *_pairs(FLOATS + INTS), signed_zeros=not ties)
    if ties:
        row(f"elementwise.{name}.zero_ties", each(fn), *_pairs(FLOATS), opset=EXACT_ZERO_TIES_OPSET)
    row(f"elementwise.{name}.x64", each(fn), *_pairs(X64_FLOATS + X64_INTS),
        opset=EXACT_ZERO_TIES_OPSET if ties else None)

# x / 0, x % 0 and INT_MIN / -1 are defined (no ORT error, no SIGFPE).
row("elementwise.integer_division_guards", lambda x, y: (lax.div(x, y), lax.rem(x, y), jnp.floor_divide(x, y),
                                                          jnp.remainder(x, y)),
    np.array([5, -5, 0, np.iinfo(np.int32).min, np.iinfo(np.int32).min, 7], np.int32),
    np.array([0, 0, 0, -1, 0, -1], np.int32))

_X = float_values(F32)
row("elementwise.max_min_constants", lambda v: (jnp.maximum(v, 0.0), jnp.maximum(v, 2.0), jax.nn.relu(v),
                                                jnp.minimum(v, 1.0)), _X)
row("elementwise.max_min_constants.zero_ties",
    lambda v: (jnp.maximum(v, 0.0), jnp.minimum(v, 0.0), jnp.maximum(v, -0.0), jnp.minimum(-0.0, v),
               jnp.maximum(v, 2.0), jax.nn.relu(v)), _X, opset=EXACT_ZERO_TIES_OPSET)


def _clamp_args():
    x = np.concatenate([float_values(F32)] * 3)
    lo = np.repeat(np.array([0.0, np.nan, -0.0], np.float32), x.size // 3)
    hi = np.repeat(np.array([1.0, 2.0, np.nan], np.float32), x.size // 3)
    ints = [(np.full(int_values(d).size, -2 if d.kind == "i" else 1, d), int_values(d), np.full(int_values(d).size, 5, d))
            for d in INTS]
    return [(lo, x, hi), (lo.astype(BF16), x.astype(BF16), hi.astype(BF16)), (lo.astype(F16), x.astype(F16), hi.astype(F16))], ints


with np.errstate(over="ignore"):
    _FLOAT_CLAMPS, _INT_CLAMPS = _clamp_args()
row("elementwise.clamp.tensor_bounds_nan", each(lax.clamp), *_FLOAT_CLAMPS, *_INT_CLAMPS, signed_zeros=False)
row("elementwise.clamp.tensor_bounds_nan.zero_ties", each(lax.clamp), *_FLOAT_CLAMPS, opset=EXACT_ZERO_TIES_OPSET)

# StableHLO allows rank-0 bounds (JAX broadcasts them first, other producers do not).
_SCALAR_SPECS = [Spec((), np.float32), Spec((26,), np.float32), Spec((), np.float32)]
assert _X.size == 26
_SCALAR_CLAMP = Patched(lax.clamp, _SCALAR_SPECS, replace_op(
    "stablehlo.clamp %0, %arg1, %1 : tensor<26xf32>",
    "stablehlo.clamp %arg0, %arg1, %arg2 : (tensor<f32>, tensor<26xf32>, tensor<f32>) -> tensor<26xf32>"))
row("elementwise.clamp.scalar_bounds", _SCALAR_CLAMP, np.float32(-1.5), _X, np.float32(2.0))
row("elementwise.clamp.scalar_bounds.nan", _SCALAR_CLAMP, np.float32(np.nan), _X, np.float32(2.0))
row("elementwise.clamp.scalar_bounds.zero_ties", _SCALAR_CLAMP, np.float32(0.0), _X, np.float32(2.0),
    opset=EXACT_ZERO_TIES_OPSET)

_V64 = int_values(np.dtype(np.int64))
row("elementwise.clamp.x64",
    lambda lo, x, hi: (lax.clamp(lo, x, hi), lax.clamp(lo.astype(jnp.uint64), x.astype(jnp.uint64), hi.astype(jnp.uint64)),
                       lax.clamp(lo.astype(jnp.float64), x.astype(jnp.float64), hi.astype(jnp.float64))),
    np.full(_V64.size, -7, np.int64), _V64, np.full(_V64.size, 100, np.int64), opset=EXACT_ZERO_TIES_OPSET)

# ---- power ------------------------------------------------------------------------------------
_BASE = np.array([2.0, -2.0, -8.0, 0.0, -0.0, 1.0, -1.0, np.nan, np.inf, -np.inf, 0.5, 3.7, 10.0], np.float32)
_EXPO = np.array([3.0, -3.0, 1 / 3, -1.0, 0.0, np.nan, np.inf, -np.inf, 0.5, 2.5, -0.5, 7.0, 38.0], np.float32)
_PA, _PB = grid(_BASE, _EXPO)
row("elementwise.power.half", each(lax.pow), (_PA.astype(F16), _PB.astype(F16)), (_PA.astype(BF16), _PB.astype(BF16)),
    (_PA, _PB), tol=TRANSCENDENTAL_TOL[F16])
row("elementwise.power.f32", lax.pow, _PA, _PB, tol=TRANSCENDENTAL_TOL[F32])
_PA64, _PB64 = grid(np.array([2.0, -2.0, -8.0, 0.0, -0.0, 1.0, np.nan, np.inf, 0.5, 3.7, 10.0]),
                    np.array([3.0, -3.0, 1 / 3, 0.0, np.nan, np.inf, 0.5, -2.5, 300.0]))
row("elementwise.power.f64", lax.pow, _PA64, _PB64, tol=TRANSCENDENTAL_TOL[F64])


def _int_power(dtype: np.dtype):
    """XLA squares over the exponent's low 6 bits; negative exponents give 0 except for bases ±1."""
    name = {"int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "ui8", "uint16": "ui16",
            "uint32": "ui32", "uint64": "ui64"}[dtype.name]
    base = int_values(dtype)
    info = np.iinfo(dtype)
    expo = np.array([e for e in (0, 1, 2, 3, 5, 7, 31, 63, 64, 65, 100, -1, -2, -3, -100) if info.min <= e <= info.max], dtype)
    a, b = grid(np.concatenate([base, np.array([3, 5], dtype)]), expo)
    specs = [Spec(a.shape, dtype)] * 2
    edit = replace_op(f"stablehlo.add %arg0, %arg1 : tensor<{a.size}x{name}>", f"stablehlo.power %arg0, %arg1 : tensor<{a.size}x{name}>")
    return Patched(lax.add, specs, edit), a, b


for _d in INTS + X64_INTS:
    _fn, _a, _b = _int_power(_d)
    row(f"elementwise.power.{_d.name}", _fn, _a, _b)

# ---- unary ------------------------------------------------------------------------------------
EXACT_UNARY = {"abs": lax.abs, "negate": lax.neg, "sign": lax.sign, "floor": lax.floor, "ceil": lax.ceil,
               "round_nearest_even": lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
               "round_nearest_afz": lax.round, "is_finite": lax.is_finite}
FLOAT_ONLY = {"floor", "ceil", "round_nearest_even", "round_nearest_afz", "is_finite"}


def _unary_inputs(name, dtypes):
    out = [values(d) for d in dtypes if (name not in FLOAT_ONLY or d.kind == "f" or d == BF16)
           and not (name == "abs" and d.kind == "u")]
    halves = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, 8388607.5, 8388609.0, 1.0000001, -3.5], np.float32)
    return out + [halves] if any(d == F32 for d in dtypes) and name.startswith("round") else out


for name, fn in EXACT_UNARY.items():
    row(f"elementwise.{name}", each(fn), *_unary_inputs(name, FLOATS + INTS))
    row(f"elementwise.{name}.x64", each(fn), *_unary_inputs(name, X64_FLOATS + X64_INTS))

MATH = {"exponential": jnp.exp, "log": jnp.log, "sqrt": jnp.sqrt, "rsqrt": lax.rsqrt, "tanh": jnp.tanh,
        "sine": jnp.sin, "cosine": jnp.cos, "tan": jnp.tan, "exponential_minus_one": jnp.expm1,
        "log_plus_one": jnp.log1p, "cbrt": jnp.cbrt}


def _math_inputs(dtype: np.dtype) -> np.ndarray:
    small = [1e-10, -1e-10, 1e-6, -3e-5, 2e-3, -0.3, 0.7, -0.99, 0.999, 1.2, -1.7, 27.0, -8.0, 88.0, -90.0,
             1e6, 1.5707963, 3.1415927, 710.0, 1e-300]
    with np.errstate(over="ignore"):
        extra = np.array(small, np.float64).astype(dtype)
    v = np.concatenate([float_values(dtype), extra])
    tiny = float(ml_dtypes.finfo(dtype).tiny)
    return v[~np.isfinite(v.astype(np.float64)) | (v == 0) | (np.abs(v.astype(np.float64)) >= tiny)]


def _math_tol(name: str, d: np.dtype) -> tuple[float, float]:
    rtol, atol = TRANSCENDENTAL_TOL[d]
    if name == "tan" and d == F64:
        rtol = 1e-8  # Sin/Cos near the pole at pi/2 (no float64 Tan kernel)
    return (rtol, PERIODIC_ATOL[d]) if name in ("sine", "cosine", "tan") else (rtol, atol)


for name, fn in MATH.items():
    for _d in FLOATS + X64_FLOATS:
        row(f"elementwise.{name}.{_d.name}", fn, _math_inputs(_d), tol=_math_tol(name, _d), signed_zeros=False)

_TINY = np.array([0.0, -0.0, 1e-20, -1e-20, 1e-10, -1e-7], np.float32)
row("elementwise.expm1_log1p.tiny", lambda v: (jnp.expm1(v), jnp.log1p(v)), _TINY, tol=(1e-6, 0.0))
row("elementwise.expm1_log1p.signed_zero", lambda v: (jnp.expm1(v), jnp.log1p(v)), _TINY[:2])

# JAX expands sigmoid on CPU; stablehlo.logistic comes from other producers.
for _d in (F32, F16, BF16):
    _x = _math_inputs(_d)
    row(f"elementwise.logistic.{_d.name}", Patched(jnp.tanh, [Spec(_x.shape, _d)], replace_op("stablehlo.tanh", "stablehlo.logistic")),
        _x, tol=TRANSCENDENTAL_TOL[_d], signed_zeros=False)

_AV = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.0, np.inf, -np.inf, np.nan, 1e-30, -1e30, 3.0], np.float32)
_AY, _AX = grid(_AV)
row("elementwise.atan2.quadrants", lax.atan2, _AY, _AX, tol=TRANSCENDENTAL_TOL[F32])  # signed zeros included
with np.errstate(over="ignore"):
    _AHALF = [(_AY.astype(d), _AX.astype(d)) for d in (F16, BF16)]
row("elementwise.atan2.half", each(lax.atan2), *_AHALF, tol=TRANSCENDENTAL_TOL[BF16])
row("elementwise.atan2.random", jnp.arctan2, *(np.random.default_rng(0).standard_normal((2, 500)) * 10.0).astype(np.float32),
    tol=TRANSCENDENTAL_TOL[F32])
_AY64, _AX64 = grid(np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.0, np.inf, -np.inf, np.nan, 1e-300, -1e300, 3.0, 1e-100]))
_R64 = np.random.default_rng(1)
_R64 = _R64.standard_normal((2, 500)) * np.exp(_R64.uniform(-30, 30, (2, 500)))
row("elementwise.atan2.f64", lax.atan2, np.concatenate([_AY64, _R64[0]]), np.concatenate([_AX64, _R64[1]]),
    tol=TRANSCENDENTAL_TOL[F64])

_E32 = np.zeros((2, 0), np.float32)
row("elementwise.empty", lambda a, b, i: (a + b, lax.rem(a, b), jnp.expm1(a), lax.round(a), lax.div(i, i), a < b,
                                          jnp.where(a < b, a, b)), _E32, _E32, np.zeros((0,), np.int32))
row("elementwise.scalar", lambda a, b: (lax.atan2(a, b), lax.rem(a, b), lax.max(a, b)), np.float32(-0.0), np.float32(0.0),
    opset=EXACT_ZERO_TIES_OPSET)

# ---- select, compare ----------------------------------------------------------------------------
_RNG = np.random.default_rng(2)
_SEL = [values(d) for d in FLOATS + INTS] + [np.array([True, False, True, False])]
_SEL = [(_RNG.random(a.size) < 0.5, a, a[::-1]) for a in _SEL]
row("elementwise.select", each(lax.select), *_SEL, signed_zeros=False)
row("elementwise.select.bitcast", each(lax.select), *_SEL[:3], opset=26)  # bit-exact floats (-0 included) through BitCast
_RNG = np.random.default_rng(3)
row("elementwise.select.x64", each(lax.select),
    *[(_RNG.random(values(d).size) < 0.5, values(d), values(d)[::-1]) for d in X64_FLOATS + X64_INTS], opset=26)

COMPARE = {"EQ": lax.eq, "NE": lax.ne, "LT": lax.lt, "LE": lax.le, "GT": lax.gt, "GE": lax.ge}


def total_order(direction: str, dtype: np.dtype, n: int) -> Patched:
    """A compare of ``direction`` with the TOTALORDER type on two ``dtype[n]`` operands."""
    name = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64"}[dtype.name]
    edit = replace_op(f"stablehlo.compare {direction}, %arg0, %arg1, FLOAT : (tensor<{n}x{name}>",
                      f"stablehlo.compare {direction}, %arg0, %arg1, TOTALORDER : (tensor<{n}x{name}>")
    return Patched(COMPARE[direction], [Spec((n,), dtype)] * 2, edit)


def total_order_values(dtype: np.dtype) -> np.ndarray:
    """Edge values and a negative NaN."""
    v = float_values(dtype)
    bits = v.view(f"uint{v.dtype.itemsize * 8}").copy()
    neg_nan = np.array(bits[np.isnan(v.astype(np.float32))][:1] | (1 << (bits.dtype.itemsize * 8 - 1)), bits.dtype)
    return np.concatenate([v, neg_nan.view(dtype)])


for direction, fn in COMPARE.items():
    row(f"elementwise.compare.{direction}", each(fn), *_pairs(FLOATS + INTS), grid(np.array([True, False])))
    row(f"elementwise.compare.{direction}.x64", each(fn), *_pairs(X64_FLOATS + X64_INTS))
    # -NaN < -inf < ... < -0 < +0 < ... < +inf < NaN, as JAX's sort comparators use it.
    for _d in (F32, BF16):
        _a, _b = grid(total_order_values(_d))
        op_row(f"elementwise.compare.{direction}.totalorder.{_d.name}", total_order(direction, _d, _a.size), _a, _b,
               expect="exact", opsets=(26, 28))
_a, _b = grid(total_order_values(F64))
row("elementwise.compare.LT.totalorder.float64", total_order("LT", F64, _a.size), _a, _b, opset=26)


def _barrier(x, y):
    a, b = lax.optimization_barrier((x * 2, y + 1))
    return a - b


op_row("elementwise.optimization_barrier", _barrier, np.arange(4, dtype=np.float32), np.ones(4, np.float32))
