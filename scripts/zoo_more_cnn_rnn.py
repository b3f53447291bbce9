"""A second zoo battery: convolutional and recurrent models of kinds scripts/zoo_models.py lacks.

Each builder returns a ``bench_models.Model`` built as a user of its library would build it: the
library's own modules in small configurations (batch 2-8, sequence 64, 32x32 or 64x64 images), seeded
random weights closed over by the function, numpy inputs. Batch-norm statistics are made non-trivial
(keras: random moving statistics; Flax linen / Haiku: one training-mode pass updates them), as in a
trained model, so that inference-mode normalisation is not the identity.

``MODELS`` maps name -> builder; ``zoo_models.MORE`` lists them for ``scripts/bench_zoo.py --more``.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np
from bench_models import Model
from zoo_models import BATCH, IMAGE, SEQ, VOCAB, _haiku, _ids, _image, _keras_hub, _model

os.environ.setdefault("KERAS_BACKEND", "jax")


def _feats(batch: int = BATCH, seq: int = SEQ, dim: int = 32, time_major: bool = False, seed: int = 7):
    shape = (seq, batch, dim) if time_major else (batch, seq, dim)
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------- keras-hub vision backbones (Keras 3, JAX)


def _bn_stats(model: Any) -> Any:
    """Give every BatchNormalization layer of a Keras model random moving statistics (a trained model's)."""
    import keras

    rng = np.random.default_rng(11)
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, keras.layers.BatchNormalization):
            shape = tuple(layer.moving_mean.shape)
            layer.moving_mean.assign((rng.standard_normal(shape) * 0.1).astype(np.float32))
            layer.moving_variance.assign(rng.uniform(0.5, 1.5, shape).astype(np.float32))
    return model


def kh_effnet() -> Model:
    """EfficientNet-B0 (MBConv v1 blocks with squeeze-and-excite, swish), timm's B0 configuration."""
    b0 = dict(
        stackwise_kernel_sizes=[3, 3, 5, 3, 5, 5, 3],
        stackwise_num_repeats=[1, 2, 2, 3, 3, 4, 1],
        stackwise_input_filters=[32, 16, 24, 40, 80, 112, 192],
        stackwise_output_filters=[16, 24, 40, 80, 112, 192, 320],
        stackwise_expansion_ratios=[1, 6, 6, 6, 6, 6, 6],
        stackwise_strides=[1, 2, 2, 2, 1, 2, 1],
        stackwise_block_types=["v1"] * 7,
        stackwise_width_coefficients=[1.0] * 7,
        stackwise_depth_coefficients=[1.0] * 7,
        stackwise_squeeze_and_excite_ratios=[0.25] * 7,
        min_depth=None,
        include_stem_padding=True,
        use_depth_divisor_as_min_depth=True,
        cap_round_filter_decrease=True,
        dropout=0,
        input_shape=(IMAGE, IMAGE, 3),
    )
    return _keras_hub(
        "kh_effnet",
        lambda kh: _bn_stats(kh.models.EfficientNetBackbone(**b0)),
        lambda b, x: b(x),
        (_image(False),),
    )


def kh_mobilenet() -> Model:
    """MobileNetV3-Small 0.5 (timm's mobilenetv3_small_050 configuration: hard-swish, SE, depthwise)."""
    cfg = dict(
        stackwise_num_blocks=[2, 3, 2, 3],
        stackwise_expansion=[[40, 56], [64, 144, 144], [72, 72], [144, 288, 288]],
        stackwise_num_filters=[[16, 16], [24, 24, 24], [24, 24], [48, 48, 48]],
        stackwise_kernel_size=[[3, 3], [5, 5, 5], [5, 5], [5, 5, 5]],
        stackwise_num_strides=[[2, 1], [2, 1, 1], [1, 1], [2, 1, 1]],
        stackwise_se_ratio=[[None, None], [0.25] * 3, [0.25] * 2, [0.25] * 3],
        stackwise_activation=[["relu"] * 2, ["hard_swish"] * 3, ["hard_swish"] * 2, ["hard_swish"] * 3],
        stackwise_padding=[[1, 1], [2, 2, 2], [2, 2], [2, 2, 2]],
        output_num_filters=1024,
        input_num_filters=16,
        depthwise_filters=8,
        depthwise_stride=2,
        depthwise_residual=False,
        squeeze_and_excite=0.5,
        last_layer_filter=288,
        input_activation="hard_swish",
        output_activation="hard_swish",
        image_shape=(IMAGE, IMAGE, 3),
    )
    return _keras_hub(
        "kh_mobilenet",
        lambda kh: _bn_stats(kh.models.MobileNetBackbone(**cfg)),
        lambda b, x: b(x),
        (_image(False),),
    )


def kh_densenet() -> Model:
    """A small DenseNet (dense blocks of concatenations, transitions with average pooling)."""
    return _keras_hub(
        "kh_densenet",
        lambda kh: _bn_stats(
            kh.models.DenseNetBackbone(
                stackwise_num_repeats=[2, 4, 4, 2], growth_rate=16, image_shape=(IMAGE, IMAGE, 3)
            )
        ),
        lambda b, x: b(x),
        (_image(False),),
    )


def kh_cspdarknet() -> Model:
    """CSPDarkNet-53's layout (csp stages of dark blocks, leaky ReLU) with fewer blocks and filters."""
    cfg = dict(
        stem_filters=16,
        stem_kernel_size=3,
        stem_strides=1,
        stackwise_depth=[1, 1, 2, 2, 1],
        stackwise_num_filters=[32, 64, 128, 256, 512],
        bottle_ratio=(0.5,) + (1.0,),
        block_ratio=(1.0,) + (0.5,),
        expand_ratio=(2.0,) + (1.0,),
        stem_padding="same",
        stem_pooling=None,
        stage_type="csp",
        groups=1,
        block_type="dark_block",
        down_growth=True,
        stackwise_strides=[2, 2, 2, 2, 2],
        avg_down=False,
        cross_linear=False,
        image_shape=(IMAGE, IMAGE, 3),
    )
    return _keras_hub(
        "kh_cspdarknet",
        lambda kh: _bn_stats(kh.models.CSPNetBackbone(**cfg)),
        lambda b, x: b(x),
        (_image(False),),
    )


def kh_mit() -> Model:
    """MiT-B0, SegFormer's encoder (overlapping conv patch embeddings, spatial-reduction attention)."""
    return _keras_hub(
        "kh_mit",
        lambda kh: kh.models.MiTBackbone(
            layerwise_depths=[2, 2, 2, 2],
            num_layers=4,
            layerwise_num_heads=[1, 2, 5, 8],
            layerwise_sr_ratios=[8, 4, 2, 1],
            max_drop_path_rate=0.1,
            layerwise_patch_sizes=[7, 3, 3, 3],
            layerwise_strides=[4, 2, 2, 2],
            hidden_dims=[32, 64, 160, 256],
            image_shape=(IMAGE, IMAGE, 3),
        ),
        lambda b, x: b(x),
        (_image(False),),
    )


def kh_xception() -> Model:
    """Xception (separable convolutions, residual max-pooled blocks), keras-hub's example configuration."""
    return _keras_hub(
        "kh_xception",
        lambda kh: _bn_stats(
            kh.models.XceptionBackbone(
                stackwise_conv_filters=[[32, 64], [64, 128], [256, 256]],
                stackwise_pooling=[True, True, False],
                image_shape=(IMAGE, IMAGE, 3),
            )
        ),
        lambda b, x: b(x),
        (_image(False),),
    )


# ---------------------------------------------------------------- Haiku nets


def _haiku_bn(name: str, forward: Callable[..., Any], inputs: tuple[np.ndarray, ...]) -> Model:
    """A Haiku model with batch norm, run in inference mode after one training step updated its averages."""
    import haiku as hk
    import jax

    f = hk.transform_with_state(forward)
    params, state = f.init(jax.random.PRNGKey(0), *inputs, is_training=True)
    _, state = f.apply(params, state, None, *inputs, is_training=True)
    return _model(
        name,
        "Haiku",
        lambda *a: f.apply(params, state, None, *a, is_training=False)[0],
        inputs,
        (params, state),
    )


def hk_mobilenet() -> Model:
    """hk.nets.MobileNetV1 at width 0.25 (depthwise-separable convs, batch norm), 64x64 images."""
    import haiku as hk

    channels = tuple(c // 4 for c in (64, 128, 128, 256, 256, 512, 512, 512, 512, 512, 512, 1024, 1024))
    return _haiku_bn(
        "hk_mobilenet",
        lambda x, is_training: hk.nets.MobileNetV1(channels=channels, num_classes=10)(x, is_training),
        (_image(False),),
    )


def hk_resnet50() -> Model:
    """hk.nets.ResNet50 (bottleneck blocks) in inference mode on CIFAR-sized 32x32 images."""
    import haiku as hk

    logits = {"w_init": hk.initializers.VarianceScaling(1.0), "name": "logits"}
    return _haiku_bn(
        "hk_resnet50",
        lambda x, is_training: hk.nets.ResNet50(10, logits_config=logits)(x, is_training=is_training),
        (_image(False, 32),),
    )


def hk_gru() -> Model:
    """hk.GRU unrolled with hk.dynamic_unroll (lax.scan), time-major, then a linear head per step."""
    import haiku as hk

    def forward(xs):
        core = hk.GRU(128)
        out, _ = hk.dynamic_unroll(core, xs, core.initial_state(xs.shape[1]))
        return hk.BatchApply(hk.Linear(10))(out)

    return _haiku("hk_gru", forward, (_feats(batch=4, time_major=True),))


def hk_deeprnn() -> Model:
    """hk.DeepRNN of two LSTMs (with a ReLU between) and hk.static_unroll: a Python-unrolled loop."""
    import haiku as hk
    import jax

    def forward(xs):
        core = hk.DeepRNN([hk.LSTM(64), jax.nn.relu, hk.LSTM(64)])
        out, _ = hk.static_unroll(core, xs, core.initial_state(xs.shape[1]))
        return hk.Linear(10)(out[-1])

    return _haiku("hk_deeprnn", forward, (_feats(time_major=True),))


def hk_vanilla() -> Model:
    """hk.VanillaRNN (ReLU) under hk.dynamic_unroll, the last step's output to a linear head."""
    import haiku as hk

    def forward(xs):
        core = hk.VanillaRNN(64)
        out, _ = hk.dynamic_unroll(core, xs, core.initial_state(xs.shape[1]))
        return hk.Linear(2)(out[-1])

    return _haiku("hk_vanilla", forward, (_feats(time_major=True),))


def hk_convlstm() -> Model:
    """hk.Conv2DLSTM over 8 frames of 16x16x3 under hk.dynamic_unroll, the last step's output."""
    import haiku as hk

    def forward(xs):
        core = hk.Conv2DLSTM((16, 16), 8, 3)
        out, _ = hk.dynamic_unroll(core, xs, core.initial_state(xs.shape[1]))
        return out[-1]

    frames = np.random.default_rng(11).standard_normal((8, BATCH, 16, 16, 3)).astype(np.float32)
    return _haiku("hk_convlstm", forward, (frames,))


def gnn_segment() -> Model:
    """A two-layer graph convolution in plain JAX, as jraph writes it: messages gathered by sender,
    ``jax.ops.segment_sum`` over receivers (1,000 nodes, 4,000 edges), degree-normalised, ReLU, mean readout."""
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(13)
    nodes, edges, width = 1000, 4000, 64
    w1, w2, out = ((rng.standard_normal(s) / 8).astype(np.float32) for s in ((width, width), (width, width), (width, 4)))

    def fn(h, senders, receivers):
        deg = jax.ops.segment_sum(jnp.ones(senders.shape, h.dtype), receivers, nodes)
        for w in (w1, w2):
            agg = jax.ops.segment_sum(h[senders] @ w, receivers, nodes)
            h = jax.nn.relu(agg / jnp.maximum(deg, 1.0)[:, None] + h)
        return jnp.mean(h, 0) @ out

    inputs = (rng.standard_normal((nodes, width)).astype(np.float32),
              rng.integers(0, nodes, edges).astype(np.int32), rng.integers(0, nodes, edges).astype(np.int32))
    return _model("gnn_segment", "JAX", fn, inputs, (w1, w2, out))


# ---------------------------------------------------------------- Flax linen


def _linen_bn(name: str, module: Any, inputs: tuple[np.ndarray, ...]) -> Model:
    """A linen module with BatchNorm: init, one training step (updates batch_stats), then inference."""
    import jax

    variables = module.init(jax.random.PRNGKey(0), *inputs, train=False)
    _, upd = module.apply(variables, *inputs, train=True, mutable=["batch_stats"])
    variables = {**variables, **upd}
    return _model(name, "Flax linen", lambda *a: module.apply(variables, *a, train=False), inputs, variables)


def linen_sepcnn() -> Model:
    """A MobileNet-style CNN: depthwise convs (feature_group_count), dilations, BatchNorm, SAME max-pools."""
    import flax.linen as nn
    import jax.numpy as jnp

    class SepCNN(nn.Module):
        @nn.compact
        def __call__(self, x, train: bool):
            bn = lambda: nn.BatchNorm(use_running_average=not train, momentum=0.5)  # noqa: E731
            x = nn.relu6(bn()(nn.Conv(32, (3, 3), strides=(2, 2), use_bias=False)(x)))
            for ch, dil in ((64, 1), (128, 2), (128, 3)):
                c = x.shape[-1]
                x = nn.Conv(c, (3, 3), feature_group_count=c, kernel_dilation=dil, use_bias=False)(x)
                x = nn.relu6(bn()(x))
                x = nn.relu6(bn()(nn.Conv(ch, (1, 1), use_bias=False)(x)))
                x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
            return nn.Dense(10)(jnp.mean(x, axis=(1, 2)))

    return _linen_bn("linen_sepcnn", SepCNN(), (_image(False),))


def linen_unet() -> Model:
    """A small U-Net: GroupNorm+swish conv blocks, ConvTranspose and jax.image.resize upsampling, skips."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    class Block(nn.Module):
        ch: int

        @nn.compact
        def __call__(self, x):
            for _ in range(2):
                x = nn.swish(nn.GroupNorm(num_groups=8)(nn.Conv(self.ch, (3, 3))(x)))
            return x

    class UNet(nn.Module):
        @nn.compact
        def __call__(self, x):
            s1 = Block(16)(x)  # 64x64
            s2 = Block(32)(nn.max_pool(s1, (2, 2), (2, 2)))  # 32x32
            mid = Block(64)(nn.avg_pool(s2, (2, 2), (2, 2)))  # 16x16
            u2 = nn.ConvTranspose(32, (2, 2), strides=(2, 2))(mid)
            u2 = Block(32)(jnp.concatenate([u2, s2], axis=-1))
            b, h, w, c = u2.shape
            u1 = jax.image.resize(u2, (b, 2 * h, 2 * w, c), method="bilinear")
            u1 = Block(16)(jnp.concatenate([u1, s1], axis=-1))
            return nn.Conv(2, (1, 1))(u1)

    x = _image(False)
    params = UNet().init(jax.random.PRNGKey(0), x)
    return _model("linen_unet", "Flax linen", lambda x: UNet().apply(params, x), (x,), params)


def linen_gru() -> Model:
    """A GRU tagger: nn.Embed, nn.RNN(nn.GRUCell), nn.Dense per step."""
    import flax.linen as nn
    import jax

    class Tagger(nn.Module):
        @nn.compact
        def __call__(self, ids):
            x = nn.Embed(VOCAB, 64)(ids)
            x = nn.RNN(nn.GRUCell(128))(x)
            return nn.Dense(10)(x)

    ids = _ids()
    params = Tagger().init(jax.random.PRNGKey(0), ids)
    return _model("linen_gru", "Flax linen", lambda x: Tagger().apply(params, x), (ids,), params)


def linen_convlstm() -> Model:
    """nn.RNN(nn.ConvLSTMCell) over 8 frames of 16x16x3, every step's output."""
    import flax.linen as nn
    import jax

    frames = np.random.default_rng(12).standard_normal((BATCH, 8, 16, 16, 3)).astype(np.float32)
    rnn = nn.RNN(nn.ConvLSTMCell(8, (3, 3)))
    params = rnn.init(jax.random.PRNGKey(0), frames)
    return _model("linen_convlstm", "Flax linen", lambda x: rnn.apply(params, x), (frames,), params)


def linen_bilstm() -> Model:
    """nn.Bidirectional of two nn.RNN(nn.LSTMCell) over a padded batch with per-row seq_lengths."""
    import flax.linen as nn
    import jax

    class BiLSTM(nn.Module):
        @nn.compact
        def __call__(self, x, lengths):
            bi = nn.Bidirectional(nn.RNN(nn.LSTMCell(64)), nn.RNN(nn.LSTMCell(64)))
            return nn.Dense(10)(bi(x, seq_lengths=lengths))

    x = _feats()
    lengths = np.array([SEQ, SEQ - 24], np.int32)
    params = BiLSTM().init(jax.random.PRNGKey(0), x, lengths)
    return _model("linen_bilstm", "Flax linen", lambda x, n: BiLSTM().apply(params, x, n), (x, lengths), params)


def linen_stacked() -> Model:
    """A 2-layer stacked LSTM (nn.LSTMCell in nn.RNN), classifying from the last layer's final carry."""
    import flax.linen as nn
    import jax

    class Stacked(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.RNN(nn.LSTMCell(128))(x)
            (c, h), _ = nn.RNN(nn.LSTMCell(128), return_carry=True)(x)
            return nn.Dense(10)(h)

    x = _feats(batch=8)
    params = Stacked().init(jax.random.PRNGKey(0), x)
    return _model("linen_stacked", "Flax linen", lambda x: Stacked().apply(params, x), (x,), params)


def linen_scan() -> Model:
    """The classic lifted-scan LSTM: nn.scan over a module holding nn.LSTMCell (params broadcast)."""
    import functools

    import flax.linen as nn
    import jax

    class ScanLSTM(nn.Module):
        @functools.partial(
            nn.scan, variable_broadcast="params", split_rngs={"params": False}, in_axes=1, out_axes=1
        )
        @nn.compact
        def __call__(self, carry, x):
            return nn.LSTMCell(128)(carry, x)

    class Encoder(nn.Module):
        @nn.compact
        def __call__(self, x):
            carry = nn.LSTMCell(128, parent=None).initialize_carry(jax.random.PRNGKey(0), x[:, 0].shape)
            carry, ys = ScanLSTM()(carry, x)
            return nn.Dense(10)(ys), carry[1]

    x = _feats(batch=4, dim=64)
    params = Encoder().init(jax.random.PRNGKey(0), x)
    return _model("linen_scan", "Flax linen", lambda x: Encoder().apply(params, x), (x,), params)


# ---------------------------------------------------------------- Flax NNX


def _nnx(name: str, model: Any, inputs: tuple[np.ndarray, ...]) -> Model:
    import jax
    import jax.numpy as jnp
    from flax import nnx

    graphdef, state = nnx.split(model)
    return _model(
        name,
        "Flax NNX",
        lambda *a: nnx.merge(graphdef, state, copy=True)(*a),  # copy: nnx.RNN bumps its carry RngCount
        inputs,
        [jnp.asarray(v) for v in jax.tree_util.tree_leaves(nnx.state(model, nnx.Param))],
    )


def nnx_lstm() -> Model:
    """nnx.RNN(nnx.LSTMCell) over embeddings, nnx.Linear per step."""
    from flax import nnx

    class Tagger(nnx.Module):
        def __init__(self, rngs: nnx.Rngs):
            self.embed = nnx.Embed(VOCAB, 64, rngs=rngs)
            self.rnn = nnx.RNN(nnx.LSTMCell(64, 128, rngs=rngs))
            self.head = nnx.Linear(128, 10, rngs=rngs)

        def __call__(self, ids):
            return self.head(self.rnn(self.embed(ids)))

    return _nnx("nnx_lstm", Tagger(nnx.Rngs(0)), (_ids(),))


def nnx_gru() -> Model:
    """Two nnx.RNN(nnx.GRUCell) layers, the second reversed (keep_order), unrolled by 4."""
    from flax import nnx

    class Enc(nnx.Module):
        def __init__(self, rngs: nnx.Rngs):
            self.fwd = nnx.RNN(nnx.GRUCell(32, 128, rngs=rngs), unroll=4)
            self.bwd = nnx.RNN(nnx.GRUCell(128, 128, rngs=rngs), reverse=True, keep_order=True, unroll=4)
            self.head = nnx.Linear(128, 10, rngs=rngs)

        def __call__(self, x):
            return self.head(self.bwd(self.fwd(x)))

    return _nnx("nnx_gru", Enc(nnx.Rngs(0)), (_feats(batch=4),))


# ---------------------------------------------------------------- Equinox


def eqx_groupconv() -> Model:
    """A ResNeXt-style Equinox CNN: grouped eqx.nn.Conv2d, GroupNorm, pooling, vmapped over the batch."""
    import equinox as eqx
    import jax

    k = jax.random.split(jax.random.PRNGKey(0), 6)

    class Net(eqx.Module):
        stem: eqx.nn.Conv2d
        convs: list
        norms: list
        pool: eqx.nn.MaxPool2d
        gap: eqx.nn.AdaptiveAvgPool2d
        head: eqx.nn.Linear

        def __init__(self):
            self.stem = eqx.nn.Conv2d(3, 32, 3, stride=2, padding=1, key=k[0])
            self.convs = [
                eqx.nn.Conv2d(32, 64, 3, padding=1, groups=8, key=k[1]),
                eqx.nn.Conv2d(64, 64, 1, key=k[2]),
                eqx.nn.Conv2d(64, 128, 3, padding=1, groups=16, key=k[3]),
                eqx.nn.Conv2d(128, 128, 1, key=k[4]),
            ]
            self.norms = [eqx.nn.GroupNorm(8, c) for c in (64, 64, 128, 128)]
            self.pool = eqx.nn.MaxPool2d(2, 2)
            self.gap = eqx.nn.AdaptiveAvgPool2d(1)
            self.head = eqx.nn.Linear(128, 10, key=k[5])

        def __call__(self, x):
            x = jax.nn.relu(self.stem(x))
            for i, (conv, norm) in enumerate(zip(self.convs, self.norms)):
                x = jax.nn.gelu(norm(conv(x)))
                if i % 2 == 1:
                    x = self.pool(x)
            return self.head(self.gap(x).reshape(-1))

    net = Net()
    return _model("eqx_groupconv", "Equinox", jax.vmap(net), (_image(True),), eqx.filter(net, eqx.is_array))


def eqx_rnn() -> Model:
    """eqx.nn.GRUCell then eqx.nn.LSTMCell, each driven by lax.scan, vmapped over the batch."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    k = jax.random.split(jax.random.PRNGKey(0), 3)
    gru = eqx.nn.GRUCell(32, 128, key=k[0])
    lstm = eqx.nn.LSTMCell(128, 128, key=k[1])
    head = eqx.nn.Linear(128, 10, key=k[2])

    def one(xs):
        def gstep(h, x):
            h = gru(x, h)
            return h, h

        _, hs = jax.lax.scan(gstep, jnp.zeros(128), xs)

        def lstep(hc, x):
            hc = lstm(x, hc)
            return hc, hc[0]

        _, ys = jax.lax.scan(lstep, (jnp.zeros(128), jnp.zeros(128)), hs)
        return jax.vmap(head)(ys)

    return _model(
        "eqx_rnn", "Equinox", jax.vmap(one), (_feats(batch=4),), eqx.filter((gru, lstm, head), eqx.is_array)
    )


# ---------------------------------------------------------------- plain Keras 3 (JAX backend)


def _keras(name: str, model: Any, inputs: tuple[np.ndarray, ...]) -> Model:
    import keras

    if keras.backend.backend() != "jax":
        raise ImportError(f"keras runs on {keras.backend.backend()}, not jax (set KERAS_BACKEND=jax)")
    return _model(
        name, "Keras", lambda *a: model(*a, training=False), inputs, [v.value for v in model.weights]
    )


def keras_cnn() -> Model:
    """keras.Sequential of Conv2D, DepthwiseConv2D, SeparableConv2D (dilated), BatchNormalization, pools."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((IMAGE, IMAGE, 3)),
            layers.Conv2D(32, 3, strides=2, padding="same", use_bias=False),
            layers.BatchNormalization(),
            layers.ReLU(),
            layers.DepthwiseConv2D(3, padding="same", use_bias=False),
            layers.BatchNormalization(),
            layers.ReLU(max_value=6.0),
            layers.Conv2D(64, 1),
            layers.MaxPooling2D(3, strides=2, padding="same"),
            layers.SeparableConv2D(128, 3, padding="same", activation="relu"),
            layers.BatchNormalization(),
            layers.SeparableConv2D(128, 3, dilation_rate=2, padding="same", activation="swish"),
            layers.AveragePooling2D(2),
            layers.Conv2D(128, 3, padding="valid", activation="relu"),
            layers.GlobalAveragePooling2D(),
            layers.Dropout(0.2),
            layers.Dense(10, activation="softmax"),
        ]
    )
    return _keras("keras_cnn", _bn_stats(model), (_image(False),))


def keras_upsample() -> Model:
    """A Keras decoder: strided Conv2D, BatchNormalization, swish, Conv2DTranspose, UpSampling2D, 1x1 sigmoid."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((IMAGE, IMAGE, 3)),
            layers.Conv2D(16, 3, strides=2, padding="same"),
            layers.BatchNormalization(),
            layers.Activation("swish"),
            layers.Conv2DTranspose(8, 3, strides=2, padding="same"),
            layers.UpSampling2D(),
            layers.Conv2D(1, 1, activation="sigmoid"),
        ]
    )
    return _keras("keras_upsample", _bn_stats(model), (_image(False),))


def keras_rnn() -> Model:
    """keras.Sequential: Embedding, Bidirectional(LSTM) and GRU with return_sequences, Dense per step."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((SEQ,), dtype="int32"),
            layers.Embedding(VOCAB, 64),
            layers.Bidirectional(layers.LSTM(64, return_sequences=True)),
            layers.GRU(64, return_sequences=True),
            layers.Dense(10),
        ]
    )
    return _keras("keras_rnn", model, (_ids(),))


def keras_stacked() -> Model:
    """keras.Sequential: Embedding, SimpleRNN with return_sequences, GRU with return_sequences, GRU, Dense."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((SEQ,), dtype="int32"),
            layers.Embedding(VOCAB, 64),
            layers.SimpleRNN(64, return_sequences=True),
            layers.GRU(64, return_sequences=True),
            layers.GRU(64),
            layers.Dense(2),
        ]
    )
    return _keras("keras_stacked", model, (_ids(),))


MODELS: dict[str, Callable[[], Model]] = {
    f.__name__: f
    for f in (
        kh_effnet,
        kh_mobilenet,
        kh_densenet,
        kh_cspdarknet,
        kh_mit,
        kh_xception,
        hk_mobilenet,
        hk_resnet50,
        linen_sepcnn,
        linen_unet,
        eqx_groupconv,
        keras_cnn,
        keras_upsample,
        linen_gru,
        linen_bilstm,
        linen_stacked,
        linen_scan,
        nnx_lstm,
        nnx_gru,
        hk_gru,
        hk_deeprnn,
        hk_vanilla,
        hk_convlstm,
        linen_convlstm,
        gnn_segment,
        eqx_rnn,
        keras_rnn,
        keras_stacked,
    )
}
