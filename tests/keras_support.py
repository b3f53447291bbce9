"""Keras 3 on its JAX backend, for the tests that convert Keras layers as their users build them."""

from __future__ import annotations

import os
from typing import Any

import pytest

_ELSEWHERE = "Keras runs on another backend here"


def jax_keras() -> Any:
    """The ``keras`` module on the JAX backend; the calling test skips where Keras is missing or was
    imported on another backend first (``KERAS_BACKEND`` is read once, at import)."""
    if os.environ.get("KERAS_BACKEND", "jax") != "jax":
        pytest.skip(_ELSEWHERE)
    os.environ.setdefault("KERAS_BACKEND", "jax")
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "jax":
        pytest.skip(_ELSEWHERE)
    return keras
