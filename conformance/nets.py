"""Networks shared by the model cases (``cases/models.py``), the benchmark models (scripts/bench_models.py)
and tests: an LSTM (and its cell) and a GRU over ``lax.scan`` with their parameters as a pytree, and a
Flax Linen ResNet.

Sizes come from the parameters (or the module's fields), so one definition serves the small conformance
models and the benchmark-sized ones. JAX and Flax are imported on first use.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable


def lstm_cell(wx: Any, wh: Any, b: Any = None) -> Callable[[Any, Any], Any]:
    """The LSTM step for ``lax.scan``: ``(h, c), x -> (h', c'), h'``, gates i, f, g, o in one
    ``x @ wx + h @ wh (+ b)``."""
    import jax
    import jax.numpy as jnp

    def cell(carry, x):
        h, c = carry
        z = x @ wx + h @ wh
        i, f, g, o = jnp.split(z if b is None else z + b, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    return cell


def lstm(params: dict[str, Any], xs: Any) -> tuple[Any, Any]:
    """An LSTM (:func:`lstm_cell` of ``wx``, ``wh``, ``b``) over ``xs`` [time, batch, features] from zero
    state; returns (the outputs projected by ``params["out"]``, the last hidden state)."""
    import jax.numpy as jnp
    from jax import lax

    b, hidden = xs.shape[1], params["wh"].shape[0]
    cell = lstm_cell(params["wx"], params["wh"], params["b"])
    (h, _), hs = lax.scan(cell, (jnp.zeros((b, hidden)), jnp.zeros((b, hidden))), xs)
    return hs @ params["out"], h


def gru(params: dict[str, Any], xs: Any, h0: Any) -> tuple[Any, Any]:
    """A GRU (reset applied before the recurrent product ``whn``) over ``xs`` [time, batch, features] from
    ``h0``; returns (the last hidden state, every hidden state)."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    split = params["wh"].shape[1]  # r and z

    def cell(h, x):
        gx = x @ params["wx"] + params["b"]
        r, z = jnp.split(jax.nn.sigmoid(gx[..., :split] + h @ params["wh"]), 2, axis=-1)
        n = jnp.tanh(gx[..., split:] + (r * h) @ params["whn"])
        h = (1 - z) * n + z * h
        return h, h

    return lax.scan(cell, h0, xs)


@lru_cache(maxsize=None)
def _resnet_class() -> type:
    import flax.linen as nn
    import jax.numpy as jnp

    class Block(nn.Module):
        """The basic block: two 3x3 convolutions with batch norm, a 1x1 projection on a stride or width
        change, relu after the residual add."""

        features: int
        stride: int

        @nn.compact
        def __call__(self, x):
            bn = lambda: nn.BatchNorm(use_running_average=True)  # noqa: E731
            y = nn.relu(bn()(nn.Conv(self.features, (3, 3), self.stride, use_bias=False)(x)))
            y = bn()(nn.Conv(self.features, (3, 3), use_bias=False)(y))
            if self.stride != 1 or x.shape[-1] != self.features:
                x = bn()(nn.Conv(self.features, (1, 1), self.stride, use_bias=False)(x))
            return nn.relu(x + y)

    class ResNet(nn.Module):
        """Stem (strided convolution, batch norm, relu, 3x3 max pool), blocks, global mean, dense head."""

        stem_features: int
        stem_kernel: int
        blocks: tuple[tuple[int, int], ...]
        classes: int

        @nn.compact
        def __call__(self, x):
            x = nn.Conv(self.stem_features, (self.stem_kernel, self.stem_kernel), 2, use_bias=False)(x)
            x = nn.relu(nn.BatchNorm(use_running_average=True)(x))
            x = nn.max_pool(x, (3, 3), (2, 2), "SAME")
            for features, stride in self.blocks:
                x = Block(features, stride)(x)
            return nn.Dense(self.classes)(jnp.mean(x, axis=(1, 2)))

    return ResNet


def resnet(stem_features: int, stem_kernel: int, blocks: tuple[tuple[int, int], ...], classes: int) -> Any:
    """A Flax Linen ResNet (inference-mode batch norm) on NHWC images.

    Args:
        stem_features: output channels of the stem convolution (stride 2).
        stem_kernel: its kernel size.
        blocks: (features, stride) of each basic block, in order.
        classes: outputs of the dense head.

    Returns:
        The ``flax.linen.Module`` (call ``init``/``apply``).
    """
    return _resnet_class()(stem_features, stem_kernel, blocks, classes)
