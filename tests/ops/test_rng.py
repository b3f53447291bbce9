"""stablehlo.rng_bit_generator: the DEFAULT algorithm is refused by name (THREE_FRY is compared with jax.jit
in rows, conformance/cases/op_rng.py)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from lowering_check import assert_onnx_matches_jax

THREE_FRY = lax.RandomAlgorithm.RNG_THREE_FRY
STATES = [np.array([3, 5], np.uint64), np.array([2**63 + 12345, 2**64 - 3], np.uint64)]


def test_default_algorithm_is_refused_by_name():
    from jaxconv.errors import UnsupportedError

    with pytest.raises(UnsupportedError, match="rng_bit_generator with algorithm DEFAULT: only THREE_FRY"):
        assert_onnx_matches_jax(lambda s: lax.rng_bit_generator(s, (4,), dtype=jnp.uint32), STATES[0])
