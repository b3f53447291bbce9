"""A cumulative sum over a symbolic length (``stablehlo.dynamic_reduce_window`` whose window is the axis'
length) of a value computed from another input's shape: HF Flax BLOOM's alibi positions,
``(cumsum(mask) - 1) * mask`` over a float mask of ones as long as the ids, cast to integers (the cast's
range guards put untyped nodes between). jax.jit's numbers at several lengths, and the one-line refusal of a
window that is not a scan."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxconv
from jaxconv.errors import UnsupportedError
from jaxconv.onnx.ops import dynamic_reduce_window
from jaxconv.runtimes.onnxrt import OnnxRunner


def _alibi_positions(ids):
    mask = jnp.ones(ids.shape, jnp.float32).astype(jnp.int32)
    return ((jnp.cumsum(mask, axis=-1) - 1) * mask)[:, None, :] + ids[:, None, :] * 0


def _masked_positions(ids):
    """The same over a mask computed from the ids (a padding mask): the window is the ids' length."""
    mask = jnp.where(ids > 0, 1.0, 0.0).astype(jnp.int32)
    return jnp.cumsum(mask, axis=-1) * mask


@pytest.mark.parametrize("fn", [_alibi_positions, _masked_positions])
@pytest.mark.parametrize("spec", ["i32[2,s]", "i32[b,s]"])
def test_a_cumsum_over_a_symbolic_length_of_a_computed_mask_converts(fn, spec):
    model = jaxconv.to_onnx(fn, spec, check=False)
    runner = OnnxRunner(model.SerializeToString())
    for b, s in ((2, 1), (2, 7), (2, 64)) if spec.startswith("i32[2") else ((1, 3), (3, 9)):
        ids = np.random.default_rng(s).integers(0, 5, (b, s)).astype(np.int32)
        np.testing.assert_array_equal(runner.run([ids])[0], np.asarray(jax.jit(fn)(ids)))


def test_the_mask_was_out_of_reach_of_the_shape_reading_alone(monkeypatch):
    """Without following the operands of the cast's guards back to the ids' length, the window is not
    recognised: the conversion says so in one line."""
    monkeypatch.setattr(dynamic_reduce_window, "_equal_dimensions",
                        lambda ctx, x, a, rank: {dynamic_reduce_window.dimension(ctx, x, a)})
    with pytest.raises(UnsupportedError, match="not a cumulative scan"):
        jaxconv.to_onnx(_alibi_positions, "i32[2,s]", check=False)
