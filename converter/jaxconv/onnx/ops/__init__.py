"""Lowering families. Importing this package registers every lowering."""

from jaxconv.onnx.ops import (  # noqa: F401
    bitwise,
    composites,
    control,
    convolution,
    elementwise,
    indexing,
    lapack,
    linalg,
    reduce,
    shape,
    sort,
    special,
)
