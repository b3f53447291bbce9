"""What the check knows of XLA's results on edge values, beyond tolerances: rows of a mismatch that
become ``edge`` (a TF target's kernels, which jaxconv does not write) or ``undecided`` (jax.jit is
no reference there), each with why.

- ``as_edge_difference``: a difference on edge values only, on a TF target (``FOREIGN_KERNELS``);
- ``as_pooling_nan``: NaN in the artifact where jax.jit has a number, in a program with max/min
  pooling or argmax/argmin (XLA on the CPU keeps or drops NaN there by the tensor's size);
- ``as_program_order``: elements where the artifact has JAX's op-by-op value (XLA's fused code drops
  NaN or reorders divisions), where float64 is NaN and jax.jit a number, or where the artifact has
  float64's infinity (XLA flushed a subnormal intermediate);
- ``as_fft_overflow``: inf or NaN on one side only, in a program with an FFT or a complex product;
- ``as_jit_overflow``: jax.jit inf or NaN where the float64 result is finite, alone;
- ``as_artifact_overflow``: the artifact inf or NaN where jax.jit and float64 are finite, on inputs near the
  float range, in a program that sums products;
- ``as_sum_overflow``: inf or NaN on both sides where the float64 result overflows the dtype, in a
  program that sums products (which infinity, or NaN, depends on the summation order).

``ZERO_SIGN_OPS`` names the ops after which XLA leaves the sign of a zero open.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from jaxconv import references
from jaxconv.compare import (
    MISMATCH,
    OutputCheck,
    as_float64,
    is_float,
    is_narrow_float,
    largest_finite,
    tolerance,
)

EDGE = "edge"
# Targets whose kernels jaxconv does not write, and who computes there.
FOREIGN_KERNELS = {"saved-model": "TensorFlow's XLA (XlaCallModule)", "tflite": "TFLite's kernels"}


def edge_text(r: OutputCheck) -> str:
    """What an ``edge`` row says, in one sentence."""
    return f"output {r.name} differs from jax.jit on edge values only (NaN/inf/huge inputs): {r.note}"



def _value_class(x: np.ndarray) -> np.ndarray:
    """Per element: NaN, +inf, -inf or finite, as text."""
    out = np.full(np.shape(x), "finite", dtype=object)
    if not is_float(x):
        return out
    x = as_float64(x)
    out[np.isnan(x)] = "NaN"
    out[np.isposinf(x)] = "+inf"
    out[np.isneginf(x)] = "-inf"
    return out


def element_classes(expected: np.ndarray, actual: np.ndarray, cls: np.ndarray) -> str:
    """The kinds of the mismatching elements, most frequent first, e.g. ``jax.jit NaN / artifact -inf x3``."""
    expected, actual = np.asarray(expected), np.asarray(actual)
    if expected.dtype.kind == "c":  # classes by the real part's pairs would mislead; name the dtype only
        return f"{int((cls == MISMATCH).sum())} complex elements"
    e_cls, a_cls = _value_class(expected), _value_class(actual)
    bad = cls == MISMATCH
    pairs: dict[str, int] = {}
    for e, a in zip(e_cls[bad].ravel(), a_cls[bad].ravel()):
        key = f"jax.jit {e} / artifact {a}"
        pairs[key] = pairs.get(key, 0) + 1
    return ", ".join(f"{k} x{n}" for k, n in sorted(pairs.items(), key=lambda kv: -kv[1]))


def as_edge_difference(row: OutputCheck, runtime: str, expected: np.ndarray, actual: np.ndarray,
                       cls: np.ndarray | None) -> OutputCheck:
    """A mismatch on the edge-value inputs of a TF target, as an ``edge`` row (a warning); other rows unchanged."""
    if (row.verdict != "mismatch" or row.inputs != "edge" or runtime not in FOREIGN_KERNELS or cls is None
            or cls.shape != np.shape(expected)):
        return row
    note = (f"computed by {FOREIGN_KERNELS[runtime]}, which jaxconv does not control; differing elements: "
            f"{element_classes(expected, actual, cls)}; {row.note}")
    return dataclasses.replace(row, ok=True, verdict=EDGE, note=note)


# Ops whose NaN handling in XLA on the CPU depends on the tensor's size (its vectorised max keeps
# or drops a NaN depending on the order it meets it); ``reduce_window`` stands for one whose body is max/min.
NAN_DROPPING_OPS = frozenset({"reduce_window_max", "reduce_window_min", "argmax", "argmin"})
POOLING_NAN_NOTE = "XLA on the CPU drops NaN in max pooling depending on the tensor size"
# The max pool's gradient picks the window element the forward pass kept: where XLA's pooling dropped a NaN
# its gradient (and every update after it) can be NaN where the artifact's is a number, and the other way.
MAX_POOL_GRADIENTS = frozenset({"select_and_scatter_add", "select_and_gather_add"})


_traced: dict[Any, list[Any] | None] | None = None  # program_eqns' results while ``one_trace`` is active


@contextlib.contextmanager
def one_trace() -> Iterator[None]:
    """Within it, ``program_eqns`` traces each program (at the same input shapes) once: the rules that read
    the program's ops (pooling, LU, FFT, sums, half precision, zero signs) ask in turn about one input set."""
    global _traced
    outer, _traced = _traced, {} if _traced is None else _traced
    try:
        yield
    finally:
        _traced = outer


def program_eqns(fn: Callable[..., Any], arg_specs: Sequence[Any], flat: Sequence[np.ndarray]) -> list[Any] | None:
    """Every equation of the traced program, those of nested jaxprs (loop bodies, branches, calls) too;
    None when the program cannot be traced here."""
    key = (id(fn), tuple((np.shape(a), np.asarray(a).dtype.name) for a in flat))
    if _traced is not None and key in _traced:
        return _traced[key]
    found = _trace_eqns(fn, arg_specs, flat)
    if _traced is not None:
        _traced[key] = found
    return found


def _trace_eqns(fn: Callable[..., Any], arg_specs: Sequence[Any], flat: Sequence[np.ndarray]) -> list[Any] | None:
    import jax

    found: list[Any] = []

    def walk(jaxpr: Any) -> None:
        for eqn in jaxpr.eqns:
            found.append(eqn)
            for p in eqn.params.values():
                for sub in (p if isinstance(p, (list, tuple)) else [p]):
                    inner = getattr(sub, "jaxpr", sub)
                    if hasattr(inner, "eqns"):
                        walk(inner)

    try:
        treedef = jax.tree_util.tree_structure(list(arg_specs))
        args = jax.tree_util.tree_unflatten(treedef, [jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype) for a in flat])
        walk(jax.make_jaxpr(fn)(*args).jaxpr)
    except Exception:  # noqa: BLE001
        return None
    return found


def nan_dropping_ops(fn: Callable[..., Any], arg_specs: Sequence[Any], flat: Sequence[np.ndarray],
                     names: frozenset[str] = NAN_DROPPING_OPS) -> set[str] | None:
    """The ops of ``names`` (default ``NAN_DROPPING_OPS``) in the traced program (a generic ``reduce_window``
    with a max or min body counts as ``reduce_window_max``/``_min``); None when the program cannot be traced here."""
    eqns = program_eqns(fn, arg_specs, flat)
    if eqns is None:
        return None
    found: set[str] = set()
    for eqn in eqns:
        name = eqn.primitive.name
        if name in names:
            found.add(name)
        if name == "dot_general" and "dot_general_complex" in names and any(
                getattr(getattr(v, "aval", None), "dtype", np.dtype("f4")).kind == "c" for v in eqn.invars):
            found.add("dot_general_complex")
        body = getattr(eqn.params.get("jaxpr"), "jaxpr", eqn.params.get("jaxpr"))
        if name == "reduce_window" and hasattr(body, "eqns"):
            found.update(f"reduce_window_{e.primitive.name}" for e in body.eqns if e.primitive.name in ("max", "min"))
    return found


def only_nan_where_jit_has_a_number(expected: np.ndarray, actual: np.ndarray, cls: np.ndarray | None,
                                    either_way: bool = False) -> int:
    """How many mismatching elements are NaN in the artifact and a number (finite or inf) in jax.jit (with
    ``either_way``, or NaN in jax.jit and a number in the artifact); 0 unless every mismatching element is
    of that kind."""
    if cls is None or cls.shape != np.shape(expected) or not is_float(expected) or np.asarray(expected).dtype.kind == "c":
        return 0
    bad = cls == MISMATCH
    e, a = np.isnan(as_float64(expected)[bad]), np.isnan(as_float64(actual)[bad])
    one_sided = (a ^ e).all() if either_way else a.all() and not e.any()
    return int(bad.sum()) if bad.any() and one_sided else 0


def as_pooling_nan(rows: list[OutputCheck], classes: Sequence[np.ndarray | None], fn: Callable[..., Any],
                   arg_specs: Sequence[Any], flat: Sequence[np.ndarray], expected: Sequence[np.ndarray],
                   actual: Sequence[np.ndarray]) -> list[OutputCheck]:
    """Mismatches on edge values that are only NaN in the artifact where jax.jit has a number, in a
    program with max/min pooling or argmax/argmin, as ``undecided`` rows naming why; with a max pool's
    gradient in the program, also NaN in jax.jit where the artifact has a number; others unchanged."""
    edge = [r.verdict == "mismatch" and r.inputs == "edge" for r in rows]
    if not any(only_nan_where_jit_has_a_number(e, a, c, either_way=True) for e, a, c, hit
               in zip(expected, actual, classes, edge) if hit):
        return rows
    ops = nan_dropping_ops(fn, arg_specs, flat, NAN_DROPPING_OPS | MAX_POOL_GRADIENTS)
    if not ops or not ops & NAN_DROPPING_OPS:
        return rows
    either_way = bool(ops & MAX_POOL_GRADIENTS)
    counts = [only_nan_where_jit_has_a_number(e, a, c, either_way) if hit else 0
              for e, a, c, hit in zip(expected, actual, classes, edge)]
    where = ("NaN on one side only (the max pool's gradient picks by what the pooling kept)" if either_way
             else "NaN in the artifact where jax.jit has a number")
    return [dataclasses.replace(r, ok=True, verdict="undecided",
                                note=f"{POOLING_NAN_NOTE} (the program has {', '.join(sorted(ops))}): {n} elements are "
                                     f"{where}; {r.note}") if n else r
            for r, n in zip(rows, counts)]


PROGRAM_ORDER_NOTE = ("jax.jit's compiled code reorders the program's arithmetic, drops NaN or flushes subnormal "
                      "intermediates to zero; the artifact follows the program's own order")


def as_op_by_op(actual: np.ndarray, eager: np.ndarray | None, bad: np.ndarray, dtype: str,
                expected: np.ndarray | None = None) -> np.ndarray:
    """The mismatching elements where the artifact has what JAX run op by op has: its inf or NaN, or a value
    within the dtype's tolerance of it, a zero of its sign; for integers and bools, its value.

    Where jax.jit (``expected``) is NaN it has no zero sign to follow, and either zero matches op by op's:
    the artifact drops ``x + 0`` as XLA does (``-0`` where op by op adds ``+0``)."""
    if eager is None or np.shape(eager) != bad.shape:
        return np.zeros(bad.shape, bool)
    if not is_float(np.asarray(actual)):
        return bad & (np.asarray(actual) == np.asarray(eager))
    a, g = as_float64(actual), as_float64(eager)
    rtol, atol = tolerance(dtype, None, None)
    with np.errstate(all="ignore"):
        zero_signs = (a != 0) | (g != 0) | (np.signbit(a) == np.signbit(g))
        if expected is not None and np.shape(expected) == bad.shape and np.asarray(expected).dtype.kind != "c":
            zero_signs |= np.isnan(as_float64(expected))
        same = ((np.isnan(a) & np.isnan(g)) | (np.isinf(a) & (a == g))
                | (np.isfinite(a) & np.isfinite(g) & (np.abs(a - g) <= atol + rtol * np.abs(g)) & zero_signs))
    return bad & same


def _as_float64(expected: np.ndarray, actual: np.ndarray, truth: np.ndarray | None, bad: np.ndarray) -> np.ndarray:
    """The mismatching elements where float64 is NaN and jax.jit a number (no reference value exists),
    where the artifact has float64's infinity, or where both are zeros of one sign (jax.jit's the other)."""
    if truth is None or np.shape(truth) != bad.shape:
        return np.zeros(bad.shape, bool)
    e, a, t = as_float64(expected), as_float64(actual), as_float64(truth)
    no_value = np.isnan(t) & ~np.isnan(e)
    return bad & (no_value | (np.isinf(a) & (a == t)) | _zero_of_float64_sign(e, a, t))


def _zero_of_float64_sign(e: np.ndarray, a: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Zeros of the artifact whose sign float64's zero has and jax.jit's zero lacks."""
    return _opposite_zeros(e, a) & (t == 0) & (np.signbit(a) == np.signbit(t))


def _opposite_zeros(e: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Where both are zeros of opposite signs."""
    return (e == 0) & (a == 0) & (np.signbit(e) != np.signbit(a))


def as_program_order(rows: list[OutputCheck], classes: Sequence[np.ndarray | None], fn: Callable[..., Any],
                     arg_specs: Sequence[Any], flat: Sequence[np.ndarray], expected: Sequence[np.ndarray],
                     actual: Sequence[np.ndarray], truth: Sequence[np.ndarray] | None = None,
                     op_by_op: Callable[[], Any] | None = None) -> list[OutputCheck]:
    """Mismatches on edge values whose every mismatching element the artifact computes as the program
    says and jax.jit's compiled code does not, as ``undecided`` rows naming why; others unchanged.

    An element counts when JAX run op by op (``jax.disable_jit``) has the artifact's value there (XLA's
    fusions drop NaN, as in a Conv, ReLU and sum pooling, and reorder divisions: Optax Adam's
    ``mu / (1 - b1 ** t)`` overflows in the program's order and not in jax.jit's), or when the float64
    result is NaN where jax.jit has a number (XLA on the CPU flushes a subnormal intermediate to zero: a
    second moment of -FLT_MIN decayed by 0.999 gives sqrt(-0) = -0 in jax.jit, NaN in float64 and in the
    artifact; Lion's sign of such a value is 0 in jax.jit, -1 in the artifact, NaN in float64), or when
    the artifact has float64's infinity (a softmax weight exp(-100), subnormal in float32, times inf:
    jax.jit flushes it, 0 * inf = NaN; float64 and the artifact inf). The op-by-op run (``op_by_op``, the
    caller's shared one, else its own) happens only when a row has an element float64 does not explain.

    On other inputs (random, the user's) only a NaN the program itself makes counts: a NaN the artifact, the
    float64 result and JAX run op by op all have where jax.jit has a number (a NaN weight's NaN, which XLA's
    compiled scan of a GRU cell dropped)."""
    candidates = [i for i, (r, cls) in enumerate(zip(rows, classes))
                  if r.verdict == "mismatch" and cls is not None and is_float(np.asarray(expected[i]))
                  and np.asarray(expected[i]).dtype.kind != "c" and np.shape(cls) == np.shape(expected[i])
                  and (r.inputs == "edge" or _nan_only(expected[i], actual[i], cls))]
    wide = truth if truth is not None and len(truth) == len(rows) else None
    if wide is None and any(_zero_sign_only(expected[i], actual[i], classes[i]) for i in candidates):
        wide, _ = references.float64_outputs(fn, arg_specs, flat)  # not computed for sign-only rows
        wide = wide if wide is not None and len(wide) == len(rows) else None
    run = op_by_op or (lambda: references.eager_outputs(fn, arg_specs, flat))
    out = list(rows)
    for i in candidates:
        bad = classes[i] == MISMATCH
        with np.errstate(all="ignore"):
            by_float64 = _as_float64(expected[i], actual[i], wide[i] if wide is not None else None, bad)
            by_eager = np.zeros(bad.shape, bool)
            if rows[i].inputs != "edge":  # the program's own NaN: float64's and op by op's, every element
                if (bad & ~by_float64).any():
                    continue
                eager = run() or []
                by_eager = as_op_by_op(actual[i], eager[i] if i < len(eager) else None, bad,
                                       np.asarray(expected[i]).dtype.name, expected[i])
                by_float64 = np.zeros(bad.shape, bool)
            elif bad.any() and not (by_float64 | ~bad).all():
                eager = run() or []
                by_eager = as_op_by_op(actual[i], eager[i] if i < len(eager) else None, bad & ~by_float64,
                                        np.asarray(expected[i]).dtype.name, expected[i])
        if bad.any() and bool((by_eager | by_float64 | ~bad).all()):
            parts = []
            if by_eager.any():
                parts.append(f"{int(by_eager.sum())} have JAX's op-by-op value")
            signs = by_float64 & (as_float64(actual[i]) == 0)
            if (by_float64 & ~signs).any():
                parts.append(f"{int((by_float64 & ~signs).sum())} lie where float64 is NaN or has their infinity")
            if signs.any():
                parts.append(f"{int(signs.sum())} lie where float64 has their zero's sign")
            out[i] = dataclasses.replace(rows[i], ok=True, verdict="undecided",
                                         note=f"{PROGRAM_ORDER_NOTE}; of the elements where jax.jit differs, "
                                              f"{' and '.join(parts)}; {rows[i].note}")
    return out


def _nan_only(expected: np.ndarray, actual: np.ndarray, cls: np.ndarray | None) -> bool:
    """Whether every mismatching element is a NaN of the artifact where jax.jit has a number."""
    bad = cls == MISMATCH
    with np.errstate(all="ignore"):
        return bool(bad.any()) and bool((~bad | (np.isnan(as_float64(actual)) & ~np.isnan(as_float64(expected)))).all())


def _zero_sign_only(expected: np.ndarray, actual: np.ndarray, cls: np.ndarray | None) -> bool:
    """Whether a row's mismatching elements include zeros of opposite signs."""
    if cls is None:
        return False
    with np.errstate(all="ignore"):
        e, a = as_float64(expected), as_float64(actual)
        return bool(((cls == MISMATCH) & _opposite_zeros(e, a)).any())


FFT_OVERFLOW_NOTE = ("XLA's FFT and complex matrix products overflow in other intermediate sums than the "
                     "ONNX model's real matrix products")


def only_non_finite_differences(expected: np.ndarray, actual: np.ndarray, cls: np.ndarray | None) -> int:
    """How many elements mismatch, when every one of them is infinite or NaN on one side, or off by no
    more than the dtype's tolerance relative to the output's largest finite magnitude (a transform's
    error bound is relative to the whole signal, not to each element); else 0."""
    if cls is None or cls.shape != np.shape(expected) or not is_float(expected):
        return 0
    bad = cls == MISMATCH
    expected, actual = np.asarray(expected), np.asarray(actual)
    e, a = expected[bad], actual[bad]
    with np.errstate(all="ignore"):
        finite = np.isfinite(e) & np.isfinite(a)
        scale = np.abs(np.where(np.isfinite(expected), expected, 0)).max(initial=0.0)
        rtol, atol = tolerance(expected.dtype.name, None, None)
        close = finite & (np.abs(a.astype(np.complex128) - e) <= atol + rtol * scale)
        ok = bad.any() and bool((~finite | close).all())
    return int(bad.sum()) if ok else 0


def as_fft_overflow(rows: list[OutputCheck], classes: Sequence[np.ndarray | None], fn: Callable[..., Any],
                    arg_specs: Sequence[Any], flat: Sequence[np.ndarray], expected: Sequence[np.ndarray],
                    actual: Sequence[np.ndarray]) -> list[OutputCheck]:
    """Mismatches on edge values that are only infinities or NaN on one side, in a program with an FFT or
    a complex matrix product, as ``undecided`` rows naming why (where sums overflow depends on their
    order); others unchanged."""
    counts = [only_non_finite_differences(e, a, c) if r.verdict == "mismatch" and r.inputs == "edge" else 0
              for r, c, e, a in zip(rows, classes, expected, actual)]
    if not any(counts) or not nan_dropping_ops(fn, arg_specs, flat, frozenset({"fft", "dot_general_complex"})):
        return rows
    return [dataclasses.replace(r, ok=True, verdict="undecided",
                                note=f"{FFT_OVERFLOW_NOTE}: {n} elements are infinite or NaN on one side only, "
                                     f"or within tolerance of the output's largest magnitude; "
                                     f"{r.note}") if n else r
            for r, n in zip(rows, counts)]


SUMMING_OPS = frozenset({"dot_general", "conv_general_dilated", "reduce_sum", "cumsum", "reduce_window_sum"})
SUM_OVERFLOW_NOTE = ("a sum of terms beyond float range: its float64 result overflows the dtype, and which "
                     "infinity, or NaN, the float sums reach depends on the order they add in")


def _edge_float_mismatch(r: OutputCheck, cls: np.ndarray | None, t: Any, e: np.ndarray,
                         a: np.ndarray | None = None) -> np.ndarray | None:
    """The mask of mismatching elements of a real float32-or-narrower output on edge values whose float64
    result ``t`` (and artifact ``a``, when given) line up with it; None for any other row."""
    if not (r.verdict == "mismatch" and r.inputs == "edge" and cls is not None and is_narrow_float(e.dtype)
            and e.dtype.kind != "c" and np.shape(t) == e.shape == cls.shape and (a is None or a.shape == e.shape)):
        return None
    bad = cls == MISMATCH
    return bad if bad.any() else None


def _explained_counts(rows: list[OutputCheck], classes: Sequence[np.ndarray | None], truth: Sequence[np.ndarray],
                      expected: Sequence[np.ndarray], actual: Sequence[np.ndarray],
                      explains: Callable[[np.ndarray, np.ndarray, np.ndarray, float], np.ndarray]) -> list[int]:
    """Per row, how many elements mismatch on edge values when ``explains(jit, artifact, float64, largest)``
    (float64 values of the mismatching elements, the dtype's largest finite value) holds for every one of
    them; else 0."""
    counts = []
    for r, cls, t, e, a in zip(rows, classes, truth, expected, actual):
        e, a = np.asarray(e), np.asarray(a)
        bad = _edge_float_mismatch(r, cls, t, e, a)
        n = 0
        if bad is not None:
            with np.errstate(all="ignore"):
                fits = explains(as_float64(e)[bad], as_float64(a)[bad], as_float64(t)[bad], largest_finite(e.dtype))
            n = int(bad.sum()) if bool(np.all(fits)) else 0
        counts.append(n)
    return counts


def as_sum_overflow(rows: list[OutputCheck], classes: Sequence[np.ndarray | None], fn: Callable[..., Any],
                    arg_specs: Sequence[Any], flat: Sequence[np.ndarray], truth: Sequence[np.ndarray] | None,
                    expected: Sequence[np.ndarray], actual: Sequence[np.ndarray]) -> list[OutputCheck]:
    """Mismatches on edge values whose every mismatching element is inf or NaN in both jax.jit and the
    artifact where the float64 result overflows the dtype (it is infinite, or beyond the largest finite
    value), in a program with a dot product, a convolution or a sum, as ``undecided`` rows naming why;
    others unchanged. ``[-inf, FLT_MAX x 7] @ ones``: jax.jit and float64 -inf, ONNX Runtime's vectorised
    sum NaN (a partial sum reached +inf first); a Flax Dense over edge-valued params: float64 5.97e38,
    jax.jit NaN, the artifact -inf."""
    if truth is None or len(truth) != len(rows):
        return rows
    counts = _explained_counts(rows, classes, truth, expected, actual,
                               lambda e, a, t, big: (np.abs(t) > big) & ~np.isfinite(e) & ~np.isfinite(a))
    if not any(counts) or not nan_dropping_ops(fn, arg_specs, flat, SUMMING_OPS):
        return rows
    return [dataclasses.replace(r, ok=True, verdict="undecided",
                                note=f"{SUM_OVERFLOW_NOTE}: {n} elements are inf or NaN in jax.jit and the artifact "
                                     f"where float64 is beyond the dtype's range; {r.note}") if n else r
            for r, n in zip(rows, counts)]


JIT_OVERFLOW_NOTE = ("jax.jit overflows in float32 where the float64 result is finite, and where a sum of huge "
                     "terms overflows depends on the order it is added in")


def as_jit_overflow(rows: list[OutputCheck], classes: Sequence[np.ndarray | None], truth: Sequence[np.ndarray] | None,
                    expected: Sequence[np.ndarray]) -> list[OutputCheck]:
    """Mismatches on edge values whose every mismatching element is inf or NaN in jax.jit but finite (and
    within the dtype's range) in float64, as ``undecided`` rows naming why: jax.jit is no reference
    there (a dot product of +-FLT_MAX terms is inf, -inf or NaN by the order of its sums); others unchanged.

    Undecided, not a note: the float64 reference, the arbiter, licenses an artifact's element only
    within tolerance of it (``compare.overflowed_in_jit`` makes those ``ok (float64)`` already). Here
    the artifact is off float64 too (``relu(x @ w)`` with a row of +-FLT_MAX: jax.jit NaN, ONNX
    Runtime 0 after its -inf, float64 1.78e38): another summation order's overflow, or a bug on
    those elements, which nothing here tells apart; ``--strict`` must still fail it."""
    if truth is None or len(truth) != len(rows):
        return rows
    out = []
    for r, cls, t, e in zip(rows, classes, truth, expected):
        e = np.asarray(e)
        bad = _edge_float_mismatch(r, cls, t, e)
        if bad is not None:
            t64 = as_float64(t)[bad]
            with np.errstate(all="ignore"):
                jit_overflowed = ~np.isfinite(as_float64(e)[bad]) & np.isfinite(t64) & (np.abs(t64) <= largest_finite(e.dtype))
            if bool(jit_overflowed.all()):
                r = dataclasses.replace(r, ok=True, verdict="undecided",
                                        note=f"{JIT_OVERFLOW_NOTE}: {int(bad.sum())} elements; {r.note}")
        out.append(r)
    return out


ARTIFACT_OVERFLOW_NOTE = ("the artifact overflows in float32 where jax.jit and the float64 result are finite, on "
                          "inputs near the float range in a program that sums products: where a sum of huge terms "
                          "overflows depends on the order it is added in")
HUGE_INPUT = 2.0 ** -8  # of the dtype's largest value: an input this large makes such products


def as_artifact_overflow(rows: list[OutputCheck], classes: Sequence[np.ndarray | None], fn: Callable[..., Any],
                         arg_specs: Sequence[Any], flat: Sequence[np.ndarray], truth: Sequence[np.ndarray] | None,
                         expected: Sequence[np.ndarray], actual: Sequence[np.ndarray]) -> list[OutputCheck]:
    """``as_jit_overflow`` the other way round: mismatches on edge values whose every mismatching element is
    inf or NaN in the artifact but finite in jax.jit and in float64 (or the float64 result's own inf or NaN,
    where jax.jit's sum overflowed another way), where an input is within ``HUGE_INPUT`` of the float range
    and the program sums products (``SUMMING_OPS``), as ``undecided`` rows naming why.
    ONNX Runtime's convolutions on AVX-512 add a 1x1 convolution's terms of +-FLT_MAX inputs in another
    order than XLA's and reach inf - inf = NaN where jax.jit and float64 have 0.129 (a MobileNet block
    through hard-swish and a depthwise convolution). Undecided, not ok: the artifact is off float64,
    which another summation order explains and a bug on those elements would too; ``--strict`` fails it."""
    if truth is None or len(truth) != len(rows):
        return rows
    counts = _explained_counts(rows, classes, truth, expected, actual, _artifact_overflowed)
    if not any(counts) or not _holds_huge(flat) or not nan_dropping_ops(fn, arg_specs, flat, SUMMING_OPS):
        return rows
    return [dataclasses.replace(r, ok=True, verdict="undecided",
                                note=f"{ARTIFACT_OVERFLOW_NOTE}: {n} elements; {r.note}") if n else r
            for r, n in zip(rows, counts)]


def _artifact_overflowed(e: np.ndarray, a: np.ndarray, t: np.ndarray, big: float) -> np.ndarray:
    """The artifact inf or NaN where jax.jit and float64 are finite (and in range), or float64's own inf or NaN."""
    overflowed = ~np.isfinite(a) & np.isfinite(e) & np.isfinite(t) & (np.abs(t) <= big)
    return overflowed | (np.isnan(a) & np.isnan(t)) | (np.isinf(a) & (a == t))


def _holds_huge(flat: Sequence[np.ndarray]) -> bool:
    """Whether a float input holds a finite value within ``HUGE_INPUT`` of its dtype's largest."""
    for x in flat:
        x = np.asarray(x)
        if is_narrow_float(x.dtype) and x.dtype.kind != "c" and x.size:
            with np.errstate(all="ignore"):
                finite = np.abs(as_float64(x)[np.isfinite(as_float64(x))])
            if finite.size and finite.max() >= largest_finite(x.dtype) * HUGE_INPUT:
                return True
    return False


# Ops after which XLA leaves the sign of a zero open: a dot product or a convolution of zeros, a max
# or min of -0.0 and +0.0, a sort of them, a transform or a matrix factorization.
ZERO_SIGN_OPS = frozenset({"dot_general", "conv_general_dilated", "reduce_max", "reduce_min", "reduce_window_max",
                           "reduce_window_min", "reduce_window", "cummax", "cummin", "sort", "fft", "eigh", "eig",
                           "svd", "qr", "lu", "cholesky", "triangular_solve", "schur", "hessenberg", "tridiagonal",
                           "householder_product", "geqrf", "tridiagonal_solve"})
ZERO_SIGN_NOTE = "XLA leaves the sign of a zero open in dot products, convolutions, max/min ties and factorizations"
