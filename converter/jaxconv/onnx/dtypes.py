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

# ONNX Runtime 1.32 CPU kernel dtypes, measured per op (one single-node model per dtype).
# bfloat16 has almost no arithmetic kernels: it is computed in float32 and cast back.
# float16 has kernels only for Cast, data movement (Reshape, Transpose, Concat, Slice, Expand,
# Gather*, Scatter*), Round, Sign, IsNaN, IsInf, Max, Min, Clip and Mod. For any other op ONNX
# Runtime inserts Casts to float32 itself and then removes the Cast pairs between neighbouring
# nodes, dropping the rounding to float16 that XLA does after every op. So float16 is computed
# in float32 with explicit Casts, like bfloat16, everywhere else.
ARITH = frozenset({"float32", "float64"}) | INTS  # Add Sub Mul Div Abs Mod(fmod=1)
FLOAT_MATH = frozenset({"float32", "float64"})  # Floor Ceil Round Exp Log Sqrt Tanh Sin Cos Sigmoid
F32_F16 = frozenset({"float32"})  # Tan Atan (no float64 kernel; float16 through float32)
F32_F64 = frozenset({"float32", "float64"})  # where float16 transcendental results are rounded from float32
MAX_MIN = frozenset({"float16", "float32", "float64", "int8", "int32", "int64", "uint8", "uint32", "uint64"})
NEG = frozenset({"float32", "float64"}) | SIGNED
SIGN = ARITH | {"float16", "bfloat16"}
POW = frozenset({"float32", "float64", "int32", "int64"})
COMPARE = ARITH  # Equal Less Greater LessOrEqual GreaterOrEqual (Equal also takes bool)
IS_NAN_INF = frozenset({"float16", "float32", "float64", "bfloat16"})
BITWISE = INTS  # BitwiseAnd/Or/Xor/Not (opset 18)
WHERE = frozenset({"float32", "float64", "int8", "int32", "int64", "uint8", "uint32"})
SHIFT_BEFORE_28 = UNSIGNED  # BitShift; all integer types from opset 28
# A same-width (or exactly widening) stand-in for Where's missing kernels: cast there and back.
WHERE_DETOUR: dict[str, str] = {"bool": "uint8", "int16": "int32", "uint16": "int32", "uint64": "int64",
                                "bfloat16": "float32", "float16": "float32"}

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
    except KeyError as e:
        raise KeyError(f"no ONNX element type for {dtype}") from e


def numpy_dtype(dtype: str) -> np.dtype:
    """numpy dtype for a dtype name (bfloat16 through ml_dtypes)."""
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
    """Bits per element (1 for bool)."""
    if dtype == "bool":
        return 1
    return numpy_dtype(dtype).itemsize * 8


def same_width_unsigned(dtype: str) -> str:
    """The unsigned integer type with ``dtype``'s bit width (Cast between them keeps the bits)."""
    return f"uint{bit_width(dtype)}"


def same_width_signed(dtype: str) -> str:
    """The signed integer type with ``dtype``'s bit width."""
    return f"int{bit_width(dtype)}"


def float_work(dtype: str) -> str:
    """The float type ONNX Runtime computes a float ``dtype`` in exactly: float64 for float64, else float32."""
    return "float64" if dtype == "float64" else "float32"


def mantissa_bits(dtype: str) -> int:
    """Explicit mantissa bits of a float dtype."""
    return {"float16": 10, "bfloat16": 7, "float32": 23, "float64": 52}[dtype]


def exponent_bits(dtype: str) -> int:
    """Exponent bits of a float dtype."""
    return {"float16": 5, "bfloat16": 8, "float32": 8, "float64": 11}[dtype]


def pad_work_dtype(dtype: str, opset: int) -> str | None:
    """The dtype to run ONNX Runtime's Pad in, or None when ``dtype`` has a Pad kernel at ``opset``."""
    if dtype in ("int16", "uint16"):
        return "int32"
    if dtype == "float16":  # no float16 Pad kernel (see ARITH)
        return "float32"
    if dtype == "bfloat16" and opset < 21:
        return "float32"
    return None


def isinf_work_dtype(dtype: str, opset: int) -> str | None:
    """IsInf takes float16/bfloat16 only from opset 20; before that they are checked as float32 (exact)."""
    if dtype in ("float16", "bfloat16") and opset < 20:
        return "float32"
    return None
