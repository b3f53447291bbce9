"""The Conv affine-chain rule (rewrites.conv_affine): inference batch norm after a biased Conv loses its
Sub (an Add of the negated mean, the same IEEE operation), and the numbers stay bit for bit."""

from __future__ import annotations

import jax
import numpy as np
from jax import lax

from jaxconv.onnx.rewrites import conv_affine
from lowering_check import assert_same_floats
from lowering_check import convert_and_run as _convert

_RNG = np.random.default_rng(0)
_W = _RNG.standard_normal((3, 3, 4, 8)).astype(np.float32)
_B, _MEAN, _SCALE, _BETA = (_RNG.standard_normal(8).astype(np.float32) for _ in range(4))
_MEAN[0] = 0.0


def _conv_bn(x):
    y = lax.conv_general_dilated(x, _W, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")) + _B
    return jax.nn.relu((y - _MEAN) * _SCALE + _BETA)


def _input() -> np.ndarray:
    x = _RNG.standard_normal((2, 6, 6, 4)).astype(np.float32)
    x[0, 0, 0, 0], x[1, 3, 3, 1], x[1, 5, 5, 2] = np.nan, np.inf, -0.0
    return x


def test_batch_norm_after_a_biased_conv_has_no_sub_and_keeps_the_numbers(monkeypatch):
    fired: list[int] = []
    real = conv_affine.rewrite
    monkeypatch.setattr(conv_affine, "rewrite", lambda graph: fired.append(real(graph)) or fired[-1])
    x = _input()
    ops, (got,) = _convert(_conv_bn, x)
    assert fired == [1] and ops["Sub"] == 0
    assert_same_floats(got, jax.jit(_conv_bn)(x), 1e-5, 1e-5)  # ORT folds the affine into the Conv's weights
    model = _unoptimized_run(x)
    monkeypatch.setattr(conv_affine, "rewrite", lambda graph: 0)
    assert_same_floats(model, _unoptimized_run(x), 0, 0)  # the graphs agree bit for bit before ORT's fusions


def _unoptimized_run(x: np.ndarray) -> np.ndarray:
    """_conv_bn's ONNX run with ORT's graph optimizations off (its Conv+Mul fusion rounds otherwise)."""
    import onnxruntime as ort

    import jaxconv

    model = jaxconv.to_onnx(_conv_bn, jax.ShapeDtypeStruct(x.shape, x.dtype), check=False)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def test_a_sub_not_after_a_conv_stays():
    def fn(x):
        return (x - _MEAN[:4]) * 2.0

    x = _input()
    ops, (got,) = _convert(fn, x)
    assert ops["Sub"] == 1
    assert_same_floats(got, jax.jit(fn)(x), 0, 0)
