"""Models built with Flax (Linen, NNX) and Equinox; declared only when the package is installed."""

from __future__ import annotations

import importlib.util
from functools import lru_cache

import jax
import numpy as np

from conformance.case import Tree, arg, case

T = {"float32": (1e-3, 1e-4)}


def _numpy_tree(tree):
    return jax.tree_util.tree_map(np.asarray, tree)


if importlib.util.find_spec("flax") is not None:

    @lru_cache(maxsize=None)
    def _linen():
        import flax.linen as nn

        class ConvNet(nn.Module):
            @nn.compact
            def __call__(self, x):
                x = nn.relu(nn.Conv(8, (3, 3))(x))
                x = nn.avg_pool(x, (2, 2), (2, 2))
                x = nn.LayerNorm()(nn.Conv(8, (3, 3))(x))
                x = x.reshape(x.shape[0], -1)
                return nn.Dense(4)(nn.gelu(nn.Dense(16)(x)))

        model = ConvNet()
        params = model.init(jax.random.key(0), np.zeros((1, 8, 8, 3), np.float32))
        return model, _numpy_tree(params)

    case("model.flax_linen_convnet", lambda p, x: _linen()[0].apply(p, x), Tree(lambda rng: _linen()[1]), arg("f32[2,8,8,3]"),
         family="model", tags={"model", "flax", "slow"}, tol=T)

    @lru_cache(maxsize=None)
    def _nnx():
        from flax import nnx

        class Block(nnx.Module):
            def __init__(self, rngs):
                self.attn = nnx.MultiHeadAttention(num_heads=2, in_features=8, qkv_features=8, decode=False, rngs=rngs)
                self.norm = nnx.LayerNorm(8, rngs=rngs)
                self.ff = nnx.Linear(8, 8, rngs=rngs)

            def __call__(self, x):
                x = x + self.attn(self.norm(x))
                return x + self.ff(nnx.gelu(x))

        graphdef, state = nnx.split(Block(nnx.Rngs(0)))
        return graphdef, _numpy_tree(state)

    def _nnx_apply(state, x):
        from flax import nnx

        return nnx.merge(_nnx()[0], state)(x)

    case("model.flax_nnx_attention", _nnx_apply, Tree(lambda rng: _nnx()[1]), arg("f32[2,5,8]"), family="model",
         tags={"model", "flax", "slow"}, tol=T)


if importlib.util.find_spec("equinox") is not None:

    @lru_cache(maxsize=None)
    def _eqx():
        import equinox as eqx

        model = eqx.nn.MLP(in_size=6, out_size=3, width_size=16, depth=2, activation=jax.nn.tanh, key=jax.random.key(1))
        params, static = eqx.partition(model, eqx.is_array)
        return static, _numpy_tree(params)

    def _eqx_apply(params, x):
        import equinox as eqx

        return jax.vmap(eqx.combine(params, _eqx()[0]))(x)

    case("model.equinox_mlp", _eqx_apply, Tree(lambda rng: _eqx()[1]), arg("f32[4,6]"), family="model",
         tags={"model", "equinox", "slow"}, tol=T)
