"""stablehlo.rng_bit_generator THREE_FRY against jax.jit (XLA's expansion), bit for bit."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from lowering_check import assert_onnx_matches_jax

THREE_FRY = lax.RandomAlgorithm.RNG_THREE_FRY
STATES = [np.array([3, 5], np.uint64), np.array([2**63 + 12345, 2**64 - 3], np.uint64)]


@pytest.mark.parametrize("shape", [(), (1,), (3,), (4,), (2, 3), (3, 5), (7, 1, 3), (3, 6, 5), (5, 5),
                                   (100, 100)])
@pytest.mark.parametrize("dtype", ["uint32", "uint64"])
def test_three_fry_bits(shape, dtype):
    def f(state):
        return lax.rng_bit_generator(state, shape, dtype=jnp.dtype(dtype), algorithm=THREE_FRY)

    for state in STATES:
        assert_onnx_matches_jax(f, state)


def test_default_algorithm_is_refused_by_name():
    from jaxconv.errors import UnsupportedError

    with pytest.raises(UnsupportedError, match="rng_bit_generator with algorithm DEFAULT: only THREE_FRY"):
        assert_onnx_matches_jax(lambda s: lax.rng_bit_generator(s, (4,), dtype=jnp.uint32), STATES[0])


def test_three_fry_state_chains():
    """The new state feeds the next call, as a program drawing twice does."""
    def f(state):
        state, a = lax.rng_bit_generator(state, (2, 8), dtype=jnp.uint32, algorithm=THREE_FRY)
        state, b = lax.rng_bit_generator(state, (5,), dtype=jnp.uint64, algorithm=THREE_FRY)
        return state, a, b

    assert_onnx_matches_jax(f, STATES[1])
