"""One training step of a Flax LSTM classifier: the loss's value and gradient, then an Adam update.

``nn.RNN(nn.LSTMCell(128))`` over 32 steps of 64 features, a Dense on the last output. The parameters and
optimizer state are closed over (constants of the export); the function takes a batch of sequences and
labels. Its backward pass is a second scan over the steps, from the last down. Time it against jax.jit
with::

    jaxconv bench examples/train_lstm.py:step --specs 'f32[b,32,64]' 'i32[b]' --sizes b=32
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax


class Classifier(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.RNN(nn.LSTMCell(128))(x)
        return nn.Dense(10)(h[:, -1])


_model = Classifier()
_params = _model.init(jax.random.PRNGKey(0), jnp.zeros((1, 32, 64)))
_opt = optax.adam(1e-3)
_state = _opt.init(_params)


def step(sequences, labels):
    """The updated parameters and the batch's mean cross-entropy (sequences f32[b,32,64], labels i32[b])."""
    def loss(params):
        logits = _model.apply(params, sequences)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    value, grads = jax.value_and_grad(loss)(_params)
    updates, _ = _opt.update(grads, _state, _params)
    return optax.apply_updates(_params, updates), value
