"""Shared pytest set-up: import path, the x64 fixture, the check that no test leaves jax_enable_x64 changed,
and the product rate the thread-count weighing was fitted with (``JAXCONV_CORE_FLOPS``), so the records
the tests read do not depend on the machine (tests/test_product_rate.py measures it)."""

from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for p in (os.path.join(ROOT, "converter"), HERE):
    if p not in sys.path:
        sys.path.insert(0, p)

from cli_support import user_file  # noqa: E402,F401  (a fixture for every test module)

os.environ.setdefault("JAXCONV_CORE_FLOPS", "1.9e11")  # product_rate.FITTED; child processes inherit it


@pytest.fixture
def x64():
    """jax_enable_x64 for the test only (64-bit dtypes; JAX narrows them otherwise)."""
    import jax

    with jax.enable_x64(True):
        yield


@pytest.fixture(autouse=True)
def _x64_left_alone():
    """No test, and nothing jaxconv does, leaves JAX's global jax_enable_x64 changed (jaxconv scopes it)."""
    import jax

    before = jax.config.jax_enable_x64
    yield
    after = jax.config.jax_enable_x64
    if after != before:
        jax.config.update("jax_enable_x64", before)
        pytest.fail(f"jax_enable_x64 was {before} before the test and {after} after it")
