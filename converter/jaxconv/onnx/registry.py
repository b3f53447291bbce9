"""The one place where StableHLO constructs meet their ONNX lowerings.

Three kinds of construct, one ``Lowering`` record each:

- an op (``stablehlo.add``): a 1:1 op is a table row (``direct``); anything else is a function
  decorated with ``@lowering("stablehlo.op")`` in ``ops/<family>.py``;
- a ``stablehlo.custom_call`` target (``lapack_spotrf_ffi``, ``ApproxTopK``), ``@custom_call_target``;
- a ``stablehlo.composite`` by name (``chlo.erf``, ``chlo.top_k``), ``@composite``; a composite with
  no entry is lowered by inlining its decomposition.

Each record says when it applies (``conditions``: dtypes, opset, static size limits) for
``jaxconv list-ops`` and docs/ops.md, which are generated from here. Registering a construct
twice, or an op with a malformed name, fails at import. An op that is not registered is unsupported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
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
        doc: the first line of ``fn``'s docstring.
        kind: ``op``, ``custom_call`` (``op_name`` is the call target) or ``composite`` (its name).
        conditions: when the lowering applies (dtypes, opset, static size limits); empty when always.
    """

    op_name: str
    fn: LowerFn
    family: str
    check: CheckFn | None = None
    onnx_ops: tuple[str, ...] = ()
    doc: str = ""
    kind: str = "op"
    conditions: str = ""


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


def lowering(*op_names: str, check: CheckFn | None = None, onnx_ops: Iterable[str] = (),
             conditions: str = "") -> Callable[[LowerFn], LowerFn]:
    """Decorator registering ``fn`` as the lowering of each of ``op_names`` (``conditions``: see ``Lowering``)."""

    def wrap(fn: LowerFn) -> LowerFn:
        for name in op_names:
            register(Lowering(op_name=name, fn=fn, family=_family_of(fn), check=check, onnx_ops=tuple(onnx_ops),
                              doc=(fn.__doc__ or "").strip().split("\n")[0], conditions=conditions))
        return fn

    return wrap


def lookup(op_name: str) -> Lowering | None:
    """The lowering of ``op_name``, or None when unsupported."""
    _load_families()
    return REGISTRY.get(op_name)


# stablehlo.custom_call targets and stablehlo.composite names, beside the ops.
CUSTOM_CALLS: dict[str, Lowering] = {}
COMPOSITES: dict[str, Lowering] = {}
# Functions ``explain(target)`` giving why an unregistered custom-call target has no lowering, or None.
EXPLAINERS: list[Callable[[str], "str | None"]] = []


def _named(table: dict[str, Lowering], kind: str, names: Iterable[str], check: CheckFn | None,
           onnx_ops: Iterable[str], conditions: str) -> Callable[[LowerFn], LowerFn]:
    def wrap(fn: LowerFn) -> LowerFn:
        for name in names:
            if not name or name in table:
                raise ValueError(f"{kind.replace('_', ' ')} {name!r} registered twice (or unnamed)")
            table[name] = Lowering(op_name=name, fn=fn, family=_family_of(fn), check=check, onnx_ops=tuple(onnx_ops),
                                   doc=(fn.__doc__ or "").strip().split("\n")[0], kind=kind, conditions=conditions)
        return fn

    return wrap


def custom_call_target(*targets: str, check: CheckFn | None = None, onnx_ops: Iterable[str] = (),
                       conditions: str = "") -> Callable[[LowerFn], LowerFn]:
    """Decorator registering ``fn`` as the lowering of ``stablehlo.custom_call`` with each target name.

    ``check(op)`` returns why one call cannot be lowered (the preflight reports it), or None.
    """
    return _named(CUSTOM_CALLS, "custom_call", targets, check, onnx_ops, conditions)


def composite(*names: str, check: CheckFn | None = None, onnx_ops: Iterable[str] = (),
              conditions: str = "") -> Callable[[LowerFn], LowerFn]:
    """Decorator registering ``fn`` as the lowering of ``stablehlo.composite`` ops with each name.

    ``check(op)`` returns why this lowering does not apply to one op (its decomposition is then
    inlined instead), or None.
    """
    return _named(COMPOSITES, "composite", names, check, onnx_ops, conditions)


def explains_unsupported(fn: Callable[[str], "str | None"]) -> Callable[[str], "str | None"]:
    """Register ``explain(target)``, naming why some unregistered custom-call targets have no lowering."""
    EXPLAINERS.append(fn)
    return fn


def lookup_custom_call(target: str) -> Lowering | None:
    """The lowering of custom calls to ``target``, or None."""
    _load_families()
    return CUSTOM_CALLS.get(target)


def lookup_composite(name: str) -> Lowering | None:
    """The lowering of composites named ``name``, or None (the decomposition is inlined)."""
    _load_families()
    return COMPOSITES.get(name)


def unsupported_target_reason(target: str) -> str:
    """Why custom calls to the unregistered ``target`` have no lowering."""
    _load_families()
    for explain in EXPLAINERS:
        reason = explain(target)
        if reason:
            return reason
    return f"custom call target {target!r} has no ONNX equivalent"


# Lowerings of ops whose operands or results are complex (see complex_layout): a separate table, so
# the complex arithmetic lives in its own modules and a real lowering never sees a complex value.
COMPLEX_REGISTRY: dict[str, Lowering] = {}


def complex_lowering(*op_names: str, check: CheckFn | None = None,
                     onnx_ops: Iterable[str] = ()) -> Callable[[LowerFn], LowerFn]:
    """Decorator registering ``fn`` as the lowering of each of ``op_names`` on complex values."""

    def wrap(fn: LowerFn) -> LowerFn:
        for name in op_names:
            if not _OP_NAME.match(name) or name in COMPLEX_REGISTRY:
                raise ValueError(f"complex lowering of {name!r}: malformed or registered twice")
            COMPLEX_REGISTRY[name] = Lowering(op_name=name, fn=fn, family=_family_of(fn), check=check,
                                              onnx_ops=tuple(onnx_ops),
                                              doc=(fn.__doc__ or "").strip().split("\n")[0])
        return fn

    return wrap


def touches_complex(op: "Op") -> bool:
    """Whether any operand or result of ``op`` is complex."""
    return any(v.type.dtype.startswith("complex") for v in list(op.operands) + list(op.results))


def lookup_for(op: "Op") -> Lowering | None:
    """The lowering of this op: the complex table's when it touches complex values, else ``lookup``."""
    _load_families()
    if touches_complex(op):
        return COMPLEX_REGISTRY.get(op.name)
    return REGISTRY.get(op.name)


def all_lowerings() -> dict[str, Lowering]:
    """Every registered lowering, by op name."""
    _load_families()
    return dict(sorted(REGISTRY.items()))


def every_construct() -> list[Lowering]:
    """Every registered lowering: the ops, then the custom-call targets, then the composites, each by name."""
    _load_families()
    return [entry for table in (REGISTRY, CUSTOM_CALLS, COMPOSITES) for _, entry in sorted(table.items())]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def ops_text() -> str:
    """``jaxconv list-ops``: one line per construct (kind, name, family, main ONNX ops, conditions)."""
    lines = []
    for e in every_construct():
        line = f"{e.kind:<12} {e.op_name:<40} {e.family:<14} {', '.join(e.onnx_ops)}"
        lines.append((line + (f"  [{e.conditions}]" if e.conditions else "")).rstrip())
    return "\n".join(lines) + "\n"


def ops_markdown() -> str:
    """docs/ops.md (``jaxconv list-ops --markdown``), generated from the registry."""
    lines = ["# What the ONNX lowering supports", "",
             "Generated by `jaxconv list-ops --markdown > docs/ops.md`; a test keeps it in step with the registry.",
             "An op missing here is unsupported: the converter lists it, with counts and source lines, before lowering.",
             "Conditions name the dtypes, opsets and static sizes a lowering needs; outside them the converter",
             "refuses the op by name before anything is written.", ""]
    headings = {"op": ("StableHLO ops", "StableHLO op"),
                "custom_call": ("`stablehlo.custom_call` targets", "call target"),
                "composite": ("`stablehlo.composite` names",
                              "composite")}
    entries = every_construct()
    for kind, (title, column) in headings.items():
        lines += [f"## {title}", ""]
        if kind == "composite":
            lines += ["A composite not listed here, or outside its conditions, is lowered by inlining its "
                      "decomposition.", ""]
        lines += [f"| {column} | family | main ONNX ops | conditions | notes |", "|---|---|---|---|---|"]
        for e in entries:
            if e.kind == kind:
                lines.append(f"| `{e.op_name}` | {e.family} | {', '.join(e.onnx_ops)} | {_cell(e.conditions)} "
                             f"| {_cell(e.doc)} |")
        lines.append("")
    lines += ["## On complex values", "",
              "Complex tensors are real tensors with a trailing (re, im) axis of 2 (see README). These ops also",
              "take complex operands or results:", ""]
    lines.append(", ".join(f"`{name}`" for name in sorted(COMPLEX_REGISTRY)))
    return "\n".join(lines) + "\n"


_loaded = False


def _load_families() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        import jaxconv.onnx.ops  # noqa: F401  (registers every family)
