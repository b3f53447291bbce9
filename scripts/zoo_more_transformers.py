"""A second battery of transformer-family models for scripts/bench_zoo.py (classes the first zoo lacks).

Hugging Face Flax (Whisper, LongT5 transient-global, mT5, Pegasus, Marian, CLIP,
RoBERTa-PreLayerNorm), keras-hub backbones on JAX (DeBERTa-V3, Gemma-2-style Gemma, Phi-3 with su
rope scaling, Falcon with ALiBi, FNet, Mixtral MoE, T5, XLNet, GPT-NeoX, Qwen3, Gemma 3, Swin), and
hand-built encoders in Flax linen, Flax NNX, Equinox and Haiku (padding masks, cross attention, rotary
heads). Small configurations (batch 2, sequence 64, 64x64 images), seeded random weights closed over by
the function, numpy inputs. Models named in ``SYMBOLIC`` convert with a symbolic sequence length ``s``
(batch stays 2).

``MODELS`` maps name -> builder; ``zoo_models.MORE`` lists them for ``scripts/bench_zoo.py --more``.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np
from bench_models import Model, _nbytes, _spec
from zoo_models import BATCH, IMAGE, SEQ, VOCAB, _haiku, _ids, _image, _keras_hub, _model, _t5_clip_shim, _text

D, HEADS, FF = 128, 4, 256


def _padded_ids(offset: int = 1) -> np.ndarray:
    """Token ids in [offset, VOCAB) whose second row ends in 16 padding tokens (id 0)."""
    ids = np.random.default_rng(6).integers(offset, VOCAB - 10, (BATCH, SEQ)).astype(np.int32)
    ids[1, -16:] = 0
    return ids


def _sym(
    name: str,
    library: str,
    fn: Callable[..., Any],
    inputs: tuple[np.ndarray, ...],
    dims: tuple[tuple[Any, ...], ...],
    weights: Any = (),
) -> Model:
    """A Model whose specs use ``dims`` (names are symbolic) and whose concrete specs are the inputs'."""
    return Model(
        name,
        library,
        fn,
        inputs,
        tuple(_spec(a, d) for a, d in zip(inputs, dims)),
        tuple(_spec(a) for a in inputs),
        _nbytes(weights),
    )


def _symbolic(m: Model, *dims: tuple[Any, ...]) -> Model:
    """``m`` converted with ``dims`` per input (names are symbolic); its concrete specs stay."""
    m.specs = tuple(_spec(a, d) for a, d in zip(m.inputs, dims))
    return m


# ---------------------------------------------------------------- Hugging Face Flax


def _hf(name: str, make: Callable[[Any], tuple[Any, Any]], call: Callable[..., Any], inputs) -> Model:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import transformers as T

    cls, config = make(T)
    m = cls(config, seed=0)
    return _model(name, "HF Flax", lambda *a: call(m, *a), inputs, m.params)


_SEQ2SEQ = dict(
    vocab_size=VOCAB,
    d_model=D,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=HEADS,
    decoder_attention_heads=HEADS,
    encoder_ffn_dim=FF,
    decoder_ffn_dim=FF,
    max_position_embeddings=128,
)


SMALL_NO_VOCAB = dict(hidden_size=D, num_hidden_layers=2, num_attention_heads=HEADS, intermediate_size=FF)


def hf_whisper() -> Model:
    """Whisper encoder-decoder: conv front end over 16 mel bins x 64 frames, 16 decoder tokens."""
    mel = np.random.default_rng(7).standard_normal((BATCH, 16, SEQ)).astype(np.float32)
    return _hf(
        "hf_whisper",
        lambda T: (
            T.FlaxWhisperModel,
            T.WhisperConfig(
                vocab_size=VOCAB,
                num_mel_bins=16,
                encoder_layers=2,
                decoder_layers=2,
                encoder_attention_heads=HEADS,
                decoder_attention_heads=HEADS,
                d_model=D,
                encoder_ffn_dim=FF,
                decoder_ffn_dim=FF,
                max_source_positions=SEQ // 2,
                max_target_positions=64,
                pad_token_id=0,
                bos_token_id=1,
                eos_token_id=2,
                decoder_start_token_id=1,
            ),
        ),
        lambda m, x, y: m(x, decoder_input_ids=y).last_hidden_state,
        (mel, _ids()[:, :16]),
    )


def hf_longt5() -> Model:
    """LongT5's encoder (``FlaxLongT5Model.encode``) with transient-global attention (local radius 8,
    global blocks of 8) over a padded batch."""
    from transformers.models.longt5 import modeling_flax_longt5

    _t5_clip_shim(modeling_flax_longt5)
    return _hf(
        "hf_longt5",
        lambda T: (
            T.FlaxLongT5Model,
            T.LongT5Config(
                vocab_size=VOCAB,
                d_model=D,
                d_kv=32,
                d_ff=FF,
                num_layers=2,
                num_heads=HEADS,
                encoder_attention_type="transient-global",
                local_radius=8,
                global_block_size=8,
            ),
        ),
        lambda m, x: m.encode(x, attention_mask=(x > 0).astype(np.int32)).last_hidden_state,
        (_padded_ids(),),
    )


def hf_mt5() -> Model:
    """mT5 for conditional generation (gated-GELU FFN, untied LM head): decoder logits; symbolic
    encoder and decoder lengths ``s``, ``t``."""
    from transformers.models.t5 import modeling_flax_t5

    _t5_clip_shim(modeling_flax_t5)
    m = _hf(
        "hf_mt5",
        lambda T: (
            T.FlaxMT5ForConditionalGeneration,
            T.MT5Config(vocab_size=VOCAB, d_model=D, d_kv=32, d_ff=FF, num_layers=2, num_heads=HEADS),
        ),
        lambda m, x, y: m(x, decoder_input_ids=y).logits,
        (_ids(), _ids(1)[:, :16]),
    )
    return _symbolic(m, (BATCH, "s"), (BATCH, "t"))


def hf_pegasus() -> Model:
    """Pegasus (sinusoidal positions, pre-layer-norm) with the decoder input shifted from the ids."""
    return _hf(
        "hf_pegasus",
        lambda T: (T.FlaxPegasusModel, T.PegasusConfig(**_SEQ2SEQ)),
        lambda m, x: m(x).last_hidden_state,
        (_ids(3),),
    )


def hf_marian() -> Model:
    """Marian MT model (post-LN, scaled embeddings, final-logits bias): logits of 16 decoder tokens."""
    return _hf(
        "hf_marian",
        lambda T: (T.FlaxMarianMTModel, T.MarianConfig(decoder_vocab_size=VOCAB, **_SEQ2SEQ)),
        lambda m, x, y: m(x, decoder_input_ids=y).logits,
        (_ids(), _ids(1)[:, :16]),
    )


def hf_clip() -> Model:
    """Full CLIP (text + vision towers): image-text logits; the text pooler takes the argmax token."""
    pix = _image(True)
    return _hf(
        "hf_clip",
        lambda T: (
            T.FlaxCLIPModel,
            T.CLIPConfig(
                text_config=dict(max_position_embeddings=SEQ, **{**SMALL_NO_VOCAB, "vocab_size": VOCAB}),
                vision_config=dict(image_size=IMAGE, patch_size=8, **SMALL_NO_VOCAB),
                projection_dim=64,
            ),
        ),
        lambda m, ids, px: m(ids, px).logits_per_image,
        (_ids(), pix),
    )


def hf_robpre() -> Model:
    """RoBERTa-PreLayerNorm (position ids from the non-padding cumsum), symbolic sequence ``s``."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import transformers as T

    m = T.FlaxRobertaPreLayerNormModel(
        T.RobertaPreLayerNormConfig(vocab_size=VOCAB, max_position_embeddings=130, **SMALL_NO_VOCAB), seed=0
    )
    ids = _padded_ids(3)
    ids[1, -16:] = 1  # RoBERTa's pad id

    def fn(x):
        return m(x, attention_mask=(x != 1).astype(np.int32)).last_hidden_state

    return _sym("hf_robpre", "HF Flax", fn, (ids,), ((BATCH, "s"),), m.params)


# ---------------------------------------------------------------- keras-hub (Keras 3, JAX backend)


def _pad_text(ids):
    import jax.numpy as jnp

    return {"token_ids": ids, "padding_mask": (ids > 0).astype(jnp.int32)}


def kh_deberta() -> Model:
    """DeBERTa-V3: disentangled (content/position) attention over log-bucketed relative positions;
    symbolic ``s``."""
    m = _keras_hub(
        "kh_deberta",
        lambda kh: kh.models.DebertaV3Backbone(
            vocabulary_size=VOCAB,
            num_layers=2,
            num_heads=HEADS,
            hidden_dim=D,
            intermediate_dim=FF,
            max_sequence_length=SEQ,
            bucket_size=32,
        ),
        lambda b, ids: b(_pad_text(ids)),
        (_padded_ids(),),
    )
    return _symbolic(m, (BATCH, "s"))


def kh_gemma2() -> Model:
    """Gemma-2-style Gemma: GQA, post-attention/FFN norms, logit soft-caps, sliding-window layers."""
    return _keras_hub(
        "kh_gemma2",
        lambda kh: kh.models.GemmaBackbone(
            vocabulary_size=VOCAB,
            num_layers=2,
            num_query_heads=HEADS,
            num_key_value_heads=2,
            hidden_dim=D,
            intermediate_dim=FF,
            head_dim=32,
            query_head_dim_normalize=False,
            use_post_ffw_norm=True,
            use_post_attention_norm=True,
            attention_logit_soft_cap=50.0,
            final_logit_soft_cap=30.0,
            use_sliding_window_attention=True,
            sliding_window_size=16,
        ),
        lambda b, ids: b(_text(ids)),
        (_ids(),),
    )


def kh_phi3() -> Model:
    """Phi-3 with "su" (LongRoPE) rotary scaling: the sequence is past the pretraining length."""
    half = D // HEADS // 2
    return _keras_hub(
        "kh_phi3",
        lambda kh: kh.models.Phi3Backbone(
            vocabulary_size=VOCAB,
            num_layers=2,
            hidden_dim=D,
            intermediate_dim=FF,
            num_query_heads=HEADS,
            num_key_value_heads=2,
            max_sequence_length=256,
            pretraining_sequence_length=32,
            rope_scaling_type="su",
            rope_scaling_short_factor=[1.0 + 0.05 * i for i in range(half)],
            rope_scaling_long_factor=[1.0 + 0.5 * i for i in range(half)],
        ),
        lambda b, ids: b(_text(ids)),
        (_ids(),),
    )


def kh_falcon() -> Model:
    """Falcon-RW style: ALiBi position biases, parallel attention and MLP."""
    return _keras_hub(
        "kh_falcon",
        lambda kh: kh.models.FalconBackbone(
            vocabulary_size=VOCAB, num_layers=2, num_attention_heads=HEADS, hidden_dim=D, intermediate_dim=FF
        ),
        lambda b, ids: b(_pad_text(ids)),
        (_padded_ids(),),
    )


def kh_fnet() -> Model:
    """FNet: token mixing by a 2-D Fourier transform (real part) instead of attention."""
    return _keras_hub(
        "kh_fnet",
        lambda kh: kh.models.FNetBackbone(
            vocabulary_size=VOCAB, num_layers=2, hidden_dim=D, intermediate_dim=FF, max_sequence_length=SEQ
        ),
        lambda b, ids: b({"token_ids": ids, "segment_ids": ids * 0})["sequence_output"],
        (_ids(),),
    )


def kh_mixtral() -> Model:
    """Mixtral: sparse mixture of 4 experts with top-2 routing, GQA, sliding window 32."""
    return _keras_hub(
        "kh_mixtral",
        lambda kh: kh.models.MixtralBackbone(
            vocabulary_size=VOCAB,
            num_layers=2,
            num_query_heads=HEADS,
            hidden_dim=D,
            intermediate_dim=FF,
            num_key_value_heads=2,
            num_experts=4,
            top_k=2,
            sliding_window=32,
        ),
        lambda b, ids: b(_text(ids)),
        (_ids(),),
    )


def kh_t5() -> Model:
    """keras-hub T5 encoder-decoder (gated activation, relative position buckets), padded encoder."""
    return _keras_hub(
        "kh_t5",
        lambda kh: kh.models.T5Backbone(
            vocabulary_size=VOCAB, num_layers=2, num_heads=HEADS, hidden_dim=D, intermediate_dim=FF
        ),
        lambda b, x, y: b(
            {
                "encoder_token_ids": x,
                "encoder_padding_mask": (x > 0).astype(np.int32),
                "decoder_token_ids": y,
                "decoder_padding_mask": (y >= 0).astype(np.int32),
            }
        ),
        (_padded_ids(), _ids(1)[:, :16]),
    )


def _halves(ids):
    """Segment ids: 0 for the first half of each row, 1 for the second."""
    import jax.numpy as jnp

    return jnp.broadcast_to(jnp.arange(ids.shape[1]) >= ids.shape[1] // 2, ids.shape).astype(jnp.int32)


def kh_xlnet() -> Model:
    """XLNet: two-stream relative-position attention with segment biases."""
    return _keras_hub(
        "kh_xlnet",
        lambda kh: kh.models.XLNetBackbone(
            vocabulary_size=VOCAB, num_layers=2, num_heads=HEADS, hidden_dim=D, intermediate_dim=FF
        ),
        lambda b, ids: b({**_pad_text(ids), "segment_ids": _halves(ids)}),
        (_padded_ids(),),
    )


# ---------------------------------------------------------------- Flax linen and NNX, Equinox, Haiku


def linen_enc() -> Model:
    """Linen encoder: nn.SelfAttention with a padding mask from nn.make_attention_mask; symbolic ``s``."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    class Encoder(nn.Module):
        @nn.compact
        def __call__(self, ids):
            x = nn.Embed(VOCAB, D)(ids)
            x = x + self.param("pos", nn.initializers.normal(0.02), (128, D))[None, : ids.shape[1]]
            mask = nn.make_attention_mask(ids > 0, ids > 0)
            for _ in range(2):
                h = nn.LayerNorm()(x)
                x = x + nn.SelfAttention(num_heads=HEADS, deterministic=True)(h, mask=mask)
                h = nn.LayerNorm()(x)
                x = x + nn.Dense(D)(nn.gelu(nn.Dense(FF)(h)))
            x = nn.LayerNorm()(x)
            keep = (ids > 0)[..., None]
            return jnp.sum(x * keep, 1) / jnp.sum(keep, 1)  # mean over the real tokens

    ids = _padded_ids()
    params = Encoder().init(jax.random.PRNGKey(0), ids)
    return _sym(
        "linen_enc", "Flax linen", lambda x: Encoder().apply(params, x), (ids,), ((BATCH, "s"),), params
    )


def linen_vit() -> Model:
    """A small ViT in linen: conv patch embedding, class token, MultiHeadDotProductAttention, head."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    class ViT(nn.Module):
        @nn.compact
        def __call__(self, img):
            x = nn.Conv(D, (8, 8), strides=(8, 8), padding="VALID")(img)
            b, h, w, c = x.shape
            x = x.reshape(b, h * w, c)
            cls = self.param("cls", nn.initializers.zeros, (1, 1, D))
            x = jnp.concatenate([jnp.broadcast_to(cls, (b, 1, D)), x], 1)
            x = x + self.param("pos", nn.initializers.normal(0.02), (1, h * w + 1, D))
            for _ in range(2):
                y = nn.LayerNorm()(x)
                x = x + nn.MultiHeadDotProductAttention(num_heads=HEADS, deterministic=True)(y, y)
                y = nn.LayerNorm()(x)
                x = x + nn.Dense(D)(nn.gelu(nn.Dense(FF)(y), approximate=False))
            return nn.Dense(10)(nn.LayerNorm()(x)[:, 0])

    img = _image(False)
    params = ViT().init(jax.random.PRNGKey(0), img)
    return _model("linen_vit", "Flax linen", lambda x: ViT().apply(params, x), (img,), params)


def nnx_seq2seq() -> Model:
    """NNX encoder-decoder: padded encoder self-attention, causal decoder self-attention and cross
    attention with masks from nnx.make_attention_mask / nnx.make_causal_mask; symbolic ``s``, ``t``."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    class Enc(nnx.Module):
        def __init__(self, rngs):
            self.ln1, self.ln2 = nnx.LayerNorm(D, rngs=rngs), nnx.LayerNorm(D, rngs=rngs)
            self.attn = nnx.MultiHeadAttention(HEADS, D, decode=False, rngs=rngs)
            self.up, self.down = nnx.Linear(D, FF, rngs=rngs), nnx.Linear(FF, D, rngs=rngs)

        def __call__(self, x, mask):
            x = x + self.attn(self.ln1(x), mask=mask)
            return x + self.down(nnx.relu(self.up(self.ln2(x))))

    class Dec(nnx.Module):
        def __init__(self, rngs):
            self.ln1, self.ln2, self.ln3 = (nnx.LayerNorm(D, rngs=rngs) for _ in range(3))
            self.self_attn = nnx.MultiHeadAttention(HEADS, D, decode=False, rngs=rngs)
            self.cross = nnx.MultiHeadAttention(HEADS, D, decode=False, rngs=rngs)
            self.up, self.down = nnx.Linear(D, FF, rngs=rngs), nnx.Linear(FF, D, rngs=rngs)

        def __call__(self, y, mem, self_mask, cross_mask):
            y = y + self.self_attn(self.ln1(y), mask=self_mask)
            y = y + self.cross(self.ln2(y), mem, mask=cross_mask)
            return y + self.down(nnx.relu(self.up(self.ln3(y))))

    class Seq2Seq(nnx.Module):
        def __init__(self, rngs):
            self.embed = nnx.Embed(VOCAB, D, rngs=rngs)
            self.enc = nnx.List([Enc(rngs) for _ in range(2)])
            self.dec = nnx.List([Dec(rngs) for _ in range(2)])
            self.head = nnx.Linear(D, VOCAB, rngs=rngs)

        def __call__(self, src, tgt):
            x = self.embed(src)
            enc_mask = nnx.make_attention_mask(src > 0, src > 0)
            for layer in self.enc:
                x = layer(x, enc_mask)
            y = self.embed(tgt)
            self_mask = nnx.combine_masks(nnx.make_causal_mask(tgt), nnx.make_attention_mask(tgt > 0, tgt > 0))
            cross_mask = nnx.make_attention_mask(tgt > 0, src > 0)
            for layer in self.dec:
                y = layer(y, x, self_mask, cross_mask)
            return self.head(y)

    model = Seq2Seq(nnx.Rngs(0))
    graphdef, state = nnx.split(model)
    m = _model(
        "nnx_seq2seq",
        "Flax NNX",
        lambda s, t: nnx.merge(graphdef, state)(s, t),
        (_padded_ids(), _ids(1)[:, :16]),
        [jnp.asarray(v) for v in jax.tree_util.tree_leaves(state)],
    )
    return _symbolic(m, (BATCH, "s"), (BATCH, "t"))


def eqx_rope() -> Model:
    """Equinox: MultiheadAttention with rotary heads (eqx.nn.RotaryPositionalEmbedding via
    process_heads) and a padding mask, RMSNorm and SwiGLU, vmapped over the batch."""
    import equinox as eqx
    import jax

    k = jax.random.split(jax.random.PRNGKey(0), 8)
    embed = eqx.nn.Embedding(VOCAB, D, key=k[0])
    rope = eqx.nn.RotaryPositionalEmbedding(D // HEADS)

    def layer(key):
        a, b, c, d = jax.random.split(key, 4)
        return dict(
            attn=eqx.nn.MultiheadAttention(HEADS, D, key=a),
            n1=eqx.nn.RMSNorm(D),
            n2=eqx.nn.RMSNorm(D),
            gate=eqx.nn.Linear(D, FF, use_bias=False, key=b),
            up=eqx.nn.Linear(D, FF, use_bias=False, key=c),
            down=eqx.nn.Linear(FF, D, use_bias=False, key=d),
        )

    layers = [layer(k[1 + i]) for i in range(2)]
    norm = eqx.nn.RMSNorm(D)

    def process_heads(q, k_, v):
        q = jax.vmap(rope, in_axes=1, out_axes=1)(q)
        k_ = jax.vmap(rope, in_axes=1, out_axes=1)(k_)
        return q, k_, v

    def one(ids):
        x = jax.vmap(embed)(ids)
        valid = ids > 0
        mask = valid[:, None] & valid[None, :]
        for p in layers:
            h = jax.vmap(p["n1"])(x)
            x = x + p["attn"](h, h, h, mask=mask, process_heads=process_heads)
            h = jax.vmap(p["n2"])(x)
            x = x + jax.vmap(p["down"])(jax.nn.silu(jax.vmap(p["gate"])(h)) * jax.vmap(p["up"])(h))
        return jax.vmap(norm)(x)

    # Concrete specs: RotaryPositionalEmbedding keeps a process-wide table sized by the first call and
    # compares the sequence with it in Python, so a symbolic length needs a constraint (s <= 64).
    return _model(
        "eqx_rope", "Equinox", jax.vmap(one), (_padded_ids(),), eqx.filter((embed, layers, norm), eqx.is_array)
    )


def hk_padenc() -> Model:
    """Haiku encoder: hk.MultiHeadAttention with a padding mask, hk.LayerNorm, learned positions
    sliced to the sequence, CLS pooling with tanh; symbolic ``s``."""
    import haiku as hk
    import jax
    import jax.numpy as jnp

    def forward(ids):
        t = ids.shape[1]
        x = hk.Embed(VOCAB, D)(ids)
        x = x + hk.get_parameter("pos", (512, D), init=hk.initializers.TruncatedNormal(0.02))[:t]
        valid = ids > 0
        mask = (valid[:, None, :, None] & valid[:, None, None, :])
        for _ in range(2):
            a = hk.MultiHeadAttention(HEADS, D // HEADS, w_init=hk.initializers.VarianceScaling(1.0))(x, x, x, mask)
            x = hk.LayerNorm(-1, True, True)(x + a)  # post-LN, as BERT
            h = hk.Linear(D)(jax.nn.gelu(hk.Linear(FF)(x)))
            x = hk.LayerNorm(-1, True, True)(x + h)
        return jnp.tanh(hk.Linear(D)(x[:, 0]))

    return _symbolic(_haiku("hk_padenc", forward, (_padded_ids(),)), (BATCH, "s"))


def _kh_lm(name: str, backbone: str, **config: Any) -> Model:
    """A keras-hub decoder backbone of two layers, called as its users call it (token ids, padding mask)."""
    def make(kh: Any) -> Any:
        return getattr(kh.models, backbone)(vocabulary_size=VOCAB, num_layers=2, **config)

    return _keras_hub(name, make, lambda b, ids: b(_text(ids)), (_ids(),))


def kh_gptneox() -> Model:
    """GPT-NeoX: q, k and v from one projection laid out per head (``[b, t, h, 3 * dh]``), a rotary embedding
    of a quarter of each head, parallel attention and MLP."""
    return _kh_lm("kh_gptneox", "GPTNeoXBackbone", num_heads=HEADS, hidden_dim=D, intermediate_dim=FF,
                  max_sequence_length=128)


def kh_qwen3() -> Model:
    """Qwen3: grouped-query attention with RMS norms of q and k per head."""
    return _kh_lm("kh_qwen3", "Qwen3Backbone", num_query_heads=HEADS, num_key_value_heads=2, head_dim=32,
                  hidden_dim=D, intermediate_dim=FF)


def kh_gemma3() -> Model:
    """Gemma 3 (text only): q/k norms, local and global layers, post norms."""
    return _kh_lm("kh_gemma3", "Gemma3Backbone", image_size=16, num_query_heads=HEADS, num_key_value_heads=2,
                  hidden_dim=D, intermediate_dim=FF, head_dim=32)


def kh_swin() -> Model:
    """Swin Transformer: shifted-window attention over 64x64 images (window 4, two stages)."""
    return _keras_hub(
        "kh_swin",
        lambda kh: kh.models.SwinTransformerBackbone(
            image_shape=(IMAGE, IMAGE, 3), patch_size=4, embed_dim=32, depths=[2, 2], num_heads=[2, 4],
            window_size=4,
        ),
        lambda b, x: b(x),
        (_image(False),),
    )


MODELS: dict[str, Callable[[], Model]] = {
    "hf_whisper": hf_whisper,
    "hf_longt5": hf_longt5,
    "hf_mt5": hf_mt5,
    "hf_pegasus": hf_pegasus,
    "hf_marian": hf_marian,
    "hf_clip": hf_clip,
    "hf_robpre": hf_robpre,
    "kh_deberta": kh_deberta,
    "kh_gemma2": kh_gemma2,
    "kh_phi3": kh_phi3,
    "kh_falcon": kh_falcon,
    "kh_fnet": kh_fnet,
    "kh_mixtral": kh_mixtral,
    "kh_t5": kh_t5,
    "kh_xlnet": kh_xlnet,
    "linen_enc": linen_enc,
    "linen_vit": linen_vit,
    "nnx_seq2seq": nnx_seq2seq,
    "eqx_rope": eqx_rope,
    "hk_padenc": hk_padenc,
    "kh_gptneox": kh_gptneox,
    "kh_qwen3": kh_qwen3,
    "kh_gemma3": kh_gemma3,
    "kh_swin": kh_swin,
}
SYMBOLIC = ("hf_mt5", "hf_robpre", "kh_deberta", "linen_enc", "nnx_seq2seq", "hk_padenc")
