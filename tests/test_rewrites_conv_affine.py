"""The Conv affine-chain rule (rewrites.conv_affine): inference batch norm after a biased Conv loses its
Sub (an Add of the negated mean, the same IEEE operation), and the numbers stay bit for bit; then the
chain's Muls and Adds fold into the Conv where ORT's own fusions would fold them, and ORT computes the
same bits as before."""

from __future__ import annotations

import jax
import numpy as np
from jax import lax

from jaxconv.onnx.rewrites import conv_affine
from lowering_check import assert_same_bits, assert_same_floats
from lowering_check import convert_and_run as _convert

_RNG = np.random.default_rng(0)
_W = _RNG.standard_normal((3, 3, 4, 8)).astype(np.float32)
_B, _MEAN, _SCALE, _BETA = (_RNG.standard_normal(8).astype(np.float32) for _ in range(4))
_MEAN[0] = 0.0


def _conv_bn(x):
    y = lax.conv_general_dilated(x, _W, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")) + _B
    return jax.nn.relu((y - _MEAN) * _SCALE + _BETA)


def _input() -> np.ndarray:
    x = _RNG.standard_normal((2, 6, 6, 4)).astype(np.float32)
    x[0, 0, 0, 0], x[1, 3, 3, 1], x[1, 5, 5, 2] = np.nan, np.inf, -0.0
    return x


def test_batch_norm_after_a_biased_conv_has_no_sub_and_keeps_the_numbers(monkeypatch):
    fired: list[int] = []
    real = conv_affine.rewrite
    monkeypatch.setattr(conv_affine, "rewrite", lambda graph: fired.append(real(graph)) or fired[-1])
    monkeypatch.setattr(conv_affine, "fold", lambda graph: 0)
    x = _input()
    ops, (got,) = _convert(_conv_bn, x)
    assert fired == [1] and ops["Sub"] == 0
    assert_same_floats(got, jax.jit(_conv_bn)(x), 1e-5, 1e-5)  # ORT folds the affine into the Conv's weights
    model = _unoptimized_run(x)
    monkeypatch.setattr(conv_affine, "rewrite", lambda graph: 0)
    assert_same_floats(model, _unoptimized_run(x), 0, 0)  # the graphs agree bit for bit before ORT's fusions


def _unoptimized_run(x: np.ndarray) -> np.ndarray:
    """_conv_bn's ONNX run with ORT's graph optimizations off (its Conv+Mul fusion rounds otherwise)."""
    import onnxruntime as ort

    import jaxconv

    model = jaxconv.to_onnx(_conv_bn, jax.ShapeDtypeStruct(x.shape, x.dtype), check=False)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def test_a_sub_not_after_a_conv_stays():
    def fn(x):
        return (x - _MEAN[:4]) * 2.0

    x = _input()
    ops, (got,) = _convert(fn, x)
    assert ops["Sub"] == 1
    assert_same_floats(got, jax.jit(fn)(x), 0, 0)


def _plain_and_folded(monkeypatch, fn, x):
    """(op histogram, outputs) of ``fn``'s ONNX with conv_affine's fold off, then on (jaxconv's runner:
    ORT's graph optimizations on)."""
    with monkeypatch.context() as patch:
        patch.setattr(conv_affine, "fold", lambda graph: 0)
        plain = _convert(fn, x)
    return plain, _convert(fn, x)


def test_batch_norm_folds_into_the_conv_with_ort_s_own_bits(monkeypatch):
    x = _input()
    (plain_ops, plain), (ops, got) = _plain_and_folded(monkeypatch, _conv_bn, x)
    assert plain_ops["Add"] == 3 and plain_ops["Mul"] == 1
    assert ops["Conv"] == 1 and ops["Add"] == ops["Mul"] == ops["Sub"] == 0
    assert_same_bits(got, plain)  # ORT fused the same chain into the same weights before
    assert_same_floats(got[0], jax.jit(_conv_bn)(x), 1e-5, 1e-5)


def test_the_folded_weights_are_the_ones_ort_s_fusion_computes(monkeypatch):
    """The folded graph with ORT's optimizations off gives the unfolded graph's bits with only ORT's
    basic fusions on: the weights and bias are ORT's."""
    import onnxruntime as ort

    import jaxconv

    x = _input()
    spec = jax.ShapeDtypeStruct(x.shape, x.dtype)

    def run(model, level):
        opts = ort.SessionOptions()
        opts.graph_optimization_level = level
        session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        return session.run(None, {session.get_inputs()[0].name: x})

    folded = jaxconv.to_onnx(_conv_bn, spec, check=False)
    monkeypatch.setattr(conv_affine, "fold", lambda graph: 0)
    plain = jaxconv.to_onnx(_conv_bn, spec, check=False)
    assert [n.op_type for n in folded.graph.node].count("Mul") == 0
    assert_same_bits(run(folded, ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
                     run(plain, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC))


def _conv(x, w=_W):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def test_a_scale_of_one_element_stays_as_ort_keeps_it(monkeypatch):
    """A Python scalar reaches the graph as a ``[1, 1, 1, 1]`` constant, which ORT does not fuse (only a
    rank-0 one or one per channel): the rule leaves it, and the bits are ORT's unfused ones."""
    def fn(x):
        return _conv(x) * np.float32(0.5) + np.float32(0.25)

    x = _input()
    (plain_ops, plain), (ops, got) = _plain_and_folded(monkeypatch, fn, x)
    assert plain_ops["Mul"] == ops["Mul"] == 1 and plain_ops["Add"] == ops["Add"] == 1
    assert_same_bits(got, plain)


def test_a_conv_read_twice_keeps_its_scale(monkeypatch):
    """A residual reads the Conv's output too: ORT does not fuse there, nor does the rule."""
    def fn(x):
        y = _conv(x)
        return y * _SCALE + y

    x = _input()
    (plain_ops, plain), (ops, got) = _plain_and_folded(monkeypatch, fn, x)
    assert ops["Mul"] == plain_ops["Mul"] == 1
    assert_same_bits(got, plain)


def test_a_scale_that_overflows_the_weights_stays(monkeypatch):
    """``W * s`` would be inf: the Mul stays (and the Conv keeps finite weights)."""
    scale = np.full(8, 1e30, np.float32)
    w = _W * np.float32(1e10)

    def fn(x):
        return _conv(x, w) * scale

    x = _input()
    (plain_ops, plain), (ops, got) = _plain_and_folded(monkeypatch, fn, x)
    assert ops["Mul"] == plain_ops["Mul"] == 1
    assert_same_bits(got, plain)


def test_a_one_d_conv_folds(monkeypatch):
    w = _RNG.standard_normal((3, 4, 8)).astype(np.float32)

    def fn(x):
        y = lax.conv_general_dilated(x, w, (1,), "SAME", dimension_numbers=("NWC", "WIO", "NWC"))
        return jax.nn.relu(y * _SCALE + _BETA)

    x = _input()[:, 0]
    (plain_ops, plain), (ops, got) = _plain_and_folded(monkeypatch, fn, x)
    assert plain_ops["Mul"] == 1 and ops["Mul"] == 0 and ops["Add"] == 0
    assert_same_bits(got, plain)
    assert_same_floats(got[0], jax.jit(fn)(x), 1e-5, 1e-5)


_W_OIHW = _W.transpose(3, 2, 0, 1).copy()


def _onnx_conv_then(ops: list[tuple[str, np.ndarray, bool]]):
    """An ONNX graph ``Conv(x, W) -> op(·, c) -> ...`` (``c`` first where the flag says so) as onnx_ir."""
    import onnx
    import onnx_ir as ir
    from onnx import helper, numpy_helper

    inits = [numpy_helper.from_array(_W_OIHW, "W")]
    nodes = [helper.make_node("Conv", ["x", "W"], ["y0"], pads=[1, 1, 1, 1])]
    for k, (op, c, first) in enumerate(ops):
        inits.append(numpy_helper.from_array(c, f"c{k}"))
        pair = [f"c{k}", f"y{k}"] if first else [f"y{k}", f"c{k}"]
        nodes.append(helper.make_node(op, pair, [f"y{k + 1}"]))
    out = f"y{len(ops)}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 4, 6, 6])],
                              [helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return ir.serde.deserialize_model(model)


def _ort_run(model, x):
    import onnx_ir as ir

    from jaxconv.runtimes.onnxrt import OnnxRunner

    return OnnxRunner(ir.serde.serialize_model(model).SerializeToString()).run([x])


def test_the_shapes_ort_fuses_fold_and_the_others_stay():
    """A rank-0 scale and ``[C, 1, 1]`` / ``[1, C, 1, 1]`` constants fold, one after the other as ORT
    fuses them; a constant as the first operand (ORT keeps that Mul) ends the chain. The bits are what
    ORT computes for the unfolded graph."""
    per = _RNG.standard_normal((8, 1, 1)).astype(np.float32)
    chain = [("Mul", np.array(0.75, np.float32), False), ("Add", per, False), ("Mul", per[None], False),
             ("Mul", per, True), ("Add", per, False)]
    x = _input().transpose(0, 3, 1, 2).copy()
    plain = _ort_run(_onnx_conv_then(chain), x)
    model = _onnx_conv_then(chain)
    assert conv_affine.fold(model.graph) == 3
    assert [n.op_type for n in model.graph] == ["Conv", "Mul", "Add"]
    assert_same_bits(_ort_run(model, x), plain)
