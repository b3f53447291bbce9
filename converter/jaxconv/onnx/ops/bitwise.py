"""Integer bit operations: and/or/xor/not on ints, shifts, popcnt, count_leading_zeros."""

from __future__ import annotations
