"""masked_softmax on a symbolic sequence: a causal mask built at run time (``Shape``, ``Range``) over
``f32[b,t,16]`` is bounded by ``_intervals`` at ``SYMBOLIC_SIZE`` places, so the rule fires as for a
static length. The numbers are those of the graph without the rule, bit for bit, and jax.jit's."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxconv
from jaxconv.onnx.rewrites import _intervals as intervals
from jaxconv.onnx.rewrites import masked_softmax
from jaxconv.runtimes.onnxrt import OnnxRunner

_LOWEST = np.finfo(np.float32).min
_SPECS = ("f32[b,t,16]", "f32[b,t,16]")


def _causal(t):
    return jnp.tril(jnp.ones((t, t), bool))


# (name, fn of queries and keys; the mask a Where or an additive bias, filled with finfo.min or -inf)
FORMS = {
    "where_lowest": lambda s, t: jnp.where(_causal(t), s, _LOWEST),
    "where_minus_inf": lambda s, t: jnp.where(_causal(t), s, -jnp.inf),
    "additive_bias": lambda s, t: s + jnp.where(_causal(t), 0.0, -jnp.inf),
}


def _attention(form):
    def fn(q, k):
        s = q @ jnp.swapaxes(k, -1, -2) * 0.25
        return jax.nn.softmax(FORMS[form](s, q.shape[1]), axis=-1)
    return fn


def _inputs(t: int, seed: int, edges: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    q, k = ((rng.standard_normal((2, t, 16)) * 2).astype(np.float32) for _ in range(2))
    if edges and t >= 6:  # NaN and +-inf scores, keys far beyond exp's range: x - m < -64 on kept places
        q[0, 3, 0] = np.nan
        q[1, 4, :] = np.inf
        k[1, 2, :] = -np.inf
        k[0, 1, :] = 40.0
        q[0, 5, :] = 30.0
    return q, k


def _ops(model) -> collections.Counter:
    ops = collections.Counter(n.op_type for n in model.graph.node)
    for n in model.graph.node:
        for a in n.attribute:
            if a.type == a.GRAPH:
                ops.update(b.op_type for b in a.g.node)
    return ops


def _by_mask_ifs(model) -> int:
    return sum(1 for n in model.graph.node if n.op_type == "If" and any(
        a.g.name == "masked_softmax_by_mask" for a in n.attribute if a.name in ("then_branch", "else_branch")))


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_causal_mask_over_a_symbolic_length_is_raised(monkeypatch, form):
    fn = _attention(form)
    model = jaxconv.to_onnx(fn, *_SPECS, check=False)
    with monkeypatch.context() as patch:
        patch.setattr(masked_softmax, "rewrite", lambda *args: 0)
        plain = jaxconv.to_onnx(fn, *_SPECS, check=False)
    ops, plain_ops = _ops(model), _ops(plain)
    assert {"Range", "Shape"} <= set(plain_ops)  # the mask is built at run time
    assert ops["ReduceMax"] == 1 and ops["Softmax"] == 1 and plain_ops["ReduceMax"] == 0, (ops, plain_ops)
    # the zeros multiplied by the mask built at run time (cast once), where a test holds
    assert _by_mask_ifs(model) == 1
    runner, plain_runner = OnnxRunner(model.SerializeToString()), OnnxRunner(plain.SerializeToString())
    for t in (1, 2, 7, 40, 130):
        for edges in (False, True):
            q, k = _inputs(t, t, edges)
            (got,), (before,) = runner.run([q, k]), plain_runner.run([q, k])
            want = np.asarray(jax.jit(fn)(q, k))
            for a in (before, want):
                np.testing.assert_array_equal(np.isnan(got), np.isnan(a))
            kept = (got != 0) & ~np.isnan(got)  # every place at or above max - 64: the same bits as before
            np.testing.assert_array_equal(got[kept].view(np.uint32), before[kept].view(np.uint32))
            raised = got == 0  # below max - 64: exp(-64) = 1.6e-28 or less before
            assert (before[raised] >= 0).all() and (before[raised] <= 1.7e-28).all()
            ok = ~np.isnan(want)
            np.testing.assert_allclose(got[ok], want[ok], rtol=1e-5, atol=1e-7)  # XLA's and ORT's MatMul
            masked = np.broadcast_to(~np.tril(np.ones((t, t), bool)), want.shape) & ok
            assert (got[masked] == 0).all() and (want[masked] == 0).all()
            if edges and t >= 6:
                assert np.isnan(got).any() and (got[kept] > 0).all()


def test_the_mask_is_counted_at_the_symbolic_size(monkeypatch):
    """A causal mask over n places fills (n - 1) / 2n of them: read at SYMBOLIC_SIZE where n is symbolic."""
    import onnx_ir as ir

    with monkeypatch.context() as patch:
        patch.setattr(masked_softmax, "rewrite", lambda *args: 0)
        plain = ir.serde.deserialize_model(jaxconv.to_onnx(_attention("where_lowest"), *_SPECS, check=False))
    (softmax,) = [n for n in plain.graph if n.op_type == "Softmax"]
    n = masked_softmax.SYMBOLIC_SIZE
    assert masked_softmax._masked_share(softmax.inputs[0]) == pytest.approx((n - 1) / (2 * n))
    (cond,) = {n.inputs[0] for n in plain.graph if n.op_type == "Where"}
    lo, hi = intervals.evaluate(cond, n)
    np.testing.assert_array_equal(np.broadcast_to(lo, (n, n)), ~np.tril(np.ones((n, n), bool)))
    np.testing.assert_array_equal(lo, hi)
    assert not (intervals.evaluate(cond)[0] >= 1).any()  # no size: nothing known of the mask


def test_a_range_expanded_then_reshaped_keeps_its_places():
    """``Range(0, n)`` over a symbolic n read at a size, broadcast by an Expand to ``[n, n]`` (left
    unexpanded in the bounds) and flattened by a Reshape: the row index of each place, not of the first n."""
    import onnx_ir as ir
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Shape", ["x"], ["n1"]),
             helper.make_node("Squeeze", ["n1"], ["n"]),
             helper.make_node("Range", ["zero", "n", "one"], ["r"]),
             helper.make_node("Unsqueeze", ["r", "axes"], ["col"]),
             helper.make_node("Shape", ["y"], ["yshape"]),
             helper.make_node("Expand", ["col", "yshape"], ["e"]),
             helper.make_node("Reshape", ["e", "flat"], ["out"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"]),
                     helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "n"])],
        [helper.make_tensor_value_info("out", TensorProto.INT64, None)],
        [numpy_helper.from_array(np.array(v, np.int64), k)
         for k, v in (("zero", 0), ("one", 1), ("axes", [1]), ("flat", [-1]))],
        value_info=[helper.make_tensor_value_info("e", TensorProto.INT64, ["n", "n"])])
    model = ir.serde.deserialize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))
    out, e = model.graph.outputs[0], model.graph.node(5).outputs[0]
    for size in (3, 5):
        lo, hi = intervals.evaluate(e, size)
        assert lo.shape == (size, 1)  # unexpanded
        np.testing.assert_array_equal(np.broadcast_to(lo, (size, size)), np.repeat(np.arange(size)[:, None], size, 1))
        lo, hi = intervals.evaluate(out, size)
        np.testing.assert_array_equal(lo, np.repeat(np.arange(size), size))
        np.testing.assert_array_equal(lo, hi)
    assert intervals.evaluate(out)[0].ndim == 0  # no size: any count, nothing known
