"""A two-layer MLP with its parameters as a pytree argument."""

import jax


def mlp(params, x):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    return jax.nn.log_softmax(h @ params["w2"] + params["b2"], axis=-1)
