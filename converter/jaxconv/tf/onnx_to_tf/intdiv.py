"""Exact integer division and remainder from TFLite builtins, with XLA's answers everywhere.

XLA truncates toward zero; ``x / 0`` is -1 (all ones unsigned), ``x % 0`` is ``x``, and
``INT_MIN / -1`` is ``INT_MIN`` (``% -1`` is 0). int32 (and the narrower types computed in it)
divide with TFLite's ``FLOOR_DIV``. TFLite has no 64-bit division (measured with TF 2.21: int64
``FloorDiv``, ``TruncateDiv``, shifts and bitwise AND do not convert to builtins), but its
``FLOOR_MOD`` converts and is exact on int64, so 64-bit values (int64, and uint32/uint64 held in
int64) take three steps:

1. the truncated remainder ``r`` from ``FLOOR_MOD`` (exact);
2. ``n = a - r``, an exact multiple of ``b`` with ``|n| <= |a|`` (no overflow);
3. the quotient ``Q = n / b`` from float32 estimates refined on the exact residual ``e = n - q*b``
   (``e`` is always ``(Q - q) * b``, computed exactly).

Why three refinement rounds are exact (``|b| >= 2``, so ``|Q| <= 2**62``; ``b = +-1`` are
selected separately): each float32 estimate of ``e / b`` has relative error below ``3.01 * 2**-24``
(two conversions and one division), so ``|Q - q|`` is at most ``2**39.6 + 1/2`` after round one and
``2**17.2 + 1/2`` after round two, and the round-three estimate lies within ``0.03`` of the
integer ``Q - q``, which rounding then hits exactly. ``|e| <= |n| * 2**-22 + |b| / 2 < 2**63`` and
every estimate stays below ``2**63``, so nothing overflows. uint64 splits ``a = 2h + lo`` with
``h < 2**63`` (two signed steps) and finishes with one unsigned compare-and-subtract.
"""

from __future__ import annotations

from typing import Any

_MIN64 = -(2**63)


def divide(tf: Any, a: Any, b: Any, dtype: str) -> Any:
    """``a / b`` truncated toward zero as XLA computes it; ``a``, ``b`` in the work dtype of ``dtype``."""
    return _div_rem(tf, a, b, dtype)[0]


def remainder(tf: Any, a: Any, b: Any, dtype: str) -> Any:
    """``a % b`` with the sign of ``a`` as XLA computes it (``a % 0 == a``)."""
    return _div_rem(tf, a, b, dtype)[1]


def _div_rem(tf: Any, a: Any, b: Any, dtype: str) -> tuple[Any, Any]:
    if dtype == "uint64":
        return _unsigned64(tf, a, b)
    zero, one = tf.zeros_like(a), tf.ones_like(a)
    by_zero = tf.equal(b, zero)
    minus_one = tf.equal(b, -one)
    safe = tf.where(tf.logical_or(by_zero, minus_one), one, b)  # FLOOR_MOD traps on x % 0, INT_MIN % -1
    r = _trunc_rem(tf, a, safe)
    if a.dtype == tf.int64:
        big = tf.logical_not(tf.logical_or(tf.equal(safe, one), tf.equal(safe, -one)))
        q = _exact_quotient(tf, a - r, tf.where(big, safe, one + one))
        q = tf.where(big, q, a)  # b == 1 here (b == -1 is handled below)
    else:
        q = tf.math.floordiv(a, safe)
        q = tf.where(tf.logical_and(tf.not_equal(r, zero), tf.not_equal(a < zero, safe < zero)), q + one, q)
    q = tf.where(minus_one, zero - a, q)  # wraps INT_MIN to itself, as XLA does
    q = tf.where(by_zero, -one if dtype not in _UNSIGNED_IN_WORK else _all_ones(tf, a, dtype), q)
    return q, tf.where(by_zero, a, r)


_UNSIGNED_IN_WORK = frozenset({"uint8", "uint16", "uint32"})


def _all_ones(tf: Any, like: Any, dtype: str) -> Any:
    bits = {"uint8": 8, "uint16": 16, "uint32": 32}[dtype]
    return tf.fill(tf.shape(like), tf.constant(2**bits - 1, like.dtype))


def _trunc_rem(tf: Any, a: Any, b: Any) -> Any:
    """The remainder with the sign of ``a`` (``b`` nonzero, not -1) from the exact FLOOR_MOD."""
    m = tf.math.floormod(a, b)
    zero = tf.zeros_like(m)
    off = tf.logical_and(tf.not_equal(m, zero), tf.not_equal(m < zero, a < zero))
    return tf.where(off, m - b, m)


def _exact_quotient(tf: Any, n: Any, b: Any) -> Any:
    """``n / b`` for int64 ``n`` an exact multiple of ``b`` with ``|b| >= 2``."""
    fb = tf.cast(b, tf.float32)
    q = tf.zeros_like(n)
    e = n
    for _ in range(3):
        d = tf.cast(tf.round(tf.cast(e, tf.float32) / fb), tf.int64)
        q, e = q + d, e - d * b
    return q


def _uge(tf: Any, x: Any, y: Any) -> Any:
    """``x >= y`` reading both int64 tensors as uint64 (wrapping add of the sign bit)."""
    flip = tf.constant(_MIN64, tf.int64)
    return tf.greater_equal(x + flip, y + flip)


def _unsigned64(tf: Any, s: Any, v: Any) -> tuple[Any, Any]:
    """uint64 division of the bit patterns ``s`` by ``v`` (held in int64)."""
    zero, one = tf.zeros_like(s), tf.ones_like(s)
    two = one + one
    by_zero = tf.equal(v, zero)
    huge = v < zero  # v >= 2**63: the quotient is 0 or 1
    small = tf.where(tf.logical_or(by_zero, huge), one, v)  # 1 <= small < 2**63
    lo = tf.math.floormod(s, two)
    h = _exact_quotient(tf, s - lo, two)
    h = tf.where(s < zero, h + tf.constant(_MIN64, tf.int64), h)  # (s - lo) / 2 read unsigned
    r1 = tf.math.floormod(h, small)
    unit = tf.equal(small, one)
    q1 = tf.where(unit, h, _exact_quotient(tf, h - r1, tf.where(unit, two, small)))
    t = r1 + r1 + lo
    c = tf.where(_uge(tf, t, small), one, zero)
    q = q1 + q1 + c
    r = t - c * small
    top = tf.where(_uge(tf, s, v), one, zero)
    q = tf.where(huge, top, q)
    r = tf.where(huge, s - top * v, r)
    return tf.where(by_zero, -one, q), tf.where(by_zero, s, r)
