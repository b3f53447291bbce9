"""Half-precision arithmetic that jax.jit computes wider than the program says.

XLA on the CPU has no bfloat16 arithmetic: it computes a bfloat16 op in float32 and, since excess
precision is allowed (``xla_allow_excess_precision``, on by default), hands a convert of the result to
float32 the value before its rounding to bfloat16. ``jnp.exp(x.astype(bfloat16)).astype(float32)`` is then
float32's exp in jax.jit, where the program rounds it to bfloat16 first, and so does JAX run op by op
(``jax.disable_jit``). The difference is bfloat16's rounding, about 0.3%, far beyond float32's tolerance.
The ONNX follows jax.jit there (``onnx/xla_bfloat16.py``); this rule is for artifacts that round as the
program says (the other targets, or forms the ONNX does not follow).

``as_excess_precision`` makes such a row ``op-by-op`` (shown as ``ok (op by op)``): in a program
with half-precision arithmetic, every element where the artifact differs from jax.jit has JAX's
op-by-op value (within the output dtype's tolerance, zero signs, infinities and NaN alike; integers
equal), whether judging had made it a mismatch or undecided. Any other such element keeps the row as it was.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

from jaxconv.compare import UNDECIDED, OutputCheck
from jaxconv.known_differences import as_op_by_op, program_eqns

VERDICT = "op-by-op"
NARROW_FLOATS = ("bfloat16", "float16")
NOTE = ("jax.jit skips the rounding between {dtypes} ops (XLA's excess precision); the artifact rounds each op "
        "as the program and JAX run op by op do")


def narrow_arithmetic(fn: Callable[..., Any], arg_specs: Sequence[Any], flat: Sequence[np.ndarray]) -> list[str]:
    """The half-precision float dtypes the traced program computes in: read or written by an op other than
    a conversion (a bare round trip ``x.astype(bfloat16).astype(float32)`` keeps its rounding in jax.jit)."""
    found: set[str] = set()
    for eqn in program_eqns(fn, arg_specs, flat) or []:
        if eqn.primitive.name == "convert_element_type":
            continue
        for var in (*eqn.invars, *eqn.outvars):
            name = getattr(getattr(getattr(var, "aval", None), "dtype", None), "name", None)
            if name in NARROW_FLOATS:
                found.add(name)
    return sorted(found)


def as_excess_precision(rows: list[OutputCheck], classes: Sequence[np.ndarray | None], fn: Callable[..., Any],
                        arg_specs: Sequence[Any], flat: Sequence[np.ndarray], actual: Sequence[np.ndarray],
                        op_by_op: Callable[[], Any]) -> list[OutputCheck]:
    """Mismatched or undecided rows (any input set) whose every such element has JAX's op-by-op value, in a
    program with half-precision arithmetic, as ``op-by-op`` rows naming why; others unchanged. ``op_by_op`` is the
    caller's shared run of the program with ``jax.disable_jit``, asked for only when a row may qualify."""
    candidates = [i for i, (r, cls) in enumerate(zip(rows, classes))
                  if r.verdict in ("mismatch", "undecided") and cls is not None and np.shape(cls) == np.shape(actual[i])
                  and np.asarray(actual[i]).dtype.kind != "c"]
    if not candidates:
        return rows
    dtypes = narrow_arithmetic(fn, arg_specs, flat)
    if not dtypes:
        return rows
    eager = op_by_op() or []
    out = list(rows)
    for i in candidates:
        bad = classes[i] >= UNDECIDED
        explained = as_op_by_op(actual[i], eager[i] if i < len(eager) else None, bad, np.asarray(actual[i]).dtype.name)
        if bad.any() and bool((explained | ~bad).all()):
            out[i] = dataclasses.replace(rows[i], ok=True, verdict=VERDICT,
                                         note=f"{NOTE.format(dtypes=' and '.join(dtypes))}: {int(bad.sum())} elements "
                                              f"have JAX's op-by-op value; {rows[i].note}")
    return out
