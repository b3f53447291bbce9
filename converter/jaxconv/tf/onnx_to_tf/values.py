"""Tensors during translation: a TF tensor in its work dtype plus the ONNX dtype it stands for.

TFLite has kernels for few element types. Every value is therefore held in a *work* dtype that
TFLite computes in (float16/bfloat16 in float32, 8/16-bit integers in int32, uint32 in int64) and
rounded back to its own dtype after each op that may leave it (``narrow``): the same results as
computing in the narrow type, which is what XLA does for float16/bfloat16 on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

WORK = {
    "float16": "float32",
    "bfloat16": "float32",
    "float32": "float32",
    "float64": "float64",
    "int8": "int32",
    "uint8": "int32",
    "int16": "int32",
    "uint16": "int32",
    "int32": "int32",
    "uint32": "int64",
    "int64": "int64",
    "uint64": "int64",
    "bool": "bool",
}
FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})
INTS = frozenset({"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"})
UNSIGNED = frozenset({"uint8", "uint16", "uint32", "uint64"})
BITS = {
    "int8": 8,
    "uint8": 8,
    "int16": 16,
    "uint16": 16,
    "int32": 32,
    "uint32": 32,
    "int64": 64,
    "uint64": 64,
    "float16": 16,
    "bfloat16": 16,
    "float32": 32,
    "float64": 64,
    "bool": 8,
}
# ONNX TensorProto element type -> dtype name.
ONNX_DTYPES = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
    16: "bfloat16",
}


@dataclass
class Value:
    """A translated tensor: ``t`` in ``WORK[dtype]``, standing for a tensor of ``dtype``."""

    t: Any
    dtype: str


def np_dtype(name: str) -> np.dtype:
    """numpy dtype for a dtype name (bfloat16 through ml_dtypes)."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def tf_dtype(tf: Any, name: str) -> Any:
    """The TF dtype called ``name``."""
    return tf.as_dtype(np_dtype(name))


def work(tf: Any, name: str) -> Any:
    """The TF dtype values of ``name`` are computed in."""
    if name not in WORK:
        from jaxconv.errors import UnsupportedError

        raise UnsupportedError(f"the tf-ops route has no {name} tensors")
    return tf_dtype(tf, WORK[name])


def narrow(tf: Any, t: Any, dtype: str) -> Any:
    """``t`` (in the work dtype) rounded or wrapped to what ``dtype`` holds, still in the work dtype."""
    if WORK.get(dtype, dtype) == dtype or dtype in ("uint64",):
        return t
    return tf.cast(tf.cast(t, tf_dtype(tf, dtype)), t.dtype)


def widen(tf: Any, t: Any, dtype: str) -> Value:
    """A tensor of ``dtype`` (as given to the model) as a Value (uint64 by its bits: TFLite casts none)."""
    if dtype == "uint64":
        return Value(tf.bitcast(t, tf.int64), dtype)
    return Value(tf.cast(t, work(tf, dtype)) if WORK[dtype] != dtype else t, dtype)


def to_own(tf: Any, v: Value) -> Any:
    """The value as a tensor of its own dtype (for the model's outputs)."""
    own = tf_dtype(tf, v.dtype)
    if v.dtype == "uint64" and v.t.dtype == tf.int64:
        return tf.bitcast(v.t, own)
    return v.t if v.t.dtype == own else tf.cast(v.t, own)


def constant(tf: Any, array: np.ndarray, dtype: str | None = None) -> Value:
    """A numpy array as a Value (stored in its work dtype).

    float32 subnormal constants become the smallest normal number of their sign: TF's and TFLite's
    CPU kernels flush subnormals to zero (as XLA's do), which would turn the lowering's
    ``x / max(|x|, tiny)`` into 0/0.
    """
    name = dtype or ("bfloat16" if array.dtype.name == "bfloat16" else array.dtype.name)
    wide = np.asarray(array).astype(np_dtype(WORK[name])) if name in WORK else np.asarray(array)
    if wide.dtype == np.float32:
        tiny = np.finfo(np.float32).tiny
        with np.errstate(invalid="ignore"):
            sub = (wide != 0) & (np.abs(wide) < tiny)
        if sub.any():
            wide = np.where(sub, np.copysign(tiny, wide), wide).astype(np.float32)
    return Value(tf.constant(wide), name)
