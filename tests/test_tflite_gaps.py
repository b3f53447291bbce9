"""TFLite on both routes: infinities kept through the converter, and the tf-ops translations of
CumProd, dilated MaxPool and a Pad whose pads the model computes. Every number is compared with
jax.jit on the same inputs, edge values (NaN, +-inf, -0.0, overflow) included."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxconv import api

pytestmark = pytest.mark.tf
tf = pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert")

INF, NAN = float("inf"), float("nan")


def _lite(fn, *args, route="tf-ops", specs=None):
    """The TFLite model's outputs for ``args`` (converted without the check) and jax.jit's."""
    from jaxconv.runtimes.tflite import TFLiteRunner, read_route

    specs = specs or [jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype) for a in args]
    data = api.to_tflite(fn, *specs, route=route, check=False)
    assert read_route(data) == route
    got = [np.asarray(g) for g in TFLiteRunner(data).run(list(args))]
    want = [np.asarray(w) for w in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]
    assert len(got) == len(want)
    return got, want


def _same(got, want):
    """Bit for bit where jax.jit is exact: the same NaN places, infinities and zero signs."""
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
        if w.dtype.kind == "f":
            np.testing.assert_array_equal(np.signbit(g), np.signbit(w))


# ---- CumProd -------------------------------------------------------------------------------------

def _edge_rows(n, seed=0):
    """Rows of length ``n`` with NaN, +-inf, zeros of both signs and products that overflow."""
    rng = np.random.default_rng(seed)
    x = (rng.uniform(0.5, 1.5, size=(5, n)) * rng.choice([-1, 1], size=(5, n))).astype(np.float32)
    x[0, 2], x[1, 1], x[1, 4], x[2, 3], x[3, 0] = NAN, 0.0, INF, -0.0, -INF
    x[4, :4] = [1e30, 1e30, 1e-30, 2.0]  # overflows to inf after two terms, in XLA's order
    return x


@pytest.mark.parametrize("reverse", [False, True])
def test_cumprod_in_order_matches_jax_bit_for_bit(reverse):
    fn = lambda x: lax.cumprod(x, axis=1, reverse=reverse)  # noqa: E731
    x = _edge_rows(9)
    got, want = _lite(fn, x)
    assert np.isinf(want).any() and np.isnan(want).any()
    _same(got, want)


def test_cumprod_of_a_long_axis_matches_jax():
    """Beyond SEQUENTIAL_CUMPROD elements the scan takes log2(n) steps: within rounding; NaN, inf
    and 0 places the same."""
    from jaxconv.tf.onnx_to_tf.reduce import SEQUENTIAL_CUMPROD

    n = SEQUENTIAL_CUMPROD * 2 + 3
    x = np.random.default_rng(1).uniform(0.9, 1.1, size=(3, n)).astype(np.float32)
    x[0, 5], x[1, 70], x[2, 100] = NAN, 0.0, INF
    (got,), (want,) = _lite(lambda x: jnp.cumprod(x, axis=1), x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=0)


@pytest.mark.parametrize("dtype", [np.int8, np.uint32, np.int64])
def test_cumprod_of_integers_wraps_as_in_jax(dtype):
    info = np.iinfo(dtype)
    x = np.random.default_rng(2).integers(info.min, info.max, size=(2, 80), dtype=dtype, endpoint=True)
    x[:, ::7] = 3

    def fn(x):
        return jnp.cumprod(x, axis=1, dtype=x.dtype), jnp.cumprod(x[:, :20], axis=1, dtype=x.dtype)

    with jax.enable_x64(np.dtype(dtype).itemsize == 8):
        got, want = _lite(fn, x)
    _same(got, want)


# ---- dilated MaxPool -----------------------------------------------------------------------------

@pytest.mark.parametrize("window,strides,dilation,padding", [
    ((1, 2, 2, 1), (1, 1, 1, 1), (1, 2, 3, 1), "SAME"),
    ((1, 3, 2, 1), (1, 2, 1, 1), (1, 2, 2, 1), "VALID"),
    ((1, 2, 2, 1), (1, 2, 3, 1), (1, 3, 1, 1), ((0, 0), (2, 1), (1, 3), (0, 0))),
])
def test_dilated_max_pool_matches_jax(window, strides, dilation, padding):
    def fn(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, window, strides, padding, window_dilation=dilation)

    x = np.random.default_rng(3).normal(size=(2, 9, 8, 3)).astype(np.float32)
    x[0, 1, 1, 0], x[1, 4, 2, 1], x[0, 6, 5, 2], x[1, 0, 0, 0] = NAN, INF, -INF, -0.0
    x[1, :, :, 2] = -INF  # a channel of only -inf
    got, want = _lite(fn, x)
    _same(got, want)


def test_dilated_max_pool_of_integers():
    def fn(x):
        return lax.reduce_window(x, jnp.iinfo(jnp.int32).min, lax.max, (1, 3), (1, 1), "SAME",
                                 window_dilation=(1, 2))

    x = np.random.default_rng(4).integers(-2**31, 2**31 - 1, size=(3, 11), dtype=np.int32)
    got, want = _lite(fn, x)
    _same(got, want)


# ---- Pad with pads computed by the model ----------------------------------------------------------

def _audio(w1, w2, x):
    dn = ("NWC", "WIO", "NWC")
    y = jax.nn.relu(lax.conv_general_dilated(x[..., None], w1, (2,), "SAME", dimension_numbers=dn))
    return lax.conv_general_dilated(y, w2, (1,), "SAME", dimension_numbers=dn)


@pytest.mark.parametrize("t", [15, 16, 30])
def test_same_padding_of_a_symbolic_length_matches_jax(t):
    """A strided SAME convolution over a symbolic length pads by an amount the model computes."""
    rng = np.random.default_rng(5)
    w1 = rng.normal(size=(5, 1, 4)).astype(np.float32)
    w2 = rng.normal(size=(3, 4, 4)).astype(np.float32)
    x = rng.normal(size=(2, t)).astype(np.float32)  # finite: TFLite's convolutions differ on inf (README)
    specs = ["f32[5,1,4]", "f32[3,4,4]", "f32[2,t]"]
    got, want = _lite(_audio, w1, w2, x, specs=specs)
    assert want[0].shape == (2, (t + 1) // 2, 4)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


def _pad_model(mode, n):
    from onnx import TensorProto, helper

    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, None]),
              helper.make_tensor_value_info("pads", TensorProto.INT64, [n])]
    node = helper.make_node("Pad", ["x", "pads"] + (["v"] if mode == "constant" else []), ["y"], mode=mode)
    init = [helper.make_tensor("v", TensorProto.FLOAT, [], [-7.5])] if mode == "constant" else []
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    graph = helper.make_graph([node], "g", inputs, outputs, initializer=init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])


@pytest.mark.parametrize("mode,pads", [
    ("constant", [1, 2, 0, 3]),
    ("constant", [0, -2, 1, -1]),  # negative pads crop
    ("edge", [2, 1, 1, 3]),
    ("reflect", [1, 2, 2, 1]),
])
def test_pad_with_pads_from_a_tensor_matches_jax(mode, pads):
    """The translation of a Pad whose pads are an input, in TF and through TFLite's builtins."""
    from jaxconv.runtimes.tflite import TFLiteRunner
    from jaxconv.tf.onnx_to_tf import serving_function

    x = np.arange(15, dtype=np.float32).reshape(3, 5) - 7
    x[1, 2], x[2, 0] = NAN, -0.0
    p = np.asarray(pads, np.int64)
    cfg = [(int(p[0]), int(p[2]), 0), (int(p[1]), int(p[3]), 0)]
    if mode == "constant":
        want = np.asarray(lax.pad(jnp.asarray(x), jnp.float32(-7.5), cfg))
    else:
        want = np.asarray(jnp.pad(jnp.asarray(x), [c[:2] for c in cfg], mode=mode))
    specs = [tf.TensorSpec([3, None], tf.float32, name="x"), tf.TensorSpec([4], tf.int64, name="pads")]
    function = serving_function(tf, _pad_model(mode, 4), specs)
    _same([function(x, p)["output_0"].numpy()], [want])
    concrete = function.get_concrete_function()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], tf.Module())
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    runner = TFLiteRunner(converter.convert())
    feeds = {"x": x, "pads": p}
    _same([runner.run([feeds[n] for n in runner.input_names])[0]], [want])


def test_cumprod_of_a_symbolic_length_is_refused_naming_the_op():
    from jaxconv.errors import UnsupportedError

    # (stablehlo.custom_call: the dynamic_reduce_window JAX writes for a symbolic length)
    refused = (r"^ONNX CumProd \(stablehlo\.custom_call\) could not be built from TF ops: "
               r"ValueError: CumProd along an axis of symbolic length$")
    with pytest.raises(UnsupportedError, match=refused):
        api.to_tflite(lambda x: jnp.cumprod(x, axis=1), "f32[2,n]", route="tf-ops", check=False)


@pytest.mark.parametrize("reverse", [0, 1])
def test_exclusive_cumprod_node_matches_jax(reverse):
    """ONNX CumProd with exclusive=1 (the lowering writes none; other producers may): in TF and in LiteRT."""
    from onnx import TensorProto, helper

    from jaxconv.runtimes.tflite import TFLiteRunner
    from jaxconv.tf.onnx_to_tf import serving_function

    node = helper.make_node("CumProd", ["x", "axis"], ["y"], exclusive=1, reverse=reverse)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 9])],
                              initializer=[helper.make_tensor("axis", TensorProto.INT64, [], [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])
    x = _edge_rows(9)

    def reference(x):
        if reverse:
            tail = jnp.cumprod(jnp.flip(x[:, 1:], 1), axis=1)
            return jnp.flip(jnp.concatenate([jnp.ones_like(x[:, :1]), tail], 1), 1)
        return jnp.concatenate([jnp.ones_like(x[:, :1]), jnp.cumprod(x[:, :-1], axis=1)], axis=1)

    want = np.asarray(jax.jit(reference)(x))
    function = serving_function(tf, model, [tf.TensorSpec([5, 9], tf.float32, name="x")])
    np.testing.assert_allclose(function(x)["output_0"].numpy(), want, rtol=1e-6)
    concrete = function.get_concrete_function()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], tf.Module())
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    converter.canonicalizing_inf_as_min_max_float = False
    (got,) = TFLiteRunner(converter.convert()).run([x])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6)


# ---- infinities: the converter keeps +-inf constants (not +-FLT_MAX) --------------------------------

def _masked_softmax(x, m):
    return jax.nn.softmax(jnp.where(m, x, -jnp.inf), axis=-1)


@pytest.mark.parametrize("route", ["xla", "tf-ops"])
def test_masked_softmax_row_of_only_minus_inf_is_nan_as_in_jax(route):
    """A row masked out entirely is NaN in jax.jit; with -inf written as -FLT_MAX it was a uniform row."""
    x = np.array([[1.0, -2.0, 3.0, 0.5], [-1.0, 2.0, -3.0, 0.25]], np.float32)
    m = np.array([[True, False, True, True], [False, False, False, False]])
    (got,), (want,) = _lite(_masked_softmax, x, m, route=route)
    assert np.isnan(want[1]).all() and np.isnan(got[1]).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=0)


@pytest.mark.parametrize("route", ["xla", "tf-ops"])
def test_inf_constants_reach_the_outputs(route):
    def fn(x):
        return (jnp.where(x > 0, x, -jnp.inf), x * 0 + jnp.inf, x / jnp.float32(0.0),
                jnp.max(x[:, :0], axis=1, initial=-jnp.inf))

    x = np.array([[1.0, -2.0, NAN, 0.0], [-0.0, INF, -INF, 3e38]], np.float32)
    got, want = _lite(fn, x, route=route)
    assert np.isneginf(want[3]).all()
    _same(got, want)


def test_max_pool_over_a_window_of_only_minus_inf_gives_minus_inf():
    def fn(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "SAME")

    x = np.full((1, 5, 4, 1), -INF, np.float32)
    x[0, 0, 0, 0], x[0, 2, 3, 0], x[0, 4, 1, 0] = 1.0, NAN, -0.0
    for route in ("xla", "tf-ops"):
        got, want = _lite(fn, x, route=route)
        assert np.isneginf(want[0]).sum() == 3 and np.isnan(want[0]).sum() == 1
        _same(got, want)


def test_converter_is_told_to_keep_infinities():
    """The flag behind the tests above, set on the converter of either route."""
    from jaxconv.program import trace
    from jaxconv.tf.tflite import _converter

    program = trace(lambda x: x + 1.0, [jax.ShapeDtypeStruct((2,), np.float32)])
    for route in ("xla", "tf-ops"):
        converter, _, _ = _converter(program, False, None, route)
        assert converter.canonicalizing_inf_as_min_max_float is False
