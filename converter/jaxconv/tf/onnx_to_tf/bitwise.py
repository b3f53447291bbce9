"""Bitwise ops from the ones TFLite has.

TFLite has XOR and right shifts, but no AND, OR, NOT or left shift. On 32-bit patterns:

- ``a & b``: ``a + b = (a ^ b) + 2 (a & b)``; the sum is formed in int64, wrapped to 32 bits and
  shifted right once as unsigned (bits 0..30), and bit 31 is set where both signs are.
- ``a | b = (a ^ b) ^ (a & b)``, ``~a = a ^ -1``, ``a << s = a * 2**s`` (wrapping).

Narrower integers are sign- or zero-extended to 32 bits (which commutes with these ops); uint32 is
held in int64 and wrapped to 32 bits first; int64 is split into two 32-bit words with a bitcast.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from jaxconv.tf.onnx_to_tf.graph import attrs
from jaxconv.tf.onnx_to_tf.table import handles
from jaxconv.tf.onnx_to_tf.values import BITS, ONNX_DTYPES, Value, tf_dtype, to_own, widen


def and32(tf: Any, a: Any, b: Any) -> Any:
    """``a & b`` of int32 tensors."""
    a, b = _broadcast(tf, a, b)
    x = tf.bitwise.bitwise_xor(a, b)
    twice = tf.cast(tf.cast(a, tf.int64) + tf.cast(b, tf.int64) - tf.cast(x, tf.int64), tf.int32)
    low = tf.cast(tf.bitwise.right_shift(tf.cast(twice, tf.uint32), tf.ones_like(twice, tf.uint32)), tf.int32)
    both = tf.logical_and(a < tf.zeros_like(a), b < tf.zeros_like(b))
    return tf.where(both, low + tf.constant(np.iinfo(np.int32).min, tf.int32), low)


def _broadcast(tf: Any, a: Any, b: Any) -> tuple[Any, Any]:
    shape = tf.broadcast_dynamic_shape(tf.shape(a), tf.shape(b))
    return tf.broadcast_to(a, shape), tf.broadcast_to(b, shape)


def _ops32(tf: Any) -> dict[str, Callable[[Any, Any], Any]]:
    return {
        "BitwiseAnd": lambda a, b: and32(tf, a, b),
        "BitwiseOr": lambda a, b: tf.bitwise.bitwise_xor(tf.bitwise.bitwise_xor(a, b), and32(tf, a, b)),
        "BitwiseXor": lambda a, b: tf.bitwise.bitwise_xor(a, b),
        "BitwiseNot": lambda a, _: tf.bitwise.bitwise_xor(a, tf.constant(-1, tf.int32)),
    }


def _apply32(tf: Any, op: str, ins: list[Value]) -> Any:
    """Run ``op`` on the values' bit patterns; returns the result in the values' work dtype."""
    dtype = ins[0].dtype
    fn = _ops32(tf)[op]
    a = ins[0].t
    b = ins[1].t if len(ins) > 1 else None
    if BITS[dtype] <= 16 or dtype == "int32":
        return fn(a, b)
    if dtype == "uint32":
        out = fn(tf.cast(a, tf.int32), None if b is None else tf.cast(b, tf.int32))
        return tf.cast(tf.cast(out, tf.uint32), tf.int64)
    if dtype == "int64":
        words = fn(tf.bitcast(a, tf.int32), None if b is None else tf.bitcast(b, tf.int32))
        return tf.bitcast(words, tf.int64)
    raise ValueError(f"no bitwise ops on {dtype}")


@handles("BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot")
def bitwise(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    tf = tr.tf
    if ins[0].dtype == "int64" and len(ins) > 1:
        shape = tf.broadcast_dynamic_shape(tf.shape(ins[0].t), tf.shape(ins[1].t))
        ins = [Value(tf.broadcast_to(v.t, shape), v.dtype) for v in ins]
    return Value(_apply32(tf, node.op_type, ins), ins[0].dtype)


@handles("BitShift")
def shift(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    tf = tr.tf
    x, s = ins[0].t, ins[1].t
    dtype = ins[0].dtype
    bits = BITS[dtype]
    if dtype not in ("uint8", "uint16", "uint32"):
        raise ValueError(f"no shifts of {dtype}")
    x, s = _broadcast(tf, x, s)
    if attrs(node)["direction"] == "LEFT":
        table = tf.constant([2**i for i in range(bits)] + [0], x.dtype)
        pow2 = tf.gather(table, tf.cast(tf.clip_by_value(s, 0, bits), tf.int32))
        return Value(x * pow2, dtype)
    big = s >= tf.constant(bits, s.dtype)
    if dtype == "uint32":
        s32 = tf.cast(tf.clip_by_value(s, 0, 31), tf.uint32)
        out = tf.cast(tf.bitwise.right_shift(tf.cast(x, tf.uint32), s32), tf.int64)
    else:
        out = tf.bitwise.right_shift(x, tf.clip_by_value(s, 0, 31))
    return Value(tf.where(big, tf.zeros_like(out), out), dtype)


@handles("BitCast", exact=True)
def bitcast(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    """Reinterpret the bits of a value in its own dtype (opset 26's BitCast) as another same-width dtype."""
    tf = tr.tf
    dst = ONNX_DTYPES[attrs(node)["to"]]
    return widen(tf, tf.bitcast(to_own(tf, ins[0]), tf_dtype(tf, dst)), dst)
