"""Convolutions whose NaN/inf results depend on which zeros get multiplied.

A convolution with padding, lhs dilation (holes) or feature groups (the zero blocks of a
grouped kernel) meets zeros that are not in the data. 0 x inf is NaN, so a result over such
a zero is NaN when the zero is multiplied and a number when it is skipped. XLA on CPU does
either, depending on the shapes (its convolution emitters and rewrites differ; a float32 3-tap
conv multiplies padding, a conv of a 1x1 input skips it), so no lowering matches it on every
shape. A difference is kind ``conv-zeros`` when jax.jit gives the target's result once one
conv's value is replaced by that convolution computed (in float64) with the non-data zeros
multiplied or skipped: padding and holes one way, group blocks one way.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from conformance.fuzz.minimise import Failure


class _Capture:
    """Stands for ``lax`` in a conv step's expression: returns the keyword arguments."""

    @staticmethod
    def conv_general_dilated(lhs: Any, rhs: Any, **kw: Any) -> dict[str, Any]:
        return kw


def conv_params(expr: str) -> dict[str, Any]:
    """window_strides, padding, lhs_dilation, rhs_dilation and feature_group_count of a fuzz conv step."""
    return eval(expr.format("None", "None"), {"lax": _Capture}, {})  # noqa: S307  (the fuzzer's own step)


def explicit_padding(params: dict[str, Any], spatial: tuple[int, ...], kernel: tuple[int, ...]
                     ) -> list[tuple[int, int]]:
    """(lo, hi) per spatial dim, with 'SAME'/'VALID' resolved as jax does."""
    from jax import lax

    padding = params["padding"]
    if not isinstance(padding, str):
        return [(int(lo), int(hi)) for lo, hi in padding]
    dilated = [(k - 1) * d + 1 for k, d in zip(kernel, params.get("rhs_dilation") or (1,) * len(kernel))]
    return [tuple(p) for p in lax.padtype_to_pads(spatial, dilated, params["window_strides"], padding)]


def conv64(x: np.ndarray, w: np.ndarray, params: dict[str, Any], multiply_padding: bool,
           multiply_groups: bool, flush_below: float = 0.0) -> np.ndarray:
    """Conv of NCH.. ``x`` by OIH.. ``w`` in float64, the zeros not in the data multiplied or skipped, and
    products smaller than ``flush_below`` flushed to zero (XLA on CPU flushes subnormal products)."""
    nsp = x.ndim - 2
    strides = tuple(params.get("window_strides") or (1,) * nsp)
    lhs = tuple(params.get("lhs_dilation") or (1,) * nsp)
    rhs = tuple(params.get("rhs_dilation") or (1,) * nsp)
    groups = int(params.get("feature_group_count") or 1)
    pads = explicit_padding(params, x.shape[2:], w.shape[2:])
    n, c = x.shape[:2]
    o, cg = w.shape[:2]
    # dilate and pad, remembering which positions hold data
    dil = [(s - 1) * d + 1 if s else 0 for s, d in zip(x.shape[2:], lhs)]
    xd = np.zeros((n, c, *dil))
    real = np.zeros(dil, bool)
    index = tuple(slice(None, None, d) for d in lhs)
    xd[(slice(None), slice(None)) + index] = x.astype(np.float64)
    real[index] = True
    for axis, (lo, hi) in enumerate(pads):
        xd, real = _pad_axis(xd, 2 + axis, lo, hi), _pad_axis(real, axis, lo, hi)
    # a dense kernel: group g's block of input channels, zeros elsewhere
    dense = np.zeros((o, c, *w.shape[2:]))
    block = np.zeros((o, c), bool)
    per = o // groups
    for g in range(groups):
        dense[g * per:(g + 1) * per, g * cg:(g + 1) * cg] = w[g * per:(g + 1) * per].astype(np.float64)
        block[g * per:(g + 1) * per, g * cg:(g + 1) * cg] = True
    out_sp = [max((p - (k - 1) * d - 1) // s + 1, 0)
              for p, k, d, s in zip(xd.shape[2:], w.shape[2:], rhs, strides)]
    out = np.zeros((n, o, *out_sp))
    with np.errstate(all="ignore"):
        for tap in itertools.product(*[range(k) for k in w.shape[2:]]):
            sl = tuple(slice(t * d, t * d + (m - 1) * s + 1, s)
                       for t, d, m, s in zip(tap, rhs, out_sp, strides))
            part = xd[(slice(None), slice(None)) + sl]  # [N, C, out...]
            here = real[sl]
            terms = part[:, None] * dense[(slice(None), slice(None)) + tap].reshape(1, o, c, *([1] * nsp))
            if flush_below:
                terms = np.where(np.abs(terms) < flush_below, 0.0 * terms, terms)
            if not multiply_padding:
                terms = np.where(here, terms, 0.0)
            if not multiply_groups:
                terms = np.where(block.reshape(1, o, c, *([1] * nsp)), terms, 0.0)
            out = out + terms.sum(axis=2)
    return out


def _pad_axis(a: np.ndarray, axis: int, lo: int, hi: int) -> np.ndarray:
    """Pad (or crop, for negative amounts) ``a`` along ``axis`` with zeros/False."""
    if lo < 0:
        a = np.take(a, range(-lo, a.shape[axis]), axis=axis)
        lo = 0
    if hi < 0:
        a = np.take(a, range(0, max(a.shape[axis] + hi, 0)), axis=axis)
        hi = 0
    widths = [(0, 0)] * a.ndim
    widths[axis] = (lo, hi)
    return np.pad(a, widths)


def _overflow_order(failure: Failure, known: dict[int, np.ndarray]) -> bool:
    """True when the differing output is a conv's and each differing element (a NaN or inf on either side)
    sums terms whose magnitudes reach the largest float: inf - inf in one order, an overflow in another."""
    import ml_dtypes

    from conformance.fuzz.compare import compare_one

    d = failure.diff
    out = failure.program.outputs[d.output] if d.output < len(failure.program.outputs) else None
    step = next((s for s in failure.program.steps if s.out == out and s.op == "conv"), None)
    if step is None or d.kind not in ("nan", "inf") or not failure.expected:
        return False
    e, a = np.asarray(failure.expected[d.output]), np.asarray(failure.actual[d.output])
    x, w = (np.asarray(known[i]).astype(np.float64) for i in step.args)
    with np.errstate(all="ignore"):
        bound = conv64(np.abs(x), np.abs(w), conv_params(step.expr), False, False)
    if bound.shape != e.shape:
        return False
    top = float(ml_dtypes.finfo(e.dtype).max)
    for index in np.ndindex(*e.shape):
        if compare_one(e[index], a[index]) is None:
            continue
        ends = np.array([e[index], a[index]], np.float64)
        if np.isfinite(ends).all() or not bound[index] >= top:
            return False
    return True


def relabel(failure: Failure) -> Failure:
    """Kind ``conv-zeros``: one conv with non-data zeros multiplied or skipped gives the target's result;
    kind ``overflow-order``: the differing conv output sums terms that reach the largest float."""
    from conformance.case import np_dtype
    from conformance.fuzz.minimise import intermediates, replays, substitute
    from conformance.fuzz.run import Invalid

    d = failure.diff
    if failure.status != "mismatch" or d is None or d.kind not in ("value", "inf", "nan"):
        return failure
    if not failure.actual:
        return failure
    convs = [s for s in failure.program.steps if s.op == "conv"]
    if not convs:
        return failure
    try:
        values = intermediates(failure.program, failure.inputs)
    except Invalid:
        return failure
    known = dict(zip(failure.program.inputs, failure.inputs))
    known.update(values)
    for step in convs:
        x, w = (np.asarray(known[a]) for a in step.args)
        params = conv_params(step.expr)
        dtype = np_dtype(failure.program.types[step.out].dtype)
        program = substitute(failure.program, step, values)
        # products are float32 for f16/bf16 convs (XLA computes them in f32) and flushed below its tiny
        tiny = float(np.finfo(np.float64 if dtype == np.float64 else np.float32).tiny)
        for *flags, flush in itertools.product((True, False), (True, False), (0.0, tiny)):
            with np.errstate(all="ignore"):
                alt = conv64(x, w, params, *flags, flush).astype(dtype)
            same = replays(program, failure, alt)
            if same is None:
                break
            if same:
                d.kind = "conv-zeros"
                return failure
    if _overflow_order(failure, known):
        d.kind = "overflow-order"
    return failure
