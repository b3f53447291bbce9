"""jaxconv.onnx.rewrites.conv_1d: a 1-D convolution with constant weights as a 2-D one over a height of
1, the Squeezes between layers gone; ONNX Runtime's outputs within tolerance of jax.jit's (NaN,
infinities and -0.0 in the input)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest

import jaxconv
from jaxconv.onnx.rewrites import conv_1d
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_floats, op_counts, without_rule
from lowering_check import convert_and_run as _convert

_RNG = np.random.default_rng(7)
_NWC = ("NWC", "WIO", "NWC")
_plain = without_rule(conv_1d)


def _w(*shape: int) -> np.ndarray:
    return (_RNG.standard_normal(shape) / np.sqrt(np.prod(shape[:-1]))).astype(np.float32)


_GATED = [dict(f=_w(2, 16, 16), g=_w(2, 16, 16), r=_w(1, 16, 16), d=d) for d in (1, 2, 4)]


def gated_stack(x):
    """WaveNet's layers: dilated causal convolutions, a tanh * sigmoid gate, a residual from the input."""
    for p in _GATED:
        xp = jnp.pad(x, ((0, 0), (p["d"], 0), (0, 0)))
        f = jax.lax.conv_general_dilated(xp, p["f"], (1,), "VALID", rhs_dilation=(p["d"],), dimension_numbers=_NWC)
        g = jax.lax.conv_general_dilated(xp, p["g"], (1,), "VALID", rhs_dilation=(p["d"],), dimension_numbers=_NWC)
        z = jnp.tanh(f) * jax.nn.sigmoid(g)
        x = x + jax.lax.conv_general_dilated(z, p["r"], (1,), "VALID", dimension_numbers=_NWC)
    return x


_DW = _w(5, 1, 12)
_PW = _w(1, 12, 24)
_B = _w(24)


def depthwise_separable(x):
    """A strided depthwise Conv (SAME) and a biased pointwise one, NCW as PyTorch writes them."""
    y = jax.lax.conv_general_dilated(x, _DW.transpose(2, 1, 0), (2,), "SAME", feature_group_count=12,
                                     dimension_numbers=("NCW", "OIW", "NCW"))
    y = jax.nn.relu(y)
    return jax.lax.conv_general_dilated(y, _PW.transpose(2, 1, 0), (1,), "VALID",
                                        dimension_numbers=("NCW", "OIW", "NCW")) + _B[:, None]


def _signal(*shape: int) -> np.ndarray:
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    x[0, 3, :3] = [np.nan, np.inf, -np.inf]
    x[-1, 0, 0] = -0.0
    return x


def _conv_weight_ranks(model: onnx.ModelProto) -> list[int]:
    weights = {t.name: len(t.dims) for t in model.graph.initializer}
    return [weights.get(n.input[1], -1) for n in model.graph.node if n.op_type == "Conv"]


@pytest.mark.parametrize("fn, x", [(gated_stack, _signal(2, 40, 16)), (depthwise_separable, _signal(3, 12, 33))],
                         ids=["gated stack NWC", "depthwise separable NCW"])
def test_one_d_convs_run_as_two_d_ones(fn, x, monkeypatch):
    model = jaxconv.to_onnx(fn, jax.ShapeDtypeStruct(x.shape, x.dtype), check=False)
    ops = op_counts(model.graph)
    assert set(_conv_weight_ranks(model)) == {4}, _conv_weight_ranks(model)
    assert ops["Squeeze"] <= 1 and ops["Unsqueeze"] <= 2, ops  # at the input (and its residual) and output only
    (got,) = OnnxRunner(model.SerializeToString()).run([x])
    assert_same_floats(got, np.asarray(jax.jit(fn)(x)), 1e-5, 1e-5)
    plain_ops, _ = _plain(monkeypatch, fn, x)
    assert plain_ops["Conv"] == ops["Conv"] and plain_ops["Squeeze"] == 0


def test_a_symbolic_batch_is_kept():
    model = jaxconv.to_onnx(gated_stack, "f32[b,40,16]", check=False)
    assert set(_conv_weight_ranks(model)) == {4}
    for batch in (1, 3):
        x = _signal(batch, 40, 16)
        (got,) = OnnxRunner(model.SerializeToString()).run([x])
        assert_same_floats(got, np.asarray(jax.jit(gated_stack)(x)), 1e-5, 1e-5)


def test_weights_computed_at_run_time_stay_one_d():
    def fn(x, w):
        return jax.nn.relu(jax.lax.conv_general_dilated(x, w, (1,), "SAME", dimension_numbers=_NWC))
    x, w = _signal(2, 20, 8), _w(3, 8, 4)
    ops, (got,) = _convert(fn, x, w)
    assert ops["Conv"] == 1 and ops["Squeeze"] == 0 and ops["Unsqueeze"] == 0, ops
    assert_same_floats(got, np.asarray(jax.jit(fn)(x, w)), 1e-5, 1e-5)
