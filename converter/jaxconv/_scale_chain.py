"""The walk from a value back through negations and products with constants, shared by two IRs.

``stablehlo.primitive_groups`` (StableHLO values) and ``onnx.rewrites.activations`` (ONNX values) both
recognise the exact GELU by its scales: ``x = c * v`` for the erfc's argument, ``k * v`` for its
factor. Each says how to read its own IR (which op computes a value, which value is a constant);
this module holds the arithmetic of the walk. It imports nothing of jaxconv.
"""

from __future__ import annotations

from typing import Callable, Literal, Sequence, TypeVar

V = TypeVar("V")
Kind = Literal["neg", "mul", "div"]


def scaled_chain(value: V, operation: Callable[[V], tuple[Kind, Sequence[V]] | None],
                 scalar: Callable[[V], float | None], limit: int = 4) -> list[tuple[V, float]]:
    """Each ``(v, c)`` with ``value = c * v``, nearest first, ``(value, 1.0)`` included.

    Args:
        value: where the walk starts.
        operation: the kind and operands of the op computing a value (``("mul", [a, b])``), or None
            when it is another op or none.
        scalar: the one number a constant value repeats, or None when it is not a constant.
        limit: how many ops the walk passes at most.

    Returns:
        The chain: each step passes a negation, a product with a constant (either side) or a division
        by a nonzero constant.
    """
    chain, scale = [(value, 1.0)], 1.0
    for _ in range(limit):
        found = operation(value)
        if found is None:
            break
        kind, operands = found
        if kind == "neg":
            scale, value = -scale, operands[0]
        else:
            a, b = operands
            cb, ca = scalar(b), scalar(a) if kind == "mul" else None
            if cb is not None and cb != 0:
                scale, value = scale * (cb if kind == "mul" else 1.0 / cb), a
            elif ca is not None:
                scale, value = scale * ca, b
            else:
                break
        chain.append((value, scale))
    return chain
