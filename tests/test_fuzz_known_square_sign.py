"""XLA folds x * x < 0 to false for signed integers although the product wraps (found by the random family,
seed 5813 program 14: square+where/i64/value, (2^62 + 1)^2 = -2^63 + 1). The known row needs a signed
integer's square compared with 0; the same class without that comparison (a real difference) stays new."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from conformance.fuzz import known
from conformance.fuzz.program import FuzzProgram, Step, Value, infer_types


def test_jit_calls_a_wrapped_square_non_negative():
    x = np.array([46341, -46341, 3], np.int32)
    for square in (lambda x: x * x, jnp.square, lambda x: lax.integer_pow(x, 2)):
        product, negative = jax.jit(lambda x: (square(x), square(x) < 0))(x)
        assert int(product[0]) == -2147479015  # wrapped
        # jax 0.10's XLA folds the comparison: jax.jit contradicts its own product; jax 0.11.2's does not
        assert bool(negative[0]) == (jax.__version_info__ >= (0, 11))
        with jax.disable_jit():
            assert bool(square(x)[0] < 0)  # op by op: the wrapped value is negative


def _program(square: str, select: str, dtype: str) -> FuzzProgram:
    return infer_types(FuzzProgram(
        inputs=[0, 1], steps=[Step("square", (0,), square, 2), Step("where", (2, 1), select, 3)],
        outputs=[3], types={0: Value((1,), dtype), 1: Value((1,), dtype)}))


def test_known_only_for_a_signed_square_compared_with_zero():
    p = _program("{0} * {0}", "jnp.where({0} < 0, {0}, {1})", "int64")
    assert known.match("square+where/i64/value", known.facts([], program=p)) is not None
    for other in (_program("{0} * {0}", "jnp.where({0} < {1}, {0}, {1})", "int64"),  # not against 0
                  _program("{0} * {0}", "jnp.where({0} < 0, {0}, {1})", "uint32"),  # unsigned never negative
                  _program("{0} + {0}", "jnp.where({0} < 0, {0}, {1})", "int64")):  # not a square
        assert known.match("square+where/i64/value", known.facts([], program=other)) is None
    assert known.match("square+where/f32/value", known.facts([], program=p)) is None
