"""Symbolic-size rules: the symbolic rule's Reshape/Squeeze sink (rewrites.symbolic._sink_regroup):
``jnp.take_along_axis`` of relative-position indices ``[s, s]`` broadcast over batch and heads (keras-hub
DeBERTa) checks the indices' bounds on ``[s, s]``, not on the broadcast ``[b, h, s, s, 1]``; its Gather
shapes (a take's fill needs no Expand); rewrites.gather_fill on indices of run-time size. The numbers are
jax.jit's bits (NaN, ±inf, -0.0 among the gathered values) and those of the graph without the change."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import onnx

import jaxconv
from jaxconv.onnx.rewrites import symbolic
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_bits

SPECS = ("f32[2,4,s,16]",)


def _relative(x):
    """DeBERTa's c2p gather: x[b, h, i, clip(i - j + 8, 0, 15)] (indices shared by batch and heads)."""
    s = x.shape[2]
    pos = jnp.arange(s)
    idx = jnp.clip(pos[:, None] - pos[None, :] + 8, 0, 15)
    idx = jnp.broadcast_to(idx[None, None], x.shape[:3] + (s,))
    return jnp.take_along_axis(x, idx, axis=-1)


def _inputs(s: int) -> np.ndarray:
    x = np.random.default_rng(s).standard_normal((2, 4, s, 16)).astype(np.float32)
    x[0, 1, 0, :] = np.nan
    x[1, 2, :, 3] = np.inf
    x[1, 0, :, 8] = -np.inf
    x[0, 3, :, 5] = -0.0
    return x


def _model(monkeypatch=None) -> onnx.ModelProto:
    if monkeypatch is None:
        return jaxconv.to_onnx(_relative, *SPECS, check=False)
    with monkeypatch.context() as patch:
        patch.setattr(symbolic, "_sink_regroup", lambda *args: False)
        return jaxconv.to_onnx(_relative, *SPECS, check=False)


def _compared_ranks(model: onnx.ModelProto) -> dict[str, int]:
    """Op type -> the largest element count bound of the bounds checks' inputs: their ranks' batch part."""
    inferred = onnx.shape_inference.infer_shapes(model)
    dims = {v.name: [d.dim_value if d.HasField("dim_value") else d.dim_param for d in v.type.tensor_type.shape.dim]
            for v in (*inferred.graph.value_info, *inferred.graph.input)}
    found = collections.defaultdict(list)
    for node in model.graph.node:
        if node.op_type in ("GreaterOrEqual", "LessOrEqual"):
            found[node.op_type].append(dims.get(node.input[0]))
    return found


def test_bounds_checks_run_on_the_shared_indices(monkeypatch):
    model, plain = _model(), _model(monkeypatch)
    checks, plain_checks = _compared_ranks(model), _compared_ranks(plain)
    assert checks and plain_checks
    for op, shapes in plain_checks.items():  # before: on the broadcast [2, 4, s, s, 1]
        assert all(shape[:2] == [2, 4] for shape in shapes), (op, shapes)
    for op, shapes in checks.items():  # now: batch and heads of length 1
        assert all(shape[:2] == [1, 1] for shape in shapes), (op, shapes)
    runner, plain_runner = OnnxRunner(model.SerializeToString()), OnnxRunner(plain.SerializeToString())
    for s in (1, 5, 24):
        x = _inputs(s)
        got = runner.run([x])
        assert_same_bits(got, plain_runner.run([x]))
        assert_same_bits(got, [np.asarray(jax.jit(_relative)(x))])


TABLE = np.random.default_rng(7).standard_normal((32, 4)).astype(np.float32)
TABLE[3] = [np.nan, np.inf, -np.inf, -0.0]


def _bias(buckets):
    """T5's relative-position bias lookup: a constant table taken at bucket indices of run-time size."""
    return jnp.take(TABLE, buckets, axis=0)  # out-of-range buckets: NaN (jnp.take's fill)


def test_take_fill_needs_no_full_size_copy():
    """The symbolic rule knows a Gather's shape (data's axes around the indices'), so the fill's
    Expand to ``[s, s, 4]`` goes: the Where broadcasts a scalar NaN."""
    model = jaxconv.to_onnx(_bias, "i32[s,s]", check=False)
    ops = collections.Counter(n.op_type for n in model.graph.node)
    assert ops["Expand"] == 0, ops
    runner = OnnxRunner(model.SerializeToString())
    for s in (1, 6):
        buckets = np.random.default_rng(s).integers(-40, 40, (s, s)).astype(np.int32)
        buckets.flat[0] = 3
        assert_same_bits(runner.run([buckets]), [np.asarray(jax.jit(_bias)(buckets))])


def test_take_fill_of_run_time_size_is_a_table_row(monkeypatch):
    """rewrites.gather_fill with symbolic indices: the NaN fill is a row of the table the out-of-range
    buckets point at (a Squeeze of the condition, no Reshape to a static shape), the same bits."""
    from jaxconv.onnx.rewrites import gather_fill

    model = jaxconv.to_onnx(_bias, "i32[s,s]", check=False)
    with monkeypatch.context() as patch:
        patch.setattr(gather_fill, "rewrite", lambda graph: 0)
        plain = jaxconv.to_onnx(_bias, "i32[s,s]", check=False)
    last = {o: n.op_type for n in model.graph.node for o in n.output}[model.graph.output[0].name]
    plain_last = {o: n.op_type for n in plain.graph.node for o in n.output}[plain.graph.output[0].name]
    assert (last, plain_last) == ("Gather", "Where")
    runner, plain_runner = OnnxRunner(model.SerializeToString()), OnnxRunner(plain.SerializeToString())
    for s in (1, 7):
        buckets = np.random.default_rng(s).integers(-40, 40, (s, s)).astype(np.int32)
        buckets.flat[-1] = 3
        got = runner.run([buckets])
        assert_same_bits(got, plain_runner.run([buckets]))
        assert_same_bits(got, [np.asarray(jax.jit(_bias)(buckets))])


def _repeat_once(q, k):
    """``jnp.repeat(k, 1, axis=2)`` (a grouped-query repeat of one, keras-hub DeBERTa's key): an Unsqueeze and
    a Reshape back to k's shape, whose target is computed where two sizes are symbolic."""
    return jnp.einsum("bthd,bshd->bhts", q, jnp.repeat(k, 1, axis=2))


def test_a_reshape_back_through_an_unsqueeze_is_its_source(monkeypatch):
    """The Reshape back to the shape of the value an Unsqueeze read is that value: no Unsqueeze, no Reshape;
    the same bits as the graph that keeps them, and jax.jit's."""
    specs = ("f32[b,t,4,8]", "f32[b,t,4,8]")
    model = jaxconv.to_onnx(_repeat_once, *specs, check=False)
    ops = collections.Counter(n.op_type for n in model.graph.node)
    assert ops["Unsqueeze"] == 0 and ops["Reshape"] == 0, ops
    real = symbolic._noop_reshape
    with monkeypatch.context() as patch:  # only a Reshape to its input's own shape goes
        patch.setattr(symbolic, "_noop_reshape", lambda node, shapes: node.inputs[0] is not None and (
            node.inputs[0].producer() is None or node.inputs[0].producer().op_type == "Reshape") and real(node, shapes))
        plain = jaxconv.to_onnx(_repeat_once, *specs, check=False)
    assert collections.Counter(n.op_type for n in plain.graph.node)["Reshape"] == 1
    runner, plain_runner = OnnxRunner(model.SerializeToString()), OnnxRunner(plain.SerializeToString())
    for b, t in ((1, 1), (2, 5), (3, 9)):
        rng = np.random.default_rng(b * t)
        q, k = (rng.standard_normal((b, t, 4, 8)).astype(np.float32) for _ in range(2))
        k[0, 0, 1, :2] = [np.nan, np.inf]
        got = runner.run([q, k])
        assert_same_bits(got, plain_runner.run([q, k]))
        np.testing.assert_allclose(got[0], np.asarray(jax.jit(_repeat_once)(q, k)), rtol=1e-5, atol=1e-5)
