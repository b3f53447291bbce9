"""Fuzz one program: generate, evaluate on each target, minimise and classify what fails.

``fuzz_task`` runs in a pool worker and returns one JSON-able record per target. A
failure's class is ``op/dtype/kind`` of its minimised form (``where/f32/signed-zero``,
``pad_edge/u8/crash``); ``verdict`` is ``silent`` when jaxconv's own default check passed
the artifact and ``caught`` when it reported a mismatch.
"""

from __future__ import annotations

import itertools
import os
import time
from typing import Any

from conformance.fuzz import convzeros, known, reproducer
from conformance.fuzz.compare import compare_all
from conformance.fuzz.generate import generate
from conformance.fuzz.minimise import Failure, flush_subnormals, minimise
from conformance.fuzz.program import FLOATS, SHORT, FuzzProgram
from conformance.fuzz.run import attempt, evaluate, judged_ok

REPRODUCERS_PER_CLASS = 3


def program_seed(seed: int, k: int) -> int:
    """The seed of program ``k`` of a run started with ``--seed seed``."""
    return seed * 1_000_003 + k


def class_of(failure: Failure, target: str) -> str:
    """``op/dtype/kind`` of a minimised failure, prefixed by the target unless it is ONNX."""
    p = failure.program
    out = p.outputs[failure.diff.output] if failure.diff is not None and failure.diff.output < len(p.outputs) else p.outputs[-1]
    producer = next((s for s in p.steps if s.out == out), p.steps[-1] if p.steps else None)
    ops = [s.op for s in p.steps]
    if failure.diff is not None and failure.diff.kind == "subnormal" and producer is not None:
        ops = [producer.op]  # often classified before minimising: the chain would only add noise
    if len(ops) > 3:
        ops = ops[:2] + ["..", ops[-1]]
    name = "+".join(ops) if ops else "identity"
    dtype = SHORT[p.types[producer.args[0]].dtype] if producer is not None and producer.args else "-"
    kind = "crash" if failure.status == "crash" else (failure.diff.kind if failure.diff else "?")
    prefix = "" if target == "onnx" else f"{target}:"
    return f"{prefix}{name}/{dtype}/{kind}"


def describe(failure: Failure) -> str:
    """One line: the ops, the input specs and what differs."""
    p = failure.program
    specs = ", ".join(f"v{i}={p.types[i].spec}" for i in p.inputs)
    what = failure.detail if failure.status == "crash" or failure.diff is None else failure.diff.line()
    small = [f"v{i}={_short(a)}" for i, a in zip(p.inputs, failure.inputs) if a.size <= 4]
    return f"{' -> '.join(p.ops()) or 'identity'} on {specs}: {what}" + (f"; inputs {', '.join(small)}" if small else "")


def _short(a: Any) -> str:
    import numpy as np

    return np.array2string(np.asarray(a), separator=",", threshold=8).replace("\n", "")


def _reproducers_written(folder: str, klass: str) -> int:
    path = os.path.join(folder, reproducer.slug(klass))
    return len(os.listdir(path)) if os.path.isdir(path) else 0


def fuzz_task(task: dict[str, Any]) -> list[dict[str, Any]]:
    """Fuzz one program on each target in ``task['targets']``; one record per target."""
    from conformance.worker import _quiet_runtimes

    _quiet_runtimes()
    seed = task["seed"]
    program = generate(seed, family=task.get("family", "mixed"), kinds=task.get("kinds"),
                       symbolic=task.get("symbolic", False))
    records = []
    for target in task["targets"]:
        start = time.perf_counter()
        rec = fuzz_program(program, seed, target, task["out"], task.get("minimise", True))
        rec["seconds"] = round(time.perf_counter() - start, 3)
        records.append(rec)
    return records


def fuzz_program(program: FuzzProgram, seed: int, target: str, folder: str, do_minimise: bool = True) -> dict[str, Any]:
    """Evaluate, and for a mismatch or crash minimise, classify and maybe write a reproducer."""
    outcome = evaluate(program, target, seed)
    rec: dict[str, Any] = {"seed": seed, "target": target, "status": outcome.status, "detail": outcome.detail[:300],
                           "ops": program.ops()}
    if outcome.rules:
        rec["rules"] = {rule: n for rule, n in sorted(outcome.rules.items()) if n}
        rec["rules_known"] = sorted(outcome.rules)
    if outcome.status not in ("mismatch", "crash"):
        return rec
    if outcome.status == "crash":
        from conformance.fuzz.generate import input_values

        failure = Failure(program, input_values(program, "normal", seed), "crash", detail=outcome.detail)
        rec["verdict"] = "crash"
    else:
        failure = Failure(outcome.program or program, outcome.inputs, "mismatch", outcome.diff, outcome.detail,
                          outcome.expected, outcome.actual)
        rec["verdict"] = "silent" if outcome.check == "ok" else "caught"
        rec["input_set"] = outcome.input_set
        if failure.program.batch_size() is not None:
            rec["batch"] = failure.program.batch_size()
    small = _explain(failure, target)  # cheap, and a flushed difference needs no minimising
    if do_minimise and not (small.diff is not None and small.diff.kind == "subnormal"):
        small = _explain(minimise(failure, target, full=False), target)
    row = _classify(small, target, rec) or _relabel(small, target, rec)
    if do_minimise and not row and _reproducers_written(folder, rec["class"]) < REPRODUCERS_PER_CLASS:
        small = _fill_outputs(_explain(minimise(small, target, full=True, max_tries=80, max_seconds=30), target), target)
        row = _classify(small, target, rec) or _relabel(small, target, rec)  # smaller: one mechanism left
        if not row:
            rec["reproducer"] = reproducer.write(small, rec["class"], rec["verdict"], rec["description"], target, folder,
                                                 f"seed{seed}")
    return rec


def _relabel(small: Failure, target: str, rec: dict[str, Any]) -> known.Known | None:
    """Try the experiments that name a difference (conv zeros or overflow order, XLA's excess precision,
    a one-ulp intermediate, XLA's fused multiply-adds); the known row of the renamed class, if one explains it."""
    if small.diff is None:
        return None
    if convzeros.relabel(small).diff.kind in ("conv-zeros", "overflow-order") \
            or _relabel_excess_precision(small).diff.kind == "excess-precision" \
            or _relabel_last_bit(small).diff.kind == "last-bit" \
            or _relabel_dot_order(small, target).diff.kind == "dot-order" \
            or _relabel_judged(small, target).diff.kind == "judged" \
            or _relabel_xla_fma(small).diff.kind == "xla-fma":
        return _classify(small, target, rec)
    return None


def _relabel_judged(failure: Failure, target: str) -> Failure:
    """Kind ``judged`` for a difference that jaxconv's own judging passes on the failure's inputs: the check
    would call these outputs ok (closer to the float64 result than the tolerance asks, a known XLA result)."""
    if failure.status == "mismatch" and failure.diff is not None and failure.expected and failure.actual \
            and failure.diff.kind not in ("load-error", "run-error") \
            and judged_ok(failure.program, target, failure.inputs, failure.expected, failure.actual):
        failure.diff.kind = "judged"
    return failure


def _explain(failure: Failure, target: str) -> Failure:
    """Refine the kind of a difference: bitcast bits read as floats, XLA's subnormal flushing."""
    return _relabel_subnormal(_bitcast_kind(failure), target)


def _ulp_step(a: Any, up: bool) -> Any:
    """``a`` moved one unit in the last place toward +inf (``up``) or -inf, for any float dtype."""
    import numpy as np

    a = np.asarray(a)
    uint = {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    bits = a.view(uint).copy()
    wide = a.astype(np.float64)
    grow = (wide > 0) if up else (wide < 0)
    shrink = (wide < 0) if up else (wide > 0)
    bits = np.where(grow, bits + uint(1), np.where(shrink, bits - uint(1), bits))
    zero = wide == 0
    sign = uint(1) << uint(8 * a.dtype.itemsize - 1)
    bits = np.where(zero, uint(1) if up else sign | uint(1), bits)
    out = bits.astype(uint).view(a.dtype)
    return np.where(np.isfinite(wide), out, a)


def _relabel_last_bit(failure: Failure) -> Failure:
    """Kind ``last-bit`` when moving one float intermediate by one ulp makes jax.jit give the target's result.

    XLA's and ONNX Runtime's float functions may round differently in the last bit; a later op
    (rem, a cancellation, a cast to integer) can magnify that beyond any tolerance. The move is the
    whole value up or down, only the differing output's elements, or the value jax computes op by op
    (``jax.disable_jit``: no fusion, so no FMA contraction of ``a * b + c * d``) of a float32/float64 step
    with a product and a sum, where that is within one ulp of jax.jit's in every element.
    """
    import numpy as np

    from conformance.fuzz.minimise import intermediates, replays, substitute
    from conformance.fuzz.run import Invalid

    d = failure.diff
    if failure.status != "mismatch" or d is None or d.kind not in ("value", "inf", "nan") or not failure.actual:
        return failure
    if len(failure.program.steps) < 2:
        return failure
    try:
        values = intermediates(failure.program, failure.inputs)
    except Invalid:
        return failure
    differing = _differing(failure)
    unfused = _unfused_intermediates(failure)
    for step in failure.program.steps[:-1]:
        value = np.asarray(values.get(step.out))
        if value.dtype.name not in ("float16", "bfloat16", "float32", "float64") or value.size == 0:
            continue
        program = substitute(failure.program, step, values)
        # the whole value, or (same shape as the differing output) only its differing elements
        masks = [None] + ([differing] if differing is not None and differing.shape == value.shape else [])
        moves = [_ulp_step(value, up) if mask is None else np.where(mask, _ulp_step(value, up), value)
                 for mask, up in itertools.product(masks, (True, False))]
        eager = unfused.get(step.out)
        if eager is not None and _may_contract(step, value) and _within_one_ulp(eager, value):
            moves.append(eager)
        for step_value in moves:
            same = replays(program, failure, step_value)
            if same is None:
                break
            if same:
                d.kind = "last-bit"
                return failure
    return failure


DOT_STEPS = frozenset({"matmul", "dot_general_f32", "vmap_matvec", *known.MODEL_DOTS})


def _relabel_dot_order(failure: Failure, target: str) -> Failure:
    """Kind ``dot-order`` when a float32/float64 dot's sum, as the target computes it, explains the difference.

    The differing output is a dot no farther from the float64 dot than jax.jit's rounding (4x its largest
    error, or 8 ulps of the largest result); or the target's value of an earlier dot step (its own artifact of
    the program up to that step) is within the tolerance of jax.jit's and as close to float64, and jax.jit of
    the rest of the program, given it, gives the target's outputs. Both are float sums in another order (XLA's
    dot emitter, ONNX Runtime's MLAS); cancelling products, or a cancellation after the dot, magnify their last
    bits. float16/bfloat16 dots are left out: there the accumulation's precision, not only its order, could
    differ.
    """
    import numpy as np

    from conformance.fuzz.minimise import intermediates, replays, substitute
    from conformance.fuzz.program import PRELUDE
    from conformance.fuzz.run import Invalid, attempt

    d = failure.diff
    if failure.status != "mismatch" or d is None or d.kind not in ("value", "inf", "nan") or not failure.actual:
        return failure
    steps = [s for s in failure.program.steps if s.op in DOT_STEPS and _wide_dot(failure.program, s)]
    if not steps:
        return failure
    try:
        values = intermediates(failure.program, failure.inputs)
    except Invalid:
        return failure
    given = {**dict(zip(failure.program.inputs, failure.inputs)), **values}
    final = steps[-1] if steps[-1].out == failure.program.outputs[d.output] else None
    if final is not None:  # the differing output is the dot itself
        others = [k for k in range(len(failure.expected)) if k != d.output]
        if compare_all([failure.expected[k] for k in others], [failure.actual[k] for k in others]) is None \
                and _as_rounded_as_jit(final, np.asarray(failure.actual[d.output]), given, PRELUDE):
            d.kind = "dot-order"
            return failure
    for step in steps:
        if step.out in failure.program.outputs:
            continue
        prefix = failure.program.copy()
        prefix.outputs = [step.out]
        prefix = prefix.prune()
        status, _, jit_value, target_value, _ = attempt(prefix, target, failure.inputs)
        if status != "ok" or not target_value:  # ok: within the tolerance of jax.jit's
            continue
        mine = np.asarray(target_value[0])
        if not _as_rounded_as_jit(step, mine, given, PRELUDE):
            continue
        if replays(substitute(failure.program, step, values), failure, mine):
            d.kind = "dot-order"
            return failure
    return failure


def _wide_dot(program: Any, step: Any) -> bool:
    """A dot ``step`` that sums in float32/float64: its result and its float operands (a float16 product that a
    float64 scale then promotes to float32 keeps its half-precision sums)."""
    wide = ("float32", "float64")
    floats = [program.types[a].dtype for a in step.args if program.types[a].dtype in FLOATS]
    return program.types[step.out].dtype in wide and all(dtype in wide for dtype in floats)



def _as_rounded_as_jit(step: Any, mine: Any, given: dict[int, Any], prelude: str) -> bool:
    """The target's value of a dot ``step`` is no farther from the float64 dot than jax.jit's float rounding:
    4x jax.jit's largest error, or 8 ulps of the largest result."""
    import numpy as np

    wide = _step_in_float64(step, given, prelude)
    theirs = given.get(step.out)
    if wide is None or theirs is None or wide.shape != mine.shape or not np.isfinite(wide).all():
        return False
    if np.isnan(mine.astype(np.float64)).any():
        return False
    err_jit = float(np.abs(np.asarray(theirs).astype(np.float64) - wide).max(initial=0.0))
    err_mine = float(np.abs(mine.astype(np.float64) - wide).max(initial=0.0))
    ulp = float(np.finfo(mine.dtype).eps) * float(np.abs(wide).max(initial=0.0))
    return err_mine <= max(4 * err_jit, 8 * ulp)


def _step_in_float64(step: Any, values: dict[int, Any], prelude: str) -> Any:
    """``step`` on its arguments widened to float64 (its closed-over weights as they are), or None."""
    import jax
    import numpy as np

    params = [f"a{k}" for k in range(len(step.args))]
    scope: dict[str, Any] = {}
    try:
        exec(compile(prelude + f"def g({', '.join(params)}):\n    return " + step.expr.format(*params) + "\n",  # noqa: S102
                     "<fuzz-step>", "exec"), scope)
        args = [np.asarray(values[a]) for a in step.args]
        args = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in args]
        with jax.enable_x64(True):
            out = np.asarray(scope["g"](*args))
    except Exception:  # noqa: BLE001  (no verdict from this experiment)
        return None
    return out.astype(np.float64) if out.dtype.kind == "f" else None


def _unfused_intermediates(failure: Failure) -> dict[int, Any]:
    """Every step's value computed op by op (``jax.disable_jit``), or {} where that fails or loops."""
    import jax
    import numpy as np

    if any(s.op in ("while_loop", "fori_loop", "scan") for s in failure.program.steps):
        return {}  # Python loops, op by op: slow, and a loop body's rounding is not one ulp of one value
    p = failure.program.copy()
    p.outputs = [s.out for s in p.steps]
    try:
        with jax.enable_x64(p.uses_x64()), jax.disable_jit():
            outs = p.function()(*[np.asarray(a) for a in failure.inputs])
        return {k: np.asarray(v) for k, v in zip(p.outputs, outs)}
    except Exception:  # noqa: BLE001  (no verdict from this experiment)
        return {}


def _may_contract(step: Any, value: Any) -> bool:
    """A float32/float64 step with a product and a sum, which XLA on CPU may contract into an FMA. Not
    float16/bfloat16: there XLA's own rewrites (its division by a square root) and excess precision differ
    from the op-by-op value too, and a lowering must follow them."""
    expr = step.expr.replace("1e-", "")
    return value.dtype.name in ("float32", "float64") and "*" in expr and ("+" in expr or " - " in expr)


def _within_one_ulp(a: Any, b: Any) -> bool:
    """``a`` differs from ``b`` (same dtype and shape), and each element by at most one ulp (NaN where NaN)."""
    import numpy as np

    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    same = (a == b) | (np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64)))
    near = same | (a == _ulp_step(b, True)) | (a == _ulp_step(b, False))
    return bool(near.all() and not same.all())


def _differing(failure: Failure) -> Any:
    """Where the differing output of a mismatch differs (a bool array), or None."""
    import numpy as np

    from conformance.fuzz.compare import compare_one

    d = failure.diff
    if d is None or not failure.expected or d.output >= len(failure.expected):
        return None
    e, a = np.asarray(failure.expected[d.output]), np.asarray(failure.actual[d.output])
    if e.shape != a.shape or e.ndim == 0:
        return None
    bad = np.zeros(e.shape, bool)
    for index in np.ndindex(*e.shape):
        bad[index] = compare_one(e[index], a[index]) is not None
    return bad


_STRICT_REFERENCE = """
import pickle, sys
sys.path[:0] = sys.argv[3:]
from conformance.fuzz.run import reference
program, inputs = pickle.load(open(sys.argv[1], "rb"))
pickle.dump(reference(program, inputs), open(sys.argv[2], "wb"))
"""


def _relabel_excess_precision(failure: Failure) -> Failure:
    """Kind ``excess-precision`` when jax.jit without XLA's excess precision gives the target's result.

    XLA on CPU keeps float16/bfloat16 intermediates of fused ops in float32 unless
    ``--xla_allow_excess_precision=false``; a target that rounds every op to its dtype then
    differs. The flag only takes effect in a new process, so the program runs in one.
    """
    d = failure.diff
    if failure.status != "mismatch" or d is None or d.kind not in ("value", "inf", "nan") or not failure.actual:
        return failure
    if not any(v.dtype in ("float16", "bfloat16") for v in failure.program.types.values()):
        return failure
    strict = _reference_in_process(failure, "--xla_allow_excess_precision=false")
    if strict is not None and compare_all(strict, failure.actual) is None:
        d.kind = "excess-precision"
    return failure


def _relabel_xla_fma(failure: Failure) -> Failure:
    """Kind ``xla-fma`` when jax.jit without FMA instructions (``--xla_cpu_max_isa=AVX``) gives the target's
    result.

    XLA on CPU contracts a multiply and an add or subtract of one fusion into an FMA, which rounds once: a value
    it computes in two fusions, once rounded and once inside an FMA, differs from itself (``softmax(s * c)``:
    ``s * c - max`` is the product's rounding error where it should be 0, and exp of that overflows for huge
    scores). Run last (a new process): only for a float difference no other experiment names.
    """
    d = failure.diff
    if failure.status != "mismatch" or d is None or d.kind not in ("value", "inf", "nan") or not failure.actual:
        return failure
    plain = _reference_in_process(failure, "--xla_cpu_max_isa=AVX")
    if plain is not None and compare_all(plain, failure.actual) is None:
        d.kind = "xla-fma"
    return failure


def _reference_in_process(failure: Failure, flags: str) -> list | None:
    """jax.jit's outputs for the failure's program and inputs in a new process with ``flags`` added to XLA_FLAGS
    (XLA reads them at start-up); None where that run fails."""
    import pickle
    import subprocess
    import sys
    import tempfile

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with tempfile.TemporaryDirectory(prefix="jaxconv-fuzz-") as tmp:
        given, got = os.path.join(tmp, "in.pkl"), os.path.join(tmp, "out.pkl")
        with open(given, "wb") as fh:
            pickle.dump((failure.program, failure.inputs), fh)
        env = {**os.environ, "XLA_FLAGS": (os.environ.get("XLA_FLAGS", "") + " " + flags).strip(),
               "JAX_PLATFORMS": "cpu"}
        try:
            subprocess.run([sys.executable, "-c", _STRICT_REFERENCE, given, got, root, os.path.join(root, "converter")],
                           env=env, capture_output=True, timeout=120, check=True)
            with open(got, "rb") as fh:
                return pickle.load(fh)
        except Exception:  # noqa: BLE001  (no verdict: keep the kind)
            return None


def _classify(failure: Failure, target: str, rec: dict[str, Any]) -> known.Known | None:
    """Fill in class, facts, known reason and description; returns the known row, if any."""
    seen = known.facts(failure.inputs, [v.size for v in failure.program.types.values()], failure.program)
    if failure.status == "crash" and known.LITERT_ZERO_SIZE_NOTE in failure.detail:
        seen |= {"litert-zero-size"}  # the converter's own diagnosis of LiteRT's failure
    rec["class"] = class_of(failure, target)
    rec["facts"] = sorted(seen)
    row = known.match(rec["class"], seen)
    rec["known"] = row.reason if row else ""
    rec["description"] = describe(failure)
    return row


def _bitcast_kind(failure: Failure) -> Failure:
    """Read a bitcast's differing integers as the floats they came from.

    ``nan-bits`` when both are NaN (sign or payload differ), ``last-bit`` when the floats agree
    within tolerance, ``subnormal`` when one of them is; otherwise the kind stays ``value``. A float
    to float bitcast (f16 -> bf16) reads a NaN's bits as a NaN, inf or number: kinds ``nan``/``inf`` too.
    """
    d = failure.diff
    if failure.status != "mismatch" or d is None or d.kind not in ("value", "nan", "inf") or not failure.expected \
            or not failure.actual:
        return failure
    out = failure.program.outputs[d.output] if d.output < len(failure.program.outputs) else None
    step = next((s for s in failure.program.steps if s.out == out), None)
    if step is None or not step.op.startswith("bitcast_"):
        return failure
    import numpy as np

    from conformance.case import np_dtype
    from conformance.fuzz.compare import compare_one

    source = np_dtype(failure.program.types[step.args[0]].dtype)
    e, a = np.asarray(failure.expected[d.output]), np.asarray(failure.actual[d.output])
    if e.dtype.itemsize != source.itemsize or e.shape != a.shape:
        return failure
    import ml_dtypes

    ef, af = e.view(source).astype(np.float64), a.view(source).astype(np.float64)
    x, y = ef[d.index], af[d.index]
    tiny = float(ml_dtypes.finfo(source).tiny)
    if np.isnan(x) and np.isnan(y):
        d.kind = "nan-bits"
    elif 0 < abs(x) < tiny or 0 < abs(y) < tiny:
        d.kind = "subnormal"
    else:
        again = compare_one(e.view(source), a.view(source), d.output)
        d.kind = "last-bit" if again is None else again.kind
    return failure


def _relabel_subnormal(failure: Failure, target: str) -> Failure:
    """Kind ``subnormal`` for a mismatch that XLA's flushing explains.

    Either flushing the subnormal inputs to zero removes the difference, or the inputs so small
    that they make subnormal intermediates can be flushed without changing jax.jit's result
    (XLA flushed what they produced) and the target then agrees, or flushing the closed-over weights'
    subnormals does (inf times the smallest subnormal weight: XLA reads 0 and gives NaN, ORT inf).
    """
    if failure.status != "mismatch" or failure.diff is None or failure.diff.kind in ("subnormal", "load-error", "run-error"):
        return failure
    if "_w(" in failure.program.source() and not failure.program.flushed_weights:
        flushed_program = failure.program.copy()
        flushed_program.flushed_weights = True
        try:
            status, *_ = attempt(flushed_program, target, failure.inputs)
        except Exception:  # noqa: BLE001
            status = "error"
        if status == "ok":
            failure.diff.kind = "subnormal"
            return failure
    for below in ("tiny", "sqrt-tiny"):
        flushed = flush_subnormals(failure.inputs, below)
        if flushed is None:
            continue
        try:
            status, _, expected, *_ = attempt(failure.program, target, flushed)
        except Exception:  # noqa: BLE001
            return failure
        if status == "ok" and (below == "tiny" or (failure.expected and _same_but_zero_signs(failure, expected))):
            failure.diff.kind = "subnormal"
            return failure
    return failure


def _same_but_zero_signs(failure: Failure, expected: list) -> bool:
    """jax.jit's result on flushed inputs equals its first one; zero signs count only for a signed-zero
    difference (XLA flushes a subnormal product to a zero of its sign, an input flushed to -0 gives
    another zero: 0.18 * -1.2e-38 is -0 in jax.jit, 0.18 * -0 summed from +0 is +0)."""
    import numpy as np

    if failure.diff is not None and failure.diff.kind == "signed-zero":
        return compare_all(failure.expected, expected) is None

    def unsigned(values: list) -> list:
        out = []
        for v in values:
            a = np.asarray(v)
            out.append(np.where(a == 0, np.zeros_like(a), a) if a.dtype.kind == "f" or a.dtype.name == "bfloat16"
                       else a)
        return out

    return compare_all(unsigned(failure.expected), unsigned(expected)) is None


def _fill_outputs(failure: Failure, target: str) -> Failure:
    """Make sure expected/actual belong to the final program (the minimiser's last try)."""
    if failure.status != "mismatch" or failure.expected:
        return failure
    try:
        _, diff, expected, actual, detail = attempt(failure.program, target, failure.inputs)
    except Exception:  # noqa: BLE001
        return failure
    failure.expected, failure.actual = expected, actual
    return failure
