"""A scan that runs k steps a body on rows it regroups itself (``nnx.RNN(unroll=k)``: each step reads
``[k, B, I]``, Splits it and Reshapes each ``[B, I]`` for its own ``x @ w``) has the regrouping done
once before the loop (``loops._regroup_steps``), so ``loops`` moves each input projection out of the
body. Each: the rule fired (op counts), outputs bit for bit those of the graph without it (ORT's own
optimizations off) and within the converter's tolerance of jax.jit on inputs with NaN, infinities
and -0.0."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scan_support import convert as _convert
from scan_support import ops as _ops
from scan_support import same_bits as _same_bits
from scan_support import unoptimized as _unoptimized

from jaxconv.onnx.rewrites import loops, unrolled_bodies
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_floats, sequence_inputs

_T, _B, _I, _H = 8, 3, 5, 16


@pytest.fixture(autouse=True)
def _bodies_unfolded(monkeypatch):
    """``unrolled_bodies`` folds these bodies into one step first; the tests read the k copies."""
    monkeypatch.setattr(unrolled_bodies, "rewrite", lambda graph: 0)


def _w(rng, *shape, scale=0.3):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _without_rule(monkeypatch, fn, x):
    with monkeypatch.context() as patch:
        patch.setattr(loops, "_regroup_steps", lambda *args: 0)
        return _convert(fn, x)


def _check(model, plain, fn, x):
    run, run_plain, near = _unoptimized(model), _unoptimized(plain), OnnxRunner(model.SerializeToString())
    for xs in sequence_inputs(x.shape):
        _same_bits(run(xs), run_plain(xs))
        got, want = near.run([xs]), jax.tree_util.tree_leaves(jax.jit(fn)(xs))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same_floats(g, np.asarray(w), 2e-5, 2e-6)


def _tanh_cell(rng, n_in):
    wx, wh, b = _w(rng, n_in, _H), _w(rng, _H, _H), _w(rng, _H, scale=0.1)
    return lambda h, x: jnp.tanh(x @ wx + b + h @ wh)


@pytest.mark.parametrize("unroll", [2, 4])
def test_steps_regrouped_by_hand_have_their_projections_before_the_loop(unroll, monkeypatch):
    """The rows reshaped ``[T / k, k, B, I]`` and a Python loop of k cells over each (NNX's form)."""
    cell = _tanh_cell(np.random.default_rng(1), _I)

    def fn(xs):
        def step(h, group):
            out = []
            for j in range(unroll):
                h = cell(h, group[j])
                out.append(h)
            return h, jnp.stack(out)
        h, ys = jax.lax.scan(step, jnp.zeros((xs.shape[1], _H)), xs.reshape(-1, unroll, *xs.shape[1:]))
        return ys.reshape(xs.shape[0], *ys.shape[2:]), h

    x = sequence_inputs((_T, _B, _I))[0]
    model, plain = _convert(fn, x), _without_rule(monkeypatch, fn, x)
    (main, body), (plain_main, plain_body) = _ops(model), _ops(plain)
    assert plain_body["MatMul"] == 2 * unroll and body["MatMul"] == unroll, (body, plain_body)
    assert main["MatMul"] == plain_main["MatMul"] + unroll and main["Scan"] == 1, (main, plain_main)
    _check(model, plain, fn, x)


def test_nnx_rnn_unrolled_gru_has_its_projections_before_the_loop(monkeypatch):
    nnx = pytest.importorskip("flax.nnx")
    rnn = nnx.RNN(nnx.GRUCell(_I, _H, rngs=nnx.Rngs(0)), unroll=4)
    graphdef, state = nnx.split(rnn)

    def fn(xs):  # batch-major, as nnx.RNN reads it
        return nnx.merge(graphdef, state, copy=True)(xs)  # copy: nnx.RNN bumps its carry RngCount

    x = np.ascontiguousarray(sequence_inputs((_T, _B, _I))[0].transpose(1, 0, 2))
    model, plain = _convert(fn, x), _without_rule(monkeypatch, fn, x)
    (main, body), (_, plain_body) = _ops(model), _ops(plain)
    assert plain_body["MatMul"] == 8 and body["MatMul"] == 4 and main["Scan"] == 1, (main, body, plain_body)
    run, run_plain, near = _unoptimized(model), _unoptimized(plain), OnnxRunner(model.SerializeToString())
    for xs in sequence_inputs((_T, _B, _I)):
        xs = np.ascontiguousarray(xs.transpose(1, 0, 2))
        _same_bits(run(xs), run_plain(xs))
        (got,), want = near.run([xs]), np.asarray(jax.jit(fn)(xs))
        assert_same_floats(got, want, 2e-5, 2e-6)


def test_a_regrouping_of_the_last_axis_stays_in_the_body(monkeypatch):
    """Each step's ``[B, 2I]`` row cut into two ``[B, I]`` halves along its last axis, each multiplied
    by the weight: the columns a product reads change, so its rows are not the projection's rows."""
    rng = np.random.default_rng(2)
    cell = _tanh_cell(rng, _I)

    def fn(xs):
        def step(h, x):
            a, b = jnp.split(x, 2, axis=-1)
            h = cell(cell(h, a), b)
            return h, h
        return jax.lax.scan(step, jnp.zeros((xs.shape[1], _H)), xs)

    x = sequence_inputs((_T, _B, 2 * _I))[0]
    model, plain = _convert(fn, x), _without_rule(monkeypatch, fn, x)
    assert _ops(model) == _ops(plain)
    _check(model, plain, fn, x)
