"""The check's jax.jit reference takes big numpy constants without copying them whole
(jaxconv.jit_borrow): most of an unaligned array as a zero-copy device view, rebuilt inside the
program where it is used, one at a time, with outputs bit-identical to jax.jit's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv import jit_borrow, jit_reference, references


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _offset_array(shape, dtype, offset: int, fill) -> np.ndarray:
    """An array whose data starts ``offset`` bytes past a 64-byte boundary, filled by ``fill(n)``."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape))
    raw = np.empty(n * dtype.itemsize + 128, np.uint8)
    start = (-_address(raw)) % 64 + offset
    a = raw[start:start + n * dtype.itemsize].view(dtype).reshape(shape)
    a[...] = fill(n).reshape(shape)
    return a


_rng = np.random.default_rng(5)


def _floats(n, dtype=np.float32):
    v = (_rng.standard_normal(n) / 16).astype(dtype)
    v[:8] = [np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-42 if dtype == np.float32 else 0, 7]
    return v


def _bits(a):
    """The array's bytes, every NaN the same: which NaN a NaN x NaN gives (its sign, its payload) IEEE leaves
    open, and jax 0.11.2's XLA picks the other operand's for a constant passed as an argument than for the
    same constant embedded (the float16 product below: 1 element of 262,144, -NaN x NaN)."""
    a = np.array(np.asarray(a), ndmin=1)
    if np.issubdtype(a.dtype, np.floating):
        a[np.isnan(a)] = np.nan
    return a.dtype, a.shape, a.tobytes()


@pytest.mark.parametrize("offset", [16, 32, 48])
def test_an_unaligned_array_is_borrowed_from_the_callers_memory(offset):
    w = _offset_array((256, 256), np.float32, offset, _floats)
    b = jit_borrow.borrow(w)
    assert isinstance(b, jit_borrow.Borrowed)
    skip = (64 - offset) // 4
    assert b.head.shape == (skip,) and b.body.shape == (w.size - skip,)
    assert b.body.unsafe_buffer_pointer() == _address(w) + 64 - offset  # no copy of the body
    assert b.dtype == w.dtype and b.nbytes == w.nbytes and b.shape == w.shape
    assert _bits(np.asarray(b)) == _bits(w)


def test_arrays_jax_takes_as_they_are_are_put_whole():
    aligned = _offset_array((256, 256), np.float32, 0, _floats)
    odd = _offset_array((64, 64), np.int32, 2, lambda n: np.arange(n, dtype=np.int32))  # 62 bytes: not 4s
    for value in (aligned, jnp.ones((256, 256)), aligned[:, ::2], odd, np.float32(3)):
        put = jit_borrow.borrow(value)
        assert not isinstance(put, jit_borrow.Borrowed)
        assert _bits(put) == _bits(value)
    assert jit_borrow.borrow(aligned).unsafe_buffer_pointer() == _address(aligned)  # jax aliases it itself


_W = [_offset_array((256, 256), np.float32, 16, _floats) for _ in range(3)]
_H = _offset_array((128, 256), np.float16, 16, lambda n: _floats(n, np.float16))
_I8 = _offset_array((256, 256), np.int8, 16, lambda n: _rng.integers(-128, 128, n, dtype=np.int8))
_U32 = _offset_array((64, 256), np.uint32, 48, lambda n: _rng.integers(0, 2**32, n, dtype=np.uint32))
_MASK = _offset_array((256, 256), np.bool_, 16, lambda n: _rng.random(n) < 0.5)


def mlp(x):
    for w in _W:
        x = jnp.tanh(x @ w)
    return x


def reused(x):  # one constant read by several ops, transposed, and after another
    y = x @ _W[0]
    return y @ _W[0].T, jnp.maximum(y[:, None, :], _W[1]), _W[0] * x[:1].T


def mixed(x):  # jax ops on the constants themselves (a numpy op would make a new array)
    h = x[:, :256].astype(jnp.float16)[:, None, :] * _H  # NaN, inf, -0 through the float16 constant
    ints = (jax.lax.convert_element_type(_I8, jnp.int32) * x[0, 0].astype(jnp.int32)) ^ _U32[:1].astype(jnp.int32)
    return h, ints, jnp.where(_MASK, x[:1], -0.0), jnp.right_shift(_U32, (x[0, 0] > 0).astype(jnp.uint32))


@jax.jit
def scanned(x):
    def step(h, row):
        return jnp.tanh(h @ _W[0] + row @ _W[1]), h @ _W[2]
    return jax.lax.scan(step, jnp.zeros((256,), x.dtype), x)


def _edge_input():
    x = _rng.standard_normal((8, 256)).astype(np.float32)
    x[0, :6] = [np.nan, np.inf, -np.inf, -0.0, 0.0, np.float32(1e-42)]
    x[1, :4] = [-np.nan, np.finfo(np.float32).max, -np.finfo(np.float32).max, -0.0]
    return x


# jax 0.11 may fold mixed's convert of the int8 constant while tracing (it did run alone, not after the
# tests above): the program then holds the int32 array jax made (its own, put whole), not the int8 to borrow
_MIXED_BORROWED = (4,) if jax.__version_info__ < (0, 11) else (3, 4)


@pytest.mark.parametrize("fn, borrowed", [(mlp, (3,)), (reused, (2,)), (mixed, _MIXED_BORROWED), (scanned, (3,))])
def test_the_reference_with_borrowed_constants_is_bit_identical_to_jax_jit(fn, borrowed):
    jit_reference.clear()
    for x in (_rng.standard_normal((8, 256)).astype(np.float32), _edge_input()):
        spec = [jax.ShapeDtypeStruct(x.shape, x.dtype)]
        got = references.reference_outputs(fn, spec, [x])
        want = [np.asarray(o) for o in jax.tree_util.tree_leaves(jax.jit(fn)(jnp.asarray(x)))]
        assert [_bits(g) for g in got] == [_bits(w) for w in want]
    (_, _, consts, _), = jit_reference._CACHE.values()
    assert sum(isinstance(c, jit_borrow.Borrowed) for c in consts) in borrowed
    jit_reference.clear()


def test_the_program_rebuilds_one_constant_at_a_time():
    """Four 1 MiB layers: the compiled reference's temporaries hold one rebuilt weight, not four."""
    layers = [_offset_array((512, 512), np.float32, 16, _floats) for _ in range(4)]

    def deep(x):
        for w in layers:
            x = jnp.tanh(x @ w)
        return x

    jit_reference.clear()
    x = np.ones((8, 512), np.float32)
    references.reference_outputs(deep, [jax.ShapeDtypeStruct(x.shape, x.dtype)], [x])
    (_, run, consts, _), = jit_reference._CACHE.values()
    assert all(isinstance(c, jit_borrow.Borrowed) for c in consts) and len(consts) == 4
    temp = run.lower(consts, x).compile().memory_analysis().temp_size_in_bytes
    assert layers[0].nbytes <= temp < 2 * layers[0].nbytes
    jit_reference.clear()


def keyed(key, x):  # the first input a typed PRNG key: the order is read from a numeric value
    return x @ _W[0] + jax.random.normal(key, (8, 256)), jax.random.split(key)


def key_only(key):  # no numeric input to order the rebuild after: rebuilt where it is used, unordered
    return jax.random.normal(key, (256, 256)) * _W[1]


@pytest.mark.parametrize("fn", [keyed, key_only])
def test_a_typed_key_input_leaves_the_reference_bit_identical(fn):
    jit_reference.clear()
    key = jax.random.key(1)
    args = [key, _edge_input()] if fn is keyed else [key]
    got = jax.tree_util.tree_leaves(jit_reference.jit_call(fn, args))
    want = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
    unwrap = lambda a: jax.random.key_data(a) if jnp.issubdtype(a.dtype, jax.dtypes.prng_key) else a  # noqa: E731
    assert [_bits(unwrap(g)) for g in got] == [_bits(unwrap(w)) for w in want]
    (_, _, consts, _), = jit_reference._CACHE.values()
    assert [type(c) for c in consts] == [jit_borrow.Borrowed]
    jit_reference.clear()
