"""A CNN exported with a symbolic batch (``f32[b, h, w, c]``) gets its static export's graph: the max pool reads
``[N, C, H, W]`` itself rather than ``[N*C, 1, H, W]`` planes between two Reshapes (rewrites.pooling), the mean
pool keeps no Reshape to ``[-1, C, h, w]`` (reshape_rules), and the NHWC flatten before the classifier goes
into the weight's rows (rewrites.head_merge). The numbers are JAX's at two batch sizes, NaN, ±inf and -0.0
included; JAX's computed op by op (jax.jit fuses a conv, its relu and the pool into code that drops NaN)."""

from __future__ import annotations

import collections

import jax
import numpy as np
import onnx
import onnx_ir as ir
import pytest
from jax import lax
from onnx import TensorProto, helper

import jaxconv
from jaxconv.onnx import passes
from jaxconv.onnx.rewrites import symbolic as symbolic_dims
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_floats

_RNG = np.random.default_rng(5)
_STEM = np.abs(_RNG.standard_normal((3, 3, 3, 8))).astype(np.float32)  # HWIO: 8 channels, ORT's block
_BLOCK = (_RNG.standard_normal((3, 3, 8, 8)) / 8).astype(np.float32)
_DENSE = _RNG.standard_normal((4 * 4 * 8, 5)).astype(np.float32)
_NHWC = ("NHWC", "HWIO", "NHWC")


def _conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=_NHWC)


def cnn(x):
    """ResNet's stem (conv, relu, a padded 3x3 max pool), a residual block, a 2x2 mean pool, a dense layer
    over the NHWC flatten."""
    y = jax.nn.relu(_conv(x, _STEM))
    y = lax.reduce_window(y, -np.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), ((0, 0), (1, 1), (1, 1), (0, 0)))
    y = jax.nn.relu(_conv(jax.nn.relu(_conv(y, _BLOCK)), _BLOCK) + y)
    y = lax.reduce_window(y, np.float32(0), lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / np.float32(4)
    return y.reshape(y.shape[0], -1) @ _DENSE


_WIDE = (_RNG.standard_normal((3, 3, 8, 16)) / 8).astype(np.float32)
_HALF = (_RNG.standard_normal((3, 3, 8, 8)) / 8).astype(np.float32)
_SQUEEZE = _RNG.standard_normal((1, 1, 16, 4)).astype(np.float32)
_EXCITE = _RNG.standard_normal((1, 1, 4, 16)).astype(np.float32)


def padded(x):
    """Keras' ZeroPadding2D before a VALID conv: the padding becomes the Conv's own (rewrites.early_transposes)."""
    y = jax.numpy.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    return jax.nn.relu(lax.conv_general_dilated(y, _STEM, (2, 2), "VALID", dimension_numbers=_NHWC))


def cross_stage(x):
    """CSPDarknet's block: the channels split in halves, one through a conv, joined again; the halves' Slices
    one Split, which the layout rule moves the NCHW convs' Transposes through (the conv after the Slice knows
    its spatial sizes: rewrites.symbolic)."""
    y = jax.nn.relu(_conv(x, _STEM))
    y = jax.nn.relu(_conv(y, _WIDE))
    a, b = y[..., :8], y[..., 8:]
    a = jax.nn.relu(_conv(a, _HALF)) + a
    return jax.nn.relu(_conv(jax.numpy.concatenate([a, b], axis=-1), _WIDE[:, :, :8].repeat(2, 2)))


def squeeze_excite(x):
    """EfficientNet's squeeze-excite: a channel mean through two pointwise convs scales the channels (the mean's
    Unsqueeze and the Reshape to pixels before the first conv's MatMul one Reshape: reshape_rules)."""
    y = jax.nn.relu(_conv(jax.nn.relu(_conv(x, _STEM)), _WIDE))
    s = y.mean(axis=(1, 2))[:, None, None, :]
    s = jax.nn.relu(lax.conv_general_dilated(s, _SQUEEZE, (1, 1), "VALID", dimension_numbers=_NHWC))
    s = jax.nn.sigmoid(lax.conv_general_dilated(s, _EXCITE, (1, 1), "VALID", dimension_numbers=_NHWC))
    return y * s


def _spec(batch: str | int) -> jax.ShapeDtypeStruct:
    shape = jax.export.symbolic_shape(f"{batch}, 16, 16, 3") if isinstance(batch, str) else (batch, 16, 16, 3)
    return jax.ShapeDtypeStruct(shape, np.float32)


def _ops(model: onnx.ModelProto) -> collections.Counter:
    return collections.Counter(n.op_type for n in model.graph.node)


@pytest.mark.parametrize("fn", [padded, cross_stage, squeeze_excite])
def test_the_layers_symbolic_batch_graph_is_the_static_one(fn):
    static = jaxconv.to_onnx(fn, _spec(2), check=False)
    symbolic = jaxconv.to_onnx(fn, _spec("b"), check=False)
    assert _ops(symbolic) == _ops(static), (_ops(symbolic), _ops(static))
    assert _ops(symbolic)["Transpose"] == 2, _ops(symbolic)  # NHWC to NCHW at the input, back at the output
    assert _ops(symbolic)["Pad"] == 0 and _ops(symbolic)["Unsqueeze"] == 0, _ops(symbolic)
    runner = OnnxRunner(symbolic.SerializeToString())
    for x in _inputs(3):
        (got,) = runner.run([x])
        assert_same_floats(got, np.asarray(jax.jit(fn)(x)), 2e-4, 2e-4)


def test_the_symbolic_batch_graph_is_the_static_one():
    static = jaxconv.to_onnx(cnn, _spec(2), check=False)
    symbolic = jaxconv.to_onnx(cnn, _spec("b"), check=False)
    assert _ops(symbolic) == _ops(static), (_ops(symbolic), _ops(static))
    ops = _ops(symbolic)
    assert ops["Transpose"] == 1 and ops["AveragePool"] == 1 and ops["If"] == 1, ops
    made = {o: n for n in symbolic.graph.node for o in n.output}
    (layout,) = [n for n in symbolic.graph.node if n.op_type == "Transpose"]
    assert layout.input[0] == symbolic.graph.input[0].name  # NHWC to NCHW once, at the input
    for pool in (n for n in symbolic.graph.node if n.op_type in ("MaxPool", "AveragePool")):
        assert made[pool.input[0]].op_type != "Reshape", pool  # [N, C, H, W] itself


def _inputs(batch: int) -> list[np.ndarray]:
    x = _RNG.standard_normal((batch, 16, 16, 3)).astype(np.float32)
    x[0, :3, :3, :] = -0.0
    nan, infs = x.copy(), x.copy()
    nan[-1, 5, 6, 1] = np.nan
    infs[0, 8:12, 8:12, :] = -np.inf  # whole windows of -inf after the stem (its weights positive)
    infs[-1, 2, 2, 0] = np.inf
    return [x, nan, infs]


@pytest.mark.parametrize("batch", [1, 3])
def test_the_symbolic_batch_graph_gives_jax_numbers(batch):
    runner = OnnxRunner(jaxconv.to_onnx(cnn, _spec("b"), check=False).SerializeToString())
    for x in _inputs(batch):
        (got,) = runner.run([x])
        with jax.disable_jit():
            want = np.asarray(cnn(x))
        assert_same_floats(got, want, 2e-4, 2e-4)


def test_the_checked_conversion_passes():
    jaxconv.to_onnx(cnn, _spec("b"), check=True)


# ---- the clean-up's rule: a Reshape to its input's own shape, a -1 in place of one size --------------


def _reshape_model(dims: list, target: list[int], allowzero: int = 0) -> onnx.ModelProto:
    node = helper.make_node("Reshape", ["x", "t"], ["r"], allowzero=allowzero)
    graph = helper.make_graph(
        [node, helper.make_node("Relu", ["r"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("t", TensorProto.INT64, [len(target)], target)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("dims, target, allowzero, stays", [
    (["b", 256, 2, 2], [-1, 256, 2, 2], 0, False),
    (["b", "s", 4], [-1, 0, 4], 0, False),  # 0 copies s
    ([6, 4], [-1, 4], 0, False),
    (["b", 256, 2, 2], [-1, 128, 4, 2], 0, True),  # moves elements
    (["b", "s", 4], [-1, 8, 4], 0, True),  # s may not be 8
    (["b", 4], [-1, 2, 2], 0, True),  # another rank
    ([0, 4], [0, 4], 1, False),  # allowzero: 0 is a size, the input's own
    (["b", 4], [0, 4], 1, True),  # allowzero: a batch of zero, not b
    (["b", 0, 3], [-1, 0, 3], 1, True),  # no elements: the -1 says nothing
])
def test_a_reshape_to_its_own_shape_goes(dims, target, allowzero, stays):
    model = ir.serde.deserialize_model(_reshape_model(dims, target, allowzero))
    passes.clean_up(model)
    proto = ir.serde.serialize_model(model)
    assert ("Reshape" in [n.op_type for n in proto.graph.node]) == stays
    sizes = [d if isinstance(d, int) else {"b": 3, "s": 8}[d] for d in dims]
    if not stays and 0 not in sizes:
        x = np.arange(-5, np.prod(sizes) - 5, dtype=np.float32).reshape(sizes)
        (got,) = OnnxRunner(proto.SerializeToString()).run([x])
        np.testing.assert_array_equal(got, np.maximum(x, 0))


def test_conv_and_pool_sizes_follow_from_the_input_where_none_are_declared():
    """The symbolic-dims analysis works out a Conv's and a pool's spatial sizes from the input's (ONNX's
    inference loses them after a Slice whose bounds come from ``Shape``: keras-hub CSPDarknet's halves)."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 1, 0, 1]),
        helper.make_node("AveragePool", ["p"], ["a"], kernel_shape=[2, 2], strides=[1, 1], dilations=[1, 1]),
        helper.make_node("Conv", ["a", "w2"], ["d"], dilations=[2, 1]),
        helper.make_node("GlobalAveragePool", ["d"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3, 17, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("w", TensorProto.FLOAT, [8, 3, 3, 3], np.ones(216)),
         helper.make_tensor("w2", TensorProto.FLOAT, [4, 8, 2, 2], np.ones(128))])
    model = ir.serde.deserialize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    shapes = symbolic_dims._Shapes(model.graph)
    found = {}
    for node in model.graph:
        shapes.infer(node)
        found[node.outputs[0].name] = shapes.shape(node.outputs[0])
    x = np.zeros((3, 3, 17, 16), np.float32)
    want = OnnxRunner(ir.serde.serialize_model(_all_outputs(model)).SerializeToString()).run([x])
    assert [found[k] for k in "cpady"] == [("b", *w.shape[1:]) for w in want]


def _all_outputs(model: ir.Model) -> ir.Model:
    """``model`` with every node's output a graph output (ORT reports their shapes)."""
    model.graph.outputs.clear()
    for node in model.graph:
        model.graph.outputs.append(node.outputs[0])
    return model


@pytest.mark.parametrize("target, stays", [([-1, 2], False), ([0, -1], True)])  # 0 copies the Unsqueeze's 1
def test_a_reshape_of_an_unsqueeze_reads_its_input(target, stays):
    nodes = [helper.make_node("Unsqueeze", ["x", "axes"], ["u"]), helper.make_node("Reshape", ["u", "t"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [0]), helper.make_tensor("t", TensorProto.INT64, [2], target)])
    model = ir.serde.deserialize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    passes.clean_up(model)
    proto = ir.serde.serialize_model(model)
    assert ("Unsqueeze" in [n.op_type for n in proto.graph.node]) == stays
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (got,) = OnnxRunner(proto.SerializeToString()).run([x])
    np.testing.assert_array_equal(got, x[None].reshape([1 if t == 0 else t for t in target]))  # 0: the 1 copied
