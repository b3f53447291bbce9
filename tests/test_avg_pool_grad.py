"""Average and sum pooling in a training step: the forward window sum (rewrites.sum_pool, also with a symbolic
batch) and its gradient, which the reduce_window lowering computes as a nearest-neighbour upsampling of the
cotangent where the pool's windows do not overlap (``reduce_window.upsampled_window_sum``).

The gradient's form is exact (each output is ``0 + g + 0 ...``): bit for bit with jax.jit, -0 turned +0,
NaN, infinities and huge values kept. Subnormals are the exception XLA makes (it flushes them); there
the new form keeps the bits of the Conv it replaces.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export, lax

from jaxconv.onnx.ops import reduce_window
from jaxconv.onnx.rewrites import sum_pool
from lowering_check import assert_same_bits, assert_same_floats
from lowering_check import convert_and_run as _convert


def _sum(window, strides=None, padding="VALID"):
    return lambda x: lax.reduce_window(x, 0.0, lax.add, window, strides or window, padding)


# name: (pool, input shape, expected form of its gradient: the ONNX op that upsamples, or Conv)
POOLS = {
    "avg_2x2_nhwc": (lambda x: nn.avg_pool(x, (2, 2), (2, 2)), (2, 8, 10, 16), "Gather"),
    "avg_2x2_same_odd": (lambda x: nn.avg_pool(x, (2, 2), (2, 2), padding="SAME"), (2, 9, 7, 16), "Gather"),
    "avg_3x3_valid_cropped": (lambda x: nn.avg_pool(x, (3, 3), (3, 3)), (2, 11, 10, 16), "Gather"),
    "sum_2x2_nchw": (_sum((1, 1, 2, 2)), (2, 16, 10, 8), "Resize"),
    "sum_2x3_nchw": (_sum((1, 1, 2, 3)), (2, 3, 9, 9), "Resize"),
    "sum_5x7_nchw": (_sum((1, 1, 5, 7)), (1, 2, 11, 22), "Resize"),
    "sum_1d_nlc": (_sum((1, 3, 1)), (2, 11, 16), "Gather"),
    "sum_1d_ncl": (_sum((1, 1, 2)), (2, 4, 11), "Resize"),
    "sum_2x2_chw": (_sum((1, 2, 2)), (3, 8, 8), "Resize"),  # equinox's channel-first pools
    "avg_3x3_s2_same": (lambda x: nn.avg_pool(x, (3, 3), (2, 2), padding="SAME"), (2, 9, 8, 16), "Conv"),
    "avg_3x3_s2_same_no_pad_count": (
        lambda x: nn.avg_pool(x, (3, 3), (2, 2), padding="SAME", count_include_pad=False),
        (2, 9, 8, 16), "Conv"),
}


def _cotangent(shape, dtype=np.float32, subnormal=False) -> np.ndarray:
    ct = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    huge = float(jnp.finfo(dtype).max)
    edges = [-0.0, np.nan, np.inf, -np.inf, huge, -huge, 0.0, -np.nan]
    ct.flat[:len(edges)] = edges
    ct.flat[-3:] = [-0.0, -0.0, -0.0]  # a corner of -0 alone: XLA's 0 + (-0) is +0
    if subnormal:
        ct.flat[len(edges):len(edges) + 2] = [1e-45, -2e-40]
    return ct.astype(dtype)


def _gradient(pool, shape, dtype=np.float32):
    """The pool's vjp as a function of its cotangent: the gradient alone, nothing computed around it."""
    x0 = jnp.zeros((1, *shape[1:]), dtype)

    def grad(ct):
        x = jnp.broadcast_to(x0, (ct.shape[0], *shape[1:]))
        return jax.vjp(pool, x)[1](ct)[0]

    return grad, jax.eval_shape(pool, jnp.zeros(shape, dtype)).shape


def _without_the_upsampling(monkeypatch) -> None:
    monkeypatch.setattr(reduce_window, "upsampled_window_sum", lambda *args, **kwargs: None)


@pytest.mark.parametrize("name", list(POOLS))
def test_gradient_is_jit_s_bits_in_the_fast_form(name):
    pool, shape, form = POOLS[name]
    grad, ct_shape = _gradient(pool, shape)
    ct = _cotangent(ct_shape)
    ops, (got,) = _convert(grad, ct)
    want = np.asarray(jax.jit(grad)(ct))
    assert_same_bits([got], [want])
    assert not np.signbit(want[want == 0]).any()
    if form == "Conv":  # overlapping windows: the general window sum stays
        assert ops["Conv"] >= 1 and ops["Gather"] == ops["Resize"] == 0, ops
    else:
        assert ops[form] >= 1 and ops["Conv"] == 0, ops


@pytest.mark.parametrize("name", [n for n, (_, _, form) in POOLS.items() if form != "Conv"])
def test_gradient_keeps_the_conv_s_bits_on_subnormals(monkeypatch, name):
    """XLA flushes subnormals; the upsampling passes them on as the Conv of ones did."""
    pool, shape, _ = POOLS[name]
    grad, ct_shape = _gradient(pool, shape)
    ct = _cotangent(ct_shape, subnormal=True)
    ops, got = _convert(grad, ct)
    with monkeypatch.context() as patch:
        _without_the_upsampling(patch)
        plain_ops, plain = _convert(grad, ct)
    assert ops["Conv"] == 0 and plain_ops["Conv"] == 1, (ops, plain_ops)
    assert_same_bits(got, plain)


@pytest.mark.parametrize("dtype, name, form", [
    (jnp.bfloat16, "avg_2x2_nhwc", "Gather"),  # no bfloat16 Resize in ORT
    (np.float16, "sum_2x2_nchw", "Resize"),
    (np.float16, "avg_2x2_nhwc", "Gather"),
])
def test_half_float_gradients_are_jit_s_bits(dtype, name, form):
    pool, shape, _ = POOLS[name]
    grad, ct_shape = _gradient(pool, shape, dtype)
    ct = _cotangent(ct_shape, dtype)
    ops, (got,) = _convert(grad, ct)
    assert ops[form] >= 1 and ops["Conv"] == 0, ops
    assert_same_bits([got], [np.asarray(jax.jit(grad)(ct))])


@pytest.mark.parametrize("name", ["avg_2x2_nhwc", "sum_2x2_nchw", "avg_2x2_same_odd"])
def test_gradient_with_a_symbolic_batch(name):
    pool, shape, form = POOLS[name]
    grad, ct_shape = _gradient(pool, shape)
    b, = export.symbolic_shape("b")
    spec = jax.ShapeDtypeStruct((b, *ct_shape[1:]), np.float32)
    for batch in (1, 3):
        ct = _cotangent((batch, *ct_shape[1:]))
        ops, (got,) = _convert(grad, ct, specs=[spec])
        assert ops[form] >= 1 and ops["Conv"] == 0, ops
        assert_same_bits([got], [np.asarray(jax.jit(grad)(ct))])


def test_a_window_that_is_not_the_interleave_s_period_stays_a_conv():
    """A stride-1 window sum over a zero-interleaved pad written by hand, with windows longer than the
    period: each holds two values, no upsampling."""
    def fn(g):
        spread = lax.pad(g, 0.0, [(0, 0, 0), (1, 1, 1), (1, 1, 1), (0, 0, 0)])
        return lax.reduce_window(spread, 0.0, lax.add, (1, 3, 3, 1), (1, 1, 1, 1), "VALID")

    ct = _cotangent((2, 5, 6, 16))
    ops, (got,) = _convert(fn, ct)
    assert ops["Conv"] == 1 and ops["Gather"] == 0, ops
    assert_same_floats(got, jax.jit(fn)(ct), 1e-6, 0)


def test_a_window_longer_than_the_input_has_no_cotangent_to_repeat():
    """A 3x3 pool of 2 rows has no output rows: the cotangent is empty there, the gradient all +0."""
    pool = POOLS["avg_3x3_valid_cropped"][0]
    grad, ct_shape = _gradient(pool, (2, 2, 9, 16))
    assert ct_shape == (2, 0, 3, 16)
    ct = np.zeros(ct_shape, np.float32)
    ops, (got,) = _convert(grad, ct)
    assert_same_bits([got], [np.asarray(jax.jit(grad)(ct))])


@pytest.mark.parametrize("fill, init", [(1.0, 0.0), (0.0, 1.0)])
def test_a_pad_value_or_init_other_than_zero_stays_a_conv(fill, init):
    """The upsampling holds for zeros between the values and a +0 init (JAX's transpose) only."""
    def fn(g):
        spread = lax.pad(g, fill, [(0, 0, 0), (1, 1, 1), (1, 1, 1), (0, 0, 0)])
        return lax.reduce_window(spread, init, lax.add, (1, 2, 2, 1), (1, 1, 1, 1), "VALID")

    ct = _cotangent((2, 5, 6, 16))
    ops, (got,) = _convert(fn, ct)
    assert ops["Gather"] == ops["Resize"] == 0, ops
    assert_same_floats(got, jax.jit(fn)(ct), 1e-6, 0)


def _train_loss_grad(pool):
    """jax.grad of a loss through the pool: the forward sum and its gradient in one program."""
    def loss(x):
        return jnp.sum(jnp.tanh(pool(x)) * jnp.arange(1.0, 17.0))

    return jax.grad(loss)


def _edge_input(shape) -> np.ndarray:
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    x[0, 0, 0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    x[1, 2:4, 2:4, 5] = -0.0
    x[1, 4, 4, 6], x[1, 4, 5, 6] = 3e38, 3e38  # a window sum that overflows
    return x


@pytest.mark.parametrize("window, padding", [((2, 2), "VALID"), ((3, 3), "SAME")])
def test_forward_and_gradient_keep_the_bits_of_the_graph_without_them(monkeypatch, window, padding):
    """Both changes are exact: with and without them the outputs are the same bits; jax.jit's within the
    tolerance of ORT's summation order."""
    fn = _train_loss_grad(lambda x: nn.avg_pool(x, window, (2, 2), padding=padding))
    x = _edge_input((2, 8, 8, 16))
    b, = export.symbolic_shape("b")
    for specs in (None, [jax.ShapeDtypeStruct((b, 8, 8, 16), np.float32)]):
        ops, got = _convert(fn, x, specs=specs)
        with monkeypatch.context() as patch:
            _without_the_upsampling(patch)
            patch.setattr(sum_pool, "rewrite", lambda graph: 0)
            _, plain = _convert(fn, x, specs=specs)
        assert ops["AveragePool"] == 1, ops
        assert (ops["Conv"] == 0) == (window == (2, 2)), ops
        assert_same_bits(got, plain)
        assert_same_floats(got[0], jax.jit(fn)(x), 1e-5, 1e-6)


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_a_mean_pool_of_symbolic_batch_is_one_average_pool(monkeypatch, layout):
    """With a symbolic batch the planes' count is symbolic: the channels still come from the Reshape
    before the pool's Conv, and the Shape that reads the pooled sizes becomes a constant."""
    window = (1, 2, 2, 1) if layout == "NHWC" else (1, 1, 2, 2)

    def fn(x):
        return jax.nn.relu(lax.reduce_window(x, 0.0, lax.add, window, window, "VALID") / 4.0)

    x = _edge_input((2, 8, 8, 16))
    if layout == "NCHW":
        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    b, = export.symbolic_shape("b")
    specs = [jax.ShapeDtypeStruct((b, *x.shape[1:]), np.float32)]
    ops, got = _convert(fn, x, specs=specs)
    assert ops["AveragePool"] == 1 and ops["Conv"] == ops["Div"] == 0, ops
    with monkeypatch.context() as patch:
        patch.setattr(sum_pool, "rewrite", lambda graph: 0)
        plain_ops, plain = _convert(fn, x, specs=specs)
    assert plain_ops["Conv"] == 1, plain_ops
    assert_same_bits(got, plain)
    assert_same_floats(got[0], jax.jit(fn)(x), 1e-5, 1e-6)
