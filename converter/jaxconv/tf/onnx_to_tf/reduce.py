"""Reductions, arg-max, cumulative sums, TopK and LayerNormalization."""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxconv.tf.onnx_to_tf.graph import attrs, static
from jaxconv.tf.onnx_to_tf.table import handles
from jaxconv.tf.onnx_to_tf.values import FLOATS, Value, narrow


def _axes(tr: Any, node: Any, ins: list[Value]) -> list[int] | None:
    """The reduced axes; None for all of them; [] for none (noop_with_empty_axes)."""
    a = attrs(node)
    axes = None
    if len(ins) > 1 and ins[1] is not None:
        known = static(tr.tf, ins[1])
        if known is None:
            raise ValueError("reduction axes must be known when the model is built")
        axes = [int(i) for i in np.asarray(known).reshape(-1)]
    elif "axes" in a:
        axes = list(a["axes"])
    if not axes:
        return [] if a.get("noop_with_empty_axes", 0) else None
    rank = len(ins[0].t.shape)
    return sorted(i % rank for i in axes)


@handles("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceMean", "ReduceSumSquare")
def reduce(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    tf = tr.tf
    x = ins[0].t
    axes = _axes(tr, node, ins)
    if axes == []:
        return ins[0]
    keep = bool(attrs(node).get("keepdims", 1))
    op = node.op_type
    if ins[0].dtype == "bool":
        fn = tf.reduce_any if op in ("ReduceMax", "ReduceSum") else tf.reduce_all
        return Value(fn(x, axis=axes, keepdims=keep), "bool")
    fn = {
        "ReduceSum": tf.reduce_sum,
        "ReduceMax": tf.reduce_max,
        "ReduceMin": tf.reduce_min,
        "ReduceProd": tf.reduce_prod,
        "ReduceMean": tf.reduce_mean,
        "ReduceSumSquare": lambda t, **kw: tf.reduce_sum(tf.square(t), **kw),
    }[op]
    out = fn(x, axis=axes, keepdims=keep)
    if op in ("ReduceMax", "ReduceMin") and ins[0].dtype in FLOATS:  # NaN wins, as in XLA
        nan = tf.reduce_any(tf.not_equal(x, x), axis=axes, keepdims=keep)
        out = tf.where(nan, tf.constant(float("nan"), out.dtype), out)
    return Value(out, ins[0].dtype)


@handles("ArgMax", "ArgMin")
def argmax(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    tf = tr.tf
    a = attrs(node)
    x = ins[0].t
    if ins[0].dtype == "bool":
        x = tf.cast(x, tf.int32)
    rank = len(x.shape)
    axis = a.get("axis", 0) % rank
    last = a.get("select_last_index", 0)
    if last:
        x = tf.reverse(x, [axis])
    fn = tf.math.argmax if node.op_type == "ArgMax" else tf.math.argmin
    idx = fn(x, axis=axis, output_type=tf.int64)
    if last:
        idx = tf.cast(tf.shape(x)[axis], tf.int64) - 1 - idx
    if a.get("keepdims", 1):
        idx = tf.expand_dims(idx, axis)
    return Value(idx, "int64")


@handles("CumSum")
def cumsum(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    tf = tr.tf
    a = attrs(node)
    axis = int(np.asarray(static(tf, ins[1])).reshape(()))
    out = tf.cumsum(
        ins[0].t, axis=axis, exclusive=bool(a.get("exclusive", 0)), reverse=bool(a.get("reverse", 0))
    )
    return Value(out, ins[0].dtype)


# Up to this many elements a cumulative product multiplies one after another, in XLA's order (its
# reduce_window on the CPU); longer axes take log2(n) steps of a Hillis-Steele scan.
SEQUENTIAL_CUMPROD = 64


@handles("CumProd")
def cumprod(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    """Cumulative product from multiplies and slices (TFLite has no CumProd builtin). For static
    lengths up to ``SEQUENTIAL_CUMPROD``, each output multiplies its window left to right, as XLA's
    reduce_window does (forward: one running product; reverse: element i times x[i + 1], then
    x[i + 2], ...), so overflow, 0 * inf and rounding come as in jax.jit; longer axes take a
    log-step scan (integers exact, floats within rounding)."""
    tf = tr.tf
    a = attrs(node)
    x = ins[0].t
    rank = len(x.shape)
    axis = int(np.asarray(static(tf, ins[1])).reshape(())) % rank
    n = x.shape[axis]
    if n is None:
        raise ValueError("CumProd along an axis of symbolic length")
    exclusive, reverse = bool(a.get("exclusive", 0)), bool(a.get("reverse", 0))
    dtype = ins[0].dtype

    def take(t: Any, start: int, stop: int) -> Any:
        return tf.gather(t, list(range(start, stop)), axis=axis)

    def ones(count: int) -> Any:
        return tf.ones_like(take(x, 0, count))

    if exclusive and n:
        x = tf.concat([take(x, 1, n), ones(1)] if reverse else [ones(1), take(x, 0, n - 1)], axis)
    if n <= 1:
        return Value(x, dtype)
    if n <= SEQUENTIAL_CUMPROD and not reverse:
        parts = [take(x, i, i + 1) for i in range(n)]  # TFLite unpacks no int64
        for i in range(1, n):
            parts[i] = narrow(tf, parts[i - 1] * parts[i], dtype)  # each product rounded, as XLA does
        return Value(tf.concat(parts, axis), dtype)
    if n <= SEQUENTIAL_CUMPROD:
        out = x
        for j in range(1, n):  # times 1 past the end: exact
            out = narrow(tf, out * tf.concat([take(x, j, n), ones(j)], axis), dtype)
        return Value(out, dtype)
    out, s = (tf.reverse(x, [axis]) if reverse else x), 1
    while s < n:
        out, s = narrow(tf, out * tf.concat([ones(s), take(out, 0, n - s)], axis), dtype), s * 2
    return Value(tf.reverse(out, [axis]) if reverse else out, dtype)


@handles("TopK", exact=True)
def topk(tr: Any, node: Any, ins: list[Value], env: Any) -> list[Value]:
    tf = tr.tf
    a = attrs(node)
    x = ins[0].t
    rank = len(x.shape)
    axis = a.get("axis", -1) % rank
    k = tf.cast(tf.reshape(ins[1].t, []), tf.int32)
    if ins[0].dtype == "bool":
        x = tf.cast(x, tf.int32)
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    if axis != rank - 1:
        x = tf.transpose(x, perm)
    largest = a.get("largest", 1)
    flipped = x if largest else (-x if x.dtype.is_floating else -1 - x)
    values, idx = tf.math.top_k(flipped, k, sorted=True)
    if not largest:
        values = -values if x.dtype.is_floating else -1 - values
    idx = tf.cast(idx, tf.int64)
    if axis != rank - 1:
        values, idx = tf.transpose(values, perm), tf.transpose(idx, perm)
    if ins[0].dtype == "bool":
        values = tf.not_equal(values, tf.zeros_like(values))
    return [Value(values, ins[0].dtype), Value(idx, "int64")]


@handles("LayerNormalization")
def layer_norm(tr: Any, node: Any, ins: list[Value], env: Any) -> list[Value]:
    """``(x - mean) / sqrt(mean((x - mean)**2) + epsilon) * scale + bias`` over the axes from ``axis`` on
    (the two-pass variance, as ORT's kernel); the optional Mean and InvStdDev outputs keep those axes."""
    tf = tr.tf
    a = attrs(node)
    x = ins[0].t
    rank = len(x.shape)
    axes = list(range(a.get("axis", -1) % rank, rank))
    mean = tf.reduce_mean(x, axis=axes, keepdims=True)
    centred = x - mean
    std = tf.sqrt(tf.reduce_mean(centred * centred, axis=axes, keepdims=True)
                  + tf.constant(a.get("epsilon", 1e-5), x.dtype))
    out = centred / std * ins[1].t
    if len(ins) > 2 and ins[2] is not None:
        out = out + ins[2].t
    dtype = ins[0].dtype
    return [Value(out, dtype), Value(mean, dtype), Value(1 / std, dtype)]
