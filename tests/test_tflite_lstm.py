"""The ONNX LSTM op (the lowering's rewrite of a lax.scan LSTM cell) on the tf-ops route."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from onnx_graphs import op_types

from conformance.nets import lstm_cell
from jaxconv import api

pytestmark = pytest.mark.tf
tf = pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert")

S = jax.ShapeDtypeStruct
_RNG = np.random.default_rng(0)
WX, WH, B = (_RNG.normal(size=s).astype(np.float32) * 0.4 for s in ((6, 32), (8, 32), (32,)))


def lstm(xs, h0):
    (h, c), hs = lax.scan(lstm_cell(WX, WH, B), (h0, jnp.zeros_like(h0)), xs)
    return hs, h, c


def test_lstm_op_in_tflite_matches_jax():
    from jaxconv.onnx import convert
    from jaxconv.program import trace
    from jaxconv.runtimes.tflite import TFLiteRunner, read_route

    specs = [S((7, 2, 6), np.float32), S((2, 8), np.float32)]
    ops = op_types(convert.program_to_onnx(trace(lstm, specs), 26).graph)
    assert "LSTM" in ops  # what this test is about: the rewrite wrote the LSTM op
    reports: list = []
    data = api.to_tflite(lstm, *specs, route="tf-ops", report_to=reports)
    assert read_route(data) == "tf-ops" and reports[0].ok, reports[0].table()
    xs, h0 = _RNG.normal(size=(7, 2, 6)).astype(np.float32), _RNG.normal(size=(2, 8)).astype(np.float32)
    got = TFLiteRunner(data).run([xs, h0])
    for g, w in zip(got, jax.jit(lstm)(xs, h0)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)
