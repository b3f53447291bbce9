"""Op rows: complex numbers built, split and transformed (complex, real, imag, fft)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from conformance.case import op_row
from conformance.values import F32, values

RNG = np.random.default_rng(5)


def _f(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


op_row("complex.build_and_split",
       lambda a, b: (jnp.real(lax.complex(a, b) * lax.complex(b, a)), jnp.imag(lax.complex(a, b) * lax.complex(b, a))),
       _f(3, 4), _f(3, 4), tol=(1e-5, 1e-5))
op_row("complex.rfft", jnp.fft.rfft, _f(2, 16), tol=(1e-4, 1e-4))
op_row("complex.fft_of_complex", lambda a, b: jnp.fft.fft(lax.complex(a, b)), _f(2, 8), _f(2, 8), tol=(1e-4, 1e-4))


def _edges(n):
    """``n`` float32 values cycling through the edge values (NaN, infinities, zeros of both signs, extremes)."""
    v = values(F32)
    return np.resize(v, n).astype(np.float32)


def _scatter_mul(update):
    """(re, im) of a complex ``z`` after ``update(z)`` (an ``.at[...].multiply``)."""
    def fn(re, im):
        z = update(lax.complex(re, im))
        return jnp.real(z), jnp.imag(z)
    return fn


# A complex scatter-multiply at unique indices (jax.scipy.signal.welch scales its one-sided spectrum so):
# XLA's complex product at each place reached, the operand elsewhere, bit for bit.
op_row("complex.scatter_mul.integer_index", _scatter_mul(lambda z: z.at[3].multiply(z[5])),
       _edges(8), _edges(8)[::-1].copy(), runs=[(_f(8), _f(8))], expect="exact")
op_row("complex.scatter_mul.slice_by_constant", _scatter_mul(lambda z: z.at[1:4].multiply(2 - 1j)),
       _edges(6), _f(6), runs=[(_f(6), _edges(6))], expect="exact")
op_row("complex.scatter_mul.column", _scatter_mul(lambda z: z.at[:, 0].multiply(z[:, 1])),
       _edges(16).reshape(4, 4), _f(4, 4), runs=[(_f(4, 4), _edges(16).reshape(4, 4).T.copy())], expect="exact")
op_row("complex.scatter_mul.traced_index",
       lambda re, im, i: _scatter_mul(lambda z: z.at[i].multiply(1j))(re, im),
       _f(5), _f(5), np.int32(2), runs=[(_f(5), _f(5), np.int32(7)), (_f(5), _f(5), np.int32(-1))],
       expect="exact")
