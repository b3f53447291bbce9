"""Bounds a symbolic size must meet for a function to trace, read from the trace's error.

jax.export traces a function once for every size of a symbolic dimension, so a shape that only makes
sense for some sizes stops the trace. Two kinds say exactly which sizes:

- a shape holding ``min(128, s)`` that must be ``s`` (Hugging Face's Flax GPT-2 and Llama slice a
  128-position causal mask to the sequence): ``s <= 128``; ``max(n, b)`` likewise ``b >= n``;
- a comparison a JAX shape rule cannot decide (keras-hub's ``PositionEmbedding`` takes ``s`` rows of a
  64-row table with ``lax.dynamic_slice``, whose rule needs ``s <= 64``).

On any concrete size outside the bound JAX itself fails, so ``program.trace`` traces again under it
and warns (``Assumed``). A comparison the user's own code makes (``x[:10] if n >= 10 else x``) is a
choice between programs, not a bound: the error names a constraint that would decide it (``hint``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

_BOUND = re.compile(r"\b(min|max)\((?:(\d+), ([A-Za-z_]\w*)|([A-Za-z_]\w*), (\d+))\)")
_INCONCLUSIVE = re.compile(r"comparison '([^']+)' (<=|>=|<|>|==|!=) '([^']+)' is inconclusive")
_SHAPE_POLY = os.path.join("jax", "_src", "export", "shape_poly.py")
_LAX = os.path.join("jax", "_src", "lax") + os.sep


@dataclass(frozen=True)
class Assumed:
    """A constraint the trace needed, and why.

    Attributes:
        constraint: as ``--constraint`` takes it, e.g. ``s <= 128``.
        why: what in the function needs it, in words.
    """

    constraint: str
    why: str

    def text(self, python: bool = False) -> str:
        """The warning (``python``: in the API's words, not the CLI's)."""
        state = f'constraints=["{self.constraint}"]' if python else f'--constraint "{self.constraint}"'
        return (f"assumed {self.constraint}: {self.why} (JAX fails on other sizes); say so with {state} to "
                "silence this")


def implied(error: BaseException | None) -> Assumed | None:
    """The bound a failed trace (the exception jax raised) says the function needs, or None."""
    text = str(error or "")
    bound = _broadcast_bound(text.strip().split("\n", 1)[0])
    if bound is not None:
        return bound
    rule = _shape_rule(error)
    compared = _INCONCLUSIVE.search(text)
    if rule is None or compared is None:
        return None
    bound = _as_constraint(*compared.groups())
    if bound is None:
        return None
    return Assumed(bound, f"JAX's shape rule for {rule} needs it")


def _broadcast_bound(first: str) -> Assumed | None:
    """From an error between shapes that must agree (a broadcast, a dot_general's batch dimensions), one
    holding ``min(n, s)`` and one that holds ``s`` itself
    (Hugging Face's causal mask against the sequence): ``s <= n``; against one that holds ``n`` (``x[:, :3]
    + y[b, 3]``): ``s >= n``; ``max`` the other way round. Only where exactly one of the two stands bare in
    the other shapes: that is the size the broadcast needs, and JAX fails on any size where it is not.
    Where both do (a 128-row position table sliced to ``s`` and added to ``f32[2,s,128]``: the table's own
    128 columns), the dimensions on the axis of ``min(n, s)`` decide (``_facing``): all ``s``, or all ``n``."""
    found = _BOUND.search(first)
    if found is None or "is inconclusive" in first:  # a comparison, not shapes that must agree
        return None
    kind, n, name = found.group(1), found.group(2) or found.group(5), found.group(3) or found.group(4)
    rest = _BOUND.sub("", first)
    bare = [re.search(rf"[\[(,]\s*{re.escape(token)}\s*[\]),]", rest) is not None for token in (name, n)]
    if bare == [True, True]:
        facing = _facing(first, found.group(0))
        bare = [facing == {name}, facing == {n}]
    if bare == [True, False]:  # min(n, s) must be s
        bound = f"{name} <= {n}" if kind == "min" else f"{name} >= {n}"
        return Assumed(bound, f"the function's shapes hold {found.group(0)}, which is {name} only there")
    if bare == [False, True]:  # min(n, s) must be n
        bound = f"{name} >= {n}" if kind == "min" else f"{name} <= {n}"
        return Assumed(bound, f"the function's shapes hold {found.group(0)}, which is {n} only there")
    return None


def _facing(text: str, bound: str) -> set[str]:
    """The dimensions the other shapes in ``text`` hold on the axis where one holds ``bound`` (``min(128, s)``),
    axes counted from the right as broadcasting aligns them: ``{"s"}`` for ``(2, s, 128), (min(128, s), 128)``.
    Empty when no shape holds ``bound``, or no other shape reaches its axis."""
    shapes = _shapes(text)
    axes = {len(shape) - i for shape in shapes for i, dim in enumerate(shape) if dim == bound}
    return {shape[-axis] for shape in shapes if bound not in shape for axis in axes if axis <= len(shape)}


def _shapes(text: str) -> list[list[str]]:
    """The shapes a message lists, ``(2, s, 128)``, each as its dimensions' text; a call such as ``min(128, s)``
    or ``Layer.call()`` is not a shape, and stays one dimension inside one."""
    shapes: list[list[str]] = []
    depth, start = 0, -1
    for i, ch in enumerate(text):
        if ch == "(":
            if depth == 0:
                start = -1 if i and (text[i - 1].isalnum() or text[i - 1] in "_.") else i
            depth += 1
        elif ch == ")" and depth:
            depth -= 1
            if depth == 0 and start >= 0:
                shapes.append(_dims(text[start + 1:i]))
    return shapes


def _dims(inside: str) -> list[str]:
    """``2, min(128, s), 128`` as ``["2", "min(128, s)", "128"]`` (the commas inside a call kept)."""
    dims, depth, start = [], 0, 0
    for i, ch in enumerate(inside + ","):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            dims.append(inside[start:i].strip())
            start = i + 1
    return [d for d in dims if d]


def _shape_rule(error: BaseException | None) -> str | None:
    """The primitive whose shape rule made the comparison that failed (``dynamic_slice`` for
    ``_dynamic_slice_shape_rule``), or None when other code made it (the user's own). JAX removes its
    own frames from the traceback it raises; ``unfiltered_tracebacks`` keeps them on a chained exception."""
    import traceback

    seen = 0
    while error is not None and seen < 8:
        frames = traceback.extract_tb(error.__traceback__)
        callers = [f for f in frames if not f.filename.endswith(_SHAPE_POLY)]
        if len(callers) < len(frames) and callers:  # this traceback holds the comparison's own frames
            for caller in reversed(callers):  # back through lax's own checks (_check_shapelike) to the rule
                if _LAX not in caller.filename:
                    break
                if caller.name.endswith("_shape_rule"):
                    return caller.name.strip("_").removesuffix("_shape_rule").removeprefix("common_")
        error = error.__cause__ or error.__context__
        seen += 1
    return None


def unfiltered_tracebacks() -> Any:
    """A context in which JAX keeps its frames on an exception chained to the one it raises
    (``jax_traceback_filtering=remove_frames``; the default, ``quiet_remove_frames``, drops them)."""
    import contextlib

    try:
        from jax._src import config
    except ImportError:  # pragma: no cover  (a JAX without it: no bounds from shape rules)
        return contextlib.nullcontext()
    state = getattr(config, "traceback_filtering", None)
    if state is None or state.value not in (None, "auto", "quiet_remove_frames"):
        return contextlib.nullcontext()  # the user chose a mode: keep it
    return state("remove_frames")


def _as_constraint(a: str, op: str, b: str) -> str | None:
    """``a op b`` as jax.export takes a constraint (>=, <=, ==; a strict bound against a number moves by one)."""
    if op in ("<=", ">=", "=="):
        return f"{a} {op} {b}"
    if op in ("<", ">") and b.lstrip("-").isdigit():
        return f"{a} <= {int(b) - 1}" if op == "<" else f"{a} >= {int(b) + 1}"
    if op in ("<", ">") and a.lstrip("-").isdigit():
        return f"{b} >= {int(a) + 1}" if op == "<" else f"{b} <= {int(a) - 1}"
    return None


COMPARISONS = "'==', '>=', '<=', '>' or '<'"
"""The comparisons a ``--constraint`` may make, as its error names them."""
_COMPARISON = re.compile(r"==|>=|<=|!=|>|<")


def comparison(constraint: str) -> str | None:
    """The one comparison ``constraint`` makes (``==``, ``>=``, ``<=``, ``>``, ``<``), or None when it makes
    none, several (``s > 3 > 2``, ``s >> 3``), ``!=`` (no single constraint), or lacks a side (``b >``)."""
    found = _COMPARISON.findall(constraint)
    if len(found) != 1 or found[0] == "!=" or not all(side.strip() for side in constraint.split(found[0])):
        return None
    return found[0]


def jax_constraint(constraint: str) -> str:
    """``constraint`` as jax.export takes it, which compares integer expressions with ``==``, ``>=`` or ``<=``
    only: ``a > b`` is ``a >= b + 1`` and ``a < b`` is ``a <= b - 1`` (against a number, ``s > 64``, the
    number moves: ``s >= 65``). Other text is returned as it is."""
    op = comparison(constraint)
    if op not in (">", "<"):
        return constraint
    a, b = (side.strip() for side in constraint.split(op))
    return _as_constraint(a, op, b) or (f"{a} >= {b} + 1" if op == ">" else f"{a} <= {b} - 1")


def inconclusive_line(error: BaseException) -> str:
    """The line of an inconclusive symbolic comparison anywhere in ``error``'s message (a library may wrap
    it: keras puts its own first line before it, and a terminal's bold around it), or ""."""
    for line in str(error).splitlines():
        if "is inconclusive" in line:
            return re.sub(r"\x1b\[[0-9;]*m", "", line).strip()
    return ""


def hint(first: str) -> str:
    """A hint naming the ``--constraint`` that settles a symbolic shape jax.export cannot decide (a
    ``min(128, s)``, a ``max(2, b)``, an inconclusive comparison); "" for other errors."""
    bound = _broadcast_bound(first)
    if bound is not None:
        return (f" ({bound.why}, i.e. where {bound.constraint}: if that always holds, say so with --constraint "
                f"\"{bound.constraint}\" (constraints=[\"{bound.constraint}\"] in Python))")
    found = _INCONCLUSIVE.search(first)
    if found is not None:
        a, op, b = found.groups()
        deciding = jax_constraint(f"{a} {'>' if op == '!=' else op} {b}")  # != : either side decides it
        return (f" (the function compares {a} {op} {b}, which depends on the symbolic size: a --constraint that "
                f"decides it, e.g. \"{deciding}\" when that always holds, or a fixed size in the spec, lets "
                "it trace)")
    return ""
