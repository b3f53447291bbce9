"""The operand counts of a traced ``scan`` equation, whichever JAX traced it.

A scan's operands are its consts, then its initial carry, then its scanned inputs; its outputs the
final carry, then the stacked outputs. JAX up to 0.10 names the counts in the equation's params
(``num_consts``, ``num_carry``); JAX 0.11 packs the three operand groups in one FlatTree, ``ft_in``.
"""

from __future__ import annotations

from typing import Any, Mapping


def scan_counts(params: Mapping[str, Any]) -> tuple[int, int]:
    """(number of consts, number of carries) of a scan equation's ``params``."""
    if "num_consts" in params:
        return int(params["num_consts"]), int(params["num_carry"])
    if "ft_in" not in params:
        raise KeyError(f"a scan equation names neither num_consts nor ft_in (params: {', '.join(sorted(params))})")
    consts, carry, _ = params["ft_in"].unpack()
    return len(consts), len(carry)
