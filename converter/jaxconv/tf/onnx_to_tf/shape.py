"""Shapes, layout and conversions: Reshape, Slice, Concat, Pad, Cast and friends."""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxconv.tf.onnx_to_tf.graph import attrs, static
from jaxconv.tf.onnx_to_tf.table import handles
from jaxconv.tf.onnx_to_tf.values import ONNX_DTYPES, Value, constant, narrow, work


def _ints(tr: Any, v: Value | None, what: str) -> list[int]:
    known = static(tr.tf, v)
    if known is None:
        raise ValueError(f"{what} must be known when the model is built")
    return [int(i) for i in np.asarray(known).reshape(-1)]


def _rank(t: Any) -> int:
    return len(t.shape)


@handles("Identity", exact=True)
def identity(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    return ins[0]


@handles("Constant", exact=True)
def const(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    a = attrs(node)
    if "value" in a:
        value = a["value"]
        dtype = _dtype_of_array(node)
        return constant(tr.tf, value, dtype)
    for key, kind in (
        ("value_float", np.float32),
        ("value_int", np.int64),
        ("value_floats", np.float32),
        ("value_ints", np.int64),
    ):
        if key in a:
            return constant(tr.tf, np.asarray(a[key], kind))
    raise ValueError(f"Constant with attributes {sorted(a)}")


def _dtype_of_array(node: Any) -> str:
    for a in node.attribute:
        if a.name == "value":
            return ONNX_DTYPES[a.t.data_type]
    raise ValueError("Constant without value")


@handles("Shape", exact=True)
def shape(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    tf = tr.tf
    a = attrs(node)
    t = ins[0].t
    dims = t.shape.as_list()
    start, end = a.get("start", 0), a.get("end", len(dims))
    if all(d is not None for d in dims):
        return constant(tf, np.asarray(dims, np.int64)[start:end])
    return Value(tf.shape(t, out_type=tf.int64)[start:end], "int64")


@handles("Size", exact=True)
def size(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    return Value(tr.tf.size(ins[0].t, out_type=tr.tf.int64), "int64")


@handles("Reshape", exact=True)
def reshape(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    tf = tr.tf
    x = ins[0].t
    known = static(tf, ins[1])
    allowzero = attrs(node).get("allowzero", 0)
    if known is not None:
        target = [int(d) for d in np.asarray(known).reshape(-1)]
        if not allowzero and 0 in target:
            dims = x.shape.as_list()
            if all(dims[i] is not None for i, d in enumerate(target) if d == 0):
                target = [dims[i] if d == 0 else d for i, d in enumerate(target)]
            else:
                dyn = tf.shape(x, out_type=tf.int64)
                spec = tf.stack(
                    [dyn[i] if d == 0 else tf.constant(d, tf.int64) for i, d in enumerate(target)]
                )
                return Value(tf.reshape(x, spec), ins[0].dtype)
        return Value(tf.reshape(x, target), ins[0].dtype)
    return Value(tf.reshape(x, tf.cast(ins[1].t, tf.int64)), ins[0].dtype)


@handles("Flatten", exact=True)
def flatten(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    tf = tr.tf
    x = ins[0].t
    axis = attrs(node).get("axis", 1) % max(_rank(x), 1)
    dims = tf.shape(x, out_type=tf.int64)
    outer = tf.reduce_prod(dims[:axis])
    return Value(tf.reshape(x, tf.stack([outer, tf.constant(-1, tf.int64)])), ins[0].dtype)


@handles("Transpose", exact=True)
def transpose(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    x = ins[0].t
    perm = attrs(node).get("perm", list(range(_rank(x)))[::-1])
    return Value(tr.tf.transpose(x, perm), ins[0].dtype)


@handles("Concat", exact=True)
def concat(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    parts = [v for v in ins if v is not None]
    axis = attrs(node)["axis"]
    return Value(tr.tf.concat([v.t for v in parts], axis), parts[0].dtype)


@handles("Unsqueeze", exact=True)
def unsqueeze(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    x = ins[0].t
    axes = _ints(tr, ins[1], "Unsqueeze axes") if len(ins) > 1 else attrs(node)["axes"]
    rank = _rank(x) + len(axes)
    for axis in sorted(a % rank for a in axes):
        x = tr.tf.expand_dims(x, axis)
    return Value(x, ins[0].dtype)


@handles("Squeeze", exact=True)
def squeeze(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    x = ins[0].t
    if len(ins) > 1 and ins[1] is not None:
        axes = [a % _rank(x) for a in _ints(tr, ins[1], "Squeeze axes")]
        return Value(tr.tf.squeeze(x, axes), ins[0].dtype)
    return Value(tr.tf.squeeze(x), ins[0].dtype)


@handles("Expand", exact=True)
def expand(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    tf = tr.tf
    x = ins[0].t
    target = tf.cast(ins[1].t, tf.int64)
    full = tf.broadcast_dynamic_shape(tf.shape(x, out_type=tf.int64), target)
    known = tf.get_static_value(full)
    return Value(tf.broadcast_to(x, known if known is not None else full), ins[0].dtype)


@handles("Tile", exact=True)
def tile(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    return Value(tr.tf.tile(ins[0].t, tr.tf.cast(ins[1].t, tr.tf.int64)), ins[0].dtype)


@handles("Range")
def range_(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    tf = tr.tf
    start, limit, delta = (v.t for v in ins)
    return Value(tf.range(start, limit, delta), ins[0].dtype)


@handles("ConstantOfShape", exact=True)
def constant_of_shape(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    tf = tr.tf
    value = attrs(node).get("value", np.zeros(1, np.float32))
    dtype = _dtype_of_array(node) if node.attribute else "float32"
    fill = constant(tf, np.asarray(value).reshape(()), dtype)
    dims = tf.cast(ins[0].t, tf.int64)
    known = tf.get_static_value(dims)
    return Value(tf.fill(known if known is not None else dims, fill.t), dtype)


@handles("Slice", exact=True)
def slice_(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    tf = tr.tf
    x = ins[0].t
    rank = _rank(x)
    n = int(ins[1].t.shape[0]) if ins[1].t.shape[0] is not None else None
    axes = _ints(tr, ins[3], "Slice axes") if len(ins) > 3 and ins[3] is not None else list(range(n or rank))
    steps = _ints(tr, ins[4], "Slice steps") if len(ins) > 4 and ins[4] is not None else [1] * len(axes)
    axes = [a % rank for a in axes]
    mask = (1 << rank) - 1
    for a in axes:
        mask &= ~(1 << a)
    stride = [1] * rank
    for a, st in zip(axes, steps):
        stride[a] = st
    limit = 2**31 - 1  # ONNX clamps starts and ends like Python slicing, as strided_slice does
    starts, ends = static(tf, ins[1]), static(tf, ins[2])
    if starts is not None and ends is not None:
        begin, end = [0] * rank, [0] * rank
        for s, e, a in zip(np.asarray(starts).reshape(-1), np.asarray(ends).reshape(-1), axes):
            begin[a], end[a] = max(min(int(s), limit), -limit), max(min(int(e), limit), -limit)
        out = tf.strided_slice(x, begin, end, stride, begin_mask=mask, end_mask=mask)
        return Value(out, ins[0].dtype)

    def vector(v: Value) -> Any:
        t = tf.cast(tf.clip_by_value(tf.cast(v.t, tf.int64), -limit, limit), tf.int32)
        parts = [tf.zeros([], tf.int32)] * rank
        for k, a in enumerate(axes):
            parts[a] = t[k]
        return tf.stack(parts)

    out = tf.strided_slice(x, vector(ins[1]), vector(ins[2]), stride, begin_mask=mask, end_mask=mask)
    return Value(out, ins[0].dtype)


@handles("Pad", exact=True)
def pad(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    tf = tr.tf
    x = ins[0].t
    rank = _rank(x)
    axes = _ints(tr, ins[3], "Pad axes") if len(ins) > 3 and ins[3] is not None else list(range(rank))
    known = partial_ints(tr, node.input[1], env)
    if static(tf, ins[1]) is None and (known is None or None in known):
        return _pad_at_run_time(tr, node, ins, [a % rank for a in axes], known)
    pads = _ints(tr, ins[1], "Pad pads") if static(tf, ins[1]) is not None else [int(k) for k in known or []]
    n = len(axes)
    before, after = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        before[a % rank], after[a % rank] = pads[i], pads[i + n]
    if any(p < 0 for p in before + after):  # negative pads crop
        begin = [max(-p, 0) for p in before]
        end = [-max(-p, 0) if p < 0 else 0 for p in after]
        mask = sum(1 << i for i, p in enumerate(after) if p >= 0)
        x = tf.strided_slice(x, begin, end, [1] * rank, end_mask=mask)
        before, after = [max(p, 0) for p in before], [max(p, 0) for p in after]
    mode = attrs(node).get("mode", "constant")
    paddings = [[b, e] for b, e in zip(before, after)]
    if mode == "constant":
        value = ins[2].t if len(ins) > 2 and ins[2] is not None else tf.zeros([], x.dtype)
        return Value(tf.pad(x, paddings, constant_values=tf.reshape(value, [])), ins[0].dtype)
    if mode == "reflect":
        return Value(tf.pad(x, paddings, mode="REFLECT"), ins[0].dtype)
    for axis, (b, e) in enumerate(paddings):  # edge
        if b or e:
            first = tf.gather(x, [0] * b, axis=axis)
            last = tf.gather(x, [tf.shape(x)[axis] - 1] * e, axis=axis)
            x = tf.concat([first, x, last], axis)
    return Value(x, ins[0].dtype)


def partial_ints(tr: Any, name: str, env: Any) -> list[int | None] | None:
    """The elements of the integer tensor ``name`` known while the model is built, None where one
    depends on the inputs (through Concat, Reshape, Transpose, Cast, Identity, Squeeze/Unsqueeze of
    constants and computed parts); None when not even its size is known."""
    tf = tr.tf
    value = env.get(name)
    known = static(tf, value) if value is not None else None
    if known is not None:
        return [int(k) for k in np.asarray(known).reshape(-1)]
    node = tr.producers.get(name)
    shape = value.t.shape if value is not None else None
    size = shape.num_elements() if shape is not None and shape.is_fully_defined() else None
    if node is None or node.domain not in ("", "ai.onnx"):
        return None if size is None else [None] * size
    if node.op_type in ("Cast", "Identity", "Reshape", "Squeeze", "Unsqueeze"):
        return partial_ints(tr, node.input[0], env)
    if node.op_type == "Concat" and size is not None:
        grids = []
        for i in (i for i in node.input if i):
            inner, dims = partial_ints(tr, i, env), env[i].t.shape
            if inner is None or not dims.is_fully_defined():
                return [None] * size
            grids.append(np.array(inner, dtype=object).reshape(dims.as_list()))
        return list(np.concatenate(grids, axis=attrs(node)["axis"]).reshape(-1))
    if node.op_type == "Transpose" and shape is not None and shape.is_fully_defined():
        inner = partial_ints(tr, node.input[0], env)
        source = env[node.input[0]].t.shape
        if inner is not None and source.is_fully_defined():
            grid = np.array(inner, dtype=object).reshape(source.as_list())
            perm = attrs(node).get("perm", list(range(grid.ndim))[::-1])
            return list(np.transpose(grid, perm).reshape(-1))
    return None if size is None else [None] * size


def _pad_at_run_time(tr: Any, node: Any, ins: list[Value], axes: list[int],
                     known: list[int | None] | None) -> Value:
    """Pad with ``pads`` computed by the model (a padding that depends on a symbolic size): negative
    pads crop (one slice), the rest pad in the node's mode; edge padding gathers clamped indices.
    The result keeps the static size of each axis whose pads are ``known`` while building (TFLite's
    convolutions need their channel counts)."""
    out = _pad_dynamic(tr, node, ins, axes)
    dims = ins[0].t.shape.as_list()
    n = len(axes)
    if known is not None and len(known) == 2 * n:
        static_dims: list[int | None] = [None] * len(dims)
        for a in range(len(dims)):
            lo, hi = (known[axes.index(a)], known[axes.index(a) + n]) if a in axes else (0, 0)
            if dims[a] is not None and lo is not None and hi is not None:
                static_dims[a] = max(dims[a] + lo + hi, 0)
        if any(d is not None for d in static_dims):  # a reshape TFLite's shape inference reads
            tf = tr.tf
            run_dims = tf.shape(out.t, out_type=tf.int32)
            spec = tf.stack([tf.constant(d, tf.int32) if d is not None else run_dims[i]
                             for i, d in enumerate(static_dims)])
            out = Value(tf.reshape(out.t, spec), out.dtype)
    return out


def _pad_dynamic(tr: Any, node: Any, ins: list[Value], axes: list[int]) -> Value:
    tf = tr.tf
    x = ins[0].t
    rank, n = _rank(x), len(axes)
    pads = tf.cast(tf.reshape(ins[1].t, [2 * n]), tf.int32)
    zero = tf.zeros([], tf.int32)
    before, after = [zero] * rank, [zero] * rank
    for i, a in enumerate(axes):
        before[a], after[a] = pads[i], pads[i + n]
    lo, hi = tf.stack(before), tf.stack(after)
    dims = tf.shape(x, out_type=tf.int32)
    crop_lo, crop_hi = tf.maximum(-lo, 0), tf.maximum(-hi, 0)
    x = tf.slice(x, crop_lo, tf.maximum(dims - crop_lo - crop_hi, 0))
    lo, hi = tf.maximum(lo, 0), tf.maximum(hi, 0)
    mode = attrs(node).get("mode", "constant")
    if mode == "constant":
        value = ins[2].t if len(ins) > 2 and ins[2] is not None else tf.zeros([], x.dtype)
        paddings = tf.stack([lo, hi], axis=1)
        return Value(tf.pad(x, paddings, constant_values=tf.reshape(value, [])), ins[0].dtype)
    if mode == "reflect":
        return Value(tf.pad(x, tf.stack([lo, hi], axis=1), mode="REFLECT"), ins[0].dtype)
    for a in axes:  # edge: index -lo .. dim + hi - 1, clamped into the axis
        size = tf.shape(x, out_type=tf.int32)[a]
        index = tf.clip_by_value(tf.range(-lo[a], size + hi[a]), 0, size - 1)
        x = tf.gather(x, index, axis=a)
    return Value(x, ins[0].dtype)


@handles("Cast")
def cast(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    tf = tr.tf
    src = ins[0]
    dst = ONNX_DTYPES[attrs(node)["to"]]
    x = src.t
    if dst == "bool":
        return Value(tf.not_equal(x, tf.zeros_like(x)), dst)
    x = tf.cast(x, work(tf, dst))
    return Value(narrow(tf, x, dst), dst)


@handles("Split", exact=True)
def split(tr: Any, node: Any, ins: list[Value], env: Any) -> list[Value]:
    tf = tr.tf
    a = attrs(node)
    x = ins[0].t
    axis = a.get("axis", 0) % _rank(x)
    if len(ins) > 1 and ins[1] is not None:
        sizes: Any = _ints(tr, ins[1], "Split sizes")
    else:
        count = a.get("num_outputs", len(node.output))
        dim = x.shape[axis]
        if dim is None:
            raise ValueError("Split of a dynamic axis without sizes")
        step = -(-dim // count)
        sizes = [min(step, dim - i * step) for i in range(count)]
    return [Value(t, ins[0].dtype) for t in tf.split(x, sizes, axis=axis)]
