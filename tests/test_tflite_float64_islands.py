"""The float32 arithmetic the ONNX lowering widens to float64 (XLA's complex-product FMAs), written
back in float32 for TFLite (``onnx_to_tf/float64.py``), compared with jax.jit and with float64."""

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

EDGE = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -2.5, 3e38, -3e38, 1e-30, 1e20, -1e20, 1.5e-5,
                 4.5e33, -2e31], np.float32)


def _graph_fma32(a, b, c):
    """fma32 as the TFLite model runs it: converted with builtin ops only, run in LiteRT. (TF's own
    graph optimizer may reassociate the error terms; TFLite's converter does not.)"""
    from jaxconv.runtimes.tflite import TFLiteRunner
    from jaxconv.tf.onnx_to_tf.float64 import fma32

    spec = tf.TensorSpec(a.shape, tf.float32)
    function = tf.function(lambda a, b, c: {"output_0": fma32(tf, a, b, c)}, input_signature=[spec] * 3)
    concrete = function.get_concrete_function()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], tf.Module())
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    converter.canonicalizing_inf_as_min_max_float = False
    runner = TFLiteRunner(converter.convert())
    feeds = dict(zip(("a", "b", "c"), (a, b, c)))
    return runner.run([feeds[n] for n in runner.input_names])[0]


def test_fma32_is_the_float64_result_on_every_edge_triple():
    """round32(a * b + c) computed in float64 (exact product, as the lowering does) is what fma32
    gives, NaN places, infinities and zero signs included: products that overflow float32 but
    not float64, sums of such products with -inf, cancellations to -0."""
    a, b, c = (g.ravel() for g in np.meshgrid(EDGE, EDGE, EDGE, indexing="ij"))
    with np.errstate(all="ignore"):
        want = (a.astype(np.float64) * b + c).astype(np.float32)
    got = _graph_fma32(a, b, c)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got[~np.isnan(got)]), np.signbit(want[~np.isnan(want)]))


def test_fma32_keeps_what_cancellation_leaves():
    """a * b + c with c close to -a * b: plain float32 loses most of these; fma32 none."""
    rng = np.random.default_rng(0)
    a, b = (rng.normal(size=50_000).astype(np.float32) for _ in range(2))
    c = (-(a.astype(np.float64) * b) * (1 + rng.normal(size=a.size) * 1e-6)).astype(np.float32)
    want = (a.astype(np.float64) * b + c).astype(np.float32)
    got = _graph_fma32(a, b, c)
    assert np.count_nonzero(a * b + c != want) > a.size // 2  # the test can tell
    np.testing.assert_array_equal(got, want)


def _lite_run(fn, *args):
    from jaxconv.runtimes.tflite import TFLiteRunner, read_route

    specs = [jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype) for x in args]
    data = api.to_tflite(fn, *specs, route="tf-ops", check=False)
    assert read_route(data) == "tf-ops"
    return [np.asarray(g) for g in TFLiteRunner(data).run(list(args))]


def _complex_product(ar, ai, br, bi):
    z = lax.complex(ar, ai) * lax.complex(br, bi)
    return jnp.real(z), jnp.imag(z)


def test_complex_product_through_tflite_matches_jax_bit_for_bit():
    rng = np.random.default_rng(1)
    ar, ai, br, bi = (rng.normal(size=4000).astype(np.float32) for _ in range(4))
    bi[::2] = (ar[::2].astype(np.float64) * br[::2] / ai[::2]).astype(np.float32)  # re cancels
    got = _lite_run(_complex_product, ar, ai, br, bi)
    want = [np.asarray(w) for w in jax.jit(_complex_product)(ar, ai, br, bi)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_complex_product_of_edge_values_matches_jax():
    """NaN places, infinities and zero signs as jax.jit; values within one ulp: where the exact
    product is a tie of two float32 values and the addend only breaks it, rounding through float64
    (the ONNX lowering) or through fma32's error terms gives the even one, XLA's FMA the other
    (-2.5 * 4.5e33 + 6.25: -1.125e34 against -1.1249999e34)."""
    ar, ai, br, bi = (g.ravel() for g in np.meshgrid(EDGE, EDGE[::2], EDGE[1::3], EDGE[::-4], indexing="ij"))
    got = _lite_run(_complex_product, ar, ai, br, bi)
    want = [np.asarray(w) for w in jax.jit(_complex_product)(ar, ai, br, bi)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        finite = np.isfinite(w)
        np.testing.assert_array_equal(g[~finite], w[~finite])
        np.testing.assert_array_equal(np.signbit(g[~np.isnan(g)]), np.signbit(w[~np.isnan(w)]))
        ulps = np.abs(g[finite].view(np.int32).astype(np.int64) - w[finite].view(np.int32).astype(np.int64))
        assert ulps.max() <= 1 and np.count_nonzero(ulps) <= 3


def test_islands_are_rewritten_and_other_float64_stays_refused():
    from jaxconv.program import trace
    from jaxconv.tf.onnx_to_tf import float64_nodes, for_program

    program = trace(_complex_product, [jax.ShapeDtypeStruct((3,), np.float32)] * 4)
    wide, _, _ = for_program(program)
    assert float64_nodes(wide)  # the lowering computes the FMAs in float64
    narrow, _, _ = for_program(program, narrow_float64=True)
    assert float64_nodes(narrow) == []
    assert sum(n.op_type == "Fma32" for n in narrow.graph.node) == 2
    from jaxconv.errors import UnsupportedError

    refused = r"TFLite has no float64 kernels: float64 in"
    with jax.enable_x64(True), pytest.raises(UnsupportedError, match=refused):
        api.to_tflite(lambda x: x * 2.0, jax.ShapeDtypeStruct((3,), np.float64), route="tf-ops", check=False)
