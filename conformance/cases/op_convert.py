"""Op rows: convert, bitcast_convert and reduce_precision, bit for bit (jax.random's programs too)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from conformance.case import op_row
from conformance.values import BF16, F16, F32, F64, FLOATS, INTS, X64_INTS, float_values, int_values

SATURATION = [3e9, -3e9, 2147483520.0, -2147483648.0, 4294967040.0, 1e19, -1e19, 1.9e19, 9.2e18, 300.0, -300.0,
              255.9, -128.9, 32767.5, 65535.9, -0.9, 0.9, 127.5, -129.0]


def row(name, fn, *args, opsets=(None,), **kw):
    op_row(f"convert.{name}", fn, *args, expect="exact", opsets=opsets, **kw)


def float_inputs(dtype: np.dtype) -> np.ndarray:
    with np.errstate(over="ignore"):
        extra = np.array(SATURATION).astype(dtype)
    return np.concatenate([float_values(dtype), extra])


def _casts(x, targets):
    return tuple(x.astype(t) for t in targets)


# XLA on CPU: truncate, saturate at the type's range, NaN -> 0 (ONNX Runtime's Cast gives INT_MIN).
for src in FLOATS:
    row(f"float_to_int_saturates.{src.name}", lambda x: _casts(x, INTS + [jnp.bool_]), float_inputs(src))
row("float_to_int.x64", lambda a, b: _casts(a, INTS + X64_INTS) + _casts(b, X64_INTS), float_inputs(F64), float_inputs(F32))
# Narrowing wraps, widening sign- or zero-extends, x -> bool is x != 0, bool -> x is 0/1.
row("int_to_int_and_bool", lambda *a: tuple(t for x in a for t in _casts(x, INTS + [jnp.bool_]) if t.dtype != x.dtype),
    *[int_values(d) for d in INTS], np.array([True, False]))
row("int_to_float_and_float_to_float",
    lambda *a: tuple(t for x in a for t in _casts(x, FLOATS) if t.dtype != x.dtype)
    + tuple(jnp.asarray(b, jnp.bool_).astype(t) for b in (a[0] > 0,) for t in FLOATS),
    *[int_values(d) for d in INTS], np.array([2**24 + 1, 2**24 + 3, -(2**24 + 2**16 + 1), 65519, 65520, 2**31 - 1], np.int32),
    *[float_inputs(d) for d in FLOATS])

# float64 -> bfloat16 rounds through float32 in XLA as in ONNX Runtime. float64 -> float16 does too, except in
# XLA on a CPU with AVX512-FP16, which rounds once: 1 + 2**-11 + 2**-40 is left to
# tests/ops/test_convert.py::test_float64_to_float16_rounds_through_float32.
_HALFWAY = np.array([1 + 2**-8 + 2**-40, 1 + 2**-8 - 2**-40, 1e300, -1e-300, 65520.0], np.float64)
row("float64",
    lambda a, b, c, f: _casts(a, FLOATS) + _casts(b, FLOATS + [F64]) + _casts(c, FLOATS + [F64]) + _casts(f, [F64])
    + _casts(b, INTS + [jnp.uint64, jnp.bool_]) + _casts(c, INTS + [jnp.int64]),
    np.concatenate([float_inputs(F64), _HALFWAY]),
    np.concatenate([int_values(np.dtype(np.int64)), np.array([2**53 + 1, 2**62 + 2**38 + 1], np.int64)]),
    int_values(np.dtype(np.uint64)), float_inputs(F32))
row("empty", lambda x: (x.astype(jnp.int8), x.astype(jnp.bfloat16)), np.zeros((0, 3), np.float32))

# ---- bitcast_convert -----------------------------------------------------------------------------
row("bitcast.same_width_integers",
    lambda x, y: (lax.bitcast_convert_type(x, jnp.uint32), lax.bitcast_convert_type(y, jnp.int8)),
    int_values(np.dtype(np.int32)), int_values(np.dtype(np.uint8)))
row("bitcast.floats",
    lambda a, b, c, i: (lax.bitcast_convert_type(a, jnp.int32), lax.bitcast_convert_type(a, jnp.uint32),
                        lax.bitcast_convert_type(b, jnp.uint16), lax.bitcast_convert_type(c, jnp.int16),
                        lax.bitcast_convert_type(b, jnp.bfloat16), lax.bitcast_convert_type(i, jnp.float32)),
    *(float_values(d) for d in (F32, F16, BF16)), int_values(np.dtype(np.int32)), opsets=(26, 28))
# f32 -> u8[..., 4] and back, little-endian like XLA; integers work below opset 26 too.
_U8 = np.arange(2 * 13 * 4, dtype=np.uint8).reshape(2, 13, 4) * 7
row("bitcast.width_changes.floats",
    lambda a, b: (lax.bitcast_convert_type(a, jnp.uint8), lax.bitcast_convert_type(b, jnp.float32),
                  lax.bitcast_convert_type(a, jnp.bfloat16), lax.bitcast_convert_type(b, jnp.int32)),
    float_values(F32).reshape(2, 13), _U8, opsets=(26,))
row("bitcast.width_changes.integers",
    lambda a, b: (lax.bitcast_convert_type(a, jnp.uint8), lax.bitcast_convert_type(a, jnp.int16),
                  lax.bitcast_convert_type(b, jnp.uint32)), int_values(np.dtype(np.int32)), _U8[0])


# Below opset 26 (no ONNX BitCast) float bits are decoded/encoded arithmetically: exact for every
# value but NaN. A NaN float gives the canonical quiet NaN bits (those of jnp.nan), so only
# positive canonical NaNs are compared bit for bit; NaN bit patterns give a NaN of any payload.
def patterns(dtype: np.dtype, nan: bool = False) -> np.ndarray:
    """Bit patterns of ``dtype``'s width: zeros, subnormals, normal extremes, infinities, random bits."""
    width = dtype.itemsize * 8
    f = {16: F16, 32: F32, 64: F64}[width] if dtype != BF16 else BF16
    u = np.dtype(f"uint{width}")
    fi = ml_dtypes.finfo(f)
    edges = np.array([0.0, -0.0, 1.0, -1.0, 1.5, np.inf, -np.inf, float(fi.max), -float(fi.max), float(fi.tiny),
                      -float(fi.tiny), float(fi.smallest_subnormal), -float(fi.smallest_subnormal)])
    sub = np.array([1, 2, 3, (1 << fi.nmant) - 1, 1 << (fi.nmant - 1)], u)
    rng = np.random.default_rng(width)
    bits = np.concatenate([edges.astype(f).view(u), sub, sub | u.type(1 << (width - 1)),
                           rng.integers(0, np.iinfo(u).max, 400, dtype=u, endpoint=True)])
    with np.errstate(invalid="ignore"):
        keep = np.isnan(bits.view(f).astype(np.float64)) == nan
    return bits[keep].view(dtype) if dtype.kind in "iu" else bits[keep].view(f)


def floats(dtype: np.dtype) -> np.ndarray:
    """Every non-NaN pattern of ``dtype`` plus the canonical NaN (jnp.nan)."""
    return np.concatenate([patterns(dtype), np.array([np.nan], dtype)])


row("bitcast.width_changes_without_bitcast_op",
    lambda a, b, c: (lax.bitcast_convert_type(a, jnp.uint8), lax.bitcast_convert_type(a, jnp.bfloat16),
                     lax.bitcast_convert_type(b, jnp.float32), lax.bitcast_convert_type(c, jnp.uint16),
                     lax.bitcast_convert_type(c, jnp.float32)),
    floats(F32)[:400].reshape(20, 20), np.random.default_rng(1).integers(0, 256, (7, 4), dtype=np.uint8), floats(F64),
    opsets=(21,))
row("bitcast.x64_without_bitcast_op",
    lambda a, b, c: (lax.bitcast_convert_type(a, jnp.float64), lax.bitcast_convert_type(b, jnp.float64),
                     lax.bitcast_convert_type(c, jnp.uint64), lax.bitcast_convert_type(c, jnp.int64)),
    patterns(np.dtype(np.uint64)), patterns(np.dtype(np.int64)), floats(F64), opsets=(18, 21))


# jax.random with threefry keys bitcasts random bits to floats: it runs at the default opset.
def _key_data() -> np.ndarray:
    with jax.default_device(jax.devices("cpu")[0]):
        return np.asarray(jax.random.key_data(jax.random.key(0)))


def _random_exact(k):
    k1, k2, k3 = jax.random.split(jax.random.wrap_key_data(k), 3)
    return (jax.random.uniform(k1, (256,)), jax.random.uniform(k2, (64,), jnp.bfloat16),
            jax.random.uniform(k3, (64,), jnp.float16), jax.random.bernoulli(k3, 0.3, (256,)))


def _random_normal(k):
    k1, k2 = jax.random.split(jax.random.wrap_key_data(k))
    return jax.random.normal(k1, (256,)), jax.random.normal(k2, (64,), jnp.bfloat16)


def _random_x64(k):
    k1, k2 = jax.random.split(jax.random.wrap_key_data(k))
    return (jax.random.uniform(k1, (128,), jnp.float64), jax.random.normal(k2, (128,), jnp.float64),
            jax.random.bernoulli(k2, 0.5, (64,)))


_KEY = _key_data()
row("random.uniform_bernoulli", _random_exact, _KEY)
op_row("convert.random.normal", _random_normal, _KEY)
op_row("convert.random.seed", lambda seed: jax.random.uniform(jax.random.PRNGKey(seed), (4, 8)), np.int32(7))
row("random.x64.exact", lambda k: _random_x64(k)[::2], _KEY, tags={"x64"})
op_row("convert.random.x64", _random_x64, _KEY, tags={"x64"})
row("bitcast.x64", lambda a: (lax.bitcast_convert_type(a, jnp.int64), lax.bitcast_convert_type(a, jnp.uint32),
                              lax.bitcast_convert_type(lax.bitcast_convert_type(a, jnp.uint16), jnp.float64)),
    float_values(F64), opsets=(26,))


# ---- reduce_precision ---------------------------------------------------------------------------------
def precision_inputs() -> np.ndarray:
    rng = np.random.default_rng(0)
    edges = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-11, 65504.0, 65520.0, 65536.0, 6.1e-5, 6.0e-5, 3e-8,
                      -2.5e-5, 1e-30, 3.4e38, -1e38, 1.0000001], np.float32)
    return np.concatenate([float_values(F32), edges,
                           (rng.standard_normal(200) * 10.0 ** rng.integers(-8, 8, 200)).astype(np.float32)])


_P = precision_inputs()
row("reduce_precision.bfloat16_format", lambda x: lax.reduce_precision(x, 8, 7), _P)
_FORMATS = [(5, 10), (8, 7), (4, 3), (5, 2), (3, 1), (8, 23), (6, 0)]
with np.errstate(over="ignore"):
    _PH = (_P, _P.astype(F16), _P.astype(BF16))
row("reduce_precision.general", lambda v, h, b: tuple(lax.reduce_precision(v, e, m) for e, m in _FORMATS)
    + (lax.reduce_precision(h, 4, 3), lax.reduce_precision(b, 5, 2)), *_PH, opsets=(26, 28))
row("reduce_precision.x64", lambda v: (lax.reduce_precision(v, 8, 23), lax.reduce_precision(v, 11, 20),
                                       lax.reduce_precision(v, 5, 10)), _P.astype(F64) * np.float64(1.0 + 2**-30),
    opsets=(26,))
