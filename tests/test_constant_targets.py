"""symbolic.constant_targets: Reshape and Expand targets computed from Shape on symbolic inputs become
constants where every entry is related to the input's dims; the numbers stay jax.jit's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxconv
from jaxconv.onnx.rewrites import symbolic
from jaxconv.onnx.rewrites._dim_products import reshape_entries
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_onnx_matches_jax, assert_same_bits

RNG = np.random.default_rng(0)
D, H = 64, 4
WQ, WK, WV, WO = (RNG.normal(size=(D, D)).astype(np.float32) * 0.1 for _ in range(4))


def attention(x):
    """A causal self-attention block: head split and merge Reshapes over a symbolic batch and length."""
    b, t, _ = x.shape

    def heads(y):
        return y.reshape(b, t, H, D // H).transpose(0, 2, 1, 3)

    q, k, v = heads(x @ WQ), heads(x @ WK), heads(x @ WV)
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D // H)
    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e9)
    o = (jax.nn.softmax(s, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(b, t, D)
    return o @ WO + x


CASES = [(attention, "b, t, 64")]


def _specs(spec):
    like = tuple(int(d) if d.strip().isdigit() else 1 for d in spec.split(","))
    return jax.export.symbolic_args_specs([jax.ShapeDtypeStruct(like, np.float32)], [spec])


def _inputs(spec, sizes):
    dims = [sizes.get(d.strip(), None) or int(d) for d in spec.split(",")]
    return RNG.normal(size=dims).astype(np.float32)


def _computed_targets(model):
    """The Reshape and Expand nodes whose target is not an initializer."""
    inits = {i.name for i in model.graph.initializer}
    return [n for n in model.graph.node if n.op_type in ("Reshape", "Expand") and n.input[1] not in inits]


@pytest.mark.parametrize("fn, spec", CASES, ids=[c[0].__name__ for c in CASES])
def test_targets_become_constants_and_match_jax(fn, spec, monkeypatch):
    sizes = [{"b": 2, "t": 5}, {"b": 1, "t": 1}, {"b": 3, "t": 17}]
    args = [_inputs(spec, s) for s in sizes]
    model = assert_onnx_matches_jax(fn, args[0], specs=_specs(spec), inputs_for_run=[[a] for a in args[1:]])
    assert _computed_targets(model) == []

    with monkeypatch.context() as patch:  # the same graph with its targets computed: the same bits
        patch.setattr(symbolic, "constant_targets", lambda graph: 0)
        plain = jaxconv.to_onnx(fn, *_specs(spec), check=False)
    assert _computed_targets(plain), "the case has no computed target to make constant"
    assert len(model.graph.node) < len(plain.graph.node)
    got, want = OnnxRunner(model.SerializeToString()), OnnxRunner(plain.SerializeToString())
    for a in args:
        assert_same_bits(got.run([a]), want.run([a]))


def test_entries_copy_infer_or_refuse():
    assert reshape_entries(("b", "t", 4, 16), ("b", "t", 64)) == [0, 0, 64]
    assert reshape_entries(("b", "t", 64), ("?n0", 64)) == [-1, 64]
    assert reshape_entries(("b", "t", 64), ("b", "?n0")) is None  # -1 beside a copy that may be 0
    assert reshape_entries(("b", "t", 64), ("?n0", "?n1")) is None  # two unknowns
    assert reshape_entries(("b", 0, 64), ("b", 0, 64)) is None  # a size 0 stays computed
    assert reshape_entries(("b", "t"), ("t", "b")) is None  # not at the same place: no copy
    assert symbolic._expand_entries(("b", 1, 64), ("b", 4, 64)) == [1, 4, 64]
    assert symbolic._expand_entries((1, 64), ("b", 1, 64)) is None  # b not in the input
    assert symbolic._expand_entries(("b", 64), ("b", 0, 64)) is None

