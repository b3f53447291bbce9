"""The backward pass of a scan (``jax.grad`` of an RNN's loss by its weights) as a Scan: its loop carries the
weight gradients and emits nothing (no scan outputs), and reads the forward pass's saved rows from the last
down. Those reads are the reversed rows of the forward Scan's outputs (``loops._reversed_steps``, the row
count read from the loop that stacked them) and scan inputs of the backward Scan (``loops.to_scan``): no
index arithmetic or Slice per step, the same rows in the same steps."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest

import jaxconv
from jaxconv.runtimes.onnxrt import OnnxRunner

_RNG = np.random.default_rng(3)
_W = (_RNG.standard_normal((16, 16)) * 0.3).astype(np.float32)
_U = (_RNG.standard_normal((8, 16)) * 0.3).astype(np.float32)


def _grads(xs):
    def loss(w, u):
        def cell(h, x):
            h = jnp.tanh(h @ w + x @ u)
            return h, h

        _, hs = jax.lax.scan(cell, jnp.zeros((xs.shape[1], 16)), xs)
        return jnp.sum(hs * hs)

    return jax.grad(loss, argnums=(0, 1))(jnp.asarray(_W), jnp.asarray(_U))


def _loops(model) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type in ("Loop", "Scan")]


@pytest.mark.parametrize("spec", ["f32[10,4,8]", "f32[10,b,8]"])
def test_the_backward_pass_of_a_scan_is_a_scan_reading_saved_rows(spec):
    model = jaxconv.to_onnx(_grads, spec, check=False)
    loops = _loops(model)
    assert [n.op_type for n in loops] == ["Scan", "Scan"], [n.op_type for n in loops]
    backward = collections.Counter(n.op_type for n in loops[1].attribute[0].g.node)
    assert not {"Slice", "Clip", "Cast", "Gather"} & set(backward), backward
    runner = OnnxRunner(model.SerializeToString())
    for batch in ((4,) if "4" in spec else (1, 3)):
        xs = _RNG.standard_normal((10, batch, 8)).astype(np.float32)
        for got, want in zip(runner.run([xs]), jax.jit(_grads)(xs)):
            np.testing.assert_allclose(got, np.asarray(want), rtol=2e-5, atol=2e-5)
