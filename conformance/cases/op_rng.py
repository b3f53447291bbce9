"""Op rows: stablehlo.rng_bit_generator THREE_FRY against jax.jit (XLA's expansion), bit for bit."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from conformance.case import op_row

THREE_FRY = lax.RandomAlgorithm.RNG_THREE_FRY
STATES = [np.array([3, 5], np.uint64), np.array([2**63 + 12345, 2**64 - 3], np.uint64)]

for shape in [(), (1,), (3,), (4,), (2, 3), (3, 5), (7, 1, 3), (3, 6, 5), (5, 5), (100, 100)]:
    for dtype in ["uint32", "uint64"]:
        for k, state in enumerate(STATES):
            op_row(f"rng.three_fry.{dtype}.{'x'.join(map(str, shape)) or 'scalar'}.state{k}",
                   lambda s, shape=shape, dtype=dtype: lax.rng_bit_generator(s, shape, dtype=jnp.dtype(dtype),
                                                                             algorithm=THREE_FRY),
                   state, expect="exact")


def _chain(state):
    """The new state feeds the next call, as a program drawing twice does."""
    state, a = lax.rng_bit_generator(state, (2, 8), dtype=jnp.uint32, algorithm=THREE_FRY)
    state, b = lax.rng_bit_generator(state, (5,), dtype=jnp.uint64, algorithm=THREE_FRY)
    return state, a, b


op_row("rng.three_fry.state_chains", _chain, STATES[1], expect="exact")
