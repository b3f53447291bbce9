"""Lowerings of specific ``stablehlo.custom_call`` targets, keyed by call_target_name.

Each handler is ``fn(ctx, op, inputs) -> list of output names``.
"""

from __future__ import annotations

from typing import Callable

HANDLERS: dict[str, Callable] = {}
# Per-target checks: ``check(op)`` returns why this call cannot be lowered, or None.
CHECKS: dict[str, Callable] = {}
# Functions ``explain(target)`` giving why an unregistered target has no lowering, or None.
EXPLAINERS: list[Callable[[str], str | None]] = []


def custom_call_target(name: str, check: Callable | None = None) -> Callable[[Callable], Callable]:
    """Register a handler (and optionally a preflight check) for one target; a duplicate fails at import."""

    def wrap(fn: Callable) -> Callable:
        if name in HANDLERS:
            raise ValueError(f"custom call target {name!r} registered twice")
        HANDLERS[name] = fn
        if check is not None:
            CHECKS[name] = check
        return fn

    return wrap


def explains_unsupported(fn: Callable[[str], str | None]) -> Callable[[str], str | None]:
    """Register a function that names why some unregistered targets have no lowering."""
    EXPLAINERS.append(fn)
    return fn
