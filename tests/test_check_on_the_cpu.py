"""The check's jax.jit references run on the CPU whatever JAX's default device.

On a GPU, jax.jit computes float32 products in TF32 by default (about 1e-3 off), so it is no reference
for a float32 artifact, and a ``.jaxexport`` exported for the CPU runs on the CPU only. Here the
default device is the CPU anyway; the test reads the device jax.jit was asked for while the check traced.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jaxconv import api


@pytest.mark.parametrize("target", ["onnx", "stablehlo"])
def test_the_check_asks_jax_for_the_cpu(tmp_path, target):
    seen = []

    def fn(x, w):
        seen.append(jax.config.jax_default_device)
        return jnp.tanh(x @ w)

    convert = api.to_onnx if target == "onnx" else api.to_stablehlo
    convert(fn, "f32[b,8]", "f32[8,4]", path=str(tmp_path / "m"))
    assert seen[0] is None  # the export, outside the check
    assert jax.devices("cpu")[0] in seen[1:]  # the check's references
    assert jax.config.jax_default_device is None  # left as it was
