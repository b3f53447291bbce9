"""Matrix products, convolutions and pooling (ONNX's channels-first layout, TF's channels-last)."""

from __future__ import annotations

from typing import Any

from jaxconv.tf.onnx_to_tf.graph import attrs
from jaxconv.tf.onnx_to_tf.table import handles
from jaxconv.tf.onnx_to_tf.values import Value


def matmul(tf: Any, a: Any, b: Any) -> Any:
    """numpy matmul; integers as a broadcast product and sum (TFLite's batch_matmul is float-only)."""
    a_vector, b_vector = len(a.shape) == 1, len(b.shape) == 1
    if a_vector:
        a = tf.expand_dims(a, 0)
    if b_vector:
        b = tf.expand_dims(b, -1)
    if a.dtype.is_floating:
        out = tf.linalg.matmul(a, b)
    else:
        out = tf.reduce_sum(tf.expand_dims(a, -1) * tf.expand_dims(b, -3), axis=-2)
    if b_vector:
        out = tf.squeeze(out, [-1])
    if a_vector:
        out = tf.squeeze(out, [-1])
    return out


@handles("MatMul")
def matmul_op(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    return Value(matmul(tr.tf, ins[0].t, ins[1].t), ins[0].dtype)


@handles("Gemm")
def gemm(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    tf = tr.tf
    a_ = attrs(node)
    a, b = ins[0].t, ins[1].t
    if a_.get("transA", 0):
        a = tf.transpose(a)
    if a_.get("transB", 0):
        b = tf.transpose(b)
    out = _scaled(tf, matmul(tf, a, b), a_.get("alpha", 1.0))  # a Gemm without C: the product alone
    if len(ins) > 2 and ins[2] is not None:
        out = out + _scaled(tf, ins[2].t, a_.get("beta", 1.0))
    return Value(out, ins[0].dtype)


def _scaled(tf: Any, t: Any, factor: float) -> Any:
    """``t * factor``; ``t`` itself for a factor of 1 (no Mul op in the TF graph)."""
    return t if factor == 1.0 else t * tf.constant(factor, t.dtype)


def _last(n: int) -> list[int]:
    return [0] + list(range(2, n + 2)) + [1]


def _first(n: int) -> list[int]:
    return [0, n + 1] + list(range(1, n + 1))


def _explicit_pads(tf: Any, x: Any, pads: list[int], n: int, value: float = 0.0) -> Any:
    if not any(pads):
        return x
    spec = [[0, 0]] + [[pads[i], pads[i + n]] for i in range(n)] + [[0, 0]]
    return tf.pad(x, spec, constant_values=value)


@handles("Conv")
def conv(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    tf = tr.tf
    a = attrs(node)
    x, w = ins[0].t, ins[1].t
    n = len(x.shape) - 2
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        raise ValueError(f"Conv auto_pad {a['auto_pad']}")
    strides = list(a.get("strides", [1] * n))
    dilations = list(a.get("dilations", [1] * n))
    group = a.get("group", 1)
    xl = _explicit_pads(tf, tf.transpose(x, _last(n)), list(a.get("pads", [0] * 2 * n)), n)
    wl = tf.transpose(w, list(range(2, n + 2)) + [1, 0])  # [k..., C/g, M]
    if group == 1:
        out = tf.nn.convolution(xl, wl, strides=strides, padding="VALID", dilations=dilations)
    else:
        xs = tf.split(xl, group, axis=-1)
        ws = tf.split(wl, group, axis=-1)
        out = tf.concat(
            [
                tf.nn.convolution(xi, wi, strides=strides, padding="VALID", dilations=dilations)
                for xi, wi in zip(xs, ws)
            ],
            axis=-1,
        )
    out = tf.transpose(out, _first(n))
    if len(ins) > 2 and ins[2] is not None:
        out = out + tf.reshape(ins[2].t, [1, -1] + [1] * n)
    return Value(out, ins[0].dtype)


def _upsample(tf: Any, x: Any, axis: int, stride: int) -> Any:
    """Insert ``stride - 1`` zeros between the elements of ``x`` along ``axis`` (static sizes)."""
    if stride == 1:
        return x
    moved = tf.experimental.numpy.moveaxis(x, axis, -1)
    zeros = tf.zeros_like(moved)
    spread = tf.stack([moved] + [zeros] * (stride - 1), axis=-1)
    shape = moved.shape.as_list()
    flat = tf.reshape(spread, shape[:-1] + [shape[-1] * stride])[..., : (shape[-1] - 1) * stride + 1]
    return tf.experimental.numpy.moveaxis(flat, -1, axis)


@handles("ConvTranspose")
def conv_transpose(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    """A transposed convolution as a convolution of the zero-upsampled input with the flipped kernel
    (TFLite's TRANSPOSE_CONV rejects some of XLA's padding)."""
    tf = tr.tf
    a = attrs(node)
    x, w = ins[0].t, ins[1].t
    n = len(x.shape) - 2
    if (
        a.get("group", 1) != 1
        or a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID")
        or "output_shape" in a
    ):
        raise ValueError("ConvTranspose with groups, auto_pad or output_shape")
    strides = list(a.get("strides", [1] * n))
    dilations = list(a.get("dilations", [1] * n))
    pads = list(a.get("pads", [0] * 2 * n))
    extra = list(a.get("output_padding", [0] * n))
    kernel = w.shape.as_list()[2:]
    xl = tf.transpose(x, _last(n))
    for i in range(n):
        xl = _upsample(tf, xl, i + 1, strides[i])
    spec = [[0, 0]]
    for i in range(n):
        edge = (kernel[i] - 1) * dilations[i]
        spec.append([edge - pads[i], edge - pads[i + n] + extra[i]])
    spec.append([0, 0])
    crop = [[max(-b, 0), max(-e, 0)] for b, e in spec]
    xl = tf.pad(xl, [[max(b, 0), max(e, 0)] for b, e in spec])
    if any(b or e for b, e in crop):
        size = xl.shape.as_list()
        xl = xl[tuple(slice(b, size[i] - e) for i, (b, e) in enumerate(crop))]
    wl = tf.reverse(tf.transpose(w, list(range(2, n + 2)) + [0, 1]), list(range(n)))  # [k..., C_in, C_out]
    out = tf.nn.convolution(xl, wl, strides=1, padding="VALID", dilations=dilations)
    out = tf.transpose(out, _first(n))
    if len(ins) > 2 and ins[2] is not None:
        out = out + tf.reshape(ins[2].t, [1, -1] + [1] * n)
    return Value(out, ins[0].dtype)


@handles("MaxPool", exact=True)
def max_pool(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    """TF's max pooling; with window dilations (which it lacks), the maximum of one strided slice per
    window offset."""
    tf = tr.tf
    a = attrs(node)
    x = ins[0].t
    n = len(x.shape) - 2
    if a.get("ceil_mode", 0):
        raise ValueError("MaxPool with ceil_mode")
    if len(node.output) > 1 and node.output[1]:
        raise ValueError("MaxPool with an Indices output")
    low = float("-inf") if x.dtype.is_floating else x.dtype.min
    xl = _explicit_pads(tf, tf.transpose(x, _last(n)), list(a.get("pads", [0] * 2 * n)), n, low)
    kernel, strides = list(a["kernel_shape"]), list(a.get("strides", [1] * n))
    dilations = list(a.get("dilations", [1] * n))
    if all(d == 1 for d in dilations):
        out = tf.nn.max_pool(xl, kernel, strides, "VALID")
    else:
        out = _dilated_max_pool(tf, xl, kernel, strides, dilations)
    return Value(tf.transpose(out, _first(n)), ins[0].dtype)


@handles("AveragePool")
def average_pool(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    """TF's average pooling of the input padded with zeros (ONNX's ``count_include_pad=1``: every
    window divided by its full size, as ``nn.avg_pool``)."""
    tf = tr.tf
    a = attrs(node)
    x = ins[0].t
    n = len(x.shape) - 2
    if a.get("ceil_mode", 0) or not a.get("count_include_pad", 0) or a.get("auto_pad", "NOTSET") != "NOTSET" \
            or any(d != 1 for d in a.get("dilations", [1] * n)):
        raise ValueError("AveragePool other than count_include_pad=1 with explicit pads")
    xl = _explicit_pads(tf, tf.transpose(x, _last(n)), list(a.get("pads", [0] * 2 * n)), n)
    out = tf.nn.avg_pool(xl, list(a["kernel_shape"]), list(a.get("strides", [1] * n)), "VALID")
    return Value(tf.transpose(out, _first(n)), ins[0].dtype)


def _dilated_max_pool(tf: Any, x: Any, kernel: list[int], strides: list[int], dilations: list[int]) -> Any:
    """Max pooling of channels-last ``x`` (already padded) over windows with holes: output i takes
    the maximum of x[i * s + j * d] over j < k, one strided slice of x per offset j."""
    import itertools

    n = len(kernel)
    extent = [d * (k - 1) + 1 for k, d in zip(kernel, dilations)]
    out = None
    for offset in itertools.product(*(range(k) for k in kernel)):
        begin = [0] + [j * d for j, d in zip(offset, dilations)] + [0]
        # up to the last start that fits a whole window: extent - 1 - j * d short of the end
        short = [e - 1 - b for e, b in zip(extent, begin[1:-1])]
        end = [0] + [-s for s in short] + [0]
        mask = 1 | (1 << (n + 1)) | sum(1 << (i + 1) for i, s in enumerate(short) if s == 0)
        part = tf.strided_slice(x, begin, end, [1] + strides + [1], end_mask=mask)
        out = part if out is None else tf.maximum(out, part)
    return out
