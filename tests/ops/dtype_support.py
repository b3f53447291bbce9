"""Per-dtype test data shared by the shape and indexing lowering tests."""

from __future__ import annotations

import contextlib

import jax
import ml_dtypes
import numpy as np

WIDE = {"float64", "int64", "uint64"}


def np_dtype(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def data(shape, dtype: str, seed: int = 0) -> np.ndarray:
    """Distinct-ish values of ``dtype`` (bool alternates)."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if np.issubdtype(np_dtype(dtype), np.integer):
        return rng.integers(0, 100, size=shape).astype(dtype)
    return rng.normal(size=shape).astype(np_dtype(dtype))


@contextlib.contextmanager
def x64_for(dtype: str):
    """jax_enable_x64 for 64-bit dtypes (JAX narrows them otherwise), restored afterwards."""
    with jax.enable_x64(True) if dtype in WIDE else contextlib.nullcontext():
        yield
