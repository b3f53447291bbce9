"""The C++ view of an existing ONNX model: its signature, complex tensors read from ``jaxconv.complex``."""

from __future__ import annotations

import onnx

from jaxconv.cpp.dims import shape_text
from jaxconv.errors import UnsupportedError
from jaxconv.onnx.complex_layout import COMPONENT, complex_io
from jaxconv.signature import Signature, TensorInfo


def _info(value: onnx.ValueInfoProto, complex_dtype: str | None, kind: str) -> TensorInfo:
    t = value.type.tensor_type
    dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name
    dims: list[int | str] = [d.dim_param if d.HasField("dim_param") else int(d.dim_value)
                             for d in t.shape.dim]
    if complex_dtype is not None:
        if dtype != COMPONENT[complex_dtype] or not dims or dims[-1] != 2:
            raise UnsupportedError(f"{kind} {value.name} is listed as {complex_dtype} in the model's "
                                   f"jaxconv.complex metadata, but is {dtype}{shape_text(dims)} "
                                   f"(expected {COMPONENT[complex_dtype]}[..., 2])")
        dtype, dims = complex_dtype, dims[:-1]
    return TensorInfo(value.name, dtype, tuple(dims), value.name)


def onnx_signature(model: onnx.ModelProto) -> Signature:
    """The model's inputs and outputs as the C++ API sees them: a complex tensor (listed in the
    ``jaxconv.complex`` metadata) is ``complex64[d...]``, not its ``float32[d..., 2]`` layout.

    Raises:
        UnsupportedError: the metadata names a tensor that is not in the (re, im) layout.
    """
    cin, cout = complex_io(model)
    init = {i.name for i in model.graph.initializer}
    inputs = tuple(_info(v, cin.get(v.name), "input") for v in model.graph.input if v.name not in init)
    outputs = tuple(_info(v, cout.get(v.name), "output") for v in model.graph.output)
    return Signature(inputs, outputs)
