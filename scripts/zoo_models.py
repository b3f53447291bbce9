"""Real third-party models for scripts/bench_zoo.py, each built as a user of its library would.

Hugging Face Flax models (``transformers<5``: version 5 dropped Flax), Haiku (``dm-haiku``),
keras-hub on Keras 3's JAX backend, Flax linen and NNX, and Equinox; all small configurations
(batch 2, sequence 64, 64x64 images) with seeded random weights closed over by the function, so
that each converts in seconds. ``build(name)`` returns a ``bench_models.Model`` whose ``title`` is
the library; a missing library raises ImportError, which the benchmark reports as a note.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np
from bench_models import Model, _nbytes, _spec

BATCH, SEQ, VOCAB, IMAGE = 2, 64, 500, 64
SMALL = dict(
    vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256
)
NO_VOCAB = {k: v for k, v in SMALL.items() if k != "vocab_size"}


def _ids(offset: int = 0) -> np.ndarray:
    return np.random.default_rng(0).integers(0, VOCAB - 10, (BATCH, SEQ)).astype(np.int32) + offset


def _image(channels_first: bool = True, size: int = IMAGE, channels: int = 3) -> np.ndarray:
    shape = (BATCH, channels, size, size) if channels_first else (BATCH, size, size, channels)
    return np.random.default_rng(1).standard_normal(shape).astype(np.float32)


def _model(
    name: str, library: str, fn: Callable[..., Any], inputs: tuple[np.ndarray, ...], weights: Any = ()
) -> Model:
    specs = tuple(_spec(a) for a in inputs)
    return Model(name, library, fn, inputs, specs, specs, _nbytes(weights))


# ---------------------------------------------------------------- Hugging Face Flax


def _t5_clip_shim(module: Any) -> None:
    """transformers' Flax T5 calls ``jnp.clip(x, a_max=...)``, which jax 0.10 removed; give that one
    module a jax.numpy whose clip still takes ``a_min``/``a_max`` (the model is unchanged)."""
    import jax.numpy as jnp

    class _Jnp:
        def __getattr__(self, name: str) -> Any:
            return getattr(jnp, name)

        @staticmethod
        def clip(a, a_min=None, a_max=None, **kw):
            return jnp.clip(a, kw.pop("min", a_min), kw.pop("max", a_max), **kw)

    module.jnp = _Jnp()


def _hf_configs(T: Any) -> dict[str, tuple[Any, Any, tuple[np.ndarray, ...]]]:
    """name -> (Flax model class, config, inputs)."""
    ids, img = (_ids(),), (_image(),)
    t5 = dict(vocab_size=VOCAB, d_model=128, d_kv=32, d_ff=256, num_layers=2, num_heads=4)
    seq2seq = dict(
        vocab_size=VOCAB,
        d_model=128,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=256,
        decoder_ffn_dim=256,
        max_position_embeddings=128,
    )
    return {
        "bert": (T.FlaxBertModel, T.BertConfig(**SMALL), ids),
        "roberta": (T.FlaxRobertaModel, T.RobertaConfig(**SMALL), (_ids(3),)),
        "distilbert": (
            T.FlaxDistilBertModel,
            T.DistilBertConfig(vocab_size=VOCAB, dim=128, n_layers=2, n_heads=4, hidden_dim=256),
            ids,
        ),
        "albert": (T.FlaxAlbertModel, T.AlbertConfig(embedding_size=64, **SMALL), ids),
        "electra": (T.FlaxElectraModel, T.ElectraConfig(embedding_size=64, **SMALL), ids),
        "roformer": (T.FlaxRoFormerModel, T.RoFormerConfig(**SMALL), ids),
        "bigbird": (T.FlaxBigBirdModel, T.BigBirdConfig(attention_type="original_full", **SMALL), ids),
        "gpt2": (
            T.FlaxGPT2Model,
            T.GPT2Config(vocab_size=VOCAB, n_embd=128, n_layer=2, n_head=4, n_positions=128),
            ids,
        ),
        "gptneo": (
            T.FlaxGPTNeoModel,
            T.GPTNeoConfig(
                vocab_size=VOCAB,
                hidden_size=128,
                num_layers=2,
                num_heads=4,
                window_size=32,
                attention_types=[[["global", "local"], 1]],
                max_position_embeddings=128,
            ),
            ids,
        ),
        "gptj": (
            T.FlaxGPTJModel,
            T.GPTJConfig(vocab_size=VOCAB, n_embd=128, n_layer=2, n_head=4, rotary_dim=16, n_positions=128),
            ids,
        ),
        "opt": (
            T.FlaxOPTModel,
            T.OPTConfig(
                vocab_size=VOCAB,
                hidden_size=128,
                num_hidden_layers=2,
                num_attention_heads=4,
                ffn_dim=256,
                word_embed_proj_dim=128,
                max_position_embeddings=128,
            ),
            ids,
        ),
        "bloom": (
            T.FlaxBloomModel,
            T.BloomConfig(vocab_size=VOCAB, hidden_size=128, n_layer=2, n_head=4),
            ids,
        ),
        "xglm": (
            T.FlaxXGLMModel,
            T.XGLMConfig(
                vocab_size=VOCAB,
                d_model=128,
                num_layers=2,
                attention_heads=4,
                ffn_dim=256,
                max_position_embeddings=128,
            ),
            ids,
        ),
        "llama": (T.FlaxLlamaModel, T.LlamaConfig(max_position_embeddings=128, **SMALL), ids),
        "mistral": (
            T.FlaxMistralModel,
            T.MistralConfig(num_key_value_heads=2, max_position_embeddings=128, sliding_window=64, **SMALL),
            ids,
        ),
        "gemma": (
            T.FlaxGemmaModel,
            T.GemmaConfig(head_dim=32, max_position_embeddings=128, num_key_value_heads=1, **SMALL),
            ids,
        ),
        "t5enc": (T.FlaxT5EncoderModel, T.T5Config(**t5), ids),
        "t5": (T.FlaxT5Model, T.T5Config(**t5), (_ids(), _ids()[:, :16])),
        "bart": (T.FlaxBartModel, T.BartConfig(**seq2seq), ids),
        "mbart": (T.FlaxMBartModel, T.MBartConfig(**seq2seq), ids),
        "vit": (T.FlaxViTModel, T.ViTConfig(image_size=IMAGE, patch_size=8, **NO_VOCAB), img),
        "beit": (T.FlaxBeitModel, T.BeitConfig(image_size=IMAGE, patch_size=8, **SMALL), img),
        "dinov2": (
            T.FlaxDinov2Model,
            T.Dinov2Config(
                image_size=IMAGE, patch_size=8, hidden_size=128, num_hidden_layers=2, num_attention_heads=4
            ),
            img,
        ),
        "clipv": (T.FlaxCLIPVisionModel, T.CLIPVisionConfig(image_size=IMAGE, patch_size=8, **NO_VOCAB), img),
        "resnet": (
            T.FlaxResNetModel,
            T.ResNetConfig(embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1]),
            img,
        ),
        "regnet": (
            T.FlaxRegNetModel,
            T.RegNetConfig(
                embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1], groups_width=16
            ),
            img,
        ),
        "wav2vec2": (
            T.FlaxWav2Vec2Model,
            T.Wav2Vec2Config(
                do_stable_layer_norm=True,
                feat_extract_norm="layer",
                conv_dim=(32, 32, 32),
                conv_stride=(5, 2, 2),
                conv_kernel=(10, 3, 3),
                num_conv_pos_embeddings=16,
                num_conv_pos_embedding_groups=4,
                **NO_VOCAB,
            ),
            (np.random.default_rng(2).standard_normal((BATCH, 4000)).astype(np.float32),),
        ),
    }


HF = (
    "bert",
    "roberta",
    "distilbert",
    "albert",
    "electra",
    "roformer",
    "bigbird",
    "gpt2",
    "gptneo",
    "gptj",
    "opt",
    "bloom",
    "xglm",
    "llama",
    "mistral",
    "gemma",
    "t5enc",
    "t5",
    "bart",
    "mbart",
    "vit",
    "beit",
    "dinov2",
    "clipv",
    "resnet",
    "regnet",
    "wav2vec2",
)


def hf(name: str) -> Model:
    """A Hugging Face Flax model with random weights; its ``last_hidden_state`` (ResNets: pooled)."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import transformers as T

    cls, config, inputs = _hf_configs(T)[name]
    if name.startswith("t5"):
        from transformers.models.t5 import modeling_flax_t5

        _t5_clip_shim(modeling_flax_t5)
    m = cls(config, seed=0)
    key = "pooler_output" if name in ("resnet", "regnet") else "last_hidden_state"
    if name == "t5":
        fn = lambda x, y: getattr(m(x, decoder_input_ids=y), key)  # noqa: E731
    else:
        fn = lambda x: getattr(m(x), key)  # noqa: E731
    return _model(name, "HF Flax", fn, inputs, m.params)


# ---------------------------------------------------------------- Haiku


def _haiku(
    name: str, forward: Callable[..., Any], inputs: tuple[np.ndarray, ...], state: bool = False
) -> Model:
    import haiku as hk
    import jax

    if state:
        f = hk.transform_with_state(forward)
        params, st = f.init(jax.random.PRNGKey(0), *inputs, is_training=True)  # creates the moving averages
        return _model(
            name,
            "Haiku",
            lambda *a: f.apply(params, st, None, *a, is_training=False)[0],
            inputs,
            (params, st),
        )
    f = hk.without_apply_rng(hk.transform(forward))
    params = f.init(jax.random.PRNGKey(0), *inputs)
    return _model(name, "Haiku", lambda *a: f.apply(params, *a), inputs, params)


def hk_mlp() -> Model:
    import haiku as hk

    x = np.random.default_rng(3).standard_normal((BATCH * 16, 256)).astype(np.float32)
    return _haiku("hk_mlp", lambda x: hk.nets.MLP([512, 512, 10])(x), (x,))


def hk_convnet() -> Model:
    import haiku as hk
    import jax

    def forward(x):
        for ch in (32, 64, 64):
            x = jax.nn.relu(hk.Conv2D(ch, 3)(x))
            x = hk.MaxPool(2, 2, "SAME")(x)
        return hk.Linear(10)(hk.Flatten()(x))

    return _haiku("hk_convnet", forward, (_image(False),))


def hk_resnet18() -> Model:
    """ResNet-18 in inference mode; its logits layer with random weights (Haiku's default is zeros)."""
    import haiku as hk

    logits = {"w_init": hk.initializers.VarianceScaling(1.0), "name": "logits"}
    return _haiku(
        "hk_resnet18",
        lambda x, is_training: hk.nets.ResNet18(10, logits_config=logits)(x, is_training=is_training),
        (_image(False),),
        state=True,
    )


def hk_lstm() -> Model:
    import haiku as hk

    def forward(xs):
        core = hk.LSTM(64)
        out, _ = hk.dynamic_unroll(core, xs, core.initial_state(xs.shape[1]))
        return hk.Linear(10)(out[-1])

    xs = np.random.default_rng(4).standard_normal((SEQ, BATCH, 32)).astype(np.float32)
    return _haiku("hk_lstm", forward, (xs,))


def hk_transformer() -> Model:
    import haiku as hk
    import jax
    import jax.numpy as jnp

    d, heads = 128, 4

    def forward(ids):
        x = hk.Embed(VOCAB, d)(ids) + hk.get_parameter(
            "pos", (SEQ, d), init=hk.initializers.TruncatedNormal(0.02)
        )
        mask = jnp.tril(jnp.ones((1, 1, SEQ, SEQ), bool))
        for _ in range(2):
            h = hk.LayerNorm(-1, True, True)(x)
            x = x + hk.MultiHeadAttention(heads, d // heads, w_init=hk.initializers.VarianceScaling(1.0))(
                h, h, h, mask
            )
            h = hk.LayerNorm(-1, True, True)(x)
            x = x + hk.Linear(d)(jax.nn.gelu(hk.Linear(4 * d)(h)))
        return hk.LayerNorm(-1, True, True)(x)

    return _haiku("hk_transformer", forward, (_ids(),))


# ---------------------------------------------------------------- keras-hub (Keras 3, JAX backend)


def _keras_hub(
    name: str, make: Callable[[Any], Any], call: Callable[[Any, Any], Any], inputs: tuple[np.ndarray, ...]
) -> Model:
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras
    import keras_hub

    if keras.backend.backend() != "jax":
        raise ImportError(f"keras runs on {keras.backend.backend()}, not jax (set KERAS_BACKEND=jax)")
    keras.utils.set_random_seed(0)
    backbone = make(keras_hub)
    return _model(
        name, "keras-hub", lambda *a: call(backbone, *a), inputs, [v.value for v in backbone.weights]
    )


def _text(ids):
    import jax.numpy as jnp

    return {"token_ids": ids, "padding_mask": jnp.ones_like(ids)}


def kh_bert() -> Model:
    return _keras_hub(
        "kh_bert",
        lambda kh: kh.models.BertBackbone(
            vocabulary_size=VOCAB,
            num_layers=2,
            num_heads=4,
            hidden_dim=128,
            intermediate_dim=256,
            max_sequence_length=SEQ,
        ),
        lambda b, ids: b({**_text(ids), "segment_ids": ids * 0})["sequence_output"],
        (_ids(),),
    )


def kh_gpt2() -> Model:
    return _keras_hub(
        "kh_gpt2",
        lambda kh: kh.models.GPT2Backbone(
            vocabulary_size=VOCAB,
            num_layers=2,
            num_heads=4,
            hidden_dim=128,
            intermediate_dim=256,
            max_sequence_length=SEQ,
        ),
        lambda b, ids: b(_text(ids)),
        (_ids(),),
    )


def kh_llama() -> Model:
    return _keras_hub(
        "kh_llama",
        lambda kh: kh.models.LlamaBackbone(
            vocabulary_size=VOCAB,
            num_layers=2,
            num_query_heads=4,
            num_key_value_heads=2,
            hidden_dim=128,
            intermediate_dim=256,
        ),
        lambda b, ids: b(_text(ids)),
        (_ids(),),
    )


def kh_resnet() -> Model:
    return _keras_hub(
        "kh_resnet",
        lambda kh: kh.models.ResNetBackbone(
            input_conv_filters=[64],
            input_conv_kernel_sizes=[7],
            stackwise_num_filters=[64, 128, 256],
            stackwise_num_blocks=[1, 1, 1],
            stackwise_num_strides=[1, 2, 2],
            block_type="basic_block",
            image_shape=(IMAGE, IMAGE, 3),
        ),
        lambda b, x: b(x),
        (_image(False),),
    )


# ---------------------------------------------------------------- Flax linen and NNX, Equinox


def linen_cnn() -> Model:
    """The CNN of Flax's MNIST example."""
    import flax.linen as nn
    import jax

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.avg_pool(nn.relu(nn.Conv(32, (3, 3))(x)), (2, 2), (2, 2))
            x = nn.avg_pool(nn.relu(nn.Conv(64, (3, 3))(x)), (2, 2), (2, 2))
            x = nn.relu(nn.Dense(256)(x.reshape((x.shape[0], -1))))
            return nn.Dense(10)(x)

    x = _image(False, 28, 1)
    params = CNN().init(jax.random.PRNGKey(0), x)
    return _model("linen_cnn", "Flax linen", lambda x: CNN().apply(params, x), (x,), params)


def linen_lstm() -> Model:
    import flax.linen as nn
    import jax

    class Tagger(nn.Module):
        @nn.compact
        def __call__(self, ids):
            x = nn.Embed(VOCAB, 64)(ids)
            x = nn.RNN(nn.OptimizedLSTMCell(64))(x)
            return nn.Dense(10)(x)

    ids = _ids()
    params = Tagger().init(jax.random.PRNGKey(0), ids)
    return _model("linen_lstm", "Flax linen", lambda x: Tagger().apply(params, x), (ids,), params)


def nnx_cnn() -> Model:
    """The CNN of Flax NNX's MNIST tutorial (batch norm in inference mode)."""
    from functools import partial

    import jax
    from flax import nnx

    class CNN(nnx.Module):
        def __init__(self, rngs: nnx.Rngs):
            self.conv1, self.bn1 = nnx.Conv(1, 32, (3, 3), rngs=rngs), nnx.BatchNorm(32, rngs=rngs)
            self.conv2, self.bn2 = nnx.Conv(32, 64, (3, 3), rngs=rngs), nnx.BatchNorm(64, rngs=rngs)
            self.linear1, self.linear2 = nnx.Linear(3136, 256, rngs=rngs), nnx.Linear(256, 10, rngs=rngs)
            self.avg_pool = partial(nnx.avg_pool, window_shape=(2, 2), strides=(2, 2))

        def __call__(self, x):
            x = self.avg_pool(nnx.relu(self.bn1(self.conv1(x))))
            x = self.avg_pool(nnx.relu(self.bn2(self.conv2(x))))
            return self.linear2(nnx.relu(self.linear1(x.reshape(x.shape[0], -1))))

    model = CNN(nnx.Rngs(0))
    model.eval()
    graphdef, state = nnx.split(model)
    return _model(
        "nnx_cnn",
        "Flax NNX",
        lambda x: nnx.merge(graphdef, state)(x),
        (_image(False, 28, 1),),
        jax.tree_util.tree_leaves(state),
    )


def nnx_transformer() -> Model:
    import jax
    import jax.numpy as jnp
    from flax import nnx

    class Block(nnx.Module):
        def __init__(self, d: int, rngs: nnx.Rngs):
            self.ln1, self.ln2 = nnx.LayerNorm(d, rngs=rngs), nnx.LayerNorm(d, rngs=rngs)
            self.attn = nnx.MultiHeadAttention(4, d, decode=False, rngs=rngs)
            self.up, self.down = nnx.Linear(d, 4 * d, rngs=rngs), nnx.Linear(4 * d, d, rngs=rngs)

        def __call__(self, x, mask):
            x = x + self.attn(self.ln1(x), mask=mask)
            return x + self.down(nnx.gelu(self.up(self.ln2(x))))

    class Model_(nnx.Module):
        def __init__(self, rngs: nnx.Rngs):
            self.embed = nnx.Embed(VOCAB, 128, rngs=rngs)
            self.blocks = nnx.List([Block(128, rngs) for _ in range(2)])

        def __call__(self, ids):
            x, mask = self.embed(ids), nnx.make_causal_mask(ids)
            for b in self.blocks:
                x = b(x, mask)
            return x

    model = Model_(nnx.Rngs(0))
    graphdef, state = nnx.split(model)
    return _model(
        "nnx_transformer",
        "Flax NNX",
        lambda ids: nnx.merge(graphdef, state)(ids),
        (_ids(),),
        [jnp.asarray(v) for v in jax.tree_util.tree_leaves(state)],
    )


def eqx_mlp() -> Model:
    import equinox as eqx
    import jax

    mlp = eqx.nn.MLP(256, 10, 512, 3, key=jax.random.PRNGKey(0))
    x = np.random.default_rng(3).standard_normal((BATCH * 16, 256)).astype(np.float32)
    return _model("eqx_mlp", "Equinox", jax.vmap(mlp), (x,), eqx.filter(mlp, eqx.is_array))


def eqx_cnn() -> Model:
    """The CNN of Equinox's MNIST example, vmapped over the batch."""
    import equinox as eqx
    import jax

    k = jax.random.split(jax.random.PRNGKey(0), 4)
    net = eqx.nn.Sequential(
        [
            eqx.nn.Conv2d(1, 3, kernel_size=4, key=k[0]),
            eqx.nn.MaxPool2d(kernel_size=2),
            eqx.nn.Lambda(jax.nn.relu),
            eqx.nn.Lambda(lambda x: x.reshape(-1)),
            eqx.nn.Linear(1728, 512, key=k[1]),
            eqx.nn.Lambda(jax.nn.sigmoid),
            eqx.nn.Linear(512, 64, key=k[2]),
            eqx.nn.Lambda(jax.nn.relu),
            eqx.nn.Linear(64, 10, key=k[3]),
            eqx.nn.Lambda(jax.nn.log_softmax),
        ]
    )
    return _model("eqx_cnn", "Equinox", jax.vmap(net), (_image(True, 28, 1),), eqx.filter(net, eqx.is_array))


def eqx_attention() -> Model:
    import equinox as eqx
    import jax

    k = jax.random.split(jax.random.PRNGKey(0), 3)
    attn = eqx.nn.MultiheadAttention(4, 128, key=k[0])
    ln = eqx.nn.LayerNorm(128)
    up, down = eqx.nn.Linear(128, 512, key=k[1]), eqx.nn.Linear(512, 128, key=k[2])

    def one(x):
        h = jax.vmap(ln)(x)
        x = x + attn(h, h, h)
        return x + jax.vmap(down)(jax.nn.gelu(jax.vmap(up)(jax.vmap(ln)(x))))

    x = np.random.default_rng(5).standard_normal((BATCH, SEQ, 128)).astype(np.float32)
    return _model(
        "eqx_attention", "Equinox", jax.vmap(one), (x,), eqx.filter((attn, ln, up, down), eqx.is_array)
    )


def tiny() -> Model:
    """A plain-JAX MLP that needs no third-party library (the benchmark's own test)."""
    import bench_models

    m = bench_models.build("tiny")
    m.title = "JAX"
    return m


OTHERS: dict[str, Callable[[], Model]] = {
    "hk_mlp": hk_mlp,
    "hk_convnet": hk_convnet,
    "hk_resnet18": hk_resnet18,
    "hk_lstm": hk_lstm,
    "hk_transformer": hk_transformer,
    "kh_bert": kh_bert,
    "kh_gpt2": kh_gpt2,
    "kh_llama": kh_llama,
    "kh_resnet": kh_resnet,
    "linen_cnn": linen_cnn,
    "linen_lstm": linen_lstm,
    "nnx_cnn": nnx_cnn,
    "nnx_transformer": nnx_transformer,
    "eqx_mlp": eqx_mlp,
    "eqx_cnn": eqx_cnn,
    "eqx_attention": eqx_attention,
}
NAMES = HF + tuple(OTHERS)
EXTRA = ("tiny",)

# The second battery: kinds the first lacks (zoo_more_transformers.py, zoo_more_cnn_rnn.py: Whisper,
# LongT5, DeBERTa-V3, Mixtral, ...; EfficientNet, DenseNet, U-Net, ...; GRU and LSTM cells of Flax, NNX,
# Haiku, Equinox and Keras). Imported here, after the helpers they use are defined.
from zoo_more_cnn_rnn import MODELS as _MORE_CNN_RNN  # noqa: E402
from zoo_more_transformers import MODELS as _MORE_TRANSFORMERS  # noqa: E402

_MORE = {**_MORE_TRANSFORMERS, **_MORE_CNN_RNN}
MORE = tuple(_MORE)

# The third: models called as they are served (zoo_served.py: masks as inputs, more keras-hub backbones).
from zoo_served import MODELS as _SERVED  # noqa: E402

SERVED = tuple(_SERVED)

# The fourth: optimizer updates and training steps (zoo_training.py: Optax on Flax models).
from zoo_training import MODELS as _TRAINING  # noqa: E402

TRAINING = tuple(_TRAINING)
ALL = NAMES + MORE + SERVED + TRAINING + EXTRA  # every name ``build`` takes


def build(name: str) -> Model:
    """The model called ``name`` (one of NAMES, MORE, SERVED, TRAINING or EXTRA)."""
    if name in HF:
        return hf(name)
    if name == "tiny":
        return tiny()
    if name in _MORE:
        return _MORE[name]()
    if name in _SERVED:
        return _SERVED[name]()
    if name in _TRAINING:
        return _TRAINING[name]()
    return OTHERS[name]()
