"""The check's options, per context: what ``check_options`` sets for every check inside its block
(the CLI sets them from its flags), and ``release_compiled`` for a one-shot process."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np


@dataclass(frozen=True)
class CheckOptions:
    """How the check runs, beyond tolerances (the CLI sets these from its flags).

    Attributes:
        sizes: sizes for symbolic dimensions (default DEFAULT_SIZES: 2, 5 and 1).
        strict: an undecided output, or one that differs on edge values only on a TF target, fails
            the check (exit 9) instead of giving a warning.
        examples: flat example inputs, checked first (from ``example_inputs()`` in the user's file).
        edge: run the edge-value input set.
        edge_skipped: why ``edge`` is off, for a note in the report.
        release_compiled: clear jax's caches once the references are computed and around the
            float64 run (the CLI, a one-shot process, sets it): the references pass big closed-over
            weights as arguments (``jit_reference``), but a compiled program still holds the small
            ones and the constants XLA folds.
    """

    sizes: tuple[int, ...] | None = None
    strict: bool = False
    examples: tuple[np.ndarray, ...] | None = None
    edge: bool = True
    edge_skipped: str = ""
    release_compiled: bool = False


_OPTIONS: contextvars.ContextVar[CheckOptions] = contextvars.ContextVar("jaxconv_check_options", default=CheckOptions())


def current_options() -> CheckOptions:
    return _OPTIONS.get()


@contextlib.contextmanager
def check_options(**changes: Any) -> Iterator[CheckOptions]:
    """Within the block, every check (``to_*``, ``check``) uses these options.

    Example:
        with check_options(strict=True, sizes=(1, 3)):
            jaxconv.to_onnx(fn, "f32[b,8]", path="fn.onnx")
    """
    token = _OPTIONS.set(dataclasses.replace(_OPTIONS.get(), **changes))
    try:
        yield _OPTIONS.get()
    finally:
        _OPTIONS.reset(token)


def set_check_options(**changes: Any) -> None:
    """Change the options of the current context (the CLI does this inside ``check_options()``)."""
    _OPTIONS.set(dataclasses.replace(_OPTIONS.get(), **changes))


def release_compiled() -> None:
    """``jax.clear_caches()`` when ``current_options().release_compiled``; nothing otherwise."""
    if current_options().release_compiled:
        import jax

        from jaxconv import jit_reference

        jit_reference.clear()
        jax.clear_caches()
