"""A Conv whose constant weights hold an infinity or a NaN pads through an explicit Pad (rewrites.conv_pads).

Found by the fuzzer as vjp/f16/nan (silent): a conv layer's gradient (a full convolution, padded by the
kernel's size less one) with one infinite weight. ONNX Runtime's blocked-layout Conv skips the padded places,
so a padded zero times the infinite weight added nothing where jax.jit (and ORT's plain Conv) add NaN.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest

import jaxconv
from jaxconv.onnx.rewrites import conv_pads
from jaxconv.runtimes.onnxrt import OnnxRunner


def _weights(edge: float | None) -> np.ndarray:
    w = np.random.default_rng(8).standard_normal((3, 3, 4, 8)).astype(np.float32) * 0.5  # HWIO
    if edge is not None:
        w[1, 0, 3, 3] = edge
    return w


def _full_conv(w):
    def fn(x):
        return jax.lax.conv_general_dilated(x, w, (1, 1), [(2, 2), (2, 2)], dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return fn


def _convs(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type == "Conv"]


def _pads(node: onnx.NodeProto) -> list[int]:
    return next((list(a.ints) for a in node.attribute if a.name == "pads"), [])


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert np.array_equal(np.isnan(got), np.isnan(want)), (np.isnan(got).sum(), np.isnan(want).sum())
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("edge", [np.inf, -np.inf, np.nan])
def test_a_padded_conv_with_a_non_finite_weight_gives_jax_jits_nans(edge):
    x = np.random.default_rng(9).standard_normal((1, 3, 3, 4)).astype(np.float32)
    x[0, 1, 1, :] = 0.0  # a real zero meets the weight too
    fn = _full_conv(_weights(edge))
    model = jaxconv.to_onnx(fn, x)  # checked against jax.jit
    (conv,) = _convs(model)
    assert not any(_pads(conv)), _pads(conv)
    assert [n.op_type for n in model.graph.node].count("Pad") == 1
    want = np.asarray(jax.jit(fn)(x))
    assert np.isnan(want).any()
    _same(OnnxRunner(model.SerializeToString()).run([x])[0], want)


def test_finite_weights_keep_the_convs_own_padding(monkeypatch):
    x = np.random.default_rng(9).standard_normal((1, 3, 3, 4)).astype(np.float32)
    fn = _full_conv(_weights(None))
    model = jaxconv.to_onnx(fn, x)
    (conv,) = _convs(model)
    assert _pads(conv) == [2, 2, 2, 2] and "Pad" not in [n.op_type for n in model.graph.node]


def test_without_the_rule_ort_drops_the_padded_nans(monkeypatch):
    """What the rule is for: ORT's blocked-layout Conv (its default optimization level) loses the NaNs."""
    x = np.random.default_rng(9).standard_normal((1, 3, 3, 4)).astype(np.float32)
    fn = _full_conv(_weights(np.inf))
    monkeypatch.setattr(conv_pads, "rewrite", lambda graph, opset: 0)
    model = jaxconv.to_onnx(fn, x, check=False)
    got = OnnxRunner(model.SerializeToString()).run([x])[0]
    want = np.asarray(jax.jit(fn)(x))
    assert np.isnan(got).sum() < np.isnan(want).sum()


def test_a_conv_layers_gradient_with_an_infinite_weight_in_half_floats():
    """The fuzzer's program, shortened: d/dw of a conv, hard-swish, max-pool, conv (an infinite weight),
    hard-swish, average-pool chain in float16; jax.jit gives NaN in the infinite weight's channel (inf * 0 in
    hard-swish's derivative, then padded zeros times the infinite weight)."""
    w2 = (np.random.default_rng(10).standard_normal((3, 3, 8, 4)) * 0.58).astype(np.float16)
    w2[1, 0, 3, 3] = np.inf
    dims = ("NHWC", "HWIO", "NHWC")

    def layers(w, v):
        h = jax.nn.hard_swish(jax.lax.conv_general_dilated(v, w, (1, 1), "VALID", dimension_numbers=dims))
        h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 1, 1, 1), "VALID")
        h = jax.nn.hard_swish(jax.lax.conv_general_dilated(h, w2, (1, 1), "VALID", dimension_numbers=dims))
        return jax.lax.reduce_window(h, 0.0, jax.lax.add, (1, 3, 3, 1), (1, 2, 2, 1), "VALID") / 9

    def grad(v, w, g):
        return jax.vjp(lambda w_: layers(w_, v), w)[1](g)[0]

    v, w, g = (np.ones(s, np.float16) for s in ((1, 6, 6, 8), (1, 1, 8, 8), (1, 1, 1, 4)))
    model = jaxconv.to_onnx(grad, v, w, g, check=False)
    want = np.asarray(jax.jit(grad)(v, w, g)).astype(np.float32)
    assert np.isnan(want[..., 3]).all()  # the infinite weight's output channel
    got = OnnxRunner(model.SerializeToString()).run([v, w, g])[0].astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)
