"""How complex tensors travel through an ONNX model.

ONNX Runtime has no complex tensor type, so a ``complex64`` (``complex128``) tensor of shape
``[d0, ..., dn]`` is a ``float32`` (``float64``) tensor of shape ``[d0, ..., dn, 2]`` holding
(real, imaginary) pairs, inside the graph and at its inputs and outputs alike. The model records
which inputs and outputs are complex in its metadata, under ``METADATA_KEY``, as JSON:
``{"inputs": {"x": "complex64"}, "outputs": {"y": "complex64"}}`` (absent when none is).
"""

from __future__ import annotations

import json
from typing import Mapping

import numpy as np
import onnx

METADATA_KEY = "jaxconv.complex"
COMPONENT: dict[str, str] = {"complex64": "float32", "complex128": "float64"}
COMPLEX_OF: dict[str, str] = {v: k for k, v in COMPONENT.items()}


def is_complex(dtype: str) -> bool:
    """True for ``complex64`` and ``complex128``."""
    return dtype in COMPONENT


def metadata_value(inputs: Mapping[str, str], outputs: Mapping[str, str]) -> str | None:
    """The JSON stored under ``METADATA_KEY`` for these complex inputs and outputs (None when none is)."""
    if not inputs and not outputs:
        return None
    return json.dumps({"inputs": dict(inputs), "outputs": dict(outputs)}, sort_keys=True)


def complex_io(model: onnx.ModelProto) -> tuple[dict[str, str], dict[str, str]]:
    """The complex inputs and outputs of ``model``: ``({input name: dtype}, {output name: dtype})``.

    Both are empty for a model without the metadata key. The dtypes are ``complex64`` or ``complex128``.
    """
    for prop in model.metadata_props:
        if prop.key == METADATA_KEY:
            data = json.loads(prop.value)
            return dict(data.get("inputs", {})), dict(data.get("outputs", {}))
    return {}, {}


def to_pairs(x: np.ndarray) -> np.ndarray:
    """A complex array as its real (re, im) layout: a trailing dimension of 2."""
    x = np.asarray(x)
    return np.stack([x.real, x.imag], axis=-1).astype(COMPONENT[x.dtype.name])


def from_pairs(x: np.ndarray, dtype: str) -> np.ndarray:
    """The complex array of ``dtype`` held in a (re, im) array with a trailing dimension of 2."""
    x = np.asarray(x)
    out = np.empty(x.shape[:-1], dtype=np.dtype(dtype))
    out.real, out.imag = x[..., 0], x[..., 1]
    return out
