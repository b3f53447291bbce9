"""Op rows: logic, shift, popcnt and count_leading_zeros against jax.jit, bit for bit, at opsets 21 and 28."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from conformance.case import op_row
from conformance.values import INTS, X64_INTS, each, grid, int_values

BOOLS = grid(np.array([True, False]))


def _pairs(dtypes):
    return [grid(int_values(d)) for d in dtypes]


LOGIC = {"and": lax.bitwise_and, "or": lax.bitwise_or, "xor": lax.bitwise_xor}
for name, fn in LOGIC.items():
    op_row(f"bitwise.{name}", each(fn), BOOLS, *_pairs(INTS), expect="exact")
op_row("bitwise.not", each(lax.bitwise_not), np.array([True, False]), *(int_values(d) for d in INTS), expect="exact")
op_row("bitwise.logic.x64",
       lambda *a: tuple(f(x, y) for f in LOGIC.values() for x, y in a) + tuple(lax.bitwise_not(x) for x, _ in a),
       *[tuple(p) for p in _pairs(X64_INTS)], expect="exact")

SHIFTS = {"shift_left": lax.shift_left, "shift_right_logical": lax.shift_right_logical,
          "shift_right_arithmetic": lax.shift_right_arithmetic}


def _shift_args(dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    width = dtype.itemsize * 8
    info = np.iinfo(dtype)
    amounts = [a for a in (0, 1, 3, width - 1, width, width + 1, 2 * width, info.max, -1, -width, info.min)
               if info.min <= a <= info.max]
    return grid(int_values(dtype), np.array(amounts, dtype))


# Amounts >= bit width or negative give 0 (or the sign fill for arithmetic right shifts).
for name, fn in SHIFTS.items():
    op_row(f"bitwise.{name}", each(fn), *(_shift_args(d) for d in INTS), expect="exact", opsets=(21, 28))
op_row("bitwise.shifts.x64", lambda *a: tuple(f(x, y) for f in SHIFTS.values() for x, y in a),
       *[_shift_args(d) for d in X64_INTS], expect="exact", opsets=(21, 28))

_RNG = np.random.default_rng(0)
_ARRAYS = [np.concatenate([int_values(d), _RNG.integers(np.iinfo(d).min, np.iinfo(d).max, 64, dtype=d, endpoint=True)])
           for d in INTS]
op_row("bitwise.popcnt_clz", lambda *a: tuple(lax.population_count(x) for x in a) + tuple(lax.clz(x) for x in a),
       *_ARRAYS, expect="exact")
_RNG = np.random.default_rng(1)
_ARRAYS64 = [np.concatenate([int_values(d), _RNG.integers(np.iinfo(d).min, np.iinfo(d).max, 64, dtype=d, endpoint=True),
                             np.array([1 << k for k in range(0, 63, 7)], d)]) for d in X64_INTS]
op_row("bitwise.popcnt_clz.x64", lambda *a: tuple(lax.population_count(x) for x in a) + tuple(lax.clz(x) for x in a),
       *_ARRAYS64, expect="exact")

# jnp's operators on uint32 (the threefry building blocks) and bool xor.
_A, _B = grid(int_values(np.dtype(np.uint32)))
op_row("bitwise.numpy_style", lambda x, y, p, q: ((x << (y & 31)) | (x >> (32 - (y & 31))), x ^ y, ~x, jnp.logical_xor(p, q)),
       _A, _B, *BOOLS, expect="exact")
