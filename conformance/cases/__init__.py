"""Every conformance case, one module per theme; importing this package registers them all."""

from conformance.cases import (  # noqa: F401
    complex_extra,
    control,
    dtypes,
    edges,
    elementwise,
    indexing,
    linalg,
    models,
    models_ext,
    reduce,
    shape,
    spectral,
    symbolic,
)
