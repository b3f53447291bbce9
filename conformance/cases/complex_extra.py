"""Complex values with symbolic sizes and complex linear algebra (JAX's complex LAPACK calls)."""

from __future__ import annotations

import jax.numpy as jnp
import jax.scipy.linalg as jsl

from conformance.case import arg, case

T = {"float32": (1e-4, 1e-4), "complex64": (1e-4, 1e-4)}


def _shifted(a):
    """A well-conditioned matrix: ``a`` plus 4 on the diagonal."""
    return a + 4 * jnp.eye(a.shape[-1], dtype=a.dtype)


case("spectral.rfft_symbolic", lambda x: jnp.abs(jnp.fft.rfft(x)), arg("f32[b,64]"), family="fft", tol=T)
case("spectral.complex_cumsum_symbolic", lambda z: jnp.cumsum(z, axis=1), arg("c64[b,n]"), family="reduce_window",
     tol=T)
case("complex.linalg.inv_solve_det",
     lambda re, im, b: (jnp.abs(jnp.linalg.inv(_shifted(re + 1j * im))),
                        jnp.real(jnp.linalg.solve(_shifted(re + 1j * im), b + 0j)),
                        jnp.abs(jnp.linalg.det(_shifted(re + 1j * im)))),
     arg("f32[4,4]"), arg("f32[4,4]"), arg("f32[4,2]"), family="linalg", tol=T)


def _cholesky_solve(re, im, b):
    a = re + 1j * im
    factor = jsl.cho_factor(_shifted(a @ jnp.conj(a).T), lower=True)
    return jnp.abs(jsl.cho_solve(factor, b + 0j)), jnp.abs(jnp.linalg.cholesky(_shifted(a @ jnp.conj(a).T)))


case("complex.linalg.cholesky_solve", _cholesky_solve, arg("f32[4,4]"), arg("f32[4,4]"), arg("f32[4,2]"),
     family="linalg", tol=T)
