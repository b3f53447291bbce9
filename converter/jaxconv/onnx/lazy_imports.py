"""sympy imported on first use, not when onnx_ir is.

onnx_ir imports sympy at module level (0.3 s of CPU, a fifth of a conversion), in ``_core`` and in
``_symbolic_shapes`` (its table of functions for dimension expressions), for arithmetic on
symbolic dimensions, which jaxconv's graphs never do: dimension names are strings. Stand-in
modules are registered under both names before onnx_ir is imported; the first attribute read
from one imports the real module, which then replaces it in ``sys.modules``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any


class _Deferred(types.ModuleType):
    """A module whose first missing attribute imports the real one and copies it in."""

    def __getattr__(self, attr: str) -> Any:
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
        real = importlib.import_module(name)
        self.__dict__.update({k: v for k, v in real.__dict__.items() if k != "__class__"})
        return getattr(real, attr)


def defer(name: str) -> None:
    """Register ``name`` as a module imported on its first attribute access (no-op when imported).

    A dotted name is registered only when its top-level package is installed and not imported yet.
    """
    top = name.partition(".")[0]
    if name in sys.modules or (top != name and top in sys.modules):
        return
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return
    if spec is None:
        return
    stand_in = _Deferred(name)
    stand_in.__spec__ = None  # the import statement reads it: a module that is not initializing
    sys.modules[name] = stand_in
