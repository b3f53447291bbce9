"""jaxconv.onnx.rewrites.nearest_resize: nearest-neighbour upsampling by whole factors (``jnp.repeat`` of
axes, Keras' UpSampling2D, ``jax.image.resize(..., "nearest")``) as one Resize, run in NCHW between
convolutions; a Resize that stays NHWC goes back to Gathers. Copies only: outputs bit for bit those
without the rule (NaN, infinities and -0.0 included), the repeats themselves bit for bit jax.jit's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import nearest_resize
from keras_support import jax_keras
from lowering_check import assert_same_bits, assert_same_floats, with_edge_values, without_rule
from lowering_check import convert_and_run as _convert

_plain = without_rule(nearest_resize)


def _conv(x, w):
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


_W1 = np.random.default_rng(0).standard_normal((3, 3, 3, 8)).astype(np.float32) / 4
_W2 = np.random.default_rng(1).standard_normal((3, 3, 8, 4)).astype(np.float32) / 4


def _decoder(x):
    """conv, relu, 2x nearest upsampling of H and W as Keras' UpSampling2D writes it, conv."""
    y = jax.nn.relu(_conv(x, _W1))
    y = jnp.repeat(jnp.repeat(y, 2, axis=1), 2, axis=2)
    return _conv(y, _W2)


def test_upsampling_between_convolutions_is_one_resize_in_nchw(monkeypatch):
    x = with_edge_values(np.random.default_rng(2).standard_normal((2, 12, 10, 3)).astype(np.float32))
    ops, (got,) = _convert(_decoder, x)
    plain_ops, (plain,) = _plain(monkeypatch, _decoder, x)
    assert ops["Resize"] == 1 and ops["Expand"] == 0 and ops["Gather"] == 0, ops
    assert ops["Transpose"] == 2 and plain_ops["Transpose"] > 2, (ops, plain_ops)  # the model's input and output
    assert_same_bits([got], [plain])
    assert_same_floats(got, np.asarray(jax.jit(_decoder)(x)), 1e-5, 1e-5)


@pytest.mark.parametrize("factor, shape", [(2, (2, 3, 8, 6)), (3, (2, 4, 33, 17)), (5, (1, 2, 7, 3))])
def test_repeat_of_trailing_axes_is_a_resize_bit_for_bit(factor, shape):
    fn = lambda x: jnp.repeat(jnp.repeat(x, factor, axis=2), factor, axis=3)  # noqa: E731
    x = with_edge_values(np.random.default_rng(3).standard_normal(shape).astype(np.float32))
    ops, (got,) = _convert(fn, x)
    assert ops["Resize"] == 1 and ops["Expand"] == 0 and ops["Gather"] == 0, ops
    assert_same_bits([got], [np.asarray(jax.jit(fn)(x))])


def test_image_resize_nearest_by_two_is_a_resize():
    fn = lambda x: jax.image.resize(x, (x.shape[0], x.shape[1], 2 * x.shape[2], 2 * x.shape[3]), "nearest")  # noqa: E731
    x = with_edge_values(np.random.default_rng(4).standard_normal((2, 3, 9, 5)).astype(np.float32))
    ops, (got,) = _convert(fn, x)
    assert ops["Resize"] == 1 and ops["Gather"] == 0, ops
    assert_same_bits([got], [np.asarray(jax.jit(fn)(x))])


def test_nhwc_upsampling_without_convolutions_stays_gathers(monkeypatch):
    """Resize is slower than a Gather on an axis followed by a long unscaled one (channels last)."""
    fn = lambda x: jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)  # noqa: E731
    x = with_edge_values(np.random.default_rng(5).standard_normal((2, 6, 5, 32)).astype(np.float32))
    ops, (got,) = _convert(fn, x)
    assert ops["Resize"] == 0 and ops["Gather"] == 2, ops
    assert_same_bits([got], [np.asarray(jax.jit(fn)(x))])


def test_gather_of_other_indices_stays():
    idx = np.array([0, 1, 1, 2, 3, 3], np.int32)
    fn = lambda x: jnp.take(x, idx, axis=2)  # noqa: E731
    x = np.random.default_rng(6).standard_normal((2, 3, 4, 5)).astype(np.float32)
    ops, (got,) = _convert(fn, x)
    assert ops["Resize"] == 0, ops
    assert_same_bits([got], [np.asarray(jax.jit(fn)(x))])


def test_symbolic_batch_upsampling_keeps_the_numbers():
    """A symbolic batch: the repeat is a Resize too (tests/test_symbolic_batch_upsample.py); the graph runs
    every batch with jax.jit's numbers."""
    import jaxconv
    from jaxconv.runtimes.onnxrt import OnnxRunner

    model = jaxconv.to_onnx(_decoder, "f32[b,12,10,3]", check=False)
    run = OnnxRunner(model.SerializeToString())
    for batch in (1, 3):
        x = with_edge_values(np.random.default_rng(batch).standard_normal((batch, 12, 10, 3)).astype(np.float32))
        assert_same_floats(run.run([x])[0], np.asarray(jax.jit(_decoder)(x)), 1e-5, 1e-5)


def test_keras_upsampling2d_is_one_resize():
    """keras.layers.UpSampling2D itself, on Keras' JAX backend, between two Conv2D layers."""
    keras = jax_keras()
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
                              keras.layers.UpSampling2D(), keras.layers.Conv2D(2, 3, padding="same")])
    fn = lambda x: model(x, training=False)  # noqa: E731
    x = with_edge_values(np.random.default_rng(7).standard_normal((2, 16, 16, 3)).astype(np.float32))
    ops, (got,) = _convert(fn, x)
    assert ops["Resize"] == 1 and ops["Expand"] == 0 and ops["Gather"] == 0 and ops["Transpose"] == 2, ops
    assert_same_floats(got, np.asarray(jax.jit(fn)(x)), 1e-5, 1e-5)


@pytest.mark.tf
def test_the_tf_ops_route_repeats_the_resize():
    """TFLite through jaxconv's ONNX as TF ops: the Resize becomes tf.repeat per axis, bit for bit."""
    pytest.importorskip("tensorflow")
    from jaxconv.program import trace
    from jaxconv.tf.onnx_to_tf import for_program

    fn = lambda x: jnp.repeat(jnp.repeat(x, 2, axis=2), 3, axis=3)  # noqa: E731
    x = with_edge_values(np.random.default_rng(8).standard_normal((2, 3, 5, 4)).astype(np.float32))
    model, function, _ = for_program(trace(fn, [jax.ShapeDtypeStruct(x.shape, x.dtype)]))
    assert any(n.op_type == "Resize" for n in model.graph.node)
    with jax.default_device(jax.devices("cpu")[0]):
        got = function(x)["output_0"].numpy()
    assert_same_bits([got], [np.asarray(jax.jit(fn)(x))])
