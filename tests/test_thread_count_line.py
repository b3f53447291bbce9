"""Where thread_count's line between small and big products lies: a Llama-style decoder layer at batch 2
and sequence 64 (three feed-forward products of 8.4 MFLOP) records one intra-op thread, a 12 MFLOP
convolution records none."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxconv
from jaxconv.onnx import thread_count

_RNG = np.random.default_rng(1)


def _w(*shape):
    return (_RNG.standard_normal(shape) * 0.1).astype(np.float32)


def _recorded_in(model) -> str | None:
    return {p.key: p.value for p in model.metadata_props}.get(thread_count.THREADS_KEY)


def test_a_swiglu_decoder_layer_records_one_thread():
    wq, wk, wv, wo = (_w(128, 128) for _ in range(4))
    w_gate, w_up, w_down = _w(128, 256), _w(128, 256), _w(256, 128)

    def layer(x):  # [2, 64, 128]: q, k, v, o 4.2 MFLOP each, scores 2.1, gate, up, down 8.4
        heads = lambda w: (x @ w).reshape(2, 64, 4, 32).transpose(0, 2, 1, 3)
        q, k, v = heads(wq), heads(wk), heads(wv)
        p = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(32)), axis=-1)
        h = x + (p @ v).transpose(0, 2, 1, 3).reshape(2, 64, 128) @ wo
        return h + (jax.nn.silu(h @ w_gate) * (h @ w_up)) @ w_down

    x = _RNG.standard_normal((2, 64, 128)).astype(np.float32)
    model = jaxconv.to_onnx(layer, x)  # checked against jax.jit
    assert _recorded_in(model) == "1"
    assert thread_count.SPIN_KEY not in {p.key for p in model.metadata_props}  # 0.24 ms of products


def test_a_12_mflop_convolution_records_nothing():
    kernel = _w(3, 3, 32, 64)

    def conv(x):
        y = jax.lax.conv_general_dilated(x, kernel, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jnp.mean(y, axis=(1, 2))

    x = _RNG.standard_normal((2, 15, 15, 32)).astype(np.float32)  # 2 * 13 * 13 * 64 outputs x 2 * 288: 12.5 MFLOP
    assert _recorded_in(jaxconv.to_onnx(conv, x, check=False)) is None
    x = _RNG.standard_normal((1, 14, 14, 32)).astype(np.float32)  # 12 * 12 * 64 x 2 * 288: 5.3 MFLOP
    assert _recorded_in(jaxconv.to_onnx(conv, x, check=False)) == "1"
