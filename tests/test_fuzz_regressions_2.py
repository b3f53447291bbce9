"""More differences the fuzzer and edge-value checks found, each reduced to a small program compared with jax.jit.

Fixed ones must match jax.jit bit for bit (zero signs, NaN places); named ones (README: Known differences,
conformance/fuzz/known.py) pin the difference so that a change in either runtime shows.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from tests.test_fuzz_regressions import _bits, _run

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_cholesky_with_an_infinite_pivot_zeroes_the_column_below(dtype):
    """LAPACK (OpenBLAS's potf2, as jax calls it) scales a column by 1/pivot and writes zeros when that is
    0: an inf pivot leaves zeros below it (also where the entry is ±inf), not inf/inf = NaN."""
    a = np.array([[np.inf, -2.98, 0.97], [-np.inf, 3.99, -2.47], [0.97, -2.47, 5.46]], dtype)
    b = np.array([[4.13, 1.21, -0.11], [1.21, np.inf, -np.inf], [-0.11, 0.46, 4.08]], dtype)
    for fn, x in ((lambda a: lax.linalg.cholesky(a, symmetrize_input=False), a),
                  (lambda a: jnp.linalg.cholesky(a, upper=True), b), (jnp.linalg.cholesky, b)):
        expected, actual = _run(fn, x)
        assert not np.isnan(expected[0]).all()
        np.testing.assert_allclose(_bits(actual[0]), _bits(expected[0]), rtol=1e-6)
        assert (np.isnan(actual[0]) == np.isnan(expected[0])).all()
