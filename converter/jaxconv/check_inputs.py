"""The inputs the check runs on: the user's examples, seeded random values, and edge values.

Input sets, in order:

- ``example``/``given``: the user's own arguments (``example_inputs()`` in the Python file, or ``--inputs``);
- ``random``: standard normal floats, integers in [-8, 8] ([0, 8] unsigned), random bools, once for
  each size of the symbolic dimensions (2, 5 and 1 by default; 1 only for dimensions without a
  constraint; 0 never, since jax.export assumes every symbolic dimension is at least 1); a size that
  breaks a constraint moves to the nearest that meets them all (``floordiv(s, 8) >= 1``: 8, then 9);
- ``edge``: ±0, ±inf, NaN, the largest and smallest normal magnitudes, subnormals, and integer
  extremes (MIN, -1, 0, MAX), interleaved with random values, at the largest size; a second edge set
  (a third too for inputs too small to hold NaN and an infinity) moves them onto other elements
  (``edge_sets``); an integer scalar is MIN or -100, then MAX, then 0 or MIN across the three; where
  two inputs or more are small, a last set lines their edge values up differently, so that a binary
  op meets NaN with a number (``PAIR_STARTS``).
"""

from __future__ import annotations

import ast
import functools
import math
import operator
import os
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from jaxconv.errors import UsageError
from jaxconv.signature import Signature, TensorInfo
from jaxconv.specs import parse_bound

SYMBOLIC_SIZES = (2, 5)
DEFAULT_SIZES = (2, 5, 1)
MAX_BYTES_ENV = "JAXCONV_CHECK_MAX_BYTES"
DEFAULT_MAX_BYTES = 2 << 30
EDGE_SEED_OFFSET = 100
_FUNCS = ("floordiv", "mod", "max", "min")
_NAME = re.compile(r"[A-Za-z_]\w*")
SEARCH_SPAN = 1024
"""How far from a size that breaks a constraint the check looks for one that meets them all."""


@dataclass
class InputSet:
    """One set of flat inputs (signature order) and what it is.

    Attributes:
        label: ``example``, ``given``, ``random`` or ``edge``.
        arrays: one array per flat input.
        sizes: the value of each symbolic dimension name (empty for static shapes or user inputs).
    """

    label: str
    arrays: list[np.ndarray]
    sizes: dict[str, int] = field(default_factory=dict)


def _numpy_dtype(name: str) -> np.dtype:
    from jaxconv.onnx.dtypes import numpy_dtype

    return np.dtype(numpy_dtype(name))


def dim_names(signature: Signature) -> list[str]:
    """Symbolic dimension names used by the inputs, in order of first use."""
    names: list[str] = []
    for t in signature.inputs:
        for d in t.shape:
            for name in _NAME.findall(d) if isinstance(d, str) else ():
                if name not in _FUNCS and name not in names:
                    names.append(name)
    return names


def _bounds(constraints: Sequence[str]) -> tuple[dict[str, int], dict[str, int]]:
    """Lower and upper bounds per symbolic name from ``NAME >=|<=|== INTEGER`` constraints."""
    low: dict[str, int] = {}
    high: dict[str, int] = {}
    for c in constraints:
        bound = parse_bound(c)
        if bound is None:
            continue
        name, op, value = bound
        if op in (">=", "=="):
            low[name] = max(low.get(name, 0), value)
        if op in ("<=", "=="):
            high[name] = min(high.get(name, value), value)
    return low, high


def _dim_sizes(signature: Signature, size: int, constraints: Sequence[str] = (),
               taken: Sequence[dict[str, int]] = ()) -> dict[str, int]:
    """A value for each symbolic name, raised to satisfy ``name >= N`` constraints and lowered to
    satisfy ``name <= N`` ones (``==`` sets both); when that breaks another constraint
    (``floordiv(s, 8) >= 1``), the nearest values that meet every one (``_meeting``), other than ``taken``
    where there are such.

    Expressions (2*b) are evaluated from their names by concrete_shape.

    Raises:
        UsageError: no values within ``SEARCH_SPAN`` of those meet every constraint.
    """
    low, high = _bounds(constraints)
    out = {}
    for name in dim_names(signature):
        value = max(size, low.get(name, 0) + size - SYMBOLIC_SIZES[0])
        if name in high:
            value = max(min(value, high[name]), low.get(name, 1))
        out[name] = value
    return _meeting(signature, out, constraints, taken)


def _meeting(signature: Signature, sizes: dict[str, int], constraints: Sequence[str],
             taken: Sequence[dict[str, int]] = ()) -> dict[str, int]:
    """``sizes`` when they meet every constraint, else the nearest sizes that do, and keep every input dimension
    positive: all names moved by the same step first, then one name at a time (``s >= t + 1``), up before
    down, never below 2 (unless the size asked for is), preferring sizes not already ``taken`` (which meet every
    constraint: with nothing else found, the first of them).

    Raises:
        UsageError: naming the constraints ``sizes`` break, when nothing within ``SEARCH_SPAN`` meets them
            and nothing is ``taken``.
    """
    broken = [c for c in constraints if _holds(c, sizes) is False]
    if not broken:
        return sizes
    floor = {n: min(v, SYMBOLIC_SIZES[0]) for n, v in sizes.items()}
    fallback = None
    for step in range(1, SEARCH_SPAN + 1):
        for sign in (step, -step):
            for moved in (tuple(sizes), *((n,) for n in sizes if len(sizes) > 1)):
                candidate = {n: v + sign if n in moved else v for n, v in sizes.items()}
                if any(candidate[n] < floor[n] for n in moved) or not _allowed(signature, candidate, constraints):
                    continue
                if candidate not in taken:
                    return candidate
                fallback = fallback or candidate
    if fallback is not None or taken:  # sizes already chosen meet every constraint: no new ones
        return fallback or dict(taken[0])
    tried = ", ".join(f"{n} = {v}" for n, v in sizes.items())
    names = "them" if len(broken) > 1 else "it"
    raise UsageError(f"the check found no sizes that meet --constraint {' and '.join(repr(c) for c in broken)}: it "
                     f"tried {tried} and every size up to {SEARCH_SPAN} away; give sizes that meet {names} with "
                     "--check-sizes (check_options(sizes=...) in Python), or convert without the check (--no-check, "
                     "check=False)")


def _allowed(signature: Signature, sizes: dict[str, int], constraints: Sequence[str]) -> bool:
    """Whether ``sizes`` meet every constraint (one that cannot be evaluated is not held against them) and give
    every symbolic input dimension a positive size."""
    if any(_holds(c, sizes) is False for c in constraints):
        return False
    try:
        return all(n >= 1 for t in signature.inputs for d, n in zip(t.shape, concrete_shape(t.shape, sizes))
                   if isinstance(d, str))
    except Exception:  # noqa: BLE001  (an expression we cannot evaluate)
        return False


_COMPARE = {ast.Eq: operator.eq, ast.GtE: operator.ge, ast.LtE: operator.le, ast.Gt: operator.gt, ast.Lt: operator.lt}
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Pow: operator.pow,
               ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_CALLS = {"floordiv": operator.floordiv, "mod": operator.mod, "max": max, "min": min}


def _holds(constraint: str, sizes: dict[str, int]) -> bool | None:
    """Whether ``constraint`` holds at ``sizes``, or None when it cannot be evaluated (a name without a size).

    A constraint compares two integer expressions in jax.export's syntax (``+ - *``, ``^`` for a power,
    ``floordiv``, ``mod``, ``max``, ``min``) with ``==``, ``>=``, ``<=``, ``>`` or ``<``; it is read with
    ``ast`` and evaluated node by node, never by ``eval``. A division by zero breaks it.
    """
    tree = _parsed(constraint)
    if tree is None:
        return None
    try:
        return bool(_COMPARE[type(tree.ops[0])](_value(tree.left, sizes), _value(tree.comparators[0], sizes)))
    except ZeroDivisionError:
        return False
    except (KeyError, ValueError):
        return None


@functools.lru_cache(maxsize=256)
def _parsed(constraint: str) -> ast.Compare | None:
    try:
        tree = ast.parse(constraint.replace("^", "**").strip(), mode="eval").body
    except SyntaxError:
        return None
    if isinstance(tree, ast.Compare) and len(tree.ops) == 1 and type(tree.ops[0]) in _COMPARE:
        return tree
    return None


def _value(node: ast.AST, sizes: dict[str, int]) -> int:
    """The integer value of a constraint's expression at ``sizes`` (KeyError: a name without a size)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        return sizes[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _value(node.operand, sizes)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _value(node.left, sizes), _value(node.right, sizes)
        if isinstance(node.op, ast.Pow) and not 0 <= right <= 64:
            raise ValueError(f"power {right} in a constraint")
        return _ARITHMETIC[type(node.op)](left, right)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS
            and len(node.args) == 2 and not node.keywords):
        return _CALLS[node.func.id](*(_value(a, sizes) for a in node.args))
    raise ValueError(f"not a dimension expression: {ast.dump(node)}")


def size_sets(signature: Signature, sizes: Sequence[int], constraints: Sequence[str] = ()) -> list[dict[str, int]]:
    """The distinct symbolic-size assignments to check (one empty dict when every shape is static).

    Sizes below 2 are used only for names that no constraint mentions (jax.export's own rule,
    every dimension >= 1, is the only one known to hold), and only when every input dimension
    stays positive. Two or more names also get one assignment where they differ (``_staggered_sizes``).
    """
    names = dim_names(signature)
    if not names:
        return [{}]
    out: list[dict[str, int]] = []
    for size in sizes:
        if size < 1:
            continue
        if size < SYMBOLIC_SIZES[0]:
            if any(re.search(rf"\b{re.escape(n)}\b", c) for n in names for c in constraints):
                continue
            chosen = {n: size for n in names}
        else:
            chosen = _dim_sizes(signature, size, constraints, taken=out)
        try:
            if any(n < 1 for t in signature.inputs for d, n in zip(t.shape, concrete_shape(t.shape, chosen))
                   if isinstance(d, str)):
                continue
        except Exception:  # noqa: BLE001  (an expression we cannot evaluate: leave the size out)
            continue
        if chosen not in out:
            out.append(chosen)
    staggered = _staggered_sizes(signature, names, constraints)
    if out and staggered is not None and staggered not in out:
        out.append(staggered)
    return out


def _staggered_sizes(signature: Signature, names: Sequence[str], constraints: Sequence[str]) -> dict[str, int] | None:
    """With two or more symbolic names, one assignment where they differ (2, 3, 4, ... from the smallest
    size up, within their bounds): an artifact that reads one dimension for another fails it. None with
    one name, or when a constraint relates two names (their sizes may have to agree)."""
    if len(names) < 2 or any(sum(bool(re.search(rf"\b{re.escape(n)}\b", c)) for n in names) > 1 for c in constraints):
        return None
    _, high = _bounds(constraints)
    base = _dim_sizes(signature, SYMBOLIC_SIZES[0], constraints)
    chosen = {n: v if n in high else v + k for k, (n, v) in enumerate(sorted(base.items()))}
    if any(_holds(c, chosen) is False for c in constraints):
        return None
    try:
        if any(n < 1 for t in signature.inputs for d, n in zip(t.shape, concrete_shape(t.shape, chosen))
               if isinstance(d, str)):
            return None
    except Exception:  # noqa: BLE001  (an expression we cannot evaluate)
        return None
    return chosen if len(set(chosen.values())) > 1 else None


def concrete_shape(shape: Sequence[int | str], sizes: dict[str, int]) -> tuple[int, ...]:
    out = []
    for d in shape:
        if isinstance(d, int):
            out.append(d)
        elif d in sizes:
            out.append(sizes[d])
        else:
            out.append(int(eval(d.replace("floordiv", "_fd").replace("mod", "_md"), {"__builtins__": {}},  # noqa: S307
                                {**sizes, "_fd": lambda a, b: a // b, "_md": lambda a, b: a % b, "max": max, "min": min})))
    return tuple(out)


def random_array(info: TensorInfo | Any, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Seeded values suited to the dtype (normal floats, small ints, random bools)."""
    dtype = _numpy_dtype(info.dtype)
    if info.dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        lo = 0 if dtype.kind == "u" else -8
        return rng.integers(lo, 9, size=shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def edge_values(dtype_name: str) -> np.ndarray:
    """The edge values of a dtype: signed zeros, infinities, NaN, extremes, subnormals; integer MIN, -1, 0, MAX."""
    dtype = _numpy_dtype(dtype_name)
    if dtype_name == "bool":
        return np.array([False, True])
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = [info.min, info.max, 0, 1, info.max - 1, 2, 7, 100 if info.max > 100 else 3]
        if dtype.kind == "i":
            values[2:2] = [-1, info.min + 1, -2, -100 if info.min < -100 else -3]
        return np.array(values, dtype=dtype)
    component = {"complex64": "float32", "complex128": "float64"}.get(dtype_name, dtype_name)
    if component == "bfloat16":
        import ml_dtypes

        fi: Any = ml_dtypes.finfo(ml_dtypes.bfloat16)
    else:
        fi = np.finfo(np.dtype(component))
    big, tiny, sub = float(fi.max), float(fi.tiny), float(fi.smallest_subnormal)
    floats = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, big, -big, big / 7, -tiny, tiny * 3,
              sub, -sub * 5, 0.5, -3.25, 100.0, -1e-3]
    real = np.array(floats, dtype=np.float64).astype(_numpy_dtype(component))
    if dtype.kind != "c":
        return real.astype(dtype)
    out = np.empty(real.shape, dtype)  # (re + 1j * im would turn an infinite im into a NaN re)
    out.real, out.imag = real, np.roll(real, 3)
    return out


def edge_array(info: TensorInfo | Any, shape: tuple[int, ...], rng: np.random.Generator, offset: int = 0,
               start: int = 0, scatter: bool = False) -> np.ndarray:
    """Edge values for one input: all of them in turn for small arrays, every other element otherwise.

    ``offset`` picks the value of a scalar (so that several scalar inputs get different ones);
    ``start`` the value a small array starts at (a scalar's is moved by it too). With ``scatter`` a
    big array's edge values go to a seeded random half of its elements instead of the even ones, each
    value still at least once: every other element binds each value to positions a stride apart (a
    column of a [64, 4] input sees only every other value), which a mask keeping that column hides.
    """
    values = edge_values(info.dtype)
    size = math.prod(shape)
    base = random_array(info, shape, rng).ravel()
    if size <= 2 * len(values):
        picks = values[(np.arange(size) + start + (offset if size == 1 else 0)) % len(values)]
        return picks.reshape(shape)
    out = base.copy()
    where = rng.permutation(size)[:size // 2] if scatter else np.arange(0, size, 2)
    out[where] = values[(np.arange(where.size) + offset) % len(values)]
    return out.reshape(shape)


def make_inputs(signature: Signature, seed: int = 0, size: int = SYMBOLIC_SIZES[0],
                constraints: Sequence[str] = ()) -> list[np.ndarray]:
    """Seeded random inputs; symbolic dimensions take ``size`` (or more, to satisfy constraints)."""
    rng = np.random.default_rng(seed)
    sizes = _dim_sizes(signature, size, constraints)
    return [random_array(t, concrete_shape(t.shape, sizes), rng) for t in signature.inputs]


def random_set(signature: Signature, sizes: dict[str, int], seed: int) -> InputSet:
    rng = np.random.default_rng(seed)
    return InputSet("random", [random_array(t, concrete_shape(t.shape, sizes), rng) for t in signature.inputs], sizes)


def edge_set(signature: Signature, sizes: dict[str, int], seed: int) -> InputSet:
    rng = np.random.default_rng(seed + EDGE_SEED_OFFSET)
    return InputSet("edge", [edge_array(t, concrete_shape(t.shape, sizes), rng, offset=5 * i)
                             for i, t in enumerate(signature.inputs)], sizes)


# Where the edge values start in a small input (fewer elements than edge values) in each edge set:
# at 0.0, -0.0, inf; at NaN, 1, -1; at inf, -inf, NaN. A scalar input i of the second and third
# sets takes the value at EDGE_SCALARS[set][i % 2] (NaN and inf, or -inf and NaN). When the first
# set holds NaN and an infinity everywhere but an input is big (more than twice as many elements as
# edge values), one second set scatters them (``edge_array(scatter=True)``); small inputs there start
# SCATTERED_START values further (at big / 7 for floats), so each element gets another value.
EDGE_ROTATIONS = (0, 4, 2)
EDGE_SCALARS = {1: (4, 2), 2: (3, 4)}
SCATTERED_START = 9
# Integer scalars take values instead (the float positions hold -2, -1 and MIN + 1 there, never MAX or
# 0): MAX in the second set; 0 (even inputs) or MIN (odd ones) in the third.
INTEGER_SCALARS = {1: ("max", "max"), 2: ("zero", "min")}


# Two small inputs hold the same values element for element in the sets above, so a binary op only
# ever meets NaN with NaN (a max that drops NaN looked exact). One more set, where a program has two
# small inputs or more, starts the k-th of them at PAIR_STARTS[k % 3]: inf, -0.0, 0.0 for floats, so
# one input's inf meets -0.0, its NaN meets -inf, its 1 meets NaN, and so on along the list.
PAIR_STARTS = (2, 1, 0)


def _pairs_set(signature: Signature, shapes: Sequence[tuple[int, ...]], sizes: dict[str, int],
               seed: int) -> InputSet | None:
    """The set in which small inputs meet other edge values at the same place (``PAIR_STARTS``); None
    when fewer than two inputs are small (more than one element, at most twice the edge values)."""
    small = [i for i, (t, shape) in enumerate(zip(signature.inputs, shapes))
             if 1 < math.prod(shape) <= 2 * len(edge_values(t.dtype))]
    if len(small) < 2:
        return None
    rng = np.random.default_rng(seed + EDGE_SEED_OFFSET + len(EDGE_ROTATIONS))
    return InputSet("edge", [edge_array(t, shape, rng, offset=5 * i,
                                        start=PAIR_STARTS[small.index(i) % len(PAIR_STARTS)] if i in small else 0)
                             for i, (t, shape) in enumerate(zip(signature.inputs, shapes))], sizes)


def _scalar_offset(dtype_name: str, k: int, i: int) -> int:
    """Where scalar input ``i`` of edge set ``k`` (1 or 2) takes its value in ``edge_values``."""
    values = edge_values(dtype_name)
    if values.dtype.kind not in "iu":
        return EDGE_SCALARS[k][i % 2]
    info = np.iinfo(values.dtype)
    want = {"max": info.max, "min": info.min, "zero": 0}[INTEGER_SCALARS[k][i % 2]]
    return int(np.flatnonzero(values == want)[0])


def _holds_the_extremes(a: np.ndarray) -> bool:
    """Whether an edge input holds NaN and an infinity (floats), MIN and MAX (integers), both bools; or is empty."""
    a = np.asarray(a)
    if a.size == 0:
        return True
    if a.dtype == np.bool_:
        return bool(a.any() and not a.all())
    if a.dtype.kind in "iu":
        info = np.iinfo(a.dtype)
        return bool((a == info.min).any() and (a == info.max).any())
    f = np.concatenate([a.real.ravel(), a.imag.ravel()]).astype(np.float64) if a.dtype.kind == "c" else a.astype(np.float64)
    return bool(np.isnan(f).any() and np.isinf(f).any())


def edge_sets(signature: Signature, sizes: dict[str, int], seed: int) -> list[InputSet]:
    """The edge set, and when an input is too small to hold NaN and an infinity (or MIN and MAX), two more
    whose small inputs start elsewhere in the list (``EDGE_ROTATIONS``): a float input of 3 elements sees
    NaN, both infinities and both zeros across them, a scalar NaN and an infinity. Otherwise, when an
    input is big, one more whose big inputs have the edge values scattered onto other elements. In the
    sets after the first, big inputs are always scattered. Last, where two inputs or more are small,
    one whose small inputs start at different places (``PAIR_STARTS``), so that a binary op meets NaN
    with a number, inf with a finite value."""
    first = edge_set(signature, sizes, seed)
    shapes = [concrete_shape(t.shape, sizes) for t in signature.inputs]
    pairs = _pairs_set(signature, shapes, sizes, seed)
    if all(_holds_the_extremes(a) for a in first.arrays):
        if not any(math.prod(shape) > 2 * len(edge_values(t.dtype)) for t, shape in zip(signature.inputs, shapes)):
            return [first] + ([pairs] if pairs is not None else [])
        plan = [(1, SCATTERED_START)]
    else:
        plan = list(enumerate(EDGE_ROTATIONS[1:], 1))
    out = [first]
    for k, shift in plan:
        rng = np.random.default_rng(seed + EDGE_SEED_OFFSET + k)
        out.append(InputSet("edge", [edge_array(t, shape, rng, offset=_scalar_offset(t.dtype, k, i), start=0)
                                     if math.prod(shape) == 1
                                     else edge_array(t, shape, rng, offset=5 * i, start=shift, scatter=True)
                                     for i, (t, shape) in enumerate(zip(signature.inputs, shapes))], sizes))
    return out + ([pairs] if pairs is not None else [])


def edge_input_sets(signature: Signature, sizes: Sequence[dict[str, int]], seed: int) -> list[InputSet]:
    """The edge sets of a check whose random sets ran at ``sizes``: ``edge_sets`` at the largest of them
    (the check against jax.jit and the SavedModel check against TensorFlow both take them from here)."""
    return edge_sets(signature, max(sizes, key=lambda s: sum(s.values())) if sizes else {}, seed)


def flush_subnormals(arrays: Sequence[np.ndarray]) -> list[np.ndarray] | None:
    """The arrays with float32/float64/bfloat16 subnormals replaced by a zero of the same sign; None if there are none.

    XLA on the CPU reads subnormal float32/float64 operands as zero. bfloat16 has float32's
    exponent range, so its subnormals are float32 subnormals and are flushed too; float16 is
    computed in float32, where its subnormals are normal numbers.
    """
    import ml_dtypes

    out, changed = [], False
    for x in arrays:
        x = np.asarray(x)
        if x.dtype.name in ("float32", "float64", "bfloat16", "complex64", "complex128"):
            tiny = float(ml_dtypes.finfo(x.real.dtype).tiny)
            parts = [x.real, x.imag] if x.dtype.kind == "c" else [x]
            flushed = [np.where((p != 0) & (np.abs(p) < tiny), np.copysign(np.zeros((), p.dtype), p), p) for p in parts]
            if any(not np.array_equal(f, p) for f, p in zip(flushed, parts)):
                if x.dtype.kind == "c":
                    x = x.copy()
                    x.real, x.imag = flushed
                else:
                    x = flushed[0].astype(x.dtype)
                changed = True
        out.append(x)
    return out if changed else None


# ---- the user's inputs -------------------------------------------------------------------------

def _spec_text(info: TensorInfo) -> str:
    return f"{info.dtype}[{','.join(str(d) for d in info.shape)}]"


def _given_text(a: np.ndarray) -> str:
    return f"{a.dtype.name}[{','.join(str(d) for d in a.shape)}]"


def check_arrays(arrays: Sequence[np.ndarray], signature: Signature, source: str) -> list[np.ndarray]:
    """Check user-given arrays against the signature: dtype, rank, static and symbolic sizes.

    Raises:
        UsageError: naming the input, what the function takes and what was given.
    """
    if len(arrays) != len(signature.inputs):
        raise UsageError(f"{source} gives {len(arrays)} array(s); the function takes {len(signature.inputs)} "
                         f"({', '.join(t.name for t in signature.inputs)})")
    bound: dict[str, int] = {}
    out = []
    for info, a in zip(signature.inputs, arrays):
        a = np.asarray(a)
        if info.dtype == "bfloat16" and a.dtype.kind == "V" and a.dtype.itemsize == 2:
            a = a.view(_numpy_dtype("bfloat16"))
        problem = a.dtype.name != info.dtype or a.ndim != len(info.shape)
        for d, n in zip(info.shape, a.shape):
            if isinstance(d, int):
                problem |= d != n
            elif _NAME.fullmatch(d) and d not in _FUNCS:
                problem |= bound.setdefault(d, n) != n
        if problem:
            raise UsageError(f"{source}: input {info.name!r} is {_given_text(a)}, the function takes {_spec_text(info)}"
                             + (f" (with {', '.join(f'{k}={v}' for k, v in bound.items())})" if bound else ""))
        out.append(a)
    for info, a in zip(signature.inputs, out):  # expressions such as 2*b, once every name is bound
        for d, n in zip(info.shape, a.shape):
            if isinstance(d, str) and not _NAME.fullmatch(d) and set(_NAME.findall(d)) - set(_FUNCS) <= set(bound):
                try:
                    want = concrete_shape([d], bound)[0]
                except Exception:  # noqa: BLE001
                    continue
                if want != n:
                    raise UsageError(f"{source}: input {info.name!r} is {_given_text(a)}, the function takes "
                                     f"{_spec_text(info)} (with {', '.join(f'{k}={v}' for k, v in bound.items())})")
    return out


def load_inputs(path: str, signature: Signature) -> list[np.ndarray]:
    """Inputs from an .npz keyed by input name (or arr_0.. in order), checked against the signature.

    Raises:
        UsageError: the file does not read, lacks an input, has arrays that match no input, or an
            array does not fit its input.
    """
    try:
        data = np.load(path, allow_pickle=False)
        files = list(data.files)
    except Exception as e:
        raise UsageError(f"cannot read inputs from {path}: {e}") from e
    arrays = []
    keys = []
    for i, t in enumerate(signature.inputs):
        key = t.name if t.name in files else f"arr_{i}"
        if key not in files:
            raise UsageError(f"{path} has no array named {t.name!r} (has: {', '.join(files)})")
        keys.append(key)
    unknown = sorted(set(files) - set(keys))
    if unknown:
        raise UsageError(f"{path} has array(s) {', '.join(map(repr, unknown))} that match no input; "
                         f"the inputs: {', '.join(t.name for t in signature.inputs)}")
    for key in keys:
        try:
            arrays.append(np.asarray(data[key]))
        except Exception as e:
            raise UsageError(f"cannot read {key!r} from {path}: {e}") from e
    return check_arrays(arrays, signature, path)


def flatten_examples(value: Any, arg_specs: Sequence[Any], signature: Signature,
                     source: str = "example_inputs()") -> list[np.ndarray]:
    """Flat arrays from example arguments as the function takes them (a tuple; one argument may come bare).

    Raises:
        UsageError: wrong number of arguments, a different pytree structure, or arrays that do not fit.
    """
    import jax

    args = value if isinstance(value, tuple) else (value,)
    if len(args) != len(arg_specs):
        raise UsageError(f"{source} returns {len(args)} argument(s); the function takes {len(arg_specs)} "
                         "(return a tuple of the positional arguments)")
    leaves, tree = jax.tree_util.tree_flatten(list(args))
    want = jax.tree_util.tree_structure(list(arg_specs))
    if tree != want:
        raise UsageError(f"{source} returns arguments structured as {str(tree)[:200]}, the specs are {str(want)[:200]}")
    arrays = []
    for info, leaf in zip(signature.inputs, leaves):
        if isinstance(leaf, (bool, int, float, complex)):
            arrays.append(np.asarray(leaf, dtype=_numpy_dtype(info.dtype)))
        else:
            arrays.append(np.asarray(leaf))
    return check_arrays(arrays, signature, source)


# ---- how much memory the check needs -----------------------------------------------------------

def max_check_bytes() -> int:
    """The limit from JAXCONV_CHECK_MAX_BYTES (bytes; K, M, G, T suffixes allowed), default 2 GiB."""
    text = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?", text, re.IGNORECASE)
    if not m:
        raise UsageError(f"{MAX_BYTES_ENV}={text!r} is not a size; give bytes, e.g. 4000000000 or 4G")
    return int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " "))


def _bytes_of(infos: Sequence[TensorInfo], sizes: dict[str, int]) -> int:
    total = 0
    for t in infos:
        try:
            shape = concrete_shape(t.shape, sizes)
        except Exception:  # noqa: BLE001  (an output dimension we cannot evaluate counts as 1)
            shape = tuple(d if isinstance(d, int) else 1 for d in t.shape)
        total += math.prod(shape) * _numpy_dtype(t.dtype).itemsize
    return total


def check_bytes(signature: Signature, sets: Sequence[dict[str, int]]) -> int:
    """Bytes of the inputs and outputs of the largest input set."""
    return max((_bytes_of(signature.inputs, s) + _bytes_of(signature.outputs, s) for s in sets or [{}]), default=0)


def _human(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} EiB"


def require_small_enough(signature: Signature, sets: Sequence[dict[str, int]]) -> None:
    """Refuse a check whose inputs and outputs would not fit in the limit.

    Raises:
        UsageError: with the estimate, the limit, and what to do instead.
    """
    need, limit = check_bytes(signature, sets), max_check_bytes()
    if need <= limit:
        return
    hint = "pass --no-check to skip the check"
    if dim_names(signature):
        hint += ", or smaller sizes for the symbolic dimensions with --check-sizes 1,2"
    raise UsageError(f"the check against jax.jit needs {_human(need)} for inputs and outputs, over the limit of "
                     f"{_human(limit)} ({MAX_BYTES_ENV}); {hint}")


def parse_sizes(text: str) -> tuple[int, ...]:
    """``2,5`` -> (2, 5) for --check-sizes."""
    try:
        sizes = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        sizes = ()
    if not sizes or any(s < 1 for s in sizes):
        raise UsageError(f"--check-sizes {text!r}: give comma-separated sizes >= 1, e.g. 2,5")
    return sizes
