"""Gathers and scatters (indices already made in-range by jaxconv's lowering)."""

from __future__ import annotations

from typing import Any

from jaxconv.tf.onnx_to_tf.graph import Untranslatable, attrs, static
from jaxconv.tf.onnx_to_tf.table import handles
from jaxconv.tf.onnx_to_tf.values import Value


def _wrap(tf: Any, idx: Any, dim: Any) -> Any:
    idx = tf.cast(idx, tf.int32)
    return tf.where(idx < 0, idx + tf.cast(dim, tf.int32), idx)


def _along_axis(tf: Any, node: Any, ins: list[Value]) -> tuple[Any, int, Any]:
    """(data, the ``axis`` attribute made non-negative, indices as int32 wrapped into range) of a
    Gather/GatherElements."""
    x = ins[0].t
    axis = attrs(node).get("axis", 0) % len(x.shape)
    return x, axis, _wrap(tf, ins[1].t, tf.shape(x)[axis])


@handles("Gather", exact=True)
def gather(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    x, axis, idx = _along_axis(tr.tf, node, ins)
    return Value(tr.tf.gather(x, idx, axis=axis), ins[0].dtype)


@handles("Resize", exact=True)
def resize(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    """The nearest-neighbour Resize by whole factors jaxconv writes for upsampling (``nearest_resize``): each
    entry repeated ``scale`` times along its axis, ``tf.repeat`` per axis (copies, exact)."""
    a = attrs(node)
    scales = static(tr.tf, ins[2]) if len(ins) > 2 else None
    form = (a.get("mode"), a.get("coordinate_transformation_mode"), a.get("nearest_mode"))
    if form != ("nearest", "asymmetric", "floor") or scales is None or (len(ins) > 3 and ins[3] is not None) \
            or any(s < 1 or s != int(s) for s in scales):
        raise Untranslatable(f"no TF translation of ONNX Resize {form} with scales {scales} ({node.name})")
    x = ins[0].t
    for axis, s in enumerate(scales):
        if s > 1:
            x = tr.tf.repeat(x, int(s), axis=axis)
    return Value(x, ins[0].dtype)


def _coordinates(tf: Any, idx: Any, axis: int) -> Any:
    """Full coordinates for GatherElements/ScatterElements: the grid with ``idx`` on ``axis``."""
    shape = tf.shape(idx)
    rank = len(idx.shape)
    grids = tf.meshgrid(*[tf.range(shape[i]) for i in range(rank)], indexing="ij")
    grids[axis] = idx
    return tf.stack(grids, axis=-1)


@handles("GatherElements", exact=True)
def gather_elements(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    x, axis, idx = _along_axis(tr.tf, node, ins)
    return Value(tr.tf.gather_nd(x, _coordinates(tr.tf, idx, axis)), ins[0].dtype)


@handles("GatherND", exact=True)
def gather_nd(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    tf = tr.tf
    batch = attrs(node).get("batch_dims", 0)
    return Value(tf.gather_nd(ins[0].t, tf.cast(ins[1].t, tf.int32), batch_dims=batch), ins[0].dtype)


@handles("ScatterND")
def scatter_nd(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    tf = tr.tf
    x, idx, upd = ins[0].t, tf.cast(ins[1].t, tf.int32), ins[2].t
    if len(idx.shape) == 1:  # one index: TF wants a list of them
        idx, upd = tf.expand_dims(idx, 0), tf.expand_dims(upd, 0)
    return Value(_scatter(tf, x, idx, upd, attrs(node).get("reduction", "none"), node.op_type), ins[0].dtype)


@handles("ScatterElements")
def scatter_elements(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    """A ScatterND at the full coordinates of each update: the grid with the indices on ``axis``."""
    tf = tr.tf
    x = ins[0].t
    axis = attrs(node).get("axis", 0) % len(x.shape)
    coordinates = _coordinates(tf, _wrap(tf, ins[1].t, tf.shape(x)[axis]), axis)
    return Value(_scatter(tf, x, coordinates, ins[2].t, attrs(node).get("reduction", "none"), node.op_type),
                 ins[0].dtype)


def _scatter(tf: Any, x: Any, idx: Any, upd: Any, reduction: str, op_type: str) -> Any:
    """``x`` with ``upd`` scattered at the index rows of ``idx`` (ScatterND's layout), combined by ``reduction``."""
    if reduction == "none":
        return tf.tensor_scatter_nd_update(x, idx, upd)
    if reduction == "add":
        return x + tf.scatter_nd(idx, upd, tf.shape(x))
    combine = _COMBINE.get(reduction)
    if combine is None:
        raise ValueError(f"{op_type} reduction {reduction!r}")
    return _scatter_one_by_one(tf, x, idx, upd, lambda old, new: combine(tf, old, new))


_COMBINE = {
    "max": lambda tf, a, b: _max_nan(tf, a, b, True),
    "min": lambda tf, a, b: _max_nan(tf, a, b, False),
    "mul": lambda tf, a, b: a * b,
}


def _max_nan(tf: Any, a: Any, b: Any, is_max: bool) -> Any:
    out = tf.maximum(a, b) if is_max else tf.minimum(a, b)
    if a.dtype.is_floating:
        out = tf.where(tf.logical_or(tf.not_equal(a, a), tf.not_equal(b, b)), a + b, out)
    return out


def _scatter_one_by_one(tf: Any, x: Any, idx: Any, upd: Any, combine: Any) -> Any:
    """Scatter with a reduction TFLite has no kernel for: one index row at a time in a while loop
    (repeated indices then combine in order, as XLA's CPU scatter does)."""
    rows = tf.reshape(idx, [-1, 1, idx.shape[-1]])
    values = tf.reshape(upd, tf.concat([[-1, 1], tf.shape(upd)[len(idx.shape) - 1 :]], 0))
    count = tf.shape(rows)[0]

    def step(i: Any, acc: Any) -> list[Any]:
        at = rows[i]
        return [i + 1, tf.tensor_scatter_nd_update(acc, at, combine(tf.gather_nd(acc, at), values[i]))]

    return tf.while_loop(lambda i, acc: i < count, step, [tf.constant(0), x])[1]


@handles("Trilu", exact=True)
def trilu(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    """The upper (``j - i >= k``) or lower (``j - i <= k``) triangle of the last two axes, +0 elsewhere.

    A mask from two ``tf.range`` (``band_part`` takes no band off the diagonal) and a select: kept
    elements are moved unchanged (NaN, -0), dropped ones become +0 as ONNX's Trilu writes them.
    """
    tf = tr.tf
    x = ins[0].t
    k = tf.zeros([], tf.int32)
    if len(ins) > 1 and ins[1] is not None:  # int64; j - i fits in int32, so clamp k to it
        k64 = tf.clip_by_value(tf.reshape(tf.cast(ins[1].t, tf.int64), []), -(2**31), 2**31 - 1)
        k = tf.cast(k64, tf.int32)
    size = tf.shape(x)
    offset = tf.range(size[-1])[tf.newaxis, :] - tf.range(size[-2])[:, tf.newaxis]  # j - i
    keep = offset >= k if attrs(node).get("upper", 1) else offset <= k
    return Value(tf.where(keep, x, tf.zeros_like(x)), ins[0].dtype)
