"""Dtype facts for the ONNX lowering: ONNX element types and what ONNX Runtime can compute."""

from __future__ import annotations

import numpy as np

from onnx import TensorProto

ONNX_TYPE: dict[str, int] = {
    "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16, "float32": TensorProto.FLOAT,
    "float64": TensorProto.DOUBLE, "bool": TensorProto.BOOL,
    "int8": TensorProto.INT8, "int16": TensorProto.INT16, "int32": TensorProto.INT32, "int64": TensorProto.INT64,
    "uint8": TensorProto.UINT8, "uint16": TensorProto.UINT16, "uint32": TensorProto.UINT32,
    "uint64": TensorProto.UINT64,
}
DTYPE_OF_ONNX: dict[int, str] = {v: k for k, v in ONNX_TYPE.items()}

FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})
SIGNED = frozenset({"int8", "int16", "int32", "int64"})
UNSIGNED = frozenset({"uint8", "uint16", "uint32", "uint64"})
INTS = SIGNED | UNSIGNED

# ONNX Runtime CPU kernels commonly present for arithmetic (measured with ort_probe).
ARITH = frozenset({"float16", "float32", "float64", "int32", "int64", "uint32", "uint64",
                   "int8", "int16", "uint8", "uint16"})
FLOAT_MATH = frozenset({"float16", "float32", "float64"})
F32_F16 = frozenset({"float16", "float32"})

# Where a dtype has no kernel, compute in this wider type and cast back.
WIDER: dict[str, str] = {
    "bfloat16": "float32", "float16": "float32", "float64": "float64",
    "int8": "int32", "int16": "int32", "uint8": "int32", "uint16": "int32",
    "uint32": "int64", "int32": "int64", "bool": "int32",
}


def onnx_type(dtype: str) -> int:
    """ONNX element type for a dtype name."""
    try:
        return ONNX_TYPE[dtype]
    except KeyError:
        raise KeyError(f"no ONNX element type for {dtype}") from None


def numpy_dtype(dtype: str) -> np.dtype:
    if dtype == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


def compute_dtype(dtype: str, native: frozenset[str]) -> str:
    """The dtype to compute in: ``dtype`` itself when ``native`` has it, else a wider one."""
    seen = dtype
    while seen not in native:
        nxt = WIDER.get(seen)
        if nxt is None or nxt == seen:
            return seen
        seen = nxt
    return seen


def bit_width(dtype: str) -> int:
    if dtype == "bool":
        return 1
    return numpy_dtype(dtype).itemsize * 8
