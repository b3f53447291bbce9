"""Lowerings of specific ``stablehlo.custom_call`` targets, keyed by call_target_name.

Each handler is ``fn(ctx, op, inputs) -> list of output names``.
"""

from __future__ import annotations

from typing import Callable

HANDLERS: dict[str, Callable] = {}


def custom_call_target(name: str) -> Callable[[Callable], Callable]:
    """Register a handler for one custom call target; a duplicate fails at import."""

    def wrap(fn: Callable) -> Callable:
        if name in HANDLERS:
            raise ValueError(f"custom call target {name!r} registered twice")
        HANDLERS[name] = fn
        return fn

    return wrap
