"""How each jaxconv dtype appears in the generated C++: element type, ONNX enum, .npy descr."""

from __future__ import annotations

from dataclasses import dataclass

from jaxconv.errors import UnsupportedError


@dataclass(frozen=True)
class CppType:
    """One dtype as the generated code sees it.

    Attributes:
        dtype: the jaxconv/numpy dtype name (``float32``).
        cpp: the C++ element type of buffers (``float``; raw bits for 16-bit floats, one byte per bool).
        onnx: the ``ONNXTensorElementDataType`` enumerator.
        descr: the ``.npy`` header descr numpy writes for this dtype.
        note: what the element type holds when it is not the obvious one.
        pairs: a complex dtype: in the ONNX model a real tensor with a trailing dimension of 2 (re, im),
            which ``std::complex<T>`` buffers hold as is.
    """

    dtype: str
    cpp: str
    onnx: str
    descr: str
    note: str = ""
    pairs: bool = False


_TYPES = (
    CppType("float32", "float", "ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT", "<f4"),
    CppType("float64", "double", "ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE", "<f8"),
    CppType("float16", "uint16_t", "ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16", "<f2", "IEEE float16 bits"),
    CppType("bfloat16", "uint16_t", "ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16", "<V2", "bfloat16 bits"),
    CppType("int8", "int8_t", "ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8", "|i1"),
    CppType("int16", "int16_t", "ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16", "<i2"),
    CppType("int32", "int32_t", "ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32", "<i4"),
    CppType("int64", "int64_t", "ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64", "<i8"),
    CppType("uint8", "uint8_t", "ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8", "|u1"),
    CppType("uint16", "uint16_t", "ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16", "<u2"),
    CppType("uint32", "uint32_t", "ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32", "<u4"),
    CppType("uint64", "uint64_t", "ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64", "<u8"),
    CppType("bool", "uint8_t", "ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL", "|b1", "bool, one byte each (0 or 1)"),
    CppType("complex64", "std::complex<float>", "ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT", "<c8",
            "float32 (re, im) pairs in ONNX", pairs=True),
    CppType("complex128", "std::complex<double>", "ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE", "<c16",
            "float64 (re, im) pairs in ONNX", pairs=True),
)
CPP_TYPES: dict[str, CppType] = {t.dtype: t for t in _TYPES}


def cpp_type(dtype: str, what: str) -> CppType:
    """The C++ view of ``dtype``.

    Args:
        what: the tensor it belongs to, for the error message (``input x``).

    Raises:
        UnsupportedError: the C++ API has no buffer type for this dtype.
    """
    try:
        return CPP_TYPES[dtype]
    except KeyError as e:
        raise UnsupportedError(f"{what} has dtype {dtype}, which the C++ API does not support "
                               f"(supported: {', '.join(CPP_TYPES)})") from e
