"""One training step of Flax's MNIST CNN: the loss's value and gradient, then an AdamW update.

The parameters and optimizer state are closed over (constants of the export); the function takes a
batch of images and labels. Time it against jax.jit with::

    jaxconv bench examples/train_cnn.py:step --specs 'f32[b,28,28,1]' 'i32[b]' --sizes b=32
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax


class CNN(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.max_pool(nn.relu(nn.Conv(16, (3, 3))(x)), (2, 2), (2, 2))
        x = nn.avg_pool(nn.relu(nn.Conv(32, (3, 3))(x)), (2, 2), (2, 2))
        return nn.Dense(10)(x.reshape(x.shape[0], -1))


_model = CNN()
_params = _model.init(jax.random.PRNGKey(0), jnp.zeros((1, 28, 28, 1)))
_opt = optax.adamw(1e-3)
_state = _opt.init(_params)


def step(images, labels):
    """The updated parameters and the batch's mean cross-entropy (images f32[b,28,28,1], labels i32[b])."""
    def loss(params):
        logits = _model.apply(params, images)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    value, grads = jax.value_and_grad(loss)(_params)
    updates, _ = _opt.update(grads, _state, _params)
    return optax.apply_updates(_params, updates), value
