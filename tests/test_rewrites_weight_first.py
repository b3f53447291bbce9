"""The weight-first rule (rewrites.weight_first): a vmapped ``W @ x`` (Equinox's Linear over a batch and a
sequence) runs as ``x @ Wᵀ`` without the Transposes around it, with jax.jit's numbers."""

from __future__ import annotations

import collections

import jax
import numpy as np

import jaxconv
from jaxconv.onnx.rewrites import axis_products, weight_first
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_floats
from lowering_check import convert_and_run as _convert

_RNG = np.random.default_rng(0)
_W = _RNG.standard_normal((24, 16)).astype(np.float32)
_B = _RNG.standard_normal(24).astype(np.float32)


def _linear(x):
    return jax.nn.relu(_W @ x + _B)  # eqx.nn.Linear on one vector


def _input() -> np.ndarray:
    x = _RNG.standard_normal((2, 8, 16)).astype(np.float32)
    x[0, 0, :3] = [np.nan, np.inf, -0.0]
    x[1, 2] = 0.0
    return x


def test_vmapped_weight_first_matmul_loses_its_transposes(monkeypatch):
    fn = jax.vmap(jax.vmap(_linear))
    fired: list[int] = []
    real = weight_first.rewrite
    monkeypatch.setattr(weight_first, "rewrite", lambda graph: fired.append(real(graph)) or fired[-1])
    x = _input()
    ops, (got,) = _convert(fn, x)
    assert sum(fired) == 1 and ops["Transpose"] == 0
    want = jax.jit(fn)(x)
    assert np.isnan(want[0, 0]).all() and (want[1, 2] == np.maximum(_B, 0)).all()
    assert_same_floats(got, want, 1e-6, 1e-6)  # ORT's GEMM sums k in another order than XLA's dot
    monkeypatch.setattr(weight_first, "rewrite", lambda graph: 0)
    monkeypatch.setattr(axis_products, "read", lambda mm, start=None: None)  # which would take them too
    plain_ops, (plain,) = _convert(fn, x)
    assert plain_ops["Transpose"] == 2
    assert_same_floats(got, plain, 0, 0)  # the same dot products in ORT, bit for bit


def test_a_weight_second_matmul_is_left_to_the_other_rules():
    fn = jax.vmap(jax.vmap(lambda x: x @ _W.T))
    x = _input()
    ops, (got,) = _convert(fn, x)
    assert ops["Transpose"] == 0
    assert_same_floats(got, jax.jit(fn)(x), 1e-6, 1e-6)


def test_a_symbolic_batch_loses_the_transposes_too():
    fn = jax.vmap(jax.vmap(_linear))
    model = jaxconv.to_onnx(fn, "f32[b,8,16]", check=False)
    ops = collections.Counter(n.op_type for n in model.graph.node)
    assert ops["Transpose"] == 0 and ops["MatMul"] == 1
    runner = OnnxRunner(model.SerializeToString())
    for b in (1, 3):
        x = np.concatenate([_input()] * 2)[:b]
        assert_same_floats(runner.run([x])[0], jax.jit(fn)(x), 1e-6, 1e-6)
