"""Logic, shift, popcnt and count_leading_zeros lowerings against jax.jit, at opsets 21 and 28."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from elementwise_support import INTS, X64_INTS, check, each, grid, int_values

BOOLS = grid(np.array([True, False]))


def _pairs(dtypes):
    return [grid(int_values(d)) for d in dtypes]


LOGIC = {"and": lax.bitwise_and, "or": lax.bitwise_or, "xor": lax.bitwise_xor}


@pytest.mark.parametrize("name", list(LOGIC))
def test_logic(name):
    check(each(LOGIC[name]), BOOLS, *_pairs(INTS))


def test_not():
    check(each(lax.bitwise_not), np.array([True, False]), *(int_values(d) for d in INTS))


def test_logic_x64(x64):
    pairs = _pairs(X64_INTS)
    check(lambda *a: tuple(f(x, y) for f in LOGIC.values() for x, y in a) + tuple(lax.bitwise_not(x) for x, _ in a),
          *[tuple(p) for p in pairs])


SHIFTS = {"shift_left": lax.shift_left, "shift_right_logical": lax.shift_right_logical,
          "shift_right_arithmetic": lax.shift_right_arithmetic}


def _shift_args(dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    width = dtype.itemsize * 8
    info = np.iinfo(dtype)
    amounts = [a for a in (0, 1, 3, width - 1, width, width + 1, 2 * width, info.max, -1, -width, info.min)
               if info.min <= a <= info.max]
    return grid(int_values(dtype), np.array(amounts, dtype))


@pytest.mark.parametrize("opset", [21, 28])
@pytest.mark.parametrize("name", list(SHIFTS))
def test_shifts(name, opset):
    """Amounts >= bit width or negative give 0 (or the sign fill for arithmetic right shifts)."""
    check(each(SHIFTS[name]), *(_shift_args(d) for d in INTS), opset=opset)


@pytest.mark.parametrize("opset", [21, 28])
def test_shifts_x64(opset, x64):
    args = [_shift_args(d) for d in X64_INTS]
    check(lambda *a: tuple(f(x, y) for f in SHIFTS.values() for x, y in a), *args, opset=opset)


def test_popcnt_and_clz():
    rng = np.random.default_rng(0)
    arrays = []
    for d in INTS:
        info = np.iinfo(d)
        arrays.append(np.concatenate([int_values(d), rng.integers(info.min, info.max, 64, dtype=d, endpoint=True)]))
    check(lambda *a: tuple(lax.population_count(x) for x in a) + tuple(lax.clz(x) for x in a), *arrays)


def test_popcnt_and_clz_x64(x64):
    rng = np.random.default_rng(1)
    arrays = [np.concatenate([int_values(d), rng.integers(np.iinfo(d).min, np.iinfo(d).max, 64, dtype=d, endpoint=True),
                              np.array([1 << k for k in range(0, 63, 7)], d)]) for d in X64_INTS]
    check(lambda *a: tuple(lax.population_count(x) for x in a) + tuple(lax.clz(x) for x in a), *arrays)


def test_numpy_style_bit_ops():
    """jnp's operators on uint32 (the threefry building blocks) and bool xor."""
    a, b = grid(int_values(np.dtype(np.uint32)))
    check(lambda x, y, p, q: ((x << (y & 31)) | (x >> (32 - (y & 31))), x ^ y, ~x, jnp.logical_xor(p, q)),
          a, b, *BOOLS)
