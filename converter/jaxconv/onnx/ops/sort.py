"""stablehlo.sort and the ApproxTopK custom call as stable TopK passes.

ONNX Runtime's TopK is stable (ties keep the lower index first), puts NaN last when ascending
and first when descending, and treats -0 and +0 as equal. That is exactly the order JAX asks for
with its NaN/-0 canonicalizing comparators, so one TopK (K = n) per sort key gives the
permutation; several keys are sorted in successive stable passes from the least significant
key, and every operand is then gathered with the permutation.

The comparator region is read symbolically: it must be a lexicographic strict LT/GT over some
of the operands (optionally after JAX's canonicalization of -0.0 and NaN). Anything else is an
arbitrary comparator and is reported as unsupported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from jaxconv.errors import UnsupportedError
from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops._common import is_inf, order_preserving
from jaxconv.onnx.registry import custom_call_target, lowering
from jaxconv.stablehlo import ir as hir

# Dtypes ONNX Runtime's TopK has a kernel for.
# float16 is cast to float32 here, not left to ONNX Runtime: its inserted Cast merges with a Cast from
# int16/uint16 before it, and the float16 rounding (2049 -> 2048, 65535 -> inf) is lost (ties then differ).
TOPK_NATIVE = dt.kernels("TopK")
# Below this opset there is no BitCast: the sign of a NaN cannot be read.
BITCAST_OPSET = 26

_SWAP = {"LT": "GT", "GT": "LT", "EQ": "EQ", "NE": "NE", "LE": "GE", "GE": "LE"}


@dataclass(frozen=True)
class SortKey:
    """One key of a lexicographic sort.

    Attributes:
        operand: index of the sorted operand holding the key.
        descending: the comparator is GT on this key.
        signed_zero: -0.0 sorts before +0.0 (IEEE total order on raw floats).
        signed_nan: NaNs with the sign bit set sort before everything else (total order).
        checks: outer values the comparator assumes are constants, with the value each must hold
            ("zero" or "nan"); verified when lowering.
        computed: a key the comparator computes from the operands (``operand`` is then -1).
    """

    operand: int
    descending: bool
    signed_zero: bool = False
    signed_nan: bool = False
    checks: tuple[tuple[hir.Value, str], ...] = ()
    computed: "ComputedKey | None" = None


@dataclass(frozen=True)
class ComputedKey:
    """A key the comparator computes elementwise from one side's arguments.

    Attributes:
        ops: the comparator ops computing it, in order (on scalars; lowered on whole operands).
        value: the key, a value of the comparator's left-hand side (even arguments).
        args: the comparator's arguments.
        signature: the computation with argument sides erased (equal for both sides' keys).
    """

    ops: tuple[hir.Op, ...]
    value: hir.Value
    args: tuple[hir.Value, ...]
    signature: Any


class ComparatorError(Exception):
    """The comparator is not one the TopK lowering reproduces."""


# ---- symbolic reading of a comparator ---------------------------------------------------------
@dataclass(frozen=True)
class _Arg:
    index: int


@dataclass(frozen=True)
class _Opaque:
    """A value defined outside the comparator (or a constant in it)."""

    value: hir.Value


@dataclass(frozen=True)
class _Canon:
    """An argument after ``x == 0 ? 0 : x`` and/or ``x != x ? NaN : x``."""

    index: int
    zero: bool
    nan: bool
    checks: tuple[tuple[hir.Value, str], ...]


@dataclass(frozen=True)
class _RawCompare:
    direction: str
    lhs: Any
    rhs: Any
    compare_type: str | None


@dataclass(frozen=True)
class _Order:
    """Strict lexicographic order over keys, most significant first."""

    keys: tuple[SortKey, ...]


@dataclass(frozen=True)
class _Eq:
    key: SortKey


@dataclass(frozen=True)
class _EqThen:
    """``key_a == key_b and <rest>``."""

    key: SortKey
    rest: _Order


def _as_canon(sym: Any) -> _Canon | None:
    if isinstance(sym, _Arg):
        return _Canon(sym.index, False, False, ())
    if isinstance(sym, _Canon):
        return sym
    return None


def _key_compare(cmp: _RawCompare, arg_types: Sequence[hir.TensorType]) -> Any:
    """A compare between the two sides of one operand, as _Order or _Eq; else the raw compare."""
    lhs, rhs = _as_canon(cmp.lhs), _as_canon(cmp.rhs)
    if lhs is None or rhs is None or (lhs.zero, lhs.nan) != (rhs.zero, rhs.nan):
        return cmp
    if lhs.index // 2 != rhs.index // 2 or lhs.index == rhs.index:
        return cmp
    direction = cmp.direction if lhs.index % 2 == 0 else _SWAP[cmp.direction]
    operand = lhs.index // 2
    dtype = arg_types[lhs.index].dtype
    total = dtype in dt.FLOATS and cmp.compare_type == "TOTALORDER"
    key = SortKey(operand, direction == "GT", signed_zero=total and not lhs.zero,
                  signed_nan=total and not lhs.nan, checks=lhs.checks + rhs.checks)
    if direction in ("LT", "GT"):
        return _Order((key,))
    if direction == "EQ":
        return _Eq(key)
    return cmp


def _same_key(a: SortKey, b: SortKey) -> bool:
    sig_a = a.computed.signature if a.computed is not None else None
    sig_b = b.computed.signature if b.computed is not None else None
    return (a.operand, a.signed_zero, a.signed_nan, sig_a) == (b.operand, b.signed_zero, b.signed_nan, sig_b)


def _select(cond: Any, on_true: Any, on_false: Any) -> Any:
    """Recognize JAX's canonicalizing selects; anything else is opaque to the reader."""
    base = _as_canon(on_false)
    if not isinstance(cond, _RawCompare) or base is None:
        raise ComparatorError("select that is not a -0.0/NaN canonicalization")
    # x == 0 ? 0 : x
    if (cond.direction == "EQ" and not base.zero and isinstance(on_true, _Opaque)
            and isinstance(cond.rhs, _Opaque) and _as_canon(cond.lhs) == base):
        checks = ((cond.rhs.value, "zero"),) + (() if cond.rhs.value is on_true.value else ((on_true.value, "zero"),))
        return _Canon(base.index, True, base.nan, base.checks + checks)
    # x != x ? NaN : x   (x is the raw argument)
    if (cond.direction == "NE" and not base.nan and isinstance(on_true, _Opaque)
            and isinstance(cond.lhs, _Arg) and cond.lhs == cond.rhs and cond.lhs.index == base.index):
        return _Canon(base.index, base.zero, True, base.checks + ((on_true.value, "nan"),))
    raise ComparatorError("select that is not a -0.0/NaN canonicalization")


def _combine_or(a: Any, b: Any) -> _Order:
    for first, second in ((a, b), (b, a)):
        if (isinstance(first, _Order) and len(first.keys) == 1 and isinstance(second, _EqThen)
                and _same_key(first.keys[0], second.key)):
            return _Order(first.keys + second.rest.keys)
    raise ComparatorError("'or' that does not continue a lexicographic order")


def _combine_and(a: Any, b: Any) -> _EqThen:
    for first, second in ((a, b), (b, a)):
        if isinstance(first, _Eq) and isinstance(second, _Order):
            return _EqThen(first.key, second)
    raise ComparatorError("'and' that is not 'keys equal and <next key>'")


def read_comparator(block: hir.Block) -> list[SortKey]:
    """The keys of a lexicographic comparator, most significant first.

    A comparator over the operands themselves (after JAX's -0.0/NaN canonicalization) gives
    operand keys; one that computes its keys (the same elementwise computation on each side's
    arguments, e.g. an integer made from a float's bits) gives computed keys.

    Raises:
        ComparatorError: the comparator is something else.
    """
    try:
        return _read_direct(block)
    except ComparatorError as direct:
        try:
            return _read_computed(block)
        except ComparatorError:
            raise direct from None


def _read_direct(block: hir.Block) -> list[SortKey]:
    types = [a.type for a in block.args]
    syms: dict[int, Any] = {a.id: _Arg(i) for i, a in enumerate(block.args)}

    def sym(v: hir.Value) -> Any:
        return syms.get(v.id, _Opaque(v))

    local: dict[int, np.ndarray] = {}
    for op in block.ops:
        if op.name == "stablehlo.constant":
            local[op.results[0].id] = np.asarray(op.attrs.get("value"))
            continue  # stays opaque; its value is checked below (outer values when lowering)
        ins = [sym(v) for v in op.operands]
        if op.name == "stablehlo.compare":
            raw = _RawCompare(op.attrs.get("comparison_direction", ""), ins[0], ins[1], op.attrs.get("compare_type"))
            out: Any = _key_compare(raw, types)
        elif op.name == "stablehlo.select":
            out = _select(*ins)
        elif op.name == "stablehlo.or":
            out = _combine_or(*ins)
        elif op.name == "stablehlo.and":
            out = _combine_and(*ins)
        else:
            raise ComparatorError(f"{op.name} in the comparator")
        syms[op.results[0].id] = out
    if len(block.returns) != 1:
        raise ComparatorError("comparator does not return one predicate")
    result = sym(block.returns[0])
    if not isinstance(result, _Order):
        raise ComparatorError("comparator is not a strict LT/GT ordering of operands")
    return [_checked_locally(key, local) for key in result.keys]


# Ops a computed key may use: elementwise, so a computation on scalars maps over whole operands.
_KEY_OPS = frozenset(f"stablehlo.{n}" for n in (
    "abs", "add", "and", "bitcast_convert", "ceil", "compare", "constant", "convert", "divide", "floor", "maximum",
    "minimum", "multiply", "negate", "not", "or", "remainder", "round_nearest_afz", "round_nearest_even", "select",
    "shift_left", "shift_right_arithmetic", "shift_right_logical", "sign", "subtract", "xor", "exponential", "log",
    "sqrt", "tanh", "is_finite"))


def _read_computed(block: hir.Block) -> list[SortKey]:
    """Keys computed by the comparator: every root compare sets one side's value against the same
    computation on the other side's arguments (argument 2i is operand i's left-hand side)."""
    side: dict[int, str] = {}  # "L", "R", "C" (constant or outer value), "M" (both sides)
    sig: dict[int, Any] = {}
    producer: dict[int, hir.Op] = {}
    for i, a in enumerate(block.args):
        side[a.id] = "LR"[i % 2]
        sig[a.id] = ("arg", i // 2)

    def side_of(v: hir.Value) -> str:
        return side.get(v.id, "C")

    def sig_of(v: hir.Value) -> Any:
        if v.id in sig:
            return sig[v.id]
        return ("outer", v.id)

    syms: dict[int, Any] = {}
    for op in block.ops:
        if op.name not in _KEY_OPS:
            raise ComparatorError(f"{op.name} in the comparator")
        if op.name == "stablehlo.constant":
            value = np.asarray(op.attrs.get("value"))
            side[op.results[0].id] = "C"
            sig[op.results[0].id] = ("const", value.dtype.str, value.shape, value.tobytes())
            producer[op.results[0].id] = op
            continue
        sides = {side_of(v) for v in op.operands} - {"C"}
        out_side = "M" if len(sides) > 1 or "M" in sides else (sides.pop() if sides else "C")
        for r in op.results:
            side[r.id] = out_side
            producer[r.id] = op
            sig[r.id] = (op.name, repr(sorted(op.attrs.items())), tuple(sig_of(v) for v in op.operands), r.type.dtype)
        if out_side != "M":
            continue
        if op.name == "stablehlo.compare":
            syms[op.results[0].id] = _computed_compare(op, side_of, sig_of, producer, block.args)
        elif op.name in ("stablehlo.or", "stablehlo.and"):
            a, b = (syms.get(v.id) for v in op.operands)
            if a is None or b is None:
                raise ComparatorError(f"{op.name} of values that are not key comparisons")
            syms[op.results[0].id] = (_combine_or if op.name == "stablehlo.or" else _combine_and)(a, b)
        else:
            raise ComparatorError(f"{op.name} mixing both sides of the comparator")
    if len(block.returns) != 1 or not isinstance(syms.get(block.returns[0].id), _Order):
        raise ComparatorError("comparator is not a strict LT/GT ordering of computed keys")
    return list(syms[block.returns[0].id].keys)


def _computed_compare(op: hir.Op, side_of, sig_of, producer: dict[int, hir.Op],
                      args: Sequence[hir.Value]) -> Any:
    lhs, rhs = op.operands
    # signatures name arguments by operand, not side: equal signatures are the same computation
    if {side_of(lhs), side_of(rhs)} != {"L", "R"} or sig_of(lhs) != sig_of(rhs):
        raise ComparatorError("compare between different computations of the two sides")
    direction = op.attrs.get("comparison_direction", "")
    left = lhs
    if side_of(lhs) == "R":
        direction, left = _SWAP[direction], rhs
    ops: list[hir.Op] = []
    seen: set[int] = set()

    def visit(v: hir.Value) -> None:
        node = producer.get(v.id)
        if node is None or id(node) in seen:
            return
        for operand in node.operands:
            visit(operand)
        seen.add(id(node))
        ops.append(node)

    visit(left)
    dtype = left.type.dtype
    total = dtype in dt.FLOATS and op.attrs.get("compare_type") == "TOTALORDER"
    key = SortKey(-1, direction == "GT", signed_zero=total, signed_nan=total,
                  computed=ComputedKey(tuple(ops), left, tuple(args), sig_of(left)))
    if direction in ("LT", "GT"):
        return _Order((key,))
    if direction == "EQ":
        return _Eq(key)
    raise ComparatorError(f"{direction} between computed keys")


def lower_computed_key(ctx: LoweringContext, key: ComputedKey, operands: Sequence[str],
                       types: Sequence[hir.TensorType]) -> str:
    """The computed key over whole operands: the comparator's ops, retyped to the operand shape."""
    shape = types[0].shape
    fresh: dict[int, hir.Value] = {}
    block_args, names = [], []
    for i, a in enumerate(key.args):
        if i % 2 == 0:
            v = hir.Value(hir.TensorType(a.type.dtype, shape))
            fresh[a.id] = v
            block_args.append(v)
            names.append(operands[i // 2])
    ops = []
    for op in key.ops:
        results = [hir.Value(hir.TensorType(r.type.dtype, shape)) for r in op.results]
        for r, new in zip(op.results, results):
            fresh[r.id] = new
        ops.append(hir.Op(op.name, [fresh.get(v.id, v) for v in op.operands], results, op.attrs, [], op.location))
    block = hir.Block(args=block_args, ops=ops, returns=[fresh[key.value.id]])
    return ctx.lower_block(block, names)[0]


def _checked_locally(key: SortKey, local: dict[int, np.ndarray]) -> SortKey:
    """``key`` less the checks on constants defined inside the comparator, which are verified here."""
    outer = []
    for value, expected in key.checks:
        if value.id not in local:
            outer.append((value, expected))
        elif not _holds(local[value.id], expected):
            raise ComparatorError("select that canonicalizes with a constant that is not 0.0/NaN")
    return SortKey(key.operand, key.descending, key.signed_zero, key.signed_nan, tuple(outer), key.computed)


def _holds(arr: np.ndarray | None, expected: str) -> bool:
    if arr is None or arr.size != 1:
        return False
    x = np.asarray(arr, dtype=np.float64).reshape(())
    return bool((expected == "zero" and x == 0) or (expected == "nan" and np.isnan(x)))


def comparator_problem(block: hir.Block) -> str | None:
    """Why the comparator cannot be lowered, or None."""
    try:
        read_comparator(block)
    except ComparatorError as e:
        return (f"sort comparator is not a lexicographic LT/GT comparison of its operands ({e}); "
                "arbitrary comparators have no ONNX lowering")
    return None


def _verify_constants(ctx: LoweringContext, keys: Sequence[SortKey]) -> None:
    for key in keys:
        for value, expected in key.checks:
            if _holds(ctx.constant_value(ctx.name_of(value)), expected):
                continue
            raise UnsupportedError("sort comparator canonicalizes with a value that is not a known 0.0/NaN constant")


# ---- emitting ----------------------------------------------------------------------------------
def _axis_size(ctx: LoweringContext, x: str, t: hir.TensorType, axis: int) -> str:
    """K for TopK: the length of ``axis`` as a 1-D int64 tensor."""
    if t.shape[axis] is not None:
        return ctx.i64([t.shape[axis]])
    return ctx.op("Shape", [x], start=axis, end=axis + 1)


_INT_OF_WIDTH = {32: "int32", 64: "int64"}


def _total_order_int(ctx: LoweringContext, x: str, dtype: str, key: SortKey) -> str:
    """An integer whose signed order is the IEEE total order of float ``x`` (needs BitCast)."""
    if dtype in ("bfloat16", "float16"):
        # Exact widening; Where has no 16-bit kernels.
        x, dtype = ctx.cast(x, "float32"), "float32"
    if not key.signed_zero:
        x = ctx.op("Where", [ctx.op("Equal", [x, ctx.scalar(0, dtype)]), ctx.scalar(0, dtype), x])
    if not key.signed_nan:
        x = ctx.op("Where", [ctx.op("IsNaN", [x]), ctx.scalar(np.nan, dtype), x])
    itype = _INT_OF_WIDTH[dt.bit_width(dtype)]
    bits = ctx.op("BitCast", [x], to=dt.onnx_type(itype))
    info = np.iinfo(itype)
    negative = ctx.op("Less", [bits, ctx.scalar(0, itype)])
    flipped = ctx.op("BitwiseXor", [bits, ctx.scalar(info.max, itype)])
    return ctx.op("Where", [negative, flipped, bits])


def _passes(ctx: LoweringContext, x: str, dtype: str, key: SortKey) -> list[tuple[str, bool]]:
    """TopK inputs for one key, least significant first: (tensor, largest)."""
    is_float = dtype in dt.FLOATS
    if is_float and (key.signed_zero or key.signed_nan) and ctx.opset >= BITCAST_OPSET:
        return [(_total_order_int(ctx, x, dtype, key), key.descending)]
    keyed, kdtype = order_preserving(ctx, x, dtype, TOPK_NATIVE)
    passes: list[tuple[str, bool]] = []
    if is_float and key.signed_zero:
        # Ties of the value pass are only -0.0 vs +0.0 (and NaNs): order those by the sign of zero.
        negative_zero = is_inf(ctx, ctx.op("Reciprocal", [keyed]), kdtype, detect_positive=0)
        passes.append((ctx.cast(negative_zero, "uint8"), not key.descending))
    passes.append((keyed, key.descending))
    return passes


def sort_permutation(ctx: LoweringContext, operands: Sequence[str], types: Sequence[hir.TensorType],
                     keys: Sequence[SortKey], axis: int, k: int | None = None) -> tuple[str, str | None]:
    """Indices (int64) that stably sort ``operands`` by ``keys`` along ``axis``.

    Args:
        k: keep only the first ``k`` positions (top-k); None keeps all.

    Returns:
        (permutation, values): ``values`` is the sorted first key operand when the last TopK
        already produced it, else None.
    """
    full = _axis_size(ctx, operands[0], types[0], axis)
    steps: list[tuple[str, bool, bool]] = []  # (tensor, largest, is the raw key operand)
    for key in reversed(list(keys)):
        if key.computed is not None:
            src, dtype = lower_computed_key(ctx, key.computed, operands, types), key.computed.value.type.dtype
        else:
            src, dtype = operands[key.operand], types[key.operand].dtype
        for tensor, largest in _passes(ctx, src, dtype, key):
            steps.append((tensor, largest, tensor == src and key.computed is None))
    perm: str | None = None
    values: str | None = None
    for n, (tensor, largest, raw) in enumerate(steps):
        last = n == len(steps) - 1
        count = ctx.i64([k]) if last and k is not None else full
        if perm is not None:
            tensor = ctx.op("GatherElements", [tensor, perm], axis=axis)
        vals, idx = ctx.op("TopK", [tensor, count], outputs=2, axis=axis, largest=int(largest), sorted=1)
        perm = idx if perm is None else ctx.op("GatherElements", [perm, idx], axis=axis)
        if last and raw and len(steps) == 1:
            values = vals
    assert perm is not None
    return perm, values


def _is_iota_along(arr: np.ndarray | None, axis: int) -> bool:
    if arr is None or arr.ndim == 0 or arr.dtype.kind not in "iu":
        return False
    n = arr.shape[axis]
    shape = [1] * arr.ndim
    shape[axis] = n
    return bool(np.array_equal(arr, np.broadcast_to(np.arange(n).reshape(shape), arr.shape)))


def gather_sorted(ctx: LoweringContext, x: str, dtype: str, perm: str, axis: int) -> str:
    """``x`` rearranged by ``perm`` along ``axis`` (an iota becomes the permutation itself)."""
    if _is_iota_along(ctx.constant_value(x), axis):
        return ctx.cast_if(perm, "int64", dtype)
    return ctx.op("GatherElements", [x, perm], axis=axis)


def _check_sort(op: hir.Op) -> str | None:
    return comparator_problem(op.regions[0])


@lowering("stablehlo.sort", check=_check_sort, onnx_ops=("TopK", "GatherElements"))
def lower_sort(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """Stable TopK passes (K = n) per key, then GatherElements for every operand."""
    try:
        keys = read_comparator(op.regions[0])
    except ComparatorError as e:
        raise UnsupportedError(comparator_problem(op.regions[0]) or str(e)) from e
    _verify_constants(ctx, keys)
    axis = op.attrs.get("dimension", 0) % max(op.operands[0].type.rank, 1)
    types = [v.type for v in op.operands]
    perm, values = sort_permutation(ctx, inputs, types, keys, axis)
    return _sorted_operands(ctx, inputs, types, keys, perm, values, axis)


@custom_call_target("ApproxTopK", onnx_ops=("TopK",),
                    conditions="aggregate_to_topk=true; a comparator that orders by one or more keys")
def lower_approx_top_k(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """jax.lax.approx_max_k / approx_min_k: the exact top k (what XLA's CPU fallback computes)."""
    config = op.attrs.get("mhlo.backend_config")
    if not isinstance(config, dict) or "top_k" not in config:
        raise UnsupportedError("ApproxTopK without a readable backend_config")
    if not config.get("aggregate_to_topk", True):
        raise UnsupportedError("ApproxTopK with aggregate_to_topk=false (partial reduction) has no ONNX lowering")
    called = op.attrs.get("called_computations") or []
    comparator = ctx.module.functions.get(called[0]) if called else None
    if comparator is None:
        raise UnsupportedError("ApproxTopK without its comparator function")
    try:
        keys = read_comparator(comparator.body)
    except ComparatorError as e:
        raise UnsupportedError(comparator_problem(comparator.body) or "ApproxTopK comparator") from e
    _verify_constants(ctx, keys)
    n = len(op.results)
    operands, types = inputs[:n], [v.type for v in op.operands[:n]]
    axis = int(config.get("reduction_dim", types[0].rank - 1)) % types[0].rank
    k = int(config["top_k"])
    perm, values = sort_permutation(ctx, operands, types, keys, axis, k)
    return _sorted_operands(ctx, operands, types, keys, perm, values, axis)


def _sorted_operands(ctx: LoweringContext, operands: list[str], types: list[hir.TensorType], keys: list,
                     perm: str, values: str | None, axis: int) -> list[str]:
    """Every operand reordered by ``perm``; the primary key reuses the sorted ``values`` when there are some."""
    return [values if i == keys[0].operand and values is not None else gather_sorted(ctx, x, t.dtype, perm, axis)
            for i, (x, t) in enumerate(zip(operands, types))]
