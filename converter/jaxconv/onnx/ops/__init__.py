"""Lowering families. Importing this package registers every lowering."""

from jaxconv.onnx.ops import (  # noqa: F401
    bitwise,
    composites,
    control,
    convolution,
    dynamic_pad,
    elementwise,
    indexing,
    lapack,
    lapack_eigen,
    lapack_qr,
    lapack_svd,
    linalg,
    quantized,
    reduce,
    rng,
    shape,
    sort,
    special,
)

# complex lowerings wrap the real ones: they register last
from jaxconv.onnx.ops import complex_arith, complex_data, complex_linalg, complex_math, complex_sort, fft  # noqa: F401,E402  isort: skip
