"""convert, bitcast_convert and reduce_precision lowerings against jax.jit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from elementwise_support import (  # noqa: F401
    BF16,
    F16,
    F32,
    F64,
    FLOATS,
    INTS,
    X64_INTS,
    Spec,
    check,
    float_values,
    int_values,
    patched,
    replace_op,
)

SATURATION = [3e9, -3e9, 2147483520.0, -2147483648.0, 4294967040.0, 1e19, -1e19, 1.9e19, 9.2e18, 300.0, -300.0,
              255.9, -128.9, 32767.5, 65535.9, -0.9, 0.9, 127.5, -129.0]


def _float_inputs(dtype: np.dtype) -> np.ndarray:
    with np.errstate(over="ignore"):
        extra = np.array(SATURATION).astype(dtype)
    return np.concatenate([float_values(dtype), extra])


def _casts(x, targets):
    return tuple(x.astype(t) for t in targets)


@pytest.mark.parametrize("src", FLOATS, ids=str)
def test_float_to_int_saturates(src):
    """XLA on CPU: truncate, saturate at the type's range, NaN -> 0 (ONNX Runtime's Cast gives INT_MIN)."""
    check(lambda x: _casts(x, INTS + [jnp.bool_]), _float_inputs(src))


def test_float_to_int_x64(x64):
    targets = INTS + X64_INTS
    check(lambda a, b: _casts(a, targets) + _casts(b, X64_INTS), _float_inputs(F64), _float_inputs(F32))


def test_int_to_int_and_bool():
    """Narrowing wraps, widening sign- or zero-extends, x -> bool is x != 0, bool -> x is 0/1."""
    args = [int_values(d) for d in INTS] + [np.array([True, False])]
    check(lambda *a: tuple(t for x in a for t in _casts(x, INTS + [jnp.bool_]) if t.dtype != x.dtype), *args)


def test_int_to_float_and_float_to_float():
    ints = [int_values(d) for d in INTS]
    big = np.array([2**24 + 1, 2**24 + 3, -(2**24 + 2**16 + 1), 65519, 65520, 2**31 - 1], np.int32)
    floats = [_float_inputs(d) for d in FLOATS]
    check(lambda *a: tuple(t for x in a for t in _casts(x, FLOATS) if t.dtype != x.dtype)
          + tuple(jnp.asarray(b, jnp.bool_).astype(t) for b in (a[0] > 0,) for t in FLOATS), *ints, big, *floats)


def test_float64_conversions(x64):
    """float64 -> bfloat16/float16 round through float32 in XLA as in ONNX Runtime."""
    halfway = np.array([1 + 2**-8 + 2**-40, 1 + 2**-8 - 2**-40, 1 + 2**-11 + 2**-40, 1e300, -1e-300, 65520.0], np.float64)
    x = np.concatenate([_float_inputs(F64), halfway])
    i64 = np.concatenate([int_values(np.dtype(np.int64)), np.array([2**53 + 1, 2**62 + 2**38 + 1], np.int64)])
    u64 = int_values(np.dtype(np.uint64))
    check(lambda a, b, c, f: _casts(a, FLOATS) + _casts(b, FLOATS + [F64]) + _casts(c, FLOATS + [F64])
          + _casts(f, [F64]) + _casts(b, INTS + [jnp.uint64, jnp.bool_]) + _casts(c, INTS + [jnp.int64]),
          x, i64, u64, _float_inputs(F32))


def test_empty_convert():
    check(lambda x: (x.astype(jnp.int8), x.astype(jnp.bfloat16)), np.zeros((0, 3), np.float32))


# ---- bitcast_convert -----------------------------------------------------------------------------
def test_bitcast_same_width_integers_any_opset():
    a, b = int_values(np.dtype(np.int32)), int_values(np.dtype(np.uint8))
    check(lambda x, y: (lax.bitcast_convert_type(x, jnp.uint32), lax.bitcast_convert_type(y, jnp.int8)), a, b)


@pytest.mark.parametrize("opset", [26, 28])
def test_bitcast_floats(opset):
    f32, f16, bf16 = (float_values(d) for d in (F32, F16, BF16))
    i32 = int_values(np.dtype(np.int32))
    check(lambda a, b, c, i: (lax.bitcast_convert_type(a, jnp.int32), lax.bitcast_convert_type(a, jnp.uint32),
                              lax.bitcast_convert_type(b, jnp.uint16), lax.bitcast_convert_type(c, jnp.int16),
                              lax.bitcast_convert_type(b, jnp.bfloat16), lax.bitcast_convert_type(i, jnp.float32)),
          f32, f16, bf16, i32, opset=opset)


def test_bitcast_width_changes():
    """f32 -> u8[..., 4] and back, little-endian like XLA; integers work below opset 26 too."""
    f32 = float_values(F32).reshape(2, 13)
    u8 = np.arange(2 * 13 * 4, dtype=np.uint8).reshape(2, 13, 4) * 7
    check(lambda a, b: (lax.bitcast_convert_type(a, jnp.uint8), lax.bitcast_convert_type(b, jnp.float32),
                        lax.bitcast_convert_type(a, jnp.bfloat16), lax.bitcast_convert_type(b, jnp.int32)),
          f32, u8, opset=26)
    i32 = int_values(np.dtype(np.int32))
    check(lambda a, b: (lax.bitcast_convert_type(a, jnp.uint8), lax.bitcast_convert_type(a, jnp.int16),
                        lax.bitcast_convert_type(b, jnp.uint32)), i32, u8[0])


# Below opset 26 (no ONNX BitCast) float bits are decoded/encoded arithmetically: exact for every
# value but NaN. A NaN float gives the canonical quiet NaN bits (those of jnp.nan), so only
# positive canonical NaNs are compared bit for bit; NaN bit patterns give a NaN of any payload.
def _patterns(dtype: np.dtype, nan: bool = False) -> np.ndarray:
    """Bit patterns of ``dtype``'s width: zeros, subnormals, normal extremes, infinities, random bits."""
    width = dtype.itemsize * 8
    f = {16: F16, 32: F32, 64: F64}[width] if dtype != BF16 else BF16
    u = np.dtype(f"uint{width}")
    edges = np.array([0.0, -0.0, 1.0, -1.0, 1.5, np.inf, -np.inf, float(ml_dtypes.finfo(f).max),
                      -float(ml_dtypes.finfo(f).max), float(ml_dtypes.finfo(f).tiny), -float(ml_dtypes.finfo(f).tiny),
                      float(ml_dtypes.finfo(f).smallest_subnormal), -float(ml_dtypes.finfo(f).smallest_subnormal)])
    sub = np.array([1, 2, 3, (1 << ml_dtypes.finfo(f).nmant) - 1, 1 << (ml_dtypes.finfo(f).nmant - 1)], u)
    rng = np.random.default_rng(width)
    bits = np.concatenate([edges.astype(f).view(u), sub, sub | u.type(1 << (width - 1)),
                           rng.integers(0, np.iinfo(u).max, 400, dtype=u, endpoint=True)])
    with np.errstate(invalid="ignore"):
        keep = np.isnan(bits.view(f).astype(np.float64)) == nan
    return bits[keep].view(dtype) if dtype.kind in "iu" else bits[keep].view(f)


def _floats(dtype: np.dtype) -> np.ndarray:
    """Every non-NaN pattern of ``dtype`` plus the canonical NaN (jnp.nan)."""
    return np.concatenate([_patterns(dtype), np.array([np.nan], dtype)])


@pytest.mark.parametrize("opset", [18, 21])
def test_bitcast_floats_without_bitcast_op(opset):
    u32, i32 = _patterns(np.dtype(np.uint32)), _patterns(np.dtype(np.int32))
    u16, i16 = _patterns(np.dtype(np.uint16)), _patterns(np.dtype(np.int16))
    model = check(lambda a, b, c, d, e, f, g, h: (
        lax.bitcast_convert_type(a, jnp.float32), lax.bitcast_convert_type(b, jnp.float32),
        lax.bitcast_convert_type(c, jnp.uint32), lax.bitcast_convert_type(c, jnp.int32),
        lax.bitcast_convert_type(d, jnp.bfloat16), lax.bitcast_convert_type(d, jnp.float16),
        lax.bitcast_convert_type(e, jnp.uint16), lax.bitcast_convert_type(f, jnp.int16),
        lax.bitcast_convert_type(g, jnp.bfloat16), lax.bitcast_convert_type(h, jnp.float16)),
        u32, i32, _floats(F32), u16, _floats(BF16), _floats(F16), i16, _patterns(np.dtype(np.int16)), opset=opset)
    assert "BitCast" not in {n.op_type for n in model.graph.node}


def test_bitcast_nan_patterns_without_bitcast_op():
    """NaN bit patterns (any sign or payload) give NaN; NaN floats give the bits of jnp.nan."""
    u32, u16 = _patterns(np.dtype(np.uint32), nan=True), _patterns(np.dtype(np.uint16), nan=True)
    assert u32.size > 0 and u16.size > 0
    check(lambda a, b: (lax.bitcast_convert_type(a, jnp.float32), lax.bitcast_convert_type(b, jnp.float16),
                        lax.bitcast_convert_type(b, jnp.bfloat16)), u32.view(np.uint32), u16.view(np.uint16))
    from jaxconv.onnx.convert import program_to_onnx
    from jaxconv.program import trace
    from jaxconv.runtimes.onnxrt import OnnxRunner

    fn = lambda x: lax.bitcast_convert_type(x, jnp.uint32)  # noqa: E731
    nans = u32.view(np.float32)
    model = program_to_onnx(trace(fn, [Spec(nans.shape, nans.dtype)]), 21)
    (got,) = OnnxRunner(model.SerializeToString()).run([nans])
    canonical = np.asarray(jax.jit(fn)(np.array([np.nan], np.float32)))
    assert np.all(got == canonical), "a NaN float gives the canonical quiet NaN bits below opset 26"


def test_bitcast_width_changes_without_bitcast_op(x64):
    f32 = _floats(F32)[:400].reshape(20, 20)
    u8 = np.random.default_rng(1).integers(0, 256, (7, 4), dtype=np.uint8)
    f64 = _floats(F64)
    check(lambda a, b, c: (lax.bitcast_convert_type(a, jnp.uint8), lax.bitcast_convert_type(a, jnp.bfloat16),
                           lax.bitcast_convert_type(b, jnp.float32), lax.bitcast_convert_type(c, jnp.uint16),
                           lax.bitcast_convert_type(c, jnp.float32)), f32, u8, f64, opset=21)


@pytest.mark.parametrize("opset", [18, 21])
def test_bitcast_x64_without_bitcast_op(x64, opset):
    u64, i64 = _patterns(np.dtype(np.uint64)), _patterns(np.dtype(np.int64))
    f64 = _floats(F64)
    check(lambda a, b, c: (lax.bitcast_convert_type(a, jnp.float64), lax.bitcast_convert_type(b, jnp.float64),
                           lax.bitcast_convert_type(c, jnp.uint64), lax.bitcast_convert_type(c, jnp.int64)),
          u64, i64, f64, opset=opset)


# jax.random with threefry keys bitcasts random bits to floats: it runs at the default opset.
def _key_data() -> np.ndarray:
    return np.asarray(jax.random.key_data(jax.random.key(0)))


def test_random_programs_default_opset():
    from lowering_check import assert_onnx_matches_jax

    def exact(k):
        k1, k2, k3 = jax.random.split(jax.random.wrap_key_data(k), 3)
        return (jax.random.uniform(k1, (256,)), jax.random.uniform(k2, (64,), jnp.bfloat16),
                jax.random.uniform(k3, (64,), jnp.float16), jax.random.bernoulli(k3, 0.3, (256,)))

    def normal(k):
        k1, k2 = jax.random.split(jax.random.wrap_key_data(k))
        return jax.random.normal(k1, (256,)), jax.random.normal(k2, (64,), jnp.bfloat16)

    check(exact, _key_data())
    assert_onnx_matches_jax(normal, _key_data())
    assert_onnx_matches_jax(lambda seed: jax.random.uniform(jax.random.PRNGKey(seed), (4, 8)), np.int32(7))


def test_random_x64_default_opset(x64):
    from lowering_check import assert_onnx_matches_jax

    def f(k):
        k1, k2 = jax.random.split(jax.random.wrap_key_data(k))
        return (jax.random.uniform(k1, (128,), jnp.float64), jax.random.normal(k2, (128,), jnp.float64),
                jax.random.bernoulli(k2, 0.5, (64,)))

    check(lambda k: f(k)[::2], _key_data())
    assert_onnx_matches_jax(f, _key_data())


def test_bitcast_x64(x64):
    f64 = float_values(F64)
    check(lambda a: (lax.bitcast_convert_type(a, jnp.int64), lax.bitcast_convert_type(a, jnp.uint32),
                     lax.bitcast_convert_type(lax.bitcast_convert_type(a, jnp.uint16), jnp.float64)), f64, opset=26)


# ---- reduce_precision ---------------------------------------------------------------------------------
def _precision_inputs() -> np.ndarray:
    rng = np.random.default_rng(0)
    edges = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-11, 65504.0, 65520.0, 65536.0, 6.1e-5, 6.0e-5, 3e-8,
                      -2.5e-5, 1e-30, 3.4e38, -1e38, 1.0000001], np.float32)
    return np.concatenate([float_values(F32), edges, (rng.standard_normal(200) * 10.0 ** rng.integers(-8, 8, 200)).astype(np.float32)])


def test_reduce_precision_bfloat16_format_any_opset():
    check(lambda x: lax.reduce_precision(x, 8, 7), _precision_inputs())


@pytest.mark.parametrize("opset", [26, 28])
def test_reduce_precision_general(opset):
    formats = [(5, 10), (8, 7), (4, 3), (5, 2), (3, 1), (8, 23), (6, 0)]
    x = _precision_inputs()
    check(lambda v, h, b: tuple(lax.reduce_precision(v, e, m) for e, m in formats)
          + (lax.reduce_precision(h, 4, 3), lax.reduce_precision(b, 5, 2)), x, x.astype(F16), x.astype(BF16), opset=opset)


def test_reduce_precision_needs_opset_26():
    from jaxconv.errors import UnsupportedError

    with pytest.raises(UnsupportedError, match=r"reduce_precision .*exponent 5, mantissa 10.*opset >= 26"):
        check(lambda x: lax.reduce_precision(x, 5, 10), _precision_inputs())


def test_reduce_precision_x64(x64):
    x = _precision_inputs().astype(F64) * np.float64(1.0 + 2**-30)
    check(lambda v: (lax.reduce_precision(v, 8, 23), lax.reduce_precision(v, 11, 20), lax.reduce_precision(v, 5, 10)),
          x, opset=26)
