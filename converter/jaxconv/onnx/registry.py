"""The one place where StableHLO ops meet their ONNX lowerings.

A 1:1 op is a table row (``direct``); anything else is a function decorated with
``@lowering("stablehlo.op")`` in ``ops/<family>.py``. Registering an op twice, or with a
malformed name, fails at import. An op that is not registered is unsupported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable

if TYPE_CHECKING:
    from jaxconv.onnx.context import LoweringContext
    from jaxconv.stablehlo.ir import Op

LowerFn = Callable[["LoweringContext", "Op", list], "list[str] | str | None"]
CheckFn = Callable[["Op"], "str | None"]

_OP_NAME = re.compile(r"^(stablehlo|chlo|func)\.[a-z_0-9]+$")


@dataclass(frozen=True)
class Lowering:
    """How one StableHLO op becomes ONNX.

    Attributes:
        op_name: e.g. ``stablehlo.add``.
        fn: ``fn(ctx, op, inputs) -> output names`` (one per op result).
        family: the ``ops/`` module it lives in.
        check: optional ``check(op) -> reason`` for variants this lowering cannot handle;
            the preflight reports them before anything is lowered.
        onnx_ops: the main ONNX ops it emits, for docs and ``list-ops``.
    """

    op_name: str
    fn: LowerFn
    family: str
    check: CheckFn | None = None
    onnx_ops: tuple[str, ...] = ()
    doc: str = ""


REGISTRY: dict[str, Lowering] = {}


def _family_of(fn: Callable) -> str:
    module = getattr(fn, "__module__", "") or ""
    return module.rsplit(".", 1)[-1]


def register(entry: Lowering) -> None:
    """Add one lowering; raises ValueError on a duplicate or malformed op name."""
    if not _OP_NAME.match(entry.op_name):
        raise ValueError(f"malformed op name {entry.op_name!r}: expected 'stablehlo.<op>'")
    if entry.op_name in REGISTRY:
        other = REGISTRY[entry.op_name]
        raise ValueError(f"{entry.op_name} registered twice ({other.family} and {entry.family})")
    REGISTRY[entry.op_name] = entry


def lowering(*op_names: str, check: CheckFn | None = None, onnx_ops: Iterable[str] = ()) -> Callable[[LowerFn], LowerFn]:
    """Decorator registering ``fn`` as the lowering of each of ``op_names``."""

    def wrap(fn: LowerFn) -> LowerFn:
        for name in op_names:
            register(Lowering(op_name=name, fn=fn, family=_family_of(fn), check=check,
                              onnx_ops=tuple(onnx_ops), doc=(fn.__doc__ or "").strip().split("\n")[0]))
        return fn

    return wrap


def lookup(op_name: str) -> Lowering | None:
    """The lowering of ``op_name``, or None when unsupported."""
    _load_families()
    return REGISTRY.get(op_name)


def all_lowerings() -> dict[str, Lowering]:
    """Every registered lowering, by op name."""
    _load_families()
    return dict(sorted(REGISTRY.items()))


_loaded = False


def _load_families() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        import jaxconv.onnx.ops  # noqa: F401  (registers every family)
