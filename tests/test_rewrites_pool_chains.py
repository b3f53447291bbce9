"""Max pooling in conv layers (rewrites.pooling.chains): the pools read [N, C, H, W] itself, a chain of
conv and pool layers runs plain with one finiteness test and one If, and the numbers are JAX's, NaN,
+-inf (a window of -inf too) and -0.0 inputs included. JAX's are computed op by op: jax.jit fuses the
conv, its relu and the pool into code that drops NaN (README, "XLA on the CPU fuses ...")."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest
from jax import lax

import jaxconv
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_floats

_RNG = np.random.default_rng(11)
_W1 = np.abs(_RNG.standard_normal((3, 3, 1, 8))).astype(np.float32)  # HWIO, positive: -inf inputs stay -inf
_W2 = _RNG.standard_normal((3, 3, 8, 16)).astype(np.float32)
_W3 = _RNG.standard_normal((3, 3, 16, 16)).astype(np.float32)
_DENSE = _RNG.standard_normal((16 * 2 * 2, 5)).astype(np.float32)
_NHWC = ("NHWC", "HWIO", "NHWC")


def _conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=_NHWC)


def _max_pool(x, window=2, stride=2, padding="VALID"):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, window, window, 1), (1, stride, stride, 1), padding)


def convnet(x):
    """Haiku's convnet: three conv, relu and max-pool layers, then a dense layer."""
    for w in (_W1, _W2, _W3):
        x = _max_pool(jax.nn.relu(_conv(x, w)))
    return x.reshape(x.shape[0], -1) @ _DENSE


def no_relu(x):
    """Pools of the conv output itself: a window of -inf stays -inf, a NaN anywhere in it wins."""
    y = _max_pool(_conv(x, _W1), 3, 2, ((0, 0), (1, 1), (1, 1), (0, 0)))
    return _max_pool(_conv(y, _W2)).sum(axis=(1, 2))


def residual(x):
    """ResNet's stem: conv, relu, a padded 3x3 max pool, then a block whose shortcut reads the pool."""
    y = _max_pool(jax.nn.relu(_conv(x, _W1)), 3, 2, ((0, 0), (1, 1), (1, 1), (0, 0)))
    z = jax.nn.relu(_conv(jax.nn.relu(_conv(y, _W1[:, :, :1].repeat(8, 2) / 8)), _W1[:, :, :1].repeat(8, 2)) + y)
    return z.mean(axis=(1, 2))


def min_pool(x):
    y = _conv(x, _W1)
    return lax.reduce_window(y, jnp.inf, lax.min, (1, 2, 2, 1), (1, 2, 2, 1), "VALID").sum(axis=(1, 2))


def _inputs(nan: bool = True) -> list[np.ndarray]:
    finite = _RNG.standard_normal((2, 16, 16, 1)).astype(np.float32)
    finite[0, :3, :3, 0] = -0.0
    nan_first = finite.copy()
    nan_first[0, 5, 6, 0] = np.nan
    nan_late = finite.copy()
    nan_late[1, 15, 15, 0] = np.nan
    infs = finite.copy()
    infs[0, 8:12, 8:12, 0] = -np.inf  # whole windows of -inf after the first conv
    infs[1, 2, 2, 0] = np.inf
    infs[1, 12, 3, 0] = -np.inf
    huge = np.full_like(finite, 3e38)  # finite, the convs overflow: the exact branch, the same numbers
    return [finite, nan_first, nan_late, infs, huge] if nan else [finite, infs, huge]


def _model(fn):
    """The model of ``fn`` on one-channel NHWC input, and its op counts; the input's NHWC -> NCHW move of
    that one channel is a Reshape (no data moves) and is not counted with the planes' Reshapes."""
    model = jaxconv.to_onnx(fn, jax.ShapeDtypeStruct((2, 16, 16, 1), np.float32), check=False)
    inputs = {i.name for i in model.graph.input}
    layout = [n for n in model.graph.node if n.op_type == "Reshape" and n.input[0] in inputs]
    assert len(layout) == 1 and not any(n.op_type == "Transpose" and n.input[0] in inputs for n in model.graph.node)
    return model, collections.Counter(n.op_type for n in model.graph.node if n not in layout)


def _branches(model: onnx.ModelProto) -> tuple[list[str], list[str]]:
    (branch,) = [n for n in model.graph.node if n.op_type == "If"]
    graphs = {a.name: a.g for a in branch.attribute}
    assert graphs["else_branch"].name == "pool_guard"  # If(plain pools exact, then: plain, else: guarded)
    return [n.op_type for n in graphs["else_branch"].node], [n.op_type for n in graphs["then_branch"].node]


def _op_by_op(fn, x):
    with jax.disable_jit():
        return np.asarray(fn(x))


# XLA's min pooling on the CPU drops NaN where StableHLO (and the ONNX) keeps it (README): no NaN for min_pool
@pytest.mark.parametrize("fn, nan", [(convnet, True), (no_relu, True), (residual, True), (min_pool, False)])
def test_pool_layers_give_jax_numbers_on_edge_values(fn, nan):
    model, _ = _model(fn)
    runner = OnnxRunner(model.SerializeToString())
    for x in _inputs(nan):
        (got,) = runner.run([x])
        assert_same_floats(got, _op_by_op(fn, x), 2e-4, 2e-4)


def test_a_chain_of_conv_and_pool_layers_runs_plain_behind_one_test():
    model, ops = _model(convnet)
    assert ops["If"] == 1 and ops["MaxPool"] == 3, ops  # the plain pools, each once
    assert ops["Reshape"] == 1, ops  # the flatten: no [N*C, 1, H, W] planes
    assert ops["Abs"] == 0, ops  # relu's -0.0 reaches only a max pool, then a conv: no fix
    assert ops["GlobalAveragePool"] == 3 and ops["Sum"] == 1, ops  # one test for the three pools' inputs
    guard, plain = _branches(model)
    assert plain == ["Identity"]
    assert collections.Counter(guard)["MaxPool"] == 6 and collections.Counter(guard)["Conv"] == 3, guard


def test_the_layers_after_the_pool_run_plain_up_to_the_mean():
    model, ops = _model(residual)
    assert ops["If"] == 1 and ops["MaxPool"] == 1, ops
    made = {o: n.op_type for n in model.graph.node for o in n.output}
    (pool,) = [n for n in model.graph.node if n.op_type == "MaxPool"]
    assert made[pool.input[0]] != "Reshape"  # [N, C, H, W] itself
    guard, _ = _branches(model)
    assert collections.Counter(guard)["Conv"] == 3, guard  # the stem and the block, from the input


def test_finite_inputs_whose_test_overflows_take_the_exact_branch():
    """3e38 everywhere: the sums the test adds overflow, so the guarded layers run; same numbers."""
    x = np.full((2, 16, 16, 1), 3e38, np.float32)
    model, _ = _model(convnet)
    (got,) = OnnxRunner(model.SerializeToString()).run([x])
    want = _op_by_op(convnet, x)
    assert np.isnan(want).any() or np.isinf(want).any()  # the edge values reach the output
    assert_same_floats(got, want, 2e-4, 2e-4)


def two_pools(x):
    """The second conv's weights negative and huge: its sums overflow, its pool sees windows of -inf."""
    y = _max_pool(_conv(x, _W1))
    return _max_pool(_conv(y, -np.abs(_W2) * np.float32(1e37)))


def test_a_later_pool_input_that_overflows_takes_the_exact_branch():
    """The first pool's input finite, the second's -inf in whole windows: its test alone fires, and
    the pool gives -inf (ORT's blocked MaxPool alone gives -FLT_MAX there)."""
    x = np.abs(_RNG.standard_normal((2, 16, 16, 1))).astype(np.float32)
    with jax.disable_jit():
        first = _conv(x, _W1)
        want = _op_by_op(two_pools, x)
    assert np.isfinite(first).all() and np.isneginf(want).any()
    model = jaxconv.to_onnx(two_pools, jax.ShapeDtypeStruct(x.shape, x.dtype), check=False)
    assert collections.Counter(n.op_type for n in model.graph.node)["MaxPool"] == 2
    (got,) = OnnxRunner(model.SerializeToString()).run([x])
    assert_same_floats(got, want, 2e-4, 2e-4)


def test_the_checked_conversion_passes():
    jaxconv.to_onnx(convnet, jax.ShapeDtypeStruct((2, 16, 16, 1), np.float32), check=True)
    jaxconv.to_onnx(residual, jax.ShapeDtypeStruct((2, 16, 16, 1), np.float32), check=True)


def test_the_tf_ops_route_translates_the_test():
    """The TF route (tf.onnx_to_tf) reads the same ONNX: GlobalAveragePool included."""
    pytest.importorskip("tensorflow")
    from jaxconv.program import trace
    from jaxconv.tf.onnx_to_tf import for_program

    model, _, concrete = for_program(trace(convnet, [jax.ShapeDtypeStruct((2, 16, 16, 1), np.float32)]))
    assert collections.Counter(n.op_type for n in model.graph.node)["GlobalAveragePool"] == 3
    for x in _inputs()[:2]:
        (got,) = [np.asarray(v) for v in concrete(x).values()]
        assert_same_floats(got, _op_by_op(convnet, x), 2e-4, 2e-4)


@pytest.mark.parametrize("fn", [
    lambda x: _max_pool(jax.nn.relu(x)),  # the pool's zeros are the output's
    lambda x: jax.nn.relu(x) * np.float32(2.0) + np.float32(-0.0),
    lambda x: jnp.maximum(jax.nn.relu(x) - np.float32(0.0), -1.0),
])
def test_relu_zero_signs_stay_where_an_output_shows_them(fn):
    """Relu(-0.0) is -0.0 in ORT, +0.0 in jax: through a pool, a sum or a product to an output, the
    fix stays (rewrites.activations)."""
    x = np.full((2, 4, 4, 3), -0.0, np.float32)
    x[0, 0, 0, 0], x[1, 2, 3, 1] = -1.5, 2.0
    model = jaxconv.to_onnx(fn, jax.ShapeDtypeStruct(x.shape, x.dtype), check=False)
    (got,) = OnnxRunner(model.SerializeToString()).run([x])
    want = np.asarray(jax.jit(fn)(x))
    assert (want == 0).any() and not np.signbit(want[want == 0]).any()
    assert_same_floats(got, want, 0, 0)


def after_sum(x):
    """A pool of a residual sum: ORT would reorder the whole sum for a blocked MaxPool."""
    y = _conv(x, _W1)
    return _max_pool(jax.nn.relu(_conv(y, _W1[:, :, :1].repeat(8, 2)) + y)).sum(axis=(1, 2))


def test_a_pool_of_a_residual_sum_keeps_its_planes_in_one_if():
    model, ops = _model(after_sum)
    assert ops["If"] == 1 and ops["MaxPool"] == 0 and ops["Reshape"] == 2, ops  # [N*C, 1, H, W] and back
    runner = OnnxRunner(model.SerializeToString())
    for x in _inputs(nan=False):  # XLA's pooling of this [2, 16, 16, 8] drops NaN even op by op (README)
        (got,) = runner.run([x])
        assert_same_floats(got, _op_by_op(after_sum, x), 2e-4, 2e-4)


def _padded_pool(x):
    return _max_pool(x, 3, 1, "SAME")


@pytest.mark.parametrize("fn", [_padded_pool, no_relu])
def test_inputs_with_inf_alone_run_plain_and_exact(fn):
    """The test sends a pool input with +inf but no NaN and no -inf (also finite values whose sum
    overflows to +inf) down the plain branch: ORT's MaxPool pools +inf exactly, whole windows of it
    and padded edges included."""
    x = np.abs(_RNG.standard_normal((2, 16, 16, 1))).astype(np.float32)
    x[0, :4, :4, 0] = np.inf  # whole windows of +inf, at the padded corner
    x[1, 7, 9, 0] = np.inf
    huge = np.full_like(x, 3e38)
    model, _ = _model(fn)
    runner = OnnxRunner(model.SerializeToString())
    for v in (x, huge):
        (got,) = runner.run([v])
        assert_same_floats(got, _op_by_op(fn, v), 2e-4, 2e-4)


def three_channels(x):
    """A pool of 3 channels (Equinox's CNN): not ORT's blocked layout, so the pool reads [N, C, H, W]."""
    return _max_pool(_conv(x, _W1[..., :3]), 3, 2, ((0, 0), (1, 1), (1, 1), (0, 0)))


def test_a_pool_of_few_channels_reads_its_input_without_planes():
    model, ops = _model(three_channels)
    assert ops["If"] == 1 and ops["Reshape"] == 0, ops
    runner = OnnxRunner(model.SerializeToString())
    for x in _inputs():
        (got,) = runner.run([x])
        assert_same_floats(got, _op_by_op(three_channels, x), 2e-4, 2e-4)
