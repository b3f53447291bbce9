"""A third battery for scripts/bench_zoo.py: models called as they are served.

The first two batteries call a text model with its token ids only (keras-hub with a padding mask of ones
made inside the function, Hugging Face with none). A served model takes its mask as an input, so the
attention cannot know which places are masked until it runs:

- Hugging Face Flax encoders and decoders called with ``attention_mask`` (``*_mask``);
- keras-hub backbones with ``padding_mask`` an input (``khp_*``);
- keras-hub backbones the other batteries lack (``khs_*``), called with token ids and a mask of ones.

The second row of every mask pads its last 16 places. Small configurations as in the other batteries
(two layers, width 128, batch 2, sequence 64). ``MODELS`` maps name -> builder; ``zoo_models.SERVED``
lists them for ``scripts/bench_zoo.py --served``.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np
from bench_models import Model
from zoo_models import IMAGE, SEQ, VOCAB, _hf_configs, _ids, _image, _keras_hub, _model, _text

D, HEADS, FF = 128, 4, 256
PADDED = 16  # the second row's last places are padding


def _mask(ids: np.ndarray) -> np.ndarray:
    mask = np.ones_like(ids)
    mask[1, SEQ - PADDED:] = 0
    return mask


# ---------------------------------------------------------------- Hugging Face Flax with attention_mask


def _hf_masked(name: str) -> Model:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import transformers as T

    cls, config, inputs = _hf_configs(T)[name]
    m = cls(config, seed=0)
    ids = inputs[0]
    return _model(f"{name}_mask", "HF Flax", lambda x, a: m(x, attention_mask=a).last_hidden_state,
                  (ids, _mask(ids)), m.params)


HF_MASKED = ("bert", "gpt2", "llama", "mistral", "bart", "distilbert", "opt", "xglm", "roberta", "gemma")


# ---------------------------------------------------------------- keras-hub: padding_mask an input, more backbones


def _kh_text(name: str, backbone: str, vocab: str = "vocabulary_size", segments: bool = False,
             padded: bool = False, **config: Any) -> Model:
    """A keras-hub text backbone called with token ids and, ``padded``, its padding mask as a second input (else
    a mask of ones made inside); segment ids of zeros where it takes them."""
    def make(kh: Any) -> Any:
        return getattr(kh.models, backbone)(**{vocab: VOCAB}, num_layers=2, **config)

    def call(b: Any, ids: Any, *mask: Any) -> Any:
        inputs = {"token_ids": ids, "padding_mask": mask[0]} if mask else _text(ids)
        return b({**inputs, "segment_ids": ids * 0} if segments else inputs)

    ids = _ids()
    return _keras_hub(name, make, call, (ids, _mask(ids)) if padded else (ids,))


def _kh_image(name: str, backbone: str, **config: Any) -> Model:
    return _keras_hub(name, lambda kh: getattr(kh.models, backbone)(image_shape=(IMAGE, IMAGE, 3), **config),
                      lambda b, x: b(x), (_image(False),))


_MHA = dict(num_heads=HEADS, hidden_dim=D, intermediate_dim=FF)
_GQA = dict(num_query_heads=HEADS, num_key_value_heads=2, hidden_dim=D, intermediate_dim=FF)

MODELS: dict[str, Callable[[], Model]] = {
    **{f"{n}_mask": (lambda n=n: _hf_masked(n)) for n in HF_MASKED},
    "khp_bert": lambda: _kh_text("khp_bert", "BertBackbone", segments=True, padded=True, **_MHA,
                                 max_sequence_length=128),
    "khp_gpt2": lambda: _kh_text("khp_gpt2", "GPT2Backbone", padded=True, **_MHA, max_sequence_length=128),
    "khp_llama": lambda: _kh_text("khp_llama", "LlamaBackbone", padded=True, **_GQA),
    "khp_gemma": lambda: _kh_text("khp_gemma", "GemmaBackbone", padded=True, num_query_heads=HEADS,
                                  num_key_value_heads=1, hidden_dim=D, intermediate_dim=FF, head_dim=32),
    "khs_distilbert": lambda: _kh_text("khs_distilbert", "DistilBertBackbone", **_MHA, max_sequence_length=128),
    "khs_roberta": lambda: _kh_text("khs_roberta", "RobertaBackbone", **_MHA, max_sequence_length=128),
    "khs_electra": lambda: _kh_text("khs_electra", "ElectraBackbone", "vocab_size", True, **_MHA, embedding_dim=D,
                                    max_sequence_length=128),
    "khs_albert": lambda: _kh_text("khs_albert", "AlbertBackbone", segments=True, **_MHA, embedding_dim=64,
                                   max_sequence_length=128),
    "khs_opt": lambda: _kh_text("khs_opt", "OPTBackbone", **_MHA, max_sequence_length=128),
    "khs_bloom": lambda: _kh_text("khs_bloom", "BloomBackbone", **_MHA),
    "khs_mistral": lambda: _kh_text("khs_mistral", "MistralBackbone", **_GQA),
    "khs_qwen2": lambda: _kh_text("khs_qwen2", "Qwen2Backbone", **_GQA),
    "khs_llama3": lambda: _kh_text("khs_llama3", "Llama3Backbone", **_GQA),
    "khs_vit": lambda: _kh_image("khs_vit", "ViTBackbone", patch_size=8, num_layers=2, num_heads=HEADS, hidden_dim=D,
                                 mlp_dim=FF),
    "khs_vgg": lambda: _kh_image("khs_vgg", "VGGBackbone", stackwise_num_repeats=[2, 2, 3],
                                 stackwise_num_filters=[16, 32, 64]),
    "khs_deit": lambda: _kh_image("khs_deit", "DeiTBackbone", patch_size=8, num_layers=2, num_heads=HEADS,
                                  hidden_dim=D, intermediate_dim=FF),
    # keras' attention with its max and sum in layouts that differ by an axis of size 1 (the softmax rule's
    # moved-axes form)
    "khs_siglip": lambda: _kh_image("khs_siglip", "SigLIPVisionEncoder", patch_size=8, num_layers=2, num_heads=HEADS,
                                    hidden_dim=D, intermediate_dim=FF),
    # a recurrence written as a fori_loop over the sequence axis (reads and writes one step's row by index)
    "khs_rwkv7": lambda: _kh_text("khs_rwkv7", "RWKV7Backbone", hidden_size=D, head_size=32, intermediate_dim=FF),
}
