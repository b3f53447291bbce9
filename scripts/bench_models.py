"""The models scripts/bench.py measures: jitted functions that close over their weights.

``build(name)`` returns a ``Model``: the function, example inputs and the specs it is converted
with (symbolic where the model has a symbolic dimension). Weights are seeded, scaled like a
standard initialisation, and closed over, as in a deployed model, so converters keep them as
constants/initializers.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:  # conformance.nets: the networks shared with the conformance model cases
    sys.path.append(_ROOT)

NAMES = ("mlp", "cnn", "transformer", "lstm", "gru", "bert", "resnet18", "mlp_large")
EXTRA = ("tiny",)  # small models for tests, not in the default list


@dataclass
class Model:
    """One benchmark model.

    Attributes:
        name: short name (``--models``).
        title: what it is, for the table.
        fn: the function of the inputs (weights closed over).
        inputs: example inputs (numpy).
        specs: spec strings for conversion; names are symbolic dimensions.
        concrete_specs: spec strings with every dimension concrete (TFLite).
        weight_bytes: bytes of the closed-over weights.
    """

    name: str
    title: str
    fn: Callable[..., Any]
    inputs: tuple[np.ndarray, ...]
    specs: tuple[str, ...]
    concrete_specs: tuple[str, ...]
    weight_bytes: int


def _w(rng: np.random.Generator, *shape: int, scale: float | None = None) -> np.ndarray:
    s = scale if scale is not None else 1.0 / np.sqrt(int(np.prod(shape[:-1])) if len(shape) > 1 else shape[0])
    return (rng.standard_normal(shape) * s).astype(np.float32)


def _spec(a: np.ndarray, dims: tuple[Any, ...] | None = None) -> str:
    short = {"float32": "f32", "int32": "i32"}[a.dtype.name]
    return f"{short}[{','.join(str(d) for d in (dims or a.shape))}]"


def _nbytes(tree: Any) -> int:
    import jax

    return int(sum(np.asarray(x).nbytes for x in jax.tree_util.tree_leaves(tree)))


def _mlp(rng, batch: int, width: int, depth: int, name: str, title: str) -> Model:
    import jax

    ws = [(_w(rng, width, width), _w(rng, width, scale=0.01)) for _ in range(depth)]
    head = (_w(rng, width, 10), _w(rng, 10, scale=0.01))

    def fn(x):
        for w, b in ws:
            x = jax.nn.relu(x @ w + b)
        return jax.nn.log_softmax(x @ head[0] + head[1])

    x = rng.standard_normal((batch, width)).astype(np.float32)
    return Model(name, title, fn, (x,), (_spec(x),), (_spec(x),), _nbytes((ws, head)))


def _conv(x, w, stride=1):
    from jax import lax

    return lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def cnn(rng) -> Model:
    import jax
    import jax.numpy as jnp
    from jax import lax

    p = {"c1": _w(rng, 3, 3, 3, 32), "b1": _w(rng, 32, scale=0.01), "c2": _w(rng, 3, 3, 32, 32),
         "b2": _w(rng, 32, scale=0.01), "c3": _w(rng, 3, 3, 32, 64), "b3": _w(rng, 64, scale=0.01),
         "head": _w(rng, 64, 10)}

    def fn(x):
        x = jax.nn.relu(_conv(x, p["c1"]) + p["b1"])
        x = jax.nn.relu(x + _conv(x, p["c2"]) + p["b2"])
        x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        x = jax.nn.relu(_conv(x, p["c3"]) + p["b3"])
        return jnp.mean(x, axis=(1, 2)) @ p["head"]

    x = rng.standard_normal((16, 64, 64, 3)).astype(np.float32)
    return Model("cnn", "ResNet-style CNN b16 64x64 NHWC", fn, (x,), (_spec(x),), (_spec(x),), _nbytes(p))


def _layer_norm(x, g, b, eps=1e-5):
    import jax.numpy as jnp

    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps) * g + b


def transformer(rng) -> Model:
    import jax
    import jax.numpy as jnp

    d, heads, layers = 256, 4, 4

    def layer_params():
        return {"wqkv": _w(rng, d, 3 * d), "wo": _w(rng, d, d), "g1": 1 + _w(rng, d, scale=0.1),
                "b1": _w(rng, d, scale=0.1), "g2": 1 + _w(rng, d, scale=0.1), "b2": _w(rng, d, scale=0.1),
                "w1": _w(rng, d, 4 * d), "c1": _w(rng, 4 * d, scale=0.01), "w2": _w(rng, 4 * d, d),
                "c2": _w(rng, d, scale=0.01)}

    ps = [layer_params() for _ in range(layers)]

    def attention(p, x):
        b, t, _ = x.shape
        split = lambda y: y.reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3)  # noqa: E731
        q, k, v = (split(y) for y in jnp.split(x @ p["wqkv"], 3, axis=-1))
        logits = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(d // heads)
        causal = jnp.tril(jnp.ones((t, t), bool))
        logits = jnp.where(causal, logits, -jnp.inf)
        out = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(logits, axis=-1), v)
        return out.transpose(0, 2, 1, 3).reshape(b, t, d) @ p["wo"]

    def fn(x):
        for p in ps:
            x = x + attention(p, _layer_norm(x, p["g1"], p["b1"]))
            h = jax.nn.gelu(_layer_norm(x, p["g2"], p["b2"]) @ p["w1"] + p["c1"])
            x = x + h @ p["w2"] + p["c2"]
        return x

    x = rng.standard_normal((8, 128, d)).astype(np.float32)
    return Model("transformer", "transformer encoder 4L b8 t128 d256", fn, (x,), (_spec(x, (8, "t", d)),),
                 (_spec(x),), _nbytes(ps))


def lstm(rng) -> Model:
    from conformance.nets import lstm as net

    n_in, hidden, batch, steps = 64, 256, 16, 64
    p = {"wx": _w(rng, n_in, 4 * hidden), "wh": _w(rng, hidden, 4 * hidden), "b": _w(rng, 4 * hidden, scale=0.01),
         "out": _w(rng, hidden, 10)}

    def fn(xs):
        return net(p, xs)

    xs = rng.standard_normal((steps, batch, n_in)).astype(np.float32)
    return Model("lstm", "LSTM lax.scan t64 b16 h256", fn, (xs,), (_spec(xs),), (_spec(xs),), _nbytes(p))


def gru(rng) -> Model:
    import jax.numpy as jnp

    from conformance.nets import gru as net

    n_in, hidden, batch, steps = 64, 256, 16, 64
    p = {"wx": _w(rng, n_in, 3 * hidden), "wh": _w(rng, hidden, 2 * hidden), "whn": _w(rng, hidden, hidden),
         "b": _w(rng, 3 * hidden, scale=0.01), "out": _w(rng, hidden, 10)}

    def fn(xs):
        h, hs = net(p, xs, jnp.zeros((xs.shape[1], hidden)))
        return hs @ p["out"], h

    xs = rng.standard_normal((steps, batch, n_in)).astype(np.float32)
    return Model("gru", "GRU lax.scan t64 b16 h256", fn, (xs,), (_spec(xs),), (_spec(xs),), _nbytes(p))


def bert(rng) -> Model:
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    vocab, d, heads, layers, seq, batch = 1000, 256, 4, 4, 128, 4

    class Layer(nn.Module):
        @nn.compact
        def __call__(self, x, mask):
            y = nn.MultiHeadDotProductAttention(num_heads=heads)(x, x, mask=mask)
            x = nn.LayerNorm()(x + y)
            y = nn.Dense(d)(nn.gelu(nn.Dense(4 * d)(x)))
            return nn.LayerNorm()(x + y)

    class Bert(nn.Module):
        @nn.compact
        def __call__(self, ids):
            pos = jnp.arange(ids.shape[1])[None, :]
            x = nn.Embed(vocab, d)(ids) + nn.Embed(512, d)(pos)
            x = nn.LayerNorm()(x)
            mask = nn.make_attention_mask(ids > 0, ids > 0)
            for _ in range(layers):
                x = Layer()(x, mask)
            return nn.Dense(2)(x[:, 0])

    ids = rng.integers(1, vocab, (batch, seq)).astype(np.int32)
    ids[:, -16:] = 0  # padding
    module = Bert()
    params = jax.jit(module.init)(jax.random.key(0), ids)

    def fn(ids):
        return module.apply(params, ids)

    return Model("bert", "Flax Linen BERT-style 4L b4 t128 d256", fn, (ids,), (_spec(ids),), (_spec(ids),),
                 _nbytes(params))


def resnet18(rng) -> Model:
    import jax

    from conformance.nets import resnet

    blocks = tuple((f, s) for i, f in enumerate((64, 128, 256, 512)) for s in (1 if i == 0 else 2, 1))
    module = resnet(64, 7, blocks, 1000)
    x = rng.standard_normal((2, 112, 112, 3)).astype(np.float32)
    variables = jax.jit(module.init)(jax.random.key(0), x)
    # non-trivial batch statistics, as in a trained model
    leaves, tree = jax.tree_util.tree_flatten(variables["batch_stats"])
    stats = [np.abs(_w(rng, *leaf.shape, scale=0.5)) + 0.5 for leaf in leaves]
    variables = {"params": variables["params"], "batch_stats": jax.tree_util.tree_unflatten(tree, stats)}

    def fn(x):
        return module.apply(variables, x)

    return Model("resnet18", "Flax Linen ResNet-18 b2 112x112", fn, (x,), (_spec(x),), (_spec(x),), _nbytes(variables))


BUILDERS = {
    "tiny": lambda rng: _mlp(rng, 4, 64, 2, "tiny", "MLP 2x64 b4"),
    "mlp": lambda rng: _mlp(rng, 32, 1024, 4, "mlp", "MLP 4x1024 b32"),
    "cnn": cnn,
    "transformer": transformer,
    "lstm": lstm,
    "gru": gru,
    "bert": bert,
    "resnet18": resnet18,
    "mlp_large": lambda rng: _mlp(rng, 8, 7168, 7, "mlp_large", "MLP 7x7168 b8 (1.4 GB weights)"),
}


def build(name: str) -> Model:
    """Build the named model with seeded weights."""
    if name not in BUILDERS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(NAMES + EXTRA)}")
    return BUILDERS[name](np.random.default_rng(0))
