"""Rewrite quantized StableHLO into plain ops, as StableHLO's own interpreter does.

The StableHLO reference interpreter runs ``stablehlo-legalize-quant-to-math`` before it
evaluates a quantized program, so that pass defines the numbers the test data expects.
This module does the same on jaxconv's IR, op for op:

- ``uniform_quantize`` and ``uniform_dequantize`` stay, on plain types: the storage integers
  (``QuantType.carrier``) and the expressed float, with the quantized type in ``attrs["quant"]``
  (and the operand's in ``attrs["operand_quant"]`` for a requantization). The ONNX lowering
  turns them into DequantizeLinear and the quantize arithmetic (``onnx/ops/quantized.py``).
- ``add`` of three per-tensor quantized values, and ``dot_general``/``dot``/``convolution`` of
  per-tensor quantized operands, are computed on integers the way the pass does (requantize to
  int32 and add; an int32 dot product of the zero-point-centred operands, scaled by
  ``lhs_scale * rhs_scale / result_scale`` unless that is within 0.001 of 1). Where the pass
  scales its zero-point offsets apart (zero points and a scale away from 1), and for the
  convolutions it leaves to the fallback (a kernel zero point, lhs dilation, other layouts),
  the op is computed in float as below.
  ``dot_general``, ``dot`` and ``convolution`` with a float lhs and a quantized rhs dequantize
  the rhs and compute in float (weight-only quantization).
- Data movement ops (reshape, transpose, gather, slice, pad, concatenate, select, ...) move the
  storage integers unchanged, and so do ``maximum``/``minimum`` of one quantized type.
- Every other op of the pass's list (elementwise math, compare, convolution, ...) dequantizes
  its operands, computes in float and quantizes its results.

Anything else with a quantized operand or result is refused, every op named at once.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

import numpy as np

from jaxconv.errors import UnsupportedError
from jaxconv.stablehlo import ir as hir
from jaxconv.stablehlo.quant_types import QuantType, is_quant, parse

# Ops whose quantized form only moves or picks storage integers (the pass's "generic" ops).
STORAGE_OPS = frozenset(f"stablehlo.{n}" for n in (
    "bitcast_convert", "broadcast_in_dim", "composite", "concatenate", "constant", "dynamic_reshape",
    "dynamic_slice", "gather", "maximum", "minimum", "pad", "reduce_window", "reshape", "select", "slice",
    "transpose", "get_dimension_size", "dynamic_broadcast_in_dim"))
# Ops computed as dequantize -> float op -> quantize (the pass's fallback list).
FLOAT_OPS = frozenset(f"stablehlo.{n}" for n in (
    "abs", "add", "atan2", "batch_norm_grad", "batch_norm_inference", "batch_norm_training", "cbrt", "ceil",
    "cholesky", "clamp", "compare", "convolution", "cosine", "divide", "dot_general", "dot",
    "exponential_minus_one", "exponential", "floor", "log_plus_one", "logistic", "log", "maximum", "minimum",
    "multiply", "negate", "power", "reduce_precision", "remainder", "round_nearest_afz", "round_nearest_even",
    "rsqrt", "select", "sign", "sine", "sqrt", "subtract", "tanh", "tan", "triangular_solve"))
_SAME_TYPE_ONLY = frozenset({"stablehlo.maximum", "stablehlo.minimum"})
_DOT_LIKE = frozenset({"stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution"})


def legalize(module: hir.Module) -> None:
    """Rewrite every quantized op of ``module`` in place (see the module docstring).

    Raises:
        UnsupportedError: ops with quantized values that have no rewrite, all listed.
    """
    rewriter = _Rewriter()
    for fn in module.functions.values():
        rewriter.collect(fn.body)
    for fn in module.functions.values():
        rewriter.block(fn.body)
    if rewriter.problems:
        parts = [f"{name} x{n} ({why})" for (name, why), n in sorted(rewriter.problems.items())]
        raise UnsupportedError("cannot lower quantized ops: " + "; ".join(parts))
    for v in rewriter.values.values():
        q = rewriter.quant[v.id]
        v.type = hir.TensorType(q.carrier, v.type.shape)


class _Rewriter:
    def __init__(self) -> None:
        self.quant: dict[int, QuantType] = {}
        self.values: dict[int, hir.Value] = {}
        self.problems: Counter[tuple[str, str]] = Counter()

    # ---- collecting ----------------------------------------------------------------------
    def _note(self, v: hir.Value) -> None:
        if is_quant(v.type.dtype):
            self.quant[v.id] = parse(v.type.dtype)
            self.values[v.id] = v

    def collect(self, block: hir.Block) -> None:
        for a in block.args:
            self._note(a)
        for op in block.ops:
            for v in op.results:
                self._note(v)
            for region in op.regions:
                self.collect(region)

    # ---- rewriting -----------------------------------------------------------------------
    def q(self, v: hir.Value) -> QuantType | None:
        return self.quant.get(v.id)

    def block(self, block: hir.Block) -> None:
        out: list[hir.Op] = []
        for op in block.ops:
            for region in op.regions:
                self.block(region)
            values = list(op.operands) + list(op.results)
            if not any(self.q(v) for v in values):
                out.append(op)
                continue
            out.extend(self.op(op))
        block.ops[:] = out

    def op(self, op: hir.Op) -> list[hir.Op]:
        name = op.name
        if name == "stablehlo.uniform_quantize":
            attrs = {"quant": self.q(op.results[0])}
            if self.q(op.operands[0]) is not None:
                attrs["operand_quant"] = self.q(op.operands[0])
            return [_op(name, op.operands, op.results, attrs, op.location)]
        if name == "stablehlo.uniform_dequantize":
            return [_op(name, op.operands, op.results, {"quant": self.q(op.operands[0])}, op.location)]
        special = _SPECIAL.get(name)
        if special is not None:
            done = special(self, op)
            if done is not None:
                return done
        if name in STORAGE_OPS and (name not in _SAME_TYPE_ONLY or self._one_type(op)):
            return [op]
        if name in FLOAT_OPS:
            return self.in_float(op)
        self.problems[(name, "no quantized form: neither integer arithmetic nor dequantize-compute-quantize "
                             "is defined for it")] += 1
        return [op]

    def _one_type(self, op: hir.Op) -> bool:
        types = {self.q(v) for v in list(op.operands) + list(op.results) if v.type.dtype != "bool"}
        return len(types) == 1 and None not in types

    def dequantize(self, v: hir.Value, loc: str, out: list[hir.Op]) -> hir.Value:
        q = self.q(v)
        if q is None:
            return v
        f = hir.Value(hir.TensorType(q.expressed, v.type.shape))
        out.append(_op("stablehlo.uniform_dequantize", [v], [f], {"quant": q}, loc))
        return f

    def in_float(self, op: hir.Op) -> list[hir.Op]:
        """Dequantize the quantized operands, compute in float, quantize the quantized results."""
        out: list[hir.Op] = []
        operands = [self.dequantize(v, op.location, out) for v in op.operands]
        results = []
        for r in op.results:
            q = self.q(r)
            results.append(hir.Value(hir.TensorType(q.expressed, r.type.shape)) if q is not None else r)
        out.append(hir.Op(op.name, operands, results, op.attrs, op.regions, op.location))
        for r, f in zip(op.results, results):
            if f is not r:
                out.append(_op("stablehlo.uniform_quantize", [f], [r], {"quant": self.q(r)}, op.location))
        return out

    # ---- integer arithmetic (the pass's dedicated patterns) -------------------------------
    def add(self, op: hir.Op) -> list[hir.Op] | None:
        lhs, rhs = op.operands
        res = op.results[0]
        ql, qr, qres = self.q(lhs), self.q(rhs), self.q(res)
        if ql is None or qr is None or qres is None:
            return None
        if ql.per_axis or qr.per_axis or qres.per_axis:
            if not (ql == qr == qres and qres.bits == 32):
                return None
            if not any(qres.zero_points):
                return [_op("stablehlo.add", [lhs, rhs], [res], {}, op.location)]
            total = hir.Value(hir.TensorType("int32", res.type.shape))
            out: list[hir.Op] = [_op("stablehlo.add", [lhs, rhs], [total], {}, op.location)]
            zps = _axis_constant(np.asarray(qres.zero_points, np.int32), qres.axis, res.type.shape, out,
                                 op.location)
            out.append(_op("stablehlo.subtract", [total, zps], [res], {}, op.location))
            return out
        shape = res.type.shape
        if any(d is None for d in shape):
            return None
        out = []
        i32 = hir.TensorType("int32", shape)
        parts = []
        for v, qv in ((lhs, ql), (rhs, qr)):
            wide = hir.Value(i32)
            attrs = {"quant": qres, "operand_quant": qv}
            out.append(_op("stablehlo.uniform_quantize", [v], [wide], attrs, op.location))
            parts.append(wide)
        total = hir.Value(i32)
        out.append(_op("stablehlo.add", parts, [total], {}, op.location))
        zp = _constant(np.full(shape, qres.zero_points[0], np.int32), out, op.location)
        if qres.bits >= 32:
            out.append(_op("stablehlo.subtract", [total, zp], [res], {}, op.location))
            return out
        shifted = hir.Value(i32)
        out.append(_op("stablehlo.subtract", [total, zp], [shifted], {}, op.location))
        lo = _constant(np.array(qres.storage_min, np.int32), out, op.location)
        hi = _constant(np.array(qres.storage_max, np.int32), out, op.location)
        clamped = hir.Value(i32)
        out.append(_op("stablehlo.clamp", [lo, shifted, hi], [clamped], {}, op.location))
        out.append(_op("stablehlo.convert", [clamped], [res], {}, op.location))
        return out

    def dot_like(self, op: hir.Op) -> list[hir.Op] | None:
        lhs, rhs = op.operands[:2]
        res = op.results[0]
        ql, qr, qres = self.q(lhs), self.q(rhs), self.q(res)
        if ql is None and qres is None and qr is not None:
            # weight-only quantization: dequantize the rhs, compute in float
            out: list[hir.Op] = []
            operands = [lhs, self.dequantize(rhs, op.location, out)] + list(op.operands[2:])
            out.append(hir.Op(op.name, operands, list(op.results), op.attrs, op.regions, op.location))
            return out
        if ql is None or qr is None or qres is None or ql.per_axis or qr.per_axis or qres.per_axis:
            return None
        shape = res.type.shape
        if any(d is None for d in list(shape) + list(lhs.type.shape) + list(rhs.type.shape)):
            return None
        zl, zr = ql.zero_points[0], qr.zero_points[0]
        combined = ql.scales[0] * qr.scales[0] / qres.scales[0]
        if op.name == "stablehlo.convolution" and (zr or not _integer_conv(op)):
            return None
        if (zl or zr) and abs(combined - 1.0) > 0.001:
            return None  # the pass scales its zero-point offsets apart, truncating each: computed in float
        out = []
        # dot(lhs - zl, rhs - zr) is the pass's dot(lhs, rhs) less its zero-point offsets, in exact integers
        operands = [_centred(v, z, out, op.location) for v, z in ((lhs, zl), (rhs, zr))]
        i32 = hir.TensorType("int32", shape)
        acc = hir.Value(i32)
        out.append(hir.Op(op.name, operands, [acc], op.attrs, [], op.location))
        if abs(combined - 1.0) > 0.001:
            f = hir.Value(hir.TensorType("float32", shape))
            out.append(_op("stablehlo.convert", [acc], [f], {}, op.location))
            scale = _constant(np.full(shape, combined, np.float32), out, op.location)
            scaled = hir.Value(hir.TensorType("float32", shape))
            out.append(_op("stablehlo.multiply", [f, scale], [scaled], {}, op.location))
            acc = hir.Value(i32)
            out.append(_op("stablehlo.convert", [scaled], [acc], {}, op.location))
        if qres.zero_points[0]:
            zp = _constant(np.full(shape, qres.zero_points[0], np.int32), out, op.location)
            shifted = hir.Value(i32)
            out.append(_op("stablehlo.add", [acc, zp], [shifted], {}, op.location))
            acc = shifted
        out.append(_op("stablehlo.convert", [acc], [res], {}, op.location))
        return out


_SPECIAL: dict[str, Callable[[_Rewriter, hir.Op], "list[hir.Op] | None"]] = {
    "stablehlo.add": _Rewriter.add,
    **{name: _Rewriter.dot_like for name in _DOT_LIKE},
}


# The convolution layouts the pass computes on integers: (input, kernel, output) dimension orders.
_INTEGER_CONV_LAYOUTS = (
    ((0, 3, (1, 2)), (2, 3, (0, 1)), (0, 3, (1, 2))),  # NHWC, HWIO
    ((0, 1, (2, 3)), (1, 0, (2, 3)), (0, 1, (2, 3))),  # NCHW, OIHW
    ((0, 4, (1, 2, 3)), (3, 4, (0, 1, 2)), (0, 4, (1, 2, 3))),  # NDHWC
    ((0, 1, (2, 3, 4)), (1, 0, (2, 3, 4)), (0, 1, (2, 3, 4))),  # NCDHW
)


def _integer_conv(op: hir.Op) -> bool:
    """A convolution the pass computes on integers: no lhs dilation, one of its four layouts."""
    if any(d != 1 for d in op.attrs.get("lhs_dilation") or ()):
        return False
    dn = op.attrs.get("dimension_numbers")
    if dn is None:
        return False
    layout = ((dn["input_batch_dimension"], dn["input_feature_dimension"],
               tuple(dn["input_spatial_dimensions"])),
              (dn["kernel_input_feature_dimension"], dn["kernel_output_feature_dimension"],
               tuple(dn["kernel_spatial_dimensions"])),
              (dn["output_batch_dimension"], dn["output_feature_dimension"],
               tuple(dn["output_spatial_dimensions"])))
    return layout in _INTEGER_CONV_LAYOUTS


def _centred(v: hir.Value, zero_point: int, out: list[hir.Op], loc: str) -> hir.Value:
    """``v``'s storage integers as int32, less ``zero_point``."""
    wide = hir.Value(hir.TensorType("int32", v.type.shape))
    out.append(_op("stablehlo.convert", [v], [wide], {}, loc))
    if not zero_point:
        return wide
    zp = _constant(np.full(v.type.shape, zero_point, np.int32), out, loc)
    centred = hir.Value(hir.TensorType("int32", v.type.shape))
    out.append(_op("stablehlo.subtract", [wide, zp], [centred], {}, loc))
    return centred


def _op(name: str, operands, results, attrs: dict, loc: str) -> hir.Op:
    return hir.Op(name=name, operands=list(operands), results=list(results), attrs=dict(attrs), regions=[],
                  location=loc)


def _constant(value: np.ndarray, out: list[hir.Op], loc: str) -> hir.Value:
    dtype = {np.dtype(np.int32): "int32", np.dtype(np.float32): "float32"}[value.dtype]
    v = hir.Value(hir.TensorType(dtype, tuple(value.shape)))
    out.append(_op("stablehlo.constant", [], [v], {"value": value}, loc))
    return v


def _axis_constant(values: np.ndarray, axis: int | None, shape: tuple, out: list[hir.Op],
                   loc: str) -> hir.Value:
    """``values`` (one per slice along ``axis``) broadcast to ``shape`` (static)."""
    if any(d is None for d in shape):
        raise UnsupportedError("quantized per-axis add on a dynamic shape")
    view = [1] * len(shape)
    view[axis] = len(values)
    return _constant(np.broadcast_to(values.reshape(view), shape).copy(), out, loc)
