"""Judging one input set: each output against jax.jit (``compare.judge``), then, for the outputs beyond
tolerance, again against the float64, op-by-op and spread references (``references``), the float64
result's moves under input and intermediate rounding (``float64_moved``, ``rounding_noise``), subnormal
flushing, zero signs, and what is known of XLA's results on edge values (``known_differences``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

from jaxconv import references
from jaxconv.check_context import release_compiled
from jaxconv.check_inputs import flush_subnormals
from jaxconv.compare import (
    MISMATCH,
    OK,
    UNDECIDED,
    OutputCheck,
    References,
    as_float64,
    farthest,
    is_float,
    is_narrow_float,
    judge,
)
from jaxconv.excess_precision import as_excess_precision
from jaxconv.known_differences import (
    FOREIGN_KERNELS,
    ZERO_SIGN_NOTE,
    ZERO_SIGN_OPS,
    as_artifact_overflow,
    as_edge_difference,
    as_fft_overflow,
    as_jit_overflow,
    as_pooling_nan,
    as_program_order,
    as_sum_overflow,
    nan_dropping_ops,
    one_trace,
)
from jaxconv.nan_choices import as_nan_choice
from jaxconv.rounding_noise import rounding_outputs
from jaxconv.vector_signs import CanonicalSigns, as_vector_signs


def judge_set(runner: Any, fn: Callable[..., Any], arg_specs: Sequence[Any], signature: Any, flat: Sequence[np.ndarray],
               expected: Sequence[np.ndarray], actual: Sequence[np.ndarray], rtol: float | None, atol: float | None,
               label: str) -> list[OutputCheck]:
    """Judge the outputs of one input set; the extra runs happen only for outputs beyond tolerance.

    Those are judged again against the float64 result and jax.jit's spread under input rounding;
    when float64 is not available, also against JAX run op by op.
    """
    with one_trace():  # the rules below may each read the program's ops: one trace for them all
        return _judge_set(runner, fn, arg_specs, signature, flat, expected, actual, rtol, atol, label)


def _judge_set(runner: Any, fn: Callable[..., Any], arg_specs: Sequence[Any], signature: Any, flat: Sequence[np.ndarray],
               expected: Sequence[np.ndarray], actual: Sequence[np.ndarray], rtol: float | None, atol: float | None,
               label: str) -> list[OutputCheck]:
    names = [info.name for info in signature.outputs]
    judged = [judge(n, e, a, rtol, atol, inputs=label) for n, e, a in zip(names, expected, actual)]
    open_ = [i for i, (_, cls) in enumerate(judged) if cls is not None and cls.max(initial=OK) == MISMATCH]
    wide: dict[str, list[np.ndarray]] = {}
    op_by_op = _once(lambda: references.eager_outputs(fn, arg_specs, flat))  # three steps may ask; run once
    rows = (_judge_open(runner, fn, arg_specs, flat, expected, actual, rtol, atol, label, names, judged, open_, wide,
                        op_by_op) if open_ else judged)
    rows = _zero_signs(rows, runner, fn, arg_specs, flat, expected, actual, op_by_op)
    excused = as_excess_precision([row for row, _ in rows], [cls for _, cls in rows], fn, arg_specs, flat, actual,
                                  op_by_op)
    rows = [(row, cls) for row, (_, cls) in zip(excused, rows)]
    signed = as_vector_signs([row for row, _ in rows], fn, arg_specs, flat, expected, actual, rtol, atol,
                             getattr(runner, "kind", ""), CanonicalSigns(fn, arg_specs, flat))
    rows = [(row, cls) for row, (_, cls) in zip(signed, rows)]
    if all(row.verdict != "mismatch" for row, _ in rows):
        return [row for row, _ in rows]
    kind = getattr(runner, "kind", "")
    out = [as_edge_difference(row, kind, e, a, cls) for (row, cls), e, a in zip(rows, expected, actual)]
    out = as_pooling_nan(out, [cls for _, cls in rows], fn, arg_specs, flat, expected, actual)
    out = as_nan_choice(out, [cls for _, cls in rows], fn, arg_specs, flat, runner)
    out = as_program_order(out, [cls for _, cls in rows], fn, arg_specs, flat, expected, actual, wide.get("float64"),
                           op_by_op)
    out = as_fft_overflow(out, [cls for _, cls in rows], fn, arg_specs, flat, expected, actual)
    out = as_sum_overflow(out, [cls for _, cls in rows], fn, arg_specs, flat, wide.get("float64"), expected, actual)
    out = as_artifact_overflow(out, [cls for _, cls in rows], fn, arg_specs, flat, wide.get("float64"), expected,
                               actual)
    return as_jit_overflow(out, [cls for _, cls in rows], wide.get("float64"), expected)


def _once(compute: Callable[[], Any]) -> Callable[[], Any]:
    """``compute``, run on the first call only; later calls return its result."""
    box: list[Any] = []

    def get() -> Any:
        if not box:
            box.append(compute())
        return box[0]

    return get


def _zero_sign_mask(expected: np.ndarray, actual: np.ndarray, cls: np.ndarray | None) -> np.ndarray | None:
    """Elements judged ``ok`` that are zeros of opposite signs (complex: in either part); None when none are."""
    if cls is None or not is_float(expected) or cls.shape != np.shape(expected):
        return None
    e, a = as_float64(expected), as_float64(actual)
    mask = (e == 0) & (a == 0) & (np.signbit(e) != np.signbit(a))
    if np.asarray(expected).dtype.kind == "c":
        mask = mask.any(axis=-1)
    mask &= cls == OK
    return mask if mask.any() else None


def _zero_signs(rows: list[tuple[OutputCheck, np.ndarray | None]], runner: Any, fn: Callable[..., Any],
                arg_specs: Sequence[Any], flat: Sequence[np.ndarray], expected: Sequence[np.ndarray],
                actual: Sequence[np.ndarray], op_by_op: Callable[[], Any] | None = None,
                ) -> list[tuple[OutputCheck, np.ndarray | None]]:
    """Zeros of the other sign than jax.jit's (``1 / x`` is then the other infinity) as a mismatch, unless
    the artifact runs on kernels jaxconv does not write (TF targets: a note), the program has an op after
    which XLA leaves a zero's sign open (a note then), jax.jit's value there
    moves when the inputs move by one rounding step (a cancellation's zero: a note), flushing subnormal
    inputs removes the difference, or JAX run op by op has the artifact's signs (undecided)."""
    masks = {i: m for i, (row, cls) in enumerate(rows)
             if row.ok and (m := _zero_sign_mask(expected[i], actual[i], cls)) is not None}
    if not masks:
        return rows
    out = list(rows)
    kind = getattr(runner, "kind", "")
    ops = None if kind in FOREIGN_KERNELS else nan_dropping_ops(fn, arg_specs, flat, ZERO_SIGN_OPS)
    if ops is None or ops:
        why = (f"computed by {FOREIGN_KERNELS[kind]}, which jaxconv does not control" if kind in FOREIGN_KERNELS
               else f"the program has {', '.join(sorted(ops))}" if ops else "the program could not be traced")
        for i, m in masks.items():
            row, cls = rows[i]
            note = f"{int(m.sum())} zero signs differ ({why if kind in FOREIGN_KERNELS else ZERO_SIGN_NOTE + '; ' + why})"
            out[i] = (dataclasses.replace(row, note=f"{row.note}; {note}" if row.note else note), cls)
        return out
    spread = references.spread_outputs(fn, arg_specs, flat, expected)
    moving: dict[int, int] = {}
    for i in list(masks):  # a zero that moves when the inputs move by one rounding step is a cancellation's
        s_i = spread[i] if spread is not None else None
        if s_i is not None and np.shape(s_i)[:masks[i].ndim] == masks[i].shape:
            moves = (s_i > 0).any(axis=-1) if s_i.ndim > masks[i].ndim else s_i > 0
            moving[i] = int((masks[i] & moves).sum())
            masks[i] = masks[i] & ~moves
    flushed = flush_subnormals(flat)
    if flushed is not None:
        try:
            again, expected_again = [np.asarray(a) for a in runner.run(flushed)], references.reference_outputs(fn, arg_specs, flushed)
            for i in list(masks):
                e, a = as_float64(expected_again[i]), as_float64(again[i])
                same = np.signbit(e) == np.signbit(a)
                masks[i] = masks[i] & ~(same.all(axis=-1) if same.ndim > masks[i].ndim else same)
        except Exception:  # noqa: BLE001  (no explanation then)
            pass
    run = op_by_op or (lambda: references.eager_outputs(fn, arg_specs, flat))
    eager = run() if any(m.any() for m in masks.values()) else None
    for i, m in masks.items():
        if not m.any():
            if moving.get(i):
                row, cls = rows[i]
                note = (f"{moving[i]} zero signs differ where jax.jit moves when the inputs move by one rounding "
                        f"step (a cancellation: its sign is not the program's)")
                out[i] = (dataclasses.replace(row, note=f"{row.note}; {note}" if row.note else note), cls)
            continue
        row, cls = rows[i]
        cls = cls.copy() if cls is not None else cls
        first = int(np.flatnonzero(m.ravel())[0])
        e0, a0 = np.asarray(expected[i]).ravel()[first], np.asarray(actual[i]).ravel()[first]
        where = [int(k) for k in np.unravel_index(first, m.shape)] if m.shape else []
        text = f"{int(m.sum())} of {m.size} elements differ in zero sign only, first at {where}: jax.jit {e0}, artifact {a0}"
        g = eager[i] if eager is not None and i < len(eager) and np.shape(eager[i]) == np.shape(expected[i]) else None
        if g is not None:
            ga, aa = as_float64(g), as_float64(actual[i])
            agree = (ga == 0) & (np.signbit(ga) == np.signbit(aa))
            if bool((agree.all(axis=-1) if agree.ndim > m.ndim else agree)[m].all()):
                cls[m] = UNDECIDED
                out[i] = (dataclasses.replace(row, verdict="undecided", note=f"{text}, as JAX run op by op has them"), cls)
                continue
        cls[m] = MISMATCH
        note = f"{text}; {row.note}" if row.note else text
        out[i] = (dataclasses.replace(row, ok=False, verdict="mismatch", note=note), cls)
    return out


def _judge_open(runner: Any, fn: Callable[..., Any], arg_specs: Sequence[Any], flat: Sequence[np.ndarray],
                expected: Sequence[np.ndarray], actual: Sequence[np.ndarray], rtol: float | None, atol: float | None,
                label: str, names: list[str], judged: list[tuple[OutputCheck, np.ndarray | None]],
                open_: list[int], wide: dict[str, list[np.ndarray]] | None = None,
                op_by_op: Callable[[], Any] | None = None) -> list[tuple[OutputCheck, np.ndarray | None]]:
    """Judge the outputs beyond tolerance again with the float64, spread and eager references (the
    float64 outputs, when computed, go in ``wide["float64"]``)."""
    floats = [i for i in open_ if is_float(expected[i])]
    explained = _explained_by_flushing(runner, fn, arg_specs, flat, expected, actual, open_, rtol, atol)
    spread = references.spread_outputs(fn, arg_specs, flat, expected) if floats else None
    truth, why = None, "the output is float64 already"
    if any(is_narrow_float(expected[i].dtype) for i in floats):
        release_compiled()  # the float32 program's constants, before the float64 one widens them
        truth, why = references.float64_outputs(fn, arg_specs, flat)
        release_compiled()
    truth = truth if truth is not None and len(truth) == len(expected) else None
    if truth is not None and wide is not None:
        wide["float64"] = truth
    eager: list[np.ndarray] | None = None
    refs: dict[int, References] = {}
    for attempt in range(2):
        for i in open_:
            if i in floats:
                t = as_float64(truth[i]) if truth is not None and is_narrow_float(expected[i].dtype) else None
                refs[i] = References(float64=t, eager=as_float64(eager[i]) if eager is not None else None,
                                     spread=spread[i] if spread is not None else None,
                                     why_not=why if t is None else "")
            judged[i] = judge(names[i], expected[i], actual[i], rtol, atol, refs=refs.get(i), inputs=label,
                              explained=explained.get(i))
        left = [i for i in floats if judged[i][1] is not None and judged[i][1].max(initial=OK) >= UNDECIDED
                and (truth is None or not is_narrow_float(expected[i].dtype))]
        if attempt or not left:
            break
        eager = op_by_op() if op_by_op is not None else references.eager_outputs(fn, arg_specs, flat)
        if eager is None or len(eager) != len(expected):
            break
    still = [i for i in floats if refs.get(i) is not None and refs[i].float64 is not None]
    for field, moves in (("moved", float64_moved), ("rounding", rounding_outputs)):
        still = [i for i in still if _finite_mismatch(expected[i], actual[i], judged[i][1])]
        if not still or truth is None:
            break
        release_compiled()  # as around the float64 run: its program's constants, before this one widens them
        found = moves(fn, arg_specs, flat, truth)
        release_compiled()
        for i in still if found is not None else []:
            if found[i] is not None:
                refs[i] = dataclasses.replace(refs[i], **{field: found[i]})
                judged[i] = judge(names[i], expected[i], actual[i], rtol, atol, inputs=label,
                                  explained=explained.get(i), refs=refs[i])
    return judged


def _finite_mismatch(expected: np.ndarray, actual: np.ndarray, cls: np.ndarray | None) -> bool:
    """Whether some mismatching element is finite in jax.jit and in the artifact."""
    if cls is None or cls.shape != np.shape(expected):
        return False
    with np.errstate(all="ignore"):
        e, a = as_float64(expected), as_float64(actual)
        finite = np.isfinite(e) & np.isfinite(a)
    if finite.ndim > cls.ndim:  # complex: (re, im) pairs
        finite = finite.all(axis=-1)
    return bool(((cls == MISMATCH) & finite).any())


MOVED_RUNS = 2
MOVED_SEED = 54321


def float64_moved(fn: Callable[..., Any], arg_specs: Sequence[Any], flat: Sequence[np.ndarray],
                  truth: Sequence[np.ndarray], runs: int = MOVED_RUNS) -> list[np.ndarray | None] | None:
    """Per output (float64, complex as pairs): how far the float64 result moves when every finite, nonzero
    narrow-float input ``x`` moves to ``x + x * d``, ``d`` drawn per element from [-eps, eps] (its dtype's
    rounding step), over ``runs`` draws; None when that cannot be computed.

    The move is computed in float64 (``references.float64_outputs`` widens ``x + x * d`` too), so it is the
    program's own sensitivity to a rounding of its inputs: what any float evaluation may be off by, which
    jax.jit, exact by chance on a cancelling sum, need not show. Each element draws its own fraction of a
    step: -FLT_MAX and FLT_MAX moved by the same fraction would cancel as before.
    """
    import jax
    import jax.numpy as jnp
    import ml_dtypes

    treedef = jax.tree_util.tree_structure(list(arg_specs))
    narrow = [k for k, x in enumerate(flat) if is_narrow_float(np.asarray(x).dtype) and np.size(x)]
    if not narrow:
        return None

    def moved_program(xs: list[Any], ds: list[Any]) -> Any:
        xs = list(xs)
        for k, d in zip(narrow, ds):
            x = xs[k]
            xs[k] = jnp.where(jnp.isfinite(x) & (x != 0), x + x * d, x)
        return fn(*jax.tree_util.tree_unflatten(treedef, xs))

    rng = np.random.default_rng(MOVED_SEED)
    wide = [as_float64(t) for t in truth]
    out: list[np.ndarray | None] = [None] * len(truth)
    for _ in range(runs):
        ds = []
        for k in narrow:
            x = np.asarray(flat[k])
            component = x.real.dtype if x.dtype.kind == "c" else x.dtype
            eps = float(ml_dtypes.finfo(component).eps)
            ds.append(rng.uniform(-eps, eps, x.shape).astype(component))
        got, _ = references.float64_outputs(moved_program, [list(flat), ds], [*flat, *ds])
        if got is None:  # no such reference then; the verdicts stand
            return None
        out = farthest(out, got, wide)
    return out


def _explained_by_flushing(runner: Any, fn: Callable[..., Any], arg_specs: Sequence[Any], flat: Sequence[np.ndarray],
                           expected: Sequence[np.ndarray], actual: Sequence[np.ndarray], open_: Sequence[int],
                           rtol: float | None, atol: float | None) -> dict[int, np.ndarray]:
    """Elements that agree once subnormal inputs are flushed to zero, as XLA on the CPU reads them, and
    that flushing moved in the artifact: the artifact's output on the inputs as they are (run again) is the
    one judged (``actual``) and differs from its output on the flushed inputs there. Where flushing leaves
    the artifact's output as it was, it explains no difference (a masked attention row of -FLT_MAX and
    FLT_MAX beside a subnormal: jax.jit and ONNX Runtime 1.69e30 either way on AVX-512, so an artifact's
    1e33 there is no flushing's)."""
    flushed = flush_subnormals(flat)
    if flushed is None:
        return {}
    try:
        before = [np.asarray(a) for a in runner.run(list(flat))]
        again = [np.asarray(a) for a in runner.run(flushed)]
        expected_again = references.reference_outputs(fn, arg_specs, flushed)
    except Exception:  # noqa: BLE001  (no explanation then; the difference stands)
        return {}
    out = {}
    for i in open_:
        if i < len(again) and i < len(expected_again):
            _, cls = judge("", expected_again[i], again[i], rtol, atol)
            if cls is not None and cls.shape == expected[i].shape:
                out[i] = (cls == OK) & _moved(again[i], before[i]) & ~_moved(before[i], actual[i])
    return out


def _moved(again: np.ndarray, before: np.ndarray) -> np.ndarray:
    """Per element: ``again`` is not ``before`` (NaN counts as equal to NaN); all True where shapes differ."""
    again, before = np.asarray(again), np.asarray(before)
    if again.shape != before.shape:
        return np.ones(again.shape, bool)
    with np.errstate(all="ignore"):
        same = again == before
        if is_float(again) and is_float(before):
            same = same | (np.isnan(again) & np.isnan(before))
    return ~same
