"""The op table: ONNX op type -> the function that builds it from TF ops.

A handler takes the translation context, the ONNX node and its inputs (``Value`` or None for an
omitted optional input) and returns one ``Value`` or a list of them. Adding an op is one decorated
function in the module of its family.
"""

from __future__ import annotations

from typing import Any, Callable

Handler = Callable[..., Any]
HANDLERS: dict[str, Handler] = {}
# Ops whose result holds only values of its inputs (moved, selected, compared): no rounding to the
# narrow dtype is needed after them.
EXACT: set[str] = set()


def handles(*op_types: str, exact: bool = False) -> Callable[[Handler], Handler]:
    """Register the decorated function for ``op_types``.

    Args:
        exact: the op never leaves its dtype's range, so its result needs no rounding back.
    """

    def register(fn: Handler) -> Handler:
        for op_type in op_types:
            if op_type in HANDLERS:
                raise ValueError(f"two handlers for ONNX {op_type}")
            HANDLERS[op_type] = fn
            if exact:
                EXACT.add(op_type)
        return fn

    return register
