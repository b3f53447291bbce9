"""Parse input specs such as ``f32[b,784]`` into ``jax.ShapeDtypeStruct`` pytrees.

Grammar (one spec per positional argument)::

    spec    := DTYPE "[" [dim ("," dim)*] "]"   |   JSON object/array of specs (a pytree)
    dim     := INTEGER | NAME | expression of NAMEs and INTEGERs with + - * ( )   (e.g. 2*b)

A NAME makes the dimension symbolic (jax.export shape polymorphism); the same NAME in
several specs is the same dimension.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from jaxconv.errors import SpecError, UsageError

# Short names first; each maps to the numpy dtype name jax uses.
DTYPE_ALIASES: dict[str, str] = {
    "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "bool": "bool", "c64": "complex64", "c128": "complex128",
}
CANONICAL_DTYPES = frozenset(DTYPE_ALIASES.values())
WIDE_DTYPES = frozenset({"float64", "int64", "uint64", "complex128"})

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIM_CHARS = re.compile(r"[A-Za-z0-9_+\-*() ]+")


@dataclass(frozen=True)
class TensorSpec:
    """One parsed leaf spec before symbolic dimensions are resolved.

    Attributes:
        dtype: canonical numpy dtype name, e.g. ``float32``.
        dims: each dimension as an int or a symbolic expression string.
        text: the spec as the user wrote it.
    """

    dtype: str
    dims: tuple[int | str, ...]
    text: str

    @property
    def symbols(self) -> set[str]:
        """Names of the symbolic dimension variables this spec uses."""
        out: set[str] = set()
        for d in self.dims:
            if isinstance(d, str):
                out.update(_NAME.findall(d))
        return out


def _fail(text: str, pos: int, why: str) -> SpecError:
    marked = text[:pos] + "\u2192" + text[pos:]
    return SpecError(f"bad spec {text!r} at character {pos + 1}: {why} (here: {marked!r})")


def canonical_dtype(name: str) -> str:
    """Return the canonical dtype name for a short or numpy name, or raise SpecError."""
    key = name.strip().lower()
    if key in DTYPE_ALIASES:
        return DTYPE_ALIASES[key]
    if key in CANONICAL_DTYPES:
        return key
    raise SpecError(
        f"unknown dtype {name!r}; use one of {', '.join(DTYPE_ALIASES)} (or numpy names such as float32)")


def parse_tensor_spec(text: str) -> TensorSpec:
    """Parse one ``DTYPE[DIMS]`` spec.

    Raises:
        SpecError: naming the first wrong character.
    """
    s = text
    i = 0
    while i < len(s) and s[i].isspace():
        i += 1
    m = re.compile(r"[A-Za-z0-9_]+").match(s, i)
    if not m:
        raise _fail(s, i, "expected a dtype such as f32")
    dtype_word = m.group(0)
    try:
        dtype = canonical_dtype(dtype_word)
    except SpecError as e:
        raise _fail(s, i, f"unknown dtype {dtype_word!r}; use one of {', '.join(DTYPE_ALIASES)}") from e
    i = m.end()
    if i >= len(s) or s[i] != "[":
        raise _fail(s, i, "expected '[' after the dtype (a scalar is written f32[])")
    close = s.find("]", i)
    if close < 0:
        raise _fail(s, len(s), "missing ']'")
    if s[close + 1:].strip():
        raise _fail(s, close + 1, "unexpected text after ']'")
    body_start = i + 1
    body = s[body_start:close]
    dims: list[int | str] = []
    if body.strip():
        pos = body_start
        for part in body.split(","):
            stripped = part.strip()
            lead = len(part) - len(part.lstrip())
            if not stripped:
                raise _fail(s, pos + lead, "expected a dimension (an integer or a name)")
            bad = next((k for k, ch in enumerate(part) if not _DIM_CHARS.fullmatch(ch)), None)
            if bad is not None:
                raise _fail(s, pos + bad, f"unexpected character {part[bad]!r} in a dimension")
            if stripped.lstrip("-").isdigit():
                value = int(stripped)
                if value < 0:
                    raise _fail(s, pos + lead, "a dimension cannot be negative")
                dims.append(value)
            else:
                if stripped[0].isdigit() and _NAME.fullmatch(stripped[1:] or "_") and not any(c in stripped for c in "+-*()"):
                    raise _fail(s, pos + lead, "a dimension name cannot start with a digit (write 2*b for a product)")
                if not _NAME.search(stripped):
                    raise _fail(s, pos + lead, "expected a dimension (an integer or a name)")
                dims.append(" ".join(stripped.split()))
            pos += len(part) + 1
    return TensorSpec(dtype=dtype, dims=tuple(dims), text=text.strip())


def parse_spec(text: str) -> Any:
    """Parse a leaf spec or a JSON pytree of leaf specs.

    Returns:
        A TensorSpec, or dicts/lists of TensorSpecs mirroring the JSON.
    """
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            tree = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise _fail(stripped, e.pos, f"bad JSON pytree spec: {e.msg}") from e
        return _tree_from_json(tree, stripped)
    return parse_tensor_spec(text)


def _tree_from_json(node: Any, whole: str) -> Any:
    if isinstance(node, str):
        return parse_tensor_spec(node)
    if isinstance(node, dict):
        return {str(k): _tree_from_json(v, whole) for k, v in node.items()}
    if isinstance(node, list):
        return [_tree_from_json(v, whole) for v in node]
    raise SpecError(f"bad spec {whole!r}: pytree leaves must be spec strings like \"f32[8]\", got {node!r}")


def needs_x64(specs: Sequence[Any]) -> bool:
    """True when any leaf uses a 64-bit dtype, which JAX only keeps with jax_enable_x64."""
    import jax

    leaves = jax.tree_util.tree_leaves(list(specs), is_leaf=lambda x: isinstance(x, TensorSpec))
    return any(str(getattr(leaf.dtype, "name", leaf.dtype)) in WIDE_DTYPES for leaf in leaves)


_BOUND = re.compile(r"^\s*(?:([A-Za-z_]\w*)\s*(>=|<=|==)\s*(\d+)|(\d+)\s*(>=|<=|==)\s*([A-Za-z_]\w*))\s*$")
_FLIPPED = {">=": "<=", "<=": ">=", "==": "=="}


def parse_bound(constraint: str) -> tuple[str, str, int] | None:
    """``(name, op, value)`` for ``NAME OP INTEGER`` or ``INTEGER OP NAME`` (op ``>=``, ``<=`` or ``==``,
    read with the name first), else None."""
    m = _BOUND.match(constraint)
    if m is None:
        return None
    if m.group(1):
        return m.group(1), m.group(2), int(m.group(3))
    return m.group(6), _FLIPPED[m.group(5)], int(m.group(4))


def check_constraint_bounds(constraints: Sequence[str]) -> None:
    """Refuse ``--constraint``s that bound one name to an empty range, e.g. ``b >= 5`` with ``b <= 2``.

    Only constraints of the form ``NAME OP INTEGER`` (or ``INTEGER OP NAME``) are compared, so the
    test is exact; jax.export accepts such contradictions and exports a function no input can fit.
    Every symbolic dimension is at least 1 (jax.export's own assumption).

    Raises:
        SpecError: naming the constraint that leaves no value and the one it contradicts.
    """
    low: dict[str, tuple[int, str | None]] = {}
    high: dict[str, tuple[int, str]] = {}
    for c in constraints:
        bound = parse_bound(c)
        if bound is None:
            continue
        name, op, value = bound
        if op in (">=", "==") and value > low.get(name, (1, None))[0]:
            low[name] = (value, c)
        if op in ("<=", "==") and (name not in high or value < high[name][0]):
            high[name] = (value, c)
        lo, lo_by = low.get(name, (1, None))
        if name in high and lo > high[name][0]:
            hi_by = high[name][1]
            if lo_by is None:
                raise SpecError(f"--constraint {c!r} leaves no value of {name}: jax.export takes every symbolic "
                                "dimension to be at least 1")
            other = lo_by if hi_by == c else hi_by
            raise SpecError(f"--constraint {c!r} contradicts {other!r}: no value of {name} satisfies both")


def to_shape_dtype_structs(specs: Sequence[Any], constraints: Sequence[str] = ()) -> list[Any]:
    """Turn parsed specs (or strings, or ShapeDtypeStructs) into ShapeDtypeStruct pytrees.

    All symbolic names share one jax.export scope, so equal names are equal dimensions.

    Args:
        specs: one entry per positional argument: a spec string, a parsed spec tree, or
            a ``jax.ShapeDtypeStruct`` pytree.
        constraints: jax.export symbolic constraints such as ``"b >= 2"``.
    """
    import jax
    from jax import export

    parsed = [parse_spec(s) if isinstance(s, str) else s for s in specs]
    check_constraint_bounds(constraints)
    try:
        scope = export.SymbolicScope(tuple(constraints)) if constraints else export.SymbolicScope()
    except ValueError as e:  # jax finds some contradictions itself ("Unsatisfiable explicit constraint")
        text = str(e).strip().splitlines()
        raise SpecError(f"--constraints contradict each other: {text[0] if text else 'no value satisfies them all'}") from e

    def convert(tree: Any) -> Any:
        if isinstance(tree, TensorSpec):
            dims_text = ",".join(str(d) for d in tree.dims)
            if any(isinstance(d, str) for d in tree.dims):
                try:
                    shape = export.symbolic_shape(dims_text, scope=scope)
                except Exception as e:  # jax raises ValueError/TypeError with its own text
                    raise SpecError(f"bad spec {tree.text!r}: symbolic dimensions not accepted by jax.export: {e}") from e
            else:
                shape = tuple(int(d) for d in tree.dims)
            return jax.ShapeDtypeStruct(shape, _np_dtype(tree.dtype))
        if isinstance(tree, dict):
            return {k: convert(v) for k, v in tree.items()}
        if isinstance(tree, list):
            return [convert(v) for v in tree]
        return tree

    return [convert(t) for t in parsed]


def _np_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def check_spec_count(n_specs: int, param_names: Sequence[str], required: int | None, fn_name: str) -> None:
    """Raise UsageError when the number of specs is not between the positional parameters without a
    default (``required``; None: all of them) and all of them (``param_names``)."""
    least = len(param_names) if required is None else required
    if least <= n_specs <= len(param_names):
        return
    count = f"{least} to {len(param_names)}" if least < len(param_names) else f"{least}"
    raise UsageError(
        f"{fn_name} takes {count} positional argument(s) ({', '.join(param_names) or 'none'}) "
        f"but {n_specs} spec(s) were given; pass one --specs entry per argument, in order")
