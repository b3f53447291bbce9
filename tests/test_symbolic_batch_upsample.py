"""Nearest upsampling by whole factors with a symbolic batch (``f32[b, 16, 16, 3]``): the graph of the static
export (``f32[2, 16, 16, 3]``), one Resize in NCHW between the convolutions. The repeat's shape ops carry
the batch as a leading symbolic size and ``layout`` leaves the NHWC Transpose on the first repeat's unit
axis; ``nearest_resize`` reads the run from the Unsqueeze to the NCHW Transpose as the repeat of the NCHW
tensor. Values only move: the symbolic model at batches 1 and 3 (NaN, infinities, -0.0) against jax.jit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keras_support import jax_keras
from lowering_check import assert_same_bits, assert_same_floats, convert_and_run, op_counts, with_edge_values

_W1 = np.random.default_rng(0).standard_normal((3, 3, 3, 8)).astype(np.float32) / 4
_W2 = np.random.default_rng(1).standard_normal((3, 3, 8, 4)).astype(np.float32) / 4
_HEAD = np.random.default_rng(2).standard_normal((1, 1, 8, 1)).astype(np.float32) / 4


def _conv(x, w):
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _up(y, fh, fw):
    return jnp.repeat(jnp.repeat(y, fh, axis=1), fw, axis=2)


def _decoder(x):
    """conv, relu, 2x nearest upsampling of H and W as Keras' UpSampling2D writes it, conv."""
    return _conv(_up(jax.nn.relu(_conv(x, _W1)), 2, 2), _W2)


def _uneven(x):
    return _conv(_up(jax.nn.relu(_conv(x, _W1)), 3, 2), _W2)


def _narrow_head(x):
    """The last layer a 1x1 conv to one channel: ``pointwise_conv`` makes it a MatMul once the Resize is NCHW."""
    return jax.nn.sigmoid(_conv(_up(jax.nn.relu(_conv(x, _W1)), 2, 2), _HEAD))


def _image_resize(x):
    """``jax.image.resize``'s nearest mode by 2: Gathers of constant indices, not Expands."""
    y = _conv(x, _W1)
    return _conv(jax.image.resize(y, (y.shape[0], 2 * y.shape[1], 2 * y.shape[2], y.shape[3]), "nearest"), _W2)


def _exports(fn, shape):
    """(static export's op counts, the symbolic export's, the symbolic ModelProto) of ``fn`` on ``shape``."""
    import jaxconv

    static = jaxconv.to_onnx(fn, jax.ShapeDtypeStruct(shape, np.float32), check=False)
    sym_shape = jax.export.symbolic_shape(", ".join(["b", *(str(d) for d in shape[1:])]))
    model = jaxconv.to_onnx(fn, jax.ShapeDtypeStruct(sym_shape, np.float32), check=False)
    return op_counts(static.graph), op_counts(model.graph), model


def _each_batch(model, fn, shape, exact: bool) -> None:
    from jaxconv.runtimes.onnxrt import OnnxRunner

    run = OnnxRunner(model.SerializeToString())
    for batch in (1, 3):
        x = with_edge_values(np.random.default_rng(batch).standard_normal((batch, *shape[1:])).astype(np.float32))
        got, want = run.run([x])[0], np.asarray(jax.jit(fn)(x))
        if exact:
            assert_same_bits([got], [want])
        else:  # the convolutions round as ORT's do
            assert_same_floats(got, want, 1e-5, 1e-5)


@pytest.mark.parametrize("fn, shape", [(_decoder, (2, 16, 16, 3)), (_uneven, (2, 10, 12, 3)),
                                       (_narrow_head, (2, 16, 16, 3)), (_image_resize, (2, 9, 5, 3))])
def test_symbolic_batch_upsampling_between_convolutions_is_the_static_graph(fn, shape):
    static, sym, model = _exports(fn, shape)
    assert sym == static, (static, sym)
    assert sym["Resize"] == 1 and sym["Expand"] == 0 and sym["Gather"] == 0 and sym["Transpose"] <= 2, sym
    _each_batch(model, fn, shape, exact=False)


def test_symbolic_batch_plain_repeat_is_the_static_graph():
    """``x.repeat(2, 1).repeat(2, 2)`` on NHWC data alone: the static export's Gathers (``spread``: the
    Resize would scale axes a long unscaled one follows), bit for bit."""
    shape = (2, 16, 16, 3)
    fn = lambda x: _up(x, 2, 2)  # noqa: E731
    static, sym, model = _exports(fn, shape)
    assert sym == static and sym["Gather"] == 2 and sym["Expand"] == 0, (static, sym)
    _each_batch(model, fn, shape, exact=True)


def test_symbolic_batch_repeat_of_trailing_axes_is_a_resize():
    shape = (2, 3, 8, 6)
    fn = lambda x: jnp.repeat(jnp.repeat(x, 2, axis=2), 3, axis=3)  # noqa: E731
    static, sym, model = _exports(fn, shape)
    assert sym == static and sym["Resize"] == 1 and sym["Expand"] == 0, (static, sym)
    _each_batch(model, fn, shape, exact=True)


def test_repeat_of_the_symbolic_batch_stays():
    """The symbolic axis itself repeated: no Resize (its scale would not be a number the rule checked)."""
    fn = lambda x: jnp.repeat(x, 2, axis=0)  # noqa: E731
    spec = jax.ShapeDtypeStruct(jax.export.symbolic_shape("b, 3, 4"), np.float32)
    x = with_edge_values(np.random.default_rng(4).standard_normal((3, 3, 4)).astype(np.float32))
    ops, (got,) = convert_and_run(fn, x, specs=[spec])
    assert ops["Resize"] == 0, ops
    assert_same_bits([got], [np.asarray(jax.jit(fn)(x))])


def test_keras_upsampling2d_with_a_symbolic_batch_is_the_static_graph():
    """keras.layers.UpSampling2D between Conv2DTranspose and a 1x1 Conv2D to one channel (a decoder's head),
    on Keras' JAX backend."""
    keras = jax_keras()
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Conv2D(8, 3, strides=2, padding="same"),
                              keras.layers.Conv2DTranspose(8, 3, strides=2, padding="same"),
                              keras.layers.UpSampling2D(), keras.layers.Conv2D(1, 1, activation="sigmoid")])
    fn = lambda x: model(x, training=False)  # noqa: E731
    shape = (2, 16, 16, 3)
    static, sym, onnx_model = _exports(fn, shape)
    assert sym == static and sym["Resize"] == 1 and sym["Expand"] == 0, (static, sym)
    _each_batch(onnx_model, fn, shape, exact=False)
