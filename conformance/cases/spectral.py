"""FFTs and the spectral models built on them: Fourier neural operator layers, STFT front ends."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from conformance.case import Tree, arg, case

T = {"float32": (1e-4, 1e-4), "complex64": (1e-4, 1e-4)}

case("spectral.rfft", jnp.fft.rfft, arg("f32[4,32]"), family="fft", tol=T)
case(
    "spectral.irfft",
    lambda re, im: jnp.fft.irfft(lax.complex(re, im), n=32),
    arg("f32[4,17]"),
    arg("f32[4,17]"),
    family="fft",
    tol=T,
)
case("spectral.fft2", jnp.fft.fft2, arg("c64[6,8]"), family="fft", tol=T)
case("spectral.ifft_c128", jnp.fft.ifft, arg("c128[3,10]"), family="fft")
case(
    "spectral.rfft2_power",
    lambda x: jnp.abs(jnp.fft.rfft2(x)) ** 2,
    arg("f32[2,12,16]"),
    family="fft",
    tol={"float32": (1e-4, 1e-3)},
)

MODES, WIDTH, GRID = 8, 4, 32


def _fno_params(rng: np.random.Generator) -> dict:
    scale = 1.0 / (WIDTH * WIDTH)
    return {
        "w_re": (scale * rng.standard_normal((MODES, WIDTH, WIDTH))).astype(np.float32),
        "w_im": (scale * rng.standard_normal((MODES, WIDTH, WIDTH))).astype(np.float32),
        "pointwise": (rng.standard_normal((WIDTH, WIDTH)) / WIDTH).astype(np.float32),
        "bias": (0.1 * rng.standard_normal((WIDTH,))).astype(np.float32),
    }


def fno_layer(params: dict, x: jax.Array) -> jax.Array:
    """One 1-D Fourier layer: rfft over the grid, complex weights on the lowest modes, irfft, plus a
    pointwise linear path and GELU (x: [batch, grid, width])."""
    spec = jnp.fft.rfft(x, axis=1)
    w = lax.complex(params["w_re"], params["w_im"])
    low = jnp.einsum("bmi,mio->bmo", spec[:, :MODES], w)
    spec_out = jnp.zeros((x.shape[0], x.shape[1] // 2 + 1, WIDTH), spec.dtype).at[:, :MODES].set(low)
    y = jnp.fft.irfft(spec_out, n=x.shape[1], axis=1)
    return jax.nn.gelu(y + x @ params["pointwise"] + params["bias"])


case(
    "spectral.fno_layer",
    fno_layer,
    Tree(_fno_params),
    arg(f"f32[2,{GRID},{WIDTH}]"),
    family="model",
    tags=("model",),
    tol=T,
)

FRAME, HOP = 64, 32


def stft_magnitude(audio: jax.Array) -> jax.Array:
    """Log-magnitude STFT frames (Hann window, hop FRAME/2) of [batch, samples] audio."""
    n_frames = 1 + (audio.shape[-1] - FRAME) // HOP
    index = np.arange(FRAME)[None, :] + HOP * np.arange(n_frames)[:, None]
    window = jnp.asarray(np.hanning(FRAME + 1)[:-1], jnp.float32)
    frames = audio[:, index] * window
    return jnp.log1p(jnp.abs(jnp.fft.rfft(frames, axis=-1)))


case("spectral.stft_magnitude", stft_magnitude, arg("f32[2,512]"), family="model", tags=("model",), tol=T)
