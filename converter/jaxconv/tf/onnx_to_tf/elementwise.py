"""Arithmetic, math and comparisons.

Floats keep XLA's NaN behaviour where TFLite's kernels drop it (max/min). Integer division
truncates toward zero as ONNX (and XLA) do, exactly on every width (``intdiv``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxconv.tf.onnx_to_tf import intdiv
from jaxconv.tf.onnx_to_tf.graph import attrs, static
from jaxconv.tf.onnx_to_tf.table import handles
from jaxconv.tf.onnx_to_tf.values import FLOATS, Value


def _unary(fn_name: str) -> Any:
    def build(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
        tf = tr.tf
        return Value(_UNARY[fn_name](tf, ins[0].t), ins[0].dtype)

    return build


_UNARY = {
    "Neg": lambda tf, x: tf.negative(x),
    "Abs": lambda tf, x: tf.where(x < tf.zeros_like(x), -x, x) if x.dtype == tf.int64 else tf.abs(x),
    "Reciprocal": lambda tf, x: tf.math.reciprocal(x),
    "Sqrt": lambda tf, x: tf.sqrt(x),
    "Exp": lambda tf, x: _keep_nan(tf, x, tf.exp(x)),
    "Log": lambda tf, x: tf.math.log(x),
    "Sin": lambda tf, x: tf.sin(x),
    "Cos": lambda tf, x: tf.cos(x),
    "Tan": lambda tf, x: tf.sin(x) / tf.cos(x),
    "Atan": lambda tf, x: tf.math.atan2(x, tf.ones_like(x)),
    "Tanh": lambda tf, x: _keep_nan(tf, x, tf.tanh(x)),
    "Sigmoid": lambda tf, x: _keep_nan(tf, x, tf.sigmoid(x)),
    "Erf": lambda tf, x: tf.math.erf(x),
    "Floor": lambda tf, x: tf.floor(x),
    "Ceil": lambda tf, x: tf.math.ceil(x),
    "Round": lambda tf, x: tf.round(x),
    "Relu": lambda tf, x: tf.nn.relu(x),
    "Softplus": lambda tf, x: tf.math.softplus(x),
    "Sinh": lambda tf, x: tf.math.sinh(x),
    "Cosh": lambda tf, x: tf.math.cosh(x),
    "Asin": lambda tf, x: tf.math.asin(x),
    "Acos": lambda tf, x: tf.math.acos(x),
    "Asinh": lambda tf, x: tf.math.asinh(x),
    "Acosh": lambda tf, x: tf.math.acosh(x),
    "Atanh": lambda tf, x: tf.math.atanh(x),
}


def _keep_nan(tf: Any, x: Any, y: Any) -> Any:
    """``y`` with NaN where ``x`` is NaN (TFLite's exp gives 0 and its logistic 1 for NaN)."""
    return tf.where(tf.not_equal(x, x), x, y)


for _name in _UNARY:
    handles(_name)(_unary(_name))


@handles("Sign")
def sign(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    tf = tr.tf
    x = ins[0].t
    zero = tf.zeros_like(x)
    one = tf.ones_like(x)
    out = tf.where(x > zero, one, tf.where(x < zero, -one, zero))
    if ins[0].dtype in FLOATS:
        out = tf.where(tf.not_equal(x, x), x, out)
    return Value(out, ins[0].dtype)


@handles("Add", "Sub", "Mul")
def arith(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    a, b = ins[0].t, ins[1].t
    if node.op_type == "Add":
        return Value(a + b, ins[0].dtype)
    if node.op_type == "Sub":
        return Value(a - b, ins[0].dtype)
    return Value(a * b, ins[0].dtype)


@handles("Sum")
def sum_(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    """Variadic Add. ``Sum(v, +0.0)`` (the lowering's -0 -> +0 fix) becomes ``where(v == 0, +0, v)``:
    the same for every value, and no converter can fold the add of zero away."""
    tf = tr.tf
    zeros = [static(tf, v) for v in ins]
    if len(ins) == 2 and ins[0].dtype in FLOATS and zeros[1] is not None and np.size(zeros[1]) == 1:
        if float(np.reshape(zeros[1], ())) == 0.0 and not np.signbit(np.reshape(zeros[1], ())):
            x = ins[0].t + tf.zeros_like(ins[1].t)  # the broadcast shape; -0 + +0 is what is fixed below
            x = ins[0].t if x.shape == ins[0].t.shape else tf.broadcast_to(ins[0].t, tf.shape(x))
            return Value(tf.where(tf.equal(x, tf.zeros_like(x)), tf.zeros_like(x), x), ins[0].dtype)
    out = ins[0].t
    for v in ins[1:]:
        out = out + v.t
    return Value(out, ins[0].dtype)


@handles("Div")
def div(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    tf = tr.tf
    a, b = ins[0].t, ins[1].t
    if ins[0].dtype in FLOATS:
        return Value(a / b, ins[0].dtype)
    a, b = _broadcast(tf, a, b)
    return Value(intdiv.divide(tf, a, b, ins[0].dtype), ins[0].dtype)


def _broadcast(tf: Any, a: Any, b: Any) -> tuple[Any, Any]:
    shape = tf.broadcast_dynamic_shape(tf.shape(a), tf.shape(b))
    return tf.broadcast_to(a, shape), tf.broadcast_to(b, shape)


@handles("Mod")
def mod(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    tf = tr.tf
    a, b = _broadcast(tf, ins[0].t, ins[1].t)
    if ins[0].dtype == "uint64":  # floor and truncation agree on unsigned values
        return Value(intdiv.remainder(tf, a, b, "uint64"), "uint64")
    if not attrs(node).get("fmod", 0):
        return Value(tf.math.floormod(a, b), ins[0].dtype)
    if ins[0].dtype in FLOATS:  # C fmod: the magnitude of |a| mod |b|, with the sign of a (-0 kept)
        m = tf.math.floormod(tf.abs(a), tf.abs(b))
        zero = tf.zeros_like(m)
        out = tf.where(a < zero, -m, m)
        return Value(tf.where(tf.equal(out, zero), a * zero, out), ins[0].dtype)
    return Value(intdiv.remainder(tf, a, b, ins[0].dtype), ins[0].dtype)


@handles("Pow")
def power(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    tf = tr.tf
    base, exp = ins[0].t, ins[1].t
    if exp.dtype != base.dtype:
        exp = tf.cast(exp, base.dtype)
    return Value(tf.pow(base, exp), ins[0].dtype)


def _extremum(tf: Any, a: Any, b: Any, is_max: bool, dtype: str) -> Any:
    if dtype == "bool":
        return tf.logical_or(a, b) if is_max else tf.logical_and(a, b)
    out = tf.maximum(a, b) if is_max else tf.minimum(a, b)
    if dtype in FLOATS:  # XLA (and ONNX) propagate NaN; TFLite's kernels return the other operand
        nan = tf.logical_or(tf.not_equal(a, a), tf.not_equal(b, b))
        out = tf.where(nan, a + b, out)
    return out


@handles("Max", "Min", exact=True)
def extremum(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    out = ins[0].t
    for v in ins[1:]:
        out = _extremum(tr.tf, out, v.t, node.op_type == "Max", ins[0].dtype)
    return Value(out, ins[0].dtype)


@handles("Clip", exact=True)
def clip(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    out = ins[0].t
    if len(ins) > 1 and ins[1] is not None:
        out = _extremum(tr.tf, out, ins[1].t, True, ins[0].dtype)
    if len(ins) > 2 and ins[2] is not None:
        out = _extremum(tr.tf, out, ins[2].t, False, ins[0].dtype)
    return Value(out, ins[0].dtype)


def _as_int(tf: Any, v: Value) -> Any:
    return tf.cast(v.t, tf.int32) if v.dtype == "bool" else v.t


_COMPARE = {
    "Equal": "equal",
    "Less": "less",
    "Greater": "greater",
    "LessOrEqual": "less_equal",
    "GreaterOrEqual": "greater_equal",
}


@handles(*_COMPARE, exact=True)
def compare(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    tf = tr.tf
    if node.op_type == "Equal" and ins[0].dtype == "bool":
        return Value(tf.equal(ins[0].t, ins[1].t), "bool")
    if node.op_type == "Equal" and ins[0].dtype in FLOATS:
        for x, other in ((ins[0], ins[1]), (ins[1], ins[0])):
            known = static(tf, other)
            if (
                known is not None
                and known.size
                and np.all(np.isinf(known))
                and len(set(np.sign(known.flat))) == 1
            ):
                # x == ±inf as |x| beyond the largest finite value: right even where a converter
                # writes inf constants as FLT_MAX (TFLite's default; tflite.py turns that off).
                big = tf.constant(x.t.dtype.max, x.t.dtype)
                return Value(x.t > big if known.flat[0] > 0 else x.t < -big, "bool")
    fn = getattr(tf.math, _COMPARE[node.op_type])
    return Value(fn(_as_int(tf, ins[0]), _as_int(tf, ins[1])), "bool")


@handles("IsNaN", exact=True)
def isnan(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    return Value(tr.tf.not_equal(ins[0].t, ins[0].t), "bool")


@handles("IsInf", exact=True)
def isinf(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    """``|x| > max finite``: right even where a converter writes inf constants as FLT_MAX (TFLite's
    default, which tflite.py turns off), where comparing with inf would miss infinities."""
    tf = tr.tf
    a = attrs(node)
    x = ins[0].t
    zero = tf.zeros_like(x)
    inf = tf.abs(x) > tf.constant(x.dtype.max, x.dtype)
    if not a.get("detect_positive", 1):
        inf = tf.logical_and(inf, x < zero)
    if not a.get("detect_negative", 1):
        inf = tf.logical_and(inf, x > zero)
    return Value(inf, "bool")


@handles("Not", exact=True)
def logical_not(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    return Value(tr.tf.logical_not(ins[0].t), "bool")


@handles("And", "Or", "Xor", exact=True)
def logical(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    tf = tr.tf
    a, b = ins[0].t, ins[1].t
    fn = {"And": tf.logical_and, "Or": tf.logical_or, "Xor": tf.not_equal}[node.op_type]
    return Value(fn(a, b), "bool")


@handles("Where", exact=True)
def select(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    return Value(tr.tf.where(ins[0].t, ins[1].t, ins[2].t), ins[1].dtype)


@handles("Gelu")
def gelu(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    approximate = attrs(node).get("approximate", "none") == "tanh"
    return Value(tr.tf.nn.gelu(ins[0].t, approximate=approximate), ins[0].dtype)


@handles("Softmax", "LogSoftmax")
def softmax(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    """TF's kernel, with NaN rows where jax's ``exp(x - max(x))`` (and ONNX Runtime) gives them: a row
    holding NaN or +inf, or all -inf (TF's kernels give NaN only at the NaN and 0 or 1 elsewhere)."""
    tf = tr.tf
    x = ins[0].t
    axis = attrs(node).get("axis", -1)
    fn = tf.nn.softmax if node.op_type == "Softmax" else tf.nn.log_softmax
    out = fn(x, axis=axis)
    big = tf.constant(x.dtype.max, x.dtype)  # ±inf as beyond it (no inf constant needed)
    nan_row = tf.logical_or(
        # NaN as x != x: TF's graph optimizer turns ``logical_not(x <= big)`` into ``x > big``
        tf.reduce_any(tf.logical_or(tf.not_equal(x, x), x > big), axis=axis, keepdims=True),
        tf.reduce_all(x < -big, axis=axis, keepdims=True),
    )
    return Value(tf.where(nan_row, tf.constant(float("nan"), x.dtype), out), ins[0].dtype)
