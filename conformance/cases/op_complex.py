"""Op rows: complex numbers built, split and transformed (complex, real, imag, fft)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from conformance.case import op_row

RNG = np.random.default_rng(5)


def _f(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


op_row("complex.build_and_split",
       lambda a, b: (jnp.real(lax.complex(a, b) * lax.complex(b, a)), jnp.imag(lax.complex(a, b) * lax.complex(b, a))),
       _f(3, 4), _f(3, 4), tol=(1e-5, 1e-5))
op_row("complex.rfft", jnp.fft.rfft, _f(2, 16), tol=(1e-4, 1e-4))
op_row("complex.fft_of_complex", lambda a, b: jnp.fft.fft(lax.complex(a, b)), _f(2, 8), _f(2, 8), tol=(1e-4, 1e-4))
