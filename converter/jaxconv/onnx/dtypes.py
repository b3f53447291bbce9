"""Dtype facts for the ONNX lowering: ONNX element types and what ONNX Runtime can compute."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto

ONNX_TYPE: dict[str, int] = {
    "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16, "float32": TensorProto.FLOAT,
    "float64": TensorProto.DOUBLE, "bool": TensorProto.BOOL,
    "int8": TensorProto.INT8, "int16": TensorProto.INT16, "int32": TensorProto.INT32, "int64": TensorProto.INT64,
    "uint8": TensorProto.UINT8, "uint16": TensorProto.UINT16, "uint32": TensorProto.UINT32,
    "uint64": TensorProto.UINT64,
}

FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})
SIGNED = frozenset({"int8", "int16", "int32", "int64"})
UNSIGNED = frozenset({"uint8", "uint16", "uint32", "uint64"})
INTS = SIGNED | UNSIGNED

HALF = frozenset({"float16"})
F32_F64 = frozenset({"float32", "float64"})
ALL = FLOATS | INTS | {"bool"}


@dataclass(frozen=True)
class Kernels:
    """What ONNX Runtime's CPU provider implements for some ONNX ops, for each dtype.

    Attributes:
        ops: the ONNX ops sharing these facts.
        dtypes: the dtypes with a kernel.
        ort_casts: dtypes without a kernel that ONNX Runtime nevertheless accepts: it inserts Casts
            to float32 around the node itself, and then removes the Cast pairs between neighbouring
            nodes, dropping the rounding to float16 that XLA does after every op. jaxconv casts
            explicitly instead, except where a comment at the use says why the difference cannot show.
        workaround: what jaxconv does for the dtypes without a kernel; the probe test
            (tests/test_ort_kernels.py) names it when a new ONNX Runtime adds a kernel, so it can go.
    """

    ops: tuple[str, ...]
    dtypes: frozenset[str]
    ort_casts: frozenset[str] = frozenset()
    workaround: str = ""


_WIDER = "computed in a wider type (WIDER) and cast back"
_F32 = "computed in float32 (float64 in float64) and cast back"

# The one table of ONNX Runtime 1.32 CPU kernels by dtype, measured with one single-node model per
# op and dtype (tests/test_ort_kernels.py repeats the measurement against the installed version).
# bfloat16 has almost no arithmetic kernels and float16 few: both are computed in float32.
ORT_KERNELS: tuple[Kernels, ...] = (
    Kernels(("Add", "Sub", "Mul", "Div", "Abs"), F32_F64 | INTS, HALF, _WIDER),
    Kernels(("Mod",), F32_F64 | INTS | HALF, workaround=_WIDER),
    Kernels(("Neg",), F32_F64 | SIGNED, HALF, _WIDER + "; unsigned negation as 0 - x"),
    Kernels(("Sign",), F32_F64 | INTS | HALF | {"bfloat16"}),
    Kernels(("Floor", "Ceil", "Exp", "Log", "Sqrt", "Tanh", "Sin", "Cos", "Sigmoid"), F32_F64, HALF, _F32),
    Kernels(("Round",), F32_F64 | HALF, workaround=_F32),
    Kernels(("Tan", "Atan", "Erf", "Asin", "Acos", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh"),
            frozenset({"float32"}), HALF, "half floats in float32; float64 by formulas of float64 ops"),
    # float16: ONNX Runtime runs the function body's 6 nodes in float32 between its own Casts
    Kernels(("Gelu",), frozenset({"float32"}), HALF,
            "half floats as Cast, Gelu, Cast (rewrites/activations.py); float64 keeps jax's formula"),
    Kernels(("Max", "Min"), frozenset({"float16", "float32", "float64", "int8", "int32", "int64", "uint8", "uint32",
                                      "uint64"}), workaround=_WIDER),
    Kernels(("Pow",), frozenset({"float32", "float64", "int32", "int64"}), HALF, _WIDER),
    Kernels(("Equal",), F32_F64 | INTS | {"bool"}, HALF, _WIDER),
    Kernels(("Less", "Greater", "LessOrEqual", "GreaterOrEqual"), F32_F64 | INTS, HALF, _WIDER),
    Kernels(("IsNaN", "IsInf"), FLOATS, workaround="half floats checked as float32 before opset 20"),
    Kernels(("BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot"), INTS),
    Kernels(("Where",), frozenset({"float32", "float64", "int8", "int32", "int64", "uint8", "uint32"}), HALF,
            "a same-width or exactly widening type (WHERE_DETOUR) and back"),
    Kernels(("BitShift",), UNSIGNED, workaround="signed shifts on the same-width unsigned type (before opset 28)"),
    Kernels(("MatMul",), frozenset({"float32", "float64", "int32", "int64", "uint32", "uint64"}), HALF, _WIDER),
    Kernels(("ReduceSum", "ReduceProd"), frozenset({"float32", "float64", "int32", "int64"}), HALF, _WIDER),
    Kernels(("ReduceMax", "ReduceMin"), frozenset({"bool", "float32", "float64", "int8", "int32", "int64", "uint8"}),
            HALF, "an order-preserving type (wider, or uint64 shifted onto int64) and back"),
    Kernels(("TopK",), frozenset({"float32", "float64", "int8", "int16", "int32", "int64", "uint8"}), HALF,
            "an order-preserving type (wider, or uint64 shifted onto int64)"),
    Kernels(("CumSum",), frozenset({"float32", "float64", "int32", "int64"}), HALF, _WIDER),
    Kernels(("CumProd",), frozenset({"float32", "float64", "int32", "int64", "uint32", "uint64"}), HALF, _WIDER),
    Kernels(("Expand",), ALL - {"bfloat16"}, workaround="bfloat16 moved as float32 (exact)"),
    Kernels(("Tile",), ALL - {"bfloat16", "float16"}, HALF, "bfloat16 moved as float32 (exact)"),
    Kernels(("Transpose",), ALL),
    Kernels(("Pad",), ALL - {"float16", "int16", "uint16"}, HALF, "int16/uint16 padded as int32, float16 as float32"),
    Kernels(("MaxPool",), frozenset({"float32", "float64", "int8", "uint8"}), HALF, _F32),
    Kernels(("AveragePool", "Conv"), frozenset({"float32"}), HALF, "half floats in float32; float64 as MatMul"),
    # With reduction="max" or "min": the dtype is refused when the model runs, not when it loads.
    Kernels(("ScatterND",), ALL - {"float16", "bfloat16", "bool"},
            workaround="half floats reduced in float32, bool in uint8 (add and multiply become max and min)"),
)
_BY_OP: dict[str, Kernels] = {op: k for k in ORT_KERNELS for op in k.ops}


def kernels(op: str) -> frozenset[str]:
    """The dtypes ONNX Runtime's CPU provider has a kernel of ``op`` for (see ``ORT_KERNELS``)."""
    return _BY_OP[op].dtypes


def ort_accepts(op: str) -> frozenset[str]:
    """The dtypes ONNX Runtime runs ``op`` in: its kernels, and those it casts to float32 itself."""
    return _BY_OP[op].dtypes | _BY_OP[op].ort_casts


# Dtype sets the lowerings name, read from the table.
ARITH = kernels("Add")  # Add Sub Mul Div Abs
FLOAT_MATH = kernels("Exp")  # Floor Ceil Exp Log Sqrt Tanh Sin Cos Sigmoid
F32_ONLY = kernels("Tan")  # Tan Atan Erf Asin Acos Sinh Cosh Asinh Acosh Atanh: no float64 kernel
MAX_MIN = kernels("Max")
NEG = kernels("Neg")
SIGN = kernels("Sign")
POW = kernels("Pow")
COMPARE = kernels("Less")  # Equal also takes bool
IS_NAN_INF = kernels("IsNaN")
BITWISE = kernels("BitwiseAnd")
WHERE = kernels("Where")
SHIFT_BEFORE_28 = kernels("BitShift")  # all integer types from opset 28
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
    if dtype == "bfloat16" and opset < 21:  # bfloat16 Pad came with opset 21
        return "float32"
    return None if dtype in kernels("Pad") else WIDER[dtype]


def isinf_work_dtype(dtype: str, opset: int) -> str | None:
    """IsInf takes float16/bfloat16 only from opset 20; before that they are checked as float32 (exact)."""
    if dtype in ("float16", "bfloat16") and opset < 20:
        return "float32"
    return None
