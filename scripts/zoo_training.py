"""A fourth battery for scripts/bench_zoo.py: optimizer updates and training steps written with Optax.

A deployed training loop (on-device fine-tuning, a server that adapts a model) exports the step itself:
``optax`` updates of a model's parameters (``opt_*``: the gradients, the optimizer state and the
parameters in, the new parameters and state out; an MLP's, or a small BERT's 39 leaves: ``opt_*_bert``)
and whole steps (``train_*``: ``jax.value_and_grad`` of a Flax model's loss plus the update). The
parameters, state and batch are inputs, flattened leaf by leaf. ``MODELS`` maps name -> builder;
``zoo_models.TRAINING`` lists them for ``bench_zoo.py --training``.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from bench_models import Model
from zoo_models import _model

_RNG_SEED = 0


def _flat(name: str, library: str, step: Callable[..., Any], args: tuple[Any, ...]) -> Model:
    """``step(*args)`` as a function of the leaves of ``args``, with those leaves as the inputs."""
    import jax

    leaves, tree = jax.tree_util.tree_flatten(args)
    inputs = tuple(np.asarray(x) for x in leaves)
    return _model(name, library, lambda *xs: step(*jax.tree_util.tree_unflatten(tree, xs)), inputs)


def _mlp_params(sizes: tuple[int, ...]) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(_RNG_SEED)
    return [{"w": (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), "b": np.zeros(b, np.float32)}
            for a, b in zip(sizes[:-1], sizes[1:])]


def _grads_like(params: Any, seed: int = 1) -> Any:
    import jax

    rng = np.random.default_rng(seed)
    return jax.tree_util.tree_map(lambda p: (rng.standard_normal(p.shape) * 1e-2).astype(np.float32), params)


def _optimizer(name: str) -> Any:
    import optax

    return {"adam": optax.adam(1e-3), "adamw": optax.adamw(1e-3, weight_decay=1e-4),
            "sgd": optax.sgd(1e-2, momentum=0.9), "rmsprop": optax.rmsprop(1e-3),
            "lion": optax.lion(1e-4), "adafactor": optax.adafactor(1e-3),
            "clip_adam": optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))}[name]


def _update(name: str, optimizer: str, make_params: Callable[[], Any]) -> Callable[[], Model]:
    """One optax update of the parameters ``make_params`` builds, a step's count past the first."""

    def build() -> Model:
        import optax

        opt = _optimizer(optimizer)
        params = make_params()
        grads = _grads_like(params)
        state = opt.update(grads, opt.init(params), params)[1]  # counts and moments past their zeros

        def step(grads, state, params):
            updates, state = opt.update(grads, state, params)
            return optax.apply_updates(params, updates), state

        return _flat(name, "Optax", step, (grads, state, params))

    return build


def _mlp_update(name: str, optimizer: str, sizes: tuple[int, ...]) -> Callable[[], Model]:
    """An MLP's parameters (layer widths ``sizes``)."""
    return _update(name, optimizer, lambda: _mlp_params(sizes))


def _bert_params() -> Any:
    """A small Hugging Face Flax BERT's parameters: 39 leaves, most of them biases and norm scales."""
    from transformers import BertConfig, FlaxBertModel

    config = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                        vocab_size=1000)
    return FlaxBertModel(config, seed=_RNG_SEED).params


def _train_step(name: str, module: Any, batch: tuple[np.ndarray, np.ndarray], optimizer: str) -> Model:
    """``value_and_grad`` of a Flax linen module's softmax cross-entropy, then an optax update."""
    import jax
    import optax

    x, y = batch
    params = module.init(jax.random.PRNGKey(0), x)
    opt = _optimizer(optimizer)
    state = opt.init(params)

    def step(params, state, x, y):
        def loss(p):
            return optax.softmax_cross_entropy_with_integer_labels(module.apply(p, x), y).mean()

        value, grads = jax.value_and_grad(loss)(params)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value

    return _flat(name, "Flax + Optax", step, (params, state, x, y))


def train_mlp() -> Model:
    import flax.linen as nn

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            for width in (256, 256):
                x = nn.relu(nn.Dense(width)(x))
            return nn.Dense(10)(x)

    rng = np.random.default_rng(_RNG_SEED)
    batch = (rng.standard_normal((32, 784)).astype(np.float32), rng.integers(0, 10, 32).astype(np.int32))
    return _train_step("train_mlp_adam", MLP(), batch, "adam")


def train_cnn() -> Model:
    import flax.linen as nn

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Conv(16, (3, 3))(x))
            x = nn.max_pool(x, (2, 2), (2, 2))
            x = nn.relu(nn.Conv(32, (3, 3))(x))
            x = x.mean(axis=(1, 2))
            return nn.Dense(10)(x)

    rng = np.random.default_rng(_RNG_SEED)
    batch = (rng.standard_normal((16, 28, 28, 1)).astype(np.float32), rng.integers(0, 10, 16).astype(np.int32))
    return _train_step("train_cnn_sgd", CNN(), batch, "sgd")


def train_transformer() -> Model:
    import flax.linen as nn

    class Classifier(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.Dense(64)(x)
            a = nn.SelfAttention(num_heads=4)(nn.LayerNorm()(h))
            h = h + a
            h = h + nn.Dense(64)(nn.gelu(nn.Dense(128)(nn.LayerNorm()(h))))
            return nn.Dense(10)(h.mean(axis=1))

    rng = np.random.default_rng(_RNG_SEED)
    batch = (rng.standard_normal((8, 32, 16)).astype(np.float32), rng.integers(0, 10, 8).astype(np.int32))
    return _train_step("train_transformer_adamw", Classifier(), batch, "adamw")


MODELS: dict[str, Callable[[], Model]] = {
    "opt_adam": _mlp_update("opt_adam", "adam", (784, 256, 256, 10)),
    "opt_adam_small": _mlp_update("opt_adam_small", "adam", (64, 128, 128, 10)),
    "opt_adamw": _mlp_update("opt_adamw", "adamw", (784, 256, 256, 10)),
    "opt_sgd": _mlp_update("opt_sgd", "sgd", (784, 256, 256, 10)),
    "opt_rmsprop": _mlp_update("opt_rmsprop", "rmsprop", (784, 256, 256, 10)),
    "opt_lion": _mlp_update("opt_lion", "lion", (784, 256, 256, 10)),
    "opt_adafactor": _mlp_update("opt_adafactor", "adafactor", (784, 256, 256, 10)),
    "opt_clip_adam": _mlp_update("opt_clip_adam", "clip_adam", (784, 256, 256, 10)),
    "opt_adam_big": _mlp_update("opt_adam_big", "adam", (1024, 1024, 1024, 10)),
    "opt_adam_bert": _update("opt_adam_bert", "adam", _bert_params),
    "opt_lion_bert": _update("opt_lion_bert", "lion", _bert_params),
    "train_mlp_adam": train_mlp,
    "train_cnn_sgd": train_cnn,
    "train_transformer_adamw": train_transformer,
}
