"""The signed-zero rule (jaxconv.onnx.rewrites.zeros): fixes that cannot change a result are dropped,
sums over their count become ReduceMean, the other fixes become one Sum; jax.jit's numbers kept
(NaN, infinities, signed zeros), and the ONNX Runtime behaviour the rule relies on."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from jaxconv.onnx.rewrites import layer_norm
from lowering_check import assert_same_floats
from lowering_check import convert_and_run as _convert

NAN, INF = np.float32(np.nan), np.float32(np.inf)




def _same(got: np.ndarray, want: np.ndarray, rtol: float = 2e-6, atol: float = 1e-6) -> None:
    assert_same_floats(got, want, rtol, atol)


def _rows(dtype=np.float32) -> np.ndarray:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((7, 8)).astype(dtype)
    x[0] = -0.0
    x[1, :4] = -0.0
    x[1, 4:] = 0.0
    x[2, 3] = np.nan
    x[3, 1] = np.inf
    x[4, :] = 0.0
    x[5, 2] = -np.inf
    return x


def _layer_norm(x, g, b):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + 1e-5) * g + b


def test_layer_norm_with_a_bias_has_no_fixes_and_reduce_means(monkeypatch):
    """A bias with no zero erases every zero sign; the variance is a sum of squares (never -0). (With the
    layer_norm rule off: the norm is the zeros rule's subject here, not the op it becomes.)"""
    monkeypatch.setattr(layer_norm, "rewrite", lambda graph, opset: 0)
    g = np.linspace(0.5, 1.5, 8, dtype=np.float32)
    b = np.linspace(-1.0, 1.0, 8, dtype=np.float32) + np.float32(0.01)
    fn = lambda x: _layer_norm(x, g, b)  # noqa: E731
    x = _rows()
    ops, (got,) = _convert(fn, x)
    assert ops["ReduceMean"] == 2 and ops["ReduceSum"] == 0 and ops["Where"] == 0 and ops["Equal"] == 0, ops
    _same(got, jax.jit(fn)(x))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=str)
def test_normalisation_without_a_bias_keeps_the_mean_fix_as_one_sum(monkeypatch, dtype):
    """Nothing erases the mean's sign ((x - mean) of a -0.0 row is -0.0 in XLA): the fix stays, as Sum
    (the layer_norm rule off; float64 stays written out anyway)."""
    monkeypatch.setattr(layer_norm, "rewrite", lambda graph, opset: 0)
    def fn(x):
        mu = jnp.mean(x, axis=-1, keepdims=True)
        return (x - mu) / jnp.sqrt(jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True) + 1e-5)

    x = _rows(dtype)
    with jax.enable_x64(dtype == np.float64):
        ops, (got,) = _convert(fn, x)
        want = np.asarray(jax.jit(fn)(x))
    assert ops["Sum"] == 1 and ops["Where"] == 0 and ops["Equal"] == 0 and ops["ReduceMean"] == 1, ops
    _same(got, want, rtol=1e-5)
    assert np.signbit(want[0]).all()


def test_sum_of_squares_drops_its_fix_and_plain_sum_keeps_it():
    fns = {"squares": lambda x: jnp.sum(x * x, axis=-1), "plain": lambda x: jnp.sum(x, axis=-1),
           "mean of squares": lambda x: jnp.mean(jnp.abs(x), axis=-1)}
    x = _rows()
    ops, (got,) = _convert(fns["squares"], x)
    assert ops["Sum"] == 0 and ops["Where"] == 0, ops
    _same(got, jax.jit(fns["squares"])(x))
    ops, (got,) = _convert(fns["plain"], x)
    assert ops["Sum"] == 1, ops
    _same(got, jax.jit(fns["plain"])(x))
    assert not np.signbit(got[0])  # a sum of -0.0 is +0.0 in XLA
    ops, (got,) = _convert(fns["mean of squares"], x)
    assert ops["ReduceMean"] == 1 and ops["Sum"] == 0, ops
    _same(got, jax.jit(fns["mean of squares"])(x))


def test_mean_with_a_zero_sign_reaching_the_output_keeps_sum_and_div():
    """A mean whose fix stays stays a sum, the fix and a division (the fix acts on the sum)."""
    fn = lambda x: jnp.mean(x, axis=-1)  # noqa: E731
    x = _rows()
    ops, (got,) = _convert(fn, x)
    assert ops["ReduceMean"] == 0 and ops["Sum"] == 1, ops
    _same(got, jax.jit(fn)(x))


def test_relu_fix_dropped_before_a_residual_add_with_a_bias():
    """relu(x) feeds a residual add followed by a nonzero bias: its Abs (the -0 fix after Relu) goes."""
    w = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32) * 0.3
    b = np.full(8, 0.25, np.float32)

    def fn(x):
        h = jax.nn.relu(x @ w)
        return h + h @ w + b

    x = _rows()
    ops, (got,) = _convert(fn, x)
    assert ops["Relu"] == 1 and ops["Abs"] == 0 and ops["Where"] == 0, ops
    _same(got, jax.jit(fn)(x), rtol=1e-5, atol=1e-6)


def test_relu_fix_kept_where_the_sign_reaches_the_output():
    w = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32) * 0.3

    def fn(x):
        h = jax.nn.relu(x @ w)
        return h + h @ w

    x = _rows()
    x[6] = -1.0
    ops, (got,) = _convert(fn, x)
    _same(got, jax.jit(fn)(x), rtol=1e-5, atol=1e-6)


def _ort(nodes, inits: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """One float input ``x``, output ``y``, ORT with every graph optimisation on."""
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", elem, list(x.shape))],
                              [helper.make_tensor_value_info("y", elem, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=str)
def test_ort_keeps_a_sum_with_zero_and_drops_an_add_of_zero(dtype):
    """What the rule relies on: Sum(v, +0) turns -0 into +0 after ORT's optimisations; Add(v, +0) does not."""
    x = np.array([-0.0, 0.0, np.nan, -1.0, 1.0, np.inf, -np.inf, 1e-30, -0.0], dtype).reshape(1, -1)
    zero = {"z": np.array(0.0, dtype)}
    negs = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"])]
    back = [helper.make_node("Neg", ["c"], ["y"])]
    summed = _ort(negs + [helper.make_node("Sum", ["b", "z"], ["c"])] + back, zero, x)
    np.testing.assert_array_equal(np.signbit(summed), np.signbit(-(x + dtype(0))))
    added = _ort(negs + [helper.make_node("Add", ["b", "z"], ["c"])] + back, zero, x)
    assert not np.signbit(added[0, 0])  # -(-0.0): the Add was dropped
    bias = {"z": np.zeros(x.shape[1], dtype)}  # a zero bias of more than one element is added
    added = _ort(negs + [helper.make_node("Add", ["b", "z"], ["c"])] + back, bias, x)
    assert np.signbit(added[0, 0])


def test_ort_reduce_mean_is_reduce_sum_over_count_bit_for_bit():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((4, 7, 300)) * 10 ** rng.uniform(-3, 3, (4, 7, 300))).astype(np.float32)
    axes = {"axes": np.array([2], np.int64)}
    total = _ort([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)], axes, x)
    mean = _ort([helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=1)], axes, x)
    np.testing.assert_array_equal((total / np.float32(300)).view(np.int32), mean.view(np.int32))


def test_ort_relu_of_negatives_is_positive_zero():
    x = -np.linspace(1e-30, 5.0, 37, dtype=np.float32).reshape(1, -1)
    got = _ort([helper.make_node("Relu", ["x"], ["y"])], {}, x)
    assert not np.signbit(got).any()

