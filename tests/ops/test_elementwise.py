"""Elementwise arithmetic, math, select and compare lowerings against jax.jit, every dtype JAX uses.

Inputs cover NaN, ±inf, -0.0, halves, INT_MIN/INT_MAX and zero divisors. Exact ops are compared
bit for bit (signed zeros included); transcendental functions within the usual tolerances.
Subnormal floats are left out: XLA on CPU flushes them to zero, ONNX Runtime does not.
Shared helpers live in elementwise_support.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from elementwise_support import (
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
    Spec,
    check,
    each,
    float_values,
    grid,
    int_values,
    patched,
    replace_op,
    values,
)

BINARY = {"add": lax.add, "subtract": lax.sub, "multiply": lax.mul, "divide": lax.div, "remainder": lax.rem,
          "maximum": lax.max, "minimum": lax.min}


def _pairs(dtypes):
    return [tuple(grid(values(d))) for d in dtypes]


EXACT_ZERO_TIES_OPSET = 26  # below it maximum/minimum of -0 and +0 may return either zero


@pytest.mark.parametrize("name", list(BINARY))
def test_binary(name):
    ties = name in ("maximum", "minimum")
    check(each(BINARY[name]), *_pairs(FLOATS + INTS), signed_zeros=not ties)
    if ties:
        check(each(BINARY[name]), *_pairs(FLOATS), opset=EXACT_ZERO_TIES_OPSET)


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_x64(name, x64):
    ties = name in ("maximum", "minimum")
    check(each(BINARY[name]), *_pairs(X64_FLOATS + X64_INTS), opset=EXACT_ZERO_TIES_OPSET if ties else None)


def test_integer_division_guards_match_xla():
    """x / 0, x % 0 and INT_MIN / -1 are defined (no ORT error, no SIGFPE)."""
    a = np.array([5, -5, 0, np.iinfo(np.int32).min, np.iinfo(np.int32).min, 7], np.int32)
    b = np.array([0, 0, 0, -1, 0, -1], np.int32)
    check(lambda x, y: (lax.div(x, y), lax.rem(x, y), jnp.floor_divide(x, y), jnp.remainder(x, y)), a, b)


def test_max_min_signed_zeros_with_constants():
    x = float_values(F32)
    check(lambda v: (jnp.maximum(v, 0.0), jnp.maximum(v, 2.0), jax.nn.relu(v), jnp.minimum(v, 1.0)), x)
    check(lambda v: (jnp.maximum(v, 0.0), jnp.minimum(v, 0.0), jnp.maximum(v, -0.0), jnp.minimum(-0.0, v),
                     jnp.maximum(v, 2.0), jax.nn.relu(v)), x, opset=EXACT_ZERO_TIES_OPSET)


def test_clamp_tensor_bounds_and_nan():
    x = np.concatenate([float_values(F32)] * 3)
    lo = np.repeat(np.array([0.0, np.nan, -0.0], np.float32), x.size // 3)
    hi = np.repeat(np.array([1.0, 2.0, np.nan], np.float32), x.size // 3)
    ints = [(np.full(int_values(d).size, -2 if d.kind == "i" else 1, d), int_values(d), np.full(int_values(d).size, 5, d))
            for d in INTS]
    args = [(lo, x, hi), (lo.astype(BF16), x.astype(BF16), hi.astype(BF16)), (lo.astype(F16), x.astype(F16), hi.astype(F16))]
    check(each(lax.clamp), *args, *ints, signed_zeros=False)
    check(each(lax.clamp), *args, opset=EXACT_ZERO_TIES_OPSET)


def test_clamp_scalar_bounds():
    """StableHLO allows rank-0 bounds (JAX broadcasts them first, other producers do not)."""
    specs = [Spec((), np.float32), Spec((26,), np.float32), Spec((), np.float32)]
    edit = replace_op("stablehlo.clamp %0, %arg1, %1 : tensor<26xf32>",
                      "stablehlo.clamp %arg0, %arg1, %arg2 : (tensor<f32>, tensor<26xf32>, tensor<f32>) -> tensor<26xf32>")
    exp = patched(lax.clamp, specs, edit)
    x = float_values(F32)
    assert x.size == 26
    check(exp, np.float32(-1.5), x, np.float32(2.0), specs=specs)
    check(exp, np.float32(np.nan), x, np.float32(2.0), specs=specs)
    check(exp, np.float32(0.0), x, np.float32(2.0), specs=specs, opset=EXACT_ZERO_TIES_OPSET)


def test_clamp_x64(x64):
    v = int_values(np.dtype(np.int64))
    check(lambda lo, x, hi: (lax.clamp(lo, x, hi), lax.clamp(lo.astype(jnp.uint64), x.astype(jnp.uint64), hi.astype(jnp.uint64)),
                             lax.clamp(lo.astype(jnp.float64), x.astype(jnp.float64), hi.astype(jnp.float64))),
          np.full(v.size, -7, np.int64), v, np.full(v.size, 100, np.int64), opset=EXACT_ZERO_TIES_OPSET)


# ---- power ------------------------------------------------------------------------------------
def test_power_float():
    base = np.array([2.0, -2.0, -8.0, 0.0, -0.0, 1.0, -1.0, np.nan, np.inf, -np.inf, 0.5, 3.7, 10.0], np.float32)
    expo = np.array([3.0, -3.0, 1 / 3, -1.0, 0.0, np.nan, np.inf, -np.inf, 0.5, 2.5, -0.5, 7.0, 38.0], np.float32)
    a, b = grid(base, expo)
    check(each(lax.pow), (a, b), (a.astype(F16), b.astype(F16)), (a.astype(BF16), b.astype(BF16)),
          tol=TRANSCENDENTAL_TOL[F16])
    check(lax.pow, a, b, tol=TRANSCENDENTAL_TOL[F32])


def test_power_float64(x64):
    base = np.array([2.0, -2.0, -8.0, 0.0, -0.0, 1.0, np.nan, np.inf, 0.5, 3.7, 10.0])
    a, b = grid(base, np.array([3.0, -3.0, 1 / 3, 0.0, np.nan, np.inf, 0.5, -2.5, 300.0]))
    check(lax.pow, a, b, tol=TRANSCENDENTAL_TOL[F64])


def _int_power(dtype: np.dtype):
    name = {"int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "ui8", "uint16": "ui16",
            "uint32": "ui32", "uint64": "ui64"}[dtype.name]
    base = int_values(dtype)
    info = np.iinfo(dtype)
    expo = np.array([e for e in (0, 1, 2, 3, 5, 7, 31, 63, 64, 65, 100, -1, -2, -3, -100) if info.min <= e <= info.max], dtype)
    a, b = grid(np.concatenate([base, np.array([3, 5], dtype)]), expo)
    specs = [Spec(a.shape, dtype)] * 2
    edit = replace_op(f"stablehlo.add %arg0, %arg1 : tensor<{a.size}x{name}>", f"stablehlo.power %arg0, %arg1 : tensor<{a.size}x{name}>")
    return patched(lax.add, specs, edit), a, b, specs


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_power_integer(dtype):
    """XLA squares over the exponent's low 6 bits; negative exponents give 0 except for bases ±1."""
    exp, a, b, specs = _int_power(dtype)
    check(exp, a, b, specs=specs)


@pytest.mark.parametrize("dtype", X64_INTS, ids=str)
def test_power_integer_x64(dtype, x64):
    exp, a, b, specs = _int_power(dtype)
    check(exp, a, b, specs=specs)


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


@pytest.mark.parametrize("name", list(EXACT_UNARY))
def test_exact_unary(name):
    check(each(EXACT_UNARY[name]), *_unary_inputs(name, FLOATS + INTS))


@pytest.mark.parametrize("name", list(EXACT_UNARY))
def test_exact_unary_x64(name, x64):
    check(each(EXACT_UNARY[name]), *_unary_inputs(name, X64_FLOATS + X64_INTS))


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


@pytest.mark.parametrize("name", list(MATH))
def test_math(name):
    fn = MATH[name]
    for d in FLOATS:
        check(fn, _math_inputs(d), tol=_math_tol(name, d), signed_zeros=False)


def _math_tol(name: str, d: np.dtype) -> tuple[float, float]:
    rtol, atol = TRANSCENDENTAL_TOL[d]
    if name == "tan" and d == F64:
        rtol = 1e-8  # Sin/Cos near the pole at pi/2 (no float64 Tan kernel)
    return (rtol, PERIODIC_ATOL[d]) if name in ("sine", "cosine", "tan") else (rtol, atol)


@pytest.mark.parametrize("name", list(MATH))
def test_math_x64(name, x64):
    check(MATH[name], _math_inputs(F64), tol=_math_tol(name, F64), signed_zeros=False)


def test_expm1_log1p_keep_signed_zero_and_tiny_values():
    x = np.array([0.0, -0.0, 1e-20, -1e-20, 1e-10, -1e-7], np.float32)
    check(lambda v: (jnp.expm1(v), jnp.log1p(v)), x, tol=(1e-6, 0.0))
    check(lambda v: (jnp.expm1(v), jnp.log1p(v)), x[:2])


def test_logistic():
    """JAX expands sigmoid on CPU; stablehlo.logistic comes from other producers."""
    for d, name in ((F32, "f32"), (F16, "f16"), (BF16, "bf16")):
        x = _math_inputs(d)
        spec = Spec(x.shape, d)
        exp = patched(jnp.tanh, [spec], replace_op("stablehlo.tanh", "stablehlo.logistic"))
        check(exp, x, specs=[spec], tol=TRANSCENDENTAL_TOL[d], signed_zeros=False)


def test_atan2_all_quadrants():
    v = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.0, np.inf, -np.inf, np.nan, 1e-30, -1e30, 3.0], np.float32)
    y, x = grid(v)
    check(lax.atan2, y, x, tol=TRANSCENDENTAL_TOL[F32])  # signed zeros included
    check(each(lax.atan2), (y.astype(F16), x.astype(F16)), (y.astype(BF16), x.astype(BF16)), tol=TRANSCENDENTAL_TOL[BF16])
    rng = np.random.default_rng(0)
    check(jnp.arctan2, *(rng.standard_normal((2, 500)) * 10.0).astype(np.float32), tol=TRANSCENDENTAL_TOL[F32])


def test_atan2_float64(x64):
    v = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.0, np.inf, -np.inf, np.nan, 1e-300, -1e300, 3.0, 1e-100])
    y, x = grid(v)
    rng = np.random.default_rng(1)
    r = rng.standard_normal((2, 500)) * np.exp(rng.uniform(-30, 30, (2, 500)))
    check(lax.atan2, np.concatenate([y, r[0]]), np.concatenate([x, r[1]]), tol=TRANSCENDENTAL_TOL[F64])


def test_empty_and_scalar_tensors():
    e32 = np.zeros((2, 0), np.float32)
    check(lambda a, b, i: (a + b, lax.rem(a, b), jnp.expm1(a), lax.round(a), lax.div(i, i), a < b, jnp.where(a < b, a, b)),
          e32, e32, np.zeros((0,), np.int32))
    check(lambda a, b: (lax.atan2(a, b), lax.rem(a, b), lax.max(a, b)), np.float32(-0.0), np.float32(0.0),
          opset=EXACT_ZERO_TIES_OPSET)


# ---- select, compare ----------------------------------------------------------------------------
def test_select_every_dtype():
    rng = np.random.default_rng(2)
    arrays = [values(d) for d in FLOATS + INTS] + [np.array([True, False, True, False])]
    args = [(rng.random(a.size) < 0.5, a, a[::-1]) for a in arrays]
    check(each(lax.select), *args, signed_zeros=False)
    check(each(lax.select), *args[:3], opset=26)  # bit-exact floats (-0 included) through BitCast


def test_select_x64(x64):
    rng = np.random.default_rng(3)
    args = [(rng.random(values(d).size) < 0.5, values(d), values(d)[::-1]) for d in X64_FLOATS + X64_INTS]
    check(each(lax.select), *args, opset=26)


COMPARE = {"EQ": lax.eq, "NE": lax.ne, "LT": lax.lt, "LE": lax.le, "GT": lax.gt, "GE": lax.ge}


@pytest.mark.parametrize("direction", list(COMPARE))
def test_compare(direction):
    bools = grid(np.array([True, False]))
    check(each(COMPARE[direction]), *_pairs(FLOATS + INTS), bools)


@pytest.mark.parametrize("direction", list(COMPARE))
def test_compare_x64(direction, x64):
    check(each(COMPARE[direction]), *_pairs(X64_FLOATS + X64_INTS))


def _total_order(direction: str, dtype: np.dtype, n: int):
    name = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64"}[dtype.name]
    specs = [Spec((n,), dtype)] * 2
    edit = replace_op(f"stablehlo.compare {direction}, %arg0, %arg1, FLOAT : (tensor<{n}x{name}>",
                      f"stablehlo.compare {direction}, %arg0, %arg1, TOTALORDER : (tensor<{n}x{name}>")
    return patched(COMPARE[direction], specs, edit), specs


def _total_order_values(dtype: np.dtype) -> np.ndarray:
    v = float_values(dtype)
    bits = v.view(f"uint{v.dtype.itemsize * 8}").copy()
    neg_nan = np.array(bits[np.isnan(v.astype(np.float32))][:1] | (1 << (bits.dtype.itemsize * 8 - 1)), bits.dtype)
    return np.concatenate([v, neg_nan.view(dtype)])


@pytest.mark.parametrize("direction", list(COMPARE))
@pytest.mark.parametrize("opset", [26, 28])
def test_compare_total_order(direction, opset):
    """-NaN < -inf < ... < -0 < +0 < ... < +inf < NaN, as JAX's sort comparators use it."""
    for d in (F32, BF16):
        a, b = grid(_total_order_values(d))
        exp, specs = _total_order(direction, d, a.size)
        check(exp, a, b, specs=specs, opset=opset)


def test_compare_total_order_needs_opset_26():
    from jaxconv.errors import UnsupportedError

    a, b = grid(_total_order_values(F32))
    exp, specs = _total_order("LT", F32, a.size)
    with pytest.raises(UnsupportedError, match=r"TOTALORDER.*opset >= 26.*--opset 26"):
        check(exp, a, b, specs=specs, opset=21)


def test_compare_total_order_x64(x64):
    a, b = grid(_total_order_values(F64))
    exp, specs = _total_order("LT", F64, a.size)
    check(exp, a, b, specs=specs, opset=26)
