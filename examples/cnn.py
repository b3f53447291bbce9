"""A small CNN on 28x28 grayscale images (NHWC): two conv + relu + max-pool blocks, then a dense head.

Convert it with, for example::

    jaxconv to-tflite examples/cnn.py -o cnn.tflite --specs \
        '{"conv1": "f32[3,3,1,8]", "conv2": "f32[3,3,8,16]", "dense": "f32[784,10]", "bias": "f32[10]"}' f32[b,28,28,1]
"""

import jax
import jax.numpy as jnp
from jax import lax

_DIMS = ("NHWC", "HWIO", "NHWC")


def _conv_relu_pool(x, kernel):
    y = lax.conv_general_dilated(x, kernel, window_strides=(1, 1), padding="SAME", dimension_numbers=_DIMS)
    y = jax.nn.relu(y)
    return lax.reduce_window(y, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def cnn(params, x):
    """Logits for a batch of images.

    Args:
        params: ``conv1`` f32[3,3,1,8], ``conv2`` f32[3,3,8,16], ``dense`` f32[784,10], ``bias`` f32[10].
        x: images, f32[b,28,28,1].
    """
    h = _conv_relu_pool(x, params["conv1"])
    h = _conv_relu_pool(h, params["conv2"])
    h = h.reshape(h.shape[0], -1)
    return h @ params["dense"] + params["bias"]
