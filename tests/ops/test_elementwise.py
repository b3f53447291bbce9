"""Elementwise lowerings: what rows cannot say (the comparisons are rows in conformance/cases/op_elementwise.py)."""

from __future__ import annotations

import pytest

from conformance.cases.op_elementwise import total_order, total_order_values
from conformance.values import F32, grid
from elementwise_support import check


def test_compare_total_order_needs_opset_26():
    from jaxconv.errors import UnsupportedError

    a, b = grid(total_order_values(F32))
    with pytest.raises(UnsupportedError, match=r"TOTALORDER.*opset >= 26.*--opset 26"):
        check(total_order("LT", F32, a.size), a, b, opset=21)
