"""Find the host callbacks in a function jax.export refused, and say where each one is.

jax.export cannot serialize host callbacks (``jax.debug.print``, ``jax.debug.callback``,
``jax.pure_callback``, ``io_callback``); it fails with a message that names neither the callback
nor the line. This module traces the function again into a jaxpr, walks it (sub-jaxprs
included) and names each callback with the user's source line. Equinox's runtime checks
(``eqx.error_if``, which diffrax's solvers use) are host callbacks too; ``EQX_ON_ERROR=nan``
turns them into plain ``select``s.
"""

from __future__ import annotations

import os
import sysconfig
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

PUBLIC_NAMES = {
    "debug_print": "jax.debug.print",
    "debug_callback": "jax.debug.callback",
    "pure_callback": "jax.pure_callback",
    "io_callback": "io_callback",
}


@dataclass(frozen=True)
class Callback:
    """One host callback: its public name, the user's line, and whether Equinox put it there."""

    name: str
    where: str
    equinox: bool


def _is_callback(primitive_name: str) -> bool:
    return primitive_name in PUBLIC_NAMES or "callback" in primitive_name


def _sub_jaxprs(params: dict[str, Any]) -> Iterator[Any]:
    for value in params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            inner = getattr(item, "jaxpr", item)
            if hasattr(inner, "eqns"):
                yield inner


def _frames(source_info: Any) -> list[tuple[str, int]]:
    """(file, line) of the frames of one equation's traceback outside JAX, innermost first."""
    from jax._src import source_info_util

    try:
        frames = source_info_util.user_frames(source_info.traceback)
        return [(f.file_name, f.start_line) for f in frames]
    except Exception:  # private API moved: no location
        return []


_LIBRARY_DIRS = tuple(p for p in {sysconfig.get_paths().get("purelib"), sysconfig.get_paths().get("platlib")} if p)


def _in_library(path: str) -> bool:
    return "site-packages" in path or "dist-packages" in path or path.startswith(_LIBRARY_DIRS)


def _pick(frames: list[tuple[str, int]], source_path: str | None) -> str:
    """The frame in the user's file, else the innermost one outside installed libraries, else the innermost."""
    if source_path is not None:
        mine = [f for f in frames if os.path.abspath(f[0]) == os.path.abspath(source_path)]
        if mine:
            return f"{mine[0][0]}:{mine[0][1]}"
    outside = [f for f in frames if not _in_library(f[0])]
    chosen = outside[0] if outside else (frames[0] if frames else None)
    return f"{chosen[0]}:{chosen[1]}" if chosen else "an unknown line"


def _from_equinox(eqn: Any, frames: list[tuple[str, int]]) -> bool:
    fn = eqn.params.get("callback")
    fn = getattr(fn, "callback_func", fn)
    module = getattr(fn, "__module__", "") or ""
    return module.startswith("equinox") or any(f"{os.sep}equinox{os.sep}" in f[0] for f in frames)


def find_callbacks(jaxpr: Any, source_path: str | None = None) -> list[Callback]:
    """Every host callback in ``jaxpr`` (a Jaxpr or ClosedJaxpr), in program order."""
    found: list[Callback] = []

    def walk(j: Any, outer: list[list[tuple[str, int]]]) -> None:
        for eqn in j.eqns:
            frames = _frames(eqn.source_info)
            if _is_callback(eqn.primitive.name):
                chain = frames + [f for fs in reversed(outer) for f in fs]
                found.append(Callback(PUBLIC_NAMES.get(eqn.primitive.name, eqn.primitive.name),
                                      _pick(chain, source_path), _from_equinox(eqn, chain)))
            for sub in _sub_jaxprs(eqn.params):
                walk(sub, outer + [frames])

    walk(getattr(jaxpr, "jaxpr", jaxpr), [])
    return found


def callbacks_of(jitted: Any, arg_specs: Sequence[Any],
                 source_path: str | None = None) -> list[Callback]:
    """Trace ``jitted`` (a ``jax.jit`` object) on ``arg_specs`` and list its host callbacks; [] if tracing fails."""
    try:
        traced = jitted.trace(*arg_specs)
    except Exception:
        return []
    return find_callbacks(traced.jaxpr, source_path)


def callback_message(fn_name: str, callbacks: list[Callback]) -> str:
    """One line naming the callbacks (at most three places) and what to do about them."""
    places: list[str] = []
    for cb in callbacks:
        text = f"{'equinox error check (' + cb.name + ')' if cb.equinox else cb.name} at {cb.where}"
        if text not in places:
            places.append(text)
    shown = ", ".join(places[:3]) + (f" and {len(places) - 3} more" if len(places) > 3 else "")
    them = "them" if len(places) > 1 else "it"
    advice = f"remove {them} or put {them} behind a Python flag for export"
    if any(cb.equinox for cb in callbacks):
        advice = ("Equinox/Diffrax runtime checks are host callbacks: run with EQX_ON_ERROR=nan to replace them "
                  "with NaN results" + ("; remove the others" if not all(cb.equinox for cb in callbacks) else ""))
    return (f"{fn_name} calls back into Python, which jax.export cannot serialize: {shown}; {advice}")
