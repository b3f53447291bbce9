"""Graph clean-up: onnxscript's optimizer with jaxconv's rules, and the passes only the lowering can do."""

import collections
import functools

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnx_ir as ir
import pytest

from jaxconv.onnx.passes import clean_up, drop_redundant_expands, optimize
from lowering_check import assert_onnx_matches_jax, onnx_op_types


def test_transposes_that_cancel_are_removed():
    model = assert_onnx_matches_jax(lambda x: jnp.transpose(jnp.transpose(x, (1, 0, 2)), (1, 0, 2)) * 2,
                                    np.ones((2, 3, 4), np.float32))
    assert onnx_op_types(model) == ["Mul"]


def test_lossless_cast_round_trip_and_reshape_chain():
    def f(x):
        return x.astype(jnp.int32).astype(jnp.int8) + 1, x.reshape(6, 4).reshape(3, 8)

    model = assert_onnx_matches_jax(f, np.arange(24, dtype=np.int8).reshape(2, 3, 4))
    assert sorted(onnx_op_types(model)) == ["Add", "Reshape"]


def test_lossy_cast_round_trip_is_kept():
    model = assert_onnx_matches_jax(lambda x: x.astype(jnp.bfloat16).astype(jnp.float32),
                                    np.array([1.0001, 3.14159, -2.5e-3], np.float32))
    assert onnx_op_types(model).count("Cast") == 2


def test_double_rounding_cast_chain_is_kept():
    # float64 -> float32 -> float16 rounds twice; one Cast to float16 would round once
    with jax.enable_x64(True):
        x = np.array([1.0 + 2.0 ** -11 + 2.0 ** -40, 3.0], np.float64)  # ties in float16 only after the float32 rounding
        model = assert_onnx_matches_jax(lambda x: x.astype(jnp.float32).astype(jnp.float16), x)
    assert onnx_op_types(model).count("Cast") == 2


def test_constants_are_folded():
    model = assert_onnx_matches_jax(lambda x: x + jnp.sin(jnp.arange(4.0)) * 3, np.ones(4, np.float32))
    assert onnx_op_types(model) == ["Add"]


def _run(model: onnx.ModelProto, *inputs: np.ndarray) -> list[np.ndarray]:
    from jaxconv.runtimes.onnxrt import OnnxRunner

    return OnnxRunner(model.SerializeToString()).run(list(inputs))


@pytest.mark.parametrize("fn", [lambda x: x + 0.0, lambda x: 0.0 + x], ids=["x+0", "0+x"])
def test_adding_a_constant_zero_keeps_minus_zero_as_jax_jit_does(fn):
    # XLA's simplifier drops x + 0 (jax.jit returns -0 for -0 + 0, not IEEE's +0); the ONNX graph drops it too
    x = np.array([-0.0, 0.0, -1.0, np.nan, np.inf], np.float32)
    model = assert_onnx_matches_jax(fn, x)
    got, want = _run(model, x)[0], np.asarray(jax.jit(fn)(x))
    assert "Add" not in onnx_op_types(model)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def test_relu_of_minus_zero_matches_jax():
    fn = jax.nn.relu
    x = np.array([-0.0, 0.0, -1.0, np.nan, np.inf], np.float32)
    model = assert_onnx_matches_jax(fn, x)
    want = np.asarray(jax.jit(fn)(x))
    got = _run(model, x)[0]
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


@pytest.mark.parametrize("fn", [lambda x: x * 1.0, lambda x: x - 0.0, lambda x: x / 1.0, lambda x: x * 1.0 - 0.0],
                         ids=["x*1", "x-0", "x/1", "x*1-0"])
def test_identities_the_optimizer_removes_keep_nan_and_signed_zero(fn):
    x = np.array([-0.0, 0.0, np.nan, -np.inf, 3.5], np.float32)
    model = assert_onnx_matches_jax(fn, x)
    got, want = _run(model, x)[0], np.asarray(jax.jit(fn)(x))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def _model(nodes: list[ir.Node], inputs: list[ir.Value], outputs: list[ir.Value]) -> ir.Model:
    graph = ir.Graph(inputs, outputs, nodes=nodes, opset_imports={"": 21}, name="g")
    return ir.Model(graph, ir_version=10)


def _x() -> ir.Value:
    return ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([3]))


def test_common_subexpressions_are_merged():
    x = _x()
    a, b = ir.Node("", "Exp", [x]), ir.Node("", "Exp", [x])
    add = ir.Node("", "Add", [a.outputs[0], b.outputs[0]])
    add.outputs[0].name = "y"
    model = _model([a, b, add], [x], [add.outputs[0]])
    clean_up(model)
    assert [n.op_type for n in model.graph] == ["Exp", "Add"]
    node = list(model.graph)[1]
    assert node.inputs[0] is node.inputs[1]


def test_dead_nodes_are_removed():
    x = _x()
    exp, log = ir.Node("", "Exp", [x]), ir.Node("", "Log", [x])
    neg = ir.Node("", "Neg", [exp.outputs[0]])
    neg.outputs[0].name = "y"
    model = _model([exp, log, neg], [x], [neg.outputs[0]])
    clean_up(model)
    assert [n.op_type for n in model.graph] == ["Exp", "Neg"]


def test_optimize_keeps_graph_outputs():
    x = _x()
    y, z = ir.Node("", "Exp", [x]), ir.Node("", "Exp", [x])
    y.outputs[0].name, z.outputs[0].name = "y", "z"
    model = _model([y, z], [x], [y.outputs[0], z.outputs[0]])
    optimize(model, 21)
    proto = ir.serde.serialize_model(model)
    assert [o.name for o in proto.graph.output] == ["y", "z"]
    onnx.checker.check_model(proto, full_check=True)
    np.testing.assert_allclose(_run(proto, np.ones(3, np.float32))[1], np.exp(np.ones(3, np.float32)))


def test_the_same_value_twice_as_outputs_keeps_both_names():
    model = assert_onnx_matches_jax(lambda x: (jnp.exp(x), jnp.exp(x), x), np.ones(3, np.float32))
    assert [o.name for o in model.graph.output] == ["output_0", "output_1", "output_2"]


def test_expand_before_a_same_shape_elementwise_op_is_dropped():
    x = _x()
    y = ir.Value(name="y", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([1]))
    shape = ir.Value(name="s", const_value=ir.tensor(np.array([3], np.int64)))
    expand = ir.Node("", "Expand", [y, shape])
    add = ir.Node("", "Add", [x, expand.outputs[0]], metadata_props={"jaxconv.same_shape_inputs": "1"})
    plain = ir.Node("", "Mul", [expand.outputs[0], expand.outputs[0]], metadata_props={"jaxconv.same_shape_inputs": "1"})
    model = _model([expand, add, plain], [x, y], [add.outputs[0], plain.outputs[0]])
    model.graph.register_initializer(shape)
    drop_redundant_expands(model.graph)
    assert add.inputs[1] is y  # x has the full shape: broadcasting does the Expand's job
    assert plain.inputs[0] is expand.outputs[0]  # no full-shape input left: the Expand stays


def test_broadcast_constants_are_not_materialised():
    model = assert_onnx_matches_jax(lambda x: jax.nn.relu(x) * 3.0 + 1.0, np.ones((64, 64), np.float32))
    sizes = [int(np.prod(t.dims)) for t in model.graph.initializer]
    assert max(sizes) <= 16, sizes


@pytest.mark.parametrize("n, folded", [(64, True), (512, False)])
def test_only_small_constant_results_are_folded(n, folded):
    # w stays (Add reads it too), so folding w * 2 would add n² elements to the file
    w = ir.Value(name="w", const_value=ir.tensor(np.ones((n, n), np.float32)))
    two = ir.Value(name="two", const_value=ir.tensor(np.array(2.0, np.float32)))
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([n, n]))
    mul = ir.Node("", "Mul", [w, two])
    mm = ir.Node("", "MatMul", [x, mul.outputs[0]])
    add = ir.Node("", "Add", [x, w])
    mm.outputs[0].name, add.outputs[0].name = "y", "z"
    model = _model([mul, mm, add], [x], [mm.outputs[0], add.outputs[0]])
    model.graph.register_initializer(w)
    model.graph.register_initializer(two)
    clean_up(model)
    want = ["MatMul", "Add"] if folded else ["Mul", "MatMul", "Add"]  # 512² > FOLD_MAX_ELEMENTS
    assert [n.op_type for n in model.graph] == want


def test_bfloat16_constants_fold_and_keep_their_type():
    c = jnp.arange(4, dtype=jnp.bfloat16)
    model = assert_onnx_matches_jax(lambda x: x * (c + 1), np.ones(4, jnp.bfloat16))
    assert all(t.data_type in (onnx.TensorProto.BFLOAT16, onnx.TensorProto.FLOAT) for t in model.graph.initializer)


def test_loop_body_reading_an_outer_value_survives_the_clean_up():
    def f(x, y):
        return jax.lax.fori_loop(0, 5, lambda i, c: c * y + jnp.sin(y), x)

    model = assert_onnx_matches_jax(f, np.ones(3, np.float32), np.full(3, 0.5, np.float32))
    assert "Loop" in onnx_op_types(model)


def test_a_loop_body_computes_its_index_once():
    """A fori_loop reading three sequences and writing one at its counter: the index (normalised for a
    negative start, clamped) was computed four times a step; common subexpressions merge inside bodies too.
    (7 steps over 8 rows: a loop over every row becomes a Scan, tests/test_rewrites_fori_rows.py.)"""
    def f(a, b, c):
        def body(i, carry):
            h, out = carry
            row = functools.partial(jax.lax.dynamic_index_in_dim, index=i, axis=1, keepdims=False)
            h = h * row(a) + row(b) * row(c)
            return h, jax.lax.dynamic_update_index_in_dim(out, h, i, 1)

        return jax.lax.fori_loop(0, 7, body, (jnp.zeros((2, 3)), jnp.zeros((2, 8, 3))))[1]

    xs = [np.random.default_rng(k).standard_normal((2, 8, 3)).astype(np.float32) for k in range(3)]
    model = assert_onnx_matches_jax(f, *xs)
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    body = collections.Counter(n.op_type for n in loop.attribute[0].g.node)
    assert body["Slice"] == 3 and body["ScatterND"] == 1, body
    assert body["Where"] == 1 and body["Clip"] == 1 and body["Cast"] == 1, body


def test_lowering_is_deterministic():
    def f(x):
        return jax.nn.log_softmax(jnp.tanh(x @ x.T) + 1.0)

    from jaxconv.onnx.convert import program_to_onnx
    from jaxconv.program import trace

    program = trace(f, [jax.ShapeDtypeStruct((4, 4), np.float32)])
    first = program_to_onnx(program).SerializeToString()
    assert all(program_to_onnx(program).SerializeToString() == first for _ in range(3))


def test_large_models_are_saved_with_external_data(tmp_path, monkeypatch):
    import jaxconv
    from jaxconv.onnx import convert
    from jaxconv.runtimes.onnxrt import OnnxRunner

    weights = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    monkeypatch.setattr(convert, "EXTERNAL_DATA_BYTES", 100_000)  # stand-in for the 2 GB limit
    path = tmp_path / "big.onnx"
    model = jaxconv.to_onnx(lambda x: x @ weights, "f32[2,256]", path=str(path))
    assert (tmp_path / "big.onnx.data").stat().st_size >= weights.nbytes
    assert path.stat().st_size < 100_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.onnx", "big.onnx.data"]
    assert any(len(t.raw_data) == weights.nbytes for t in model.graph.initializer)  # returned model keeps its weights
    x = np.ones((2, 256), np.float32)
    np.testing.assert_allclose(OnnxRunner(str(path)).run([x])[0], x @ weights, rtol=1e-5)


def test_outputs_that_are_inputs_constants_or_repeats_keep_their_names():
    def f(x):
        return x, jnp.arange(3.0), x, jnp.full((2,), 7, jnp.int32), jnp.exp(x)

    model = assert_onnx_matches_jax(f, np.ones(3, np.float32))
    assert [o.name for o in model.graph.output] == [f"output_{i}" for i in range(5)]


@pytest.mark.parametrize("fn", [lambda x: jnp.clip(x, 0.0, 6.0), lambda x: jnp.minimum(jnp.maximum(x, -1.0), 1.0),
                                lambda x: jnp.maximum(jnp.maximum(x, 0.5), 2.0)], ids=["clip", "min_max", "max_max"])
def test_min_max_chains_keep_nan_and_signed_zero(fn):
    x = np.array([np.nan, -0.0, 0.0, -np.inf, np.inf, 3.0, 7.0, -3.0], np.float32)
    model = assert_onnx_matches_jax(fn, x)
    got, want = _run(model, x)[0], np.asarray(jax.jit(fn)(x))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_value_names_are_unique_across_subgraphs():
    """A branch value and a later main-graph value with the same name: ONNX Runtime refuses such a model (SSA)."""
    x = _x()
    cond = ir.node("ReduceMax", [x], {"keepdims": 0})
    test = ir.Node("", "IsNaN", [cond.outputs[0]])
    keep = ir.Node("", "Identity", [x])
    keep.outputs[0].name = "t"
    neg = ir.Node("", "Neg", [x])
    neg.outputs[0].name = "t_then"
    then_branch = ir.Graph([], [neg.outputs[0]], nodes=[neg], name="then")
    else_branch = ir.Graph([], [keep.outputs[0]], nodes=[keep], name="else")
    branch = ir.node("If", [test.outputs[0]], {"then_branch": then_branch, "else_branch": else_branch})
    exp = ir.Node("", "Exp", [branch.outputs[0]])
    exp.outputs[0].name = "t"
    out = ir.Node("", "Add", [exp.outputs[0], x])
    out.outputs[0].name = "y"
    model = _model([cond, test, branch, exp, out], [x], [out.outputs[0]])
    clean_up(model)
    proto = ir.serde.serialize_model(model)
    names = [o for n in proto.graph.node for o in n.output]
    names += [o for n in proto.graph.node for a in n.attribute if a.g.node for m in a.g.node for o in m.output]
    assert len(names) == len(set(names)), names
    x0 = np.array([1.0, -2.0, 0.5], np.float32)
    np.testing.assert_allclose(_run(proto, x0)[0], np.exp(x0) + x0, rtol=1e-6)


@pytest.mark.parametrize("combine", ["min", "max", "add", "multiply", "set"])
@pytest.mark.parametrize("dtype", [np.int32, np.float32])
def test_a_scatter_over_every_row_keeps_its_reduction(combine, dtype):
    """Found by the fuzzer: ``x.at[0].min(u)`` on a one-row ``x`` is a ScatterND over every row, which
    onnxscript's rule replaced by ``u`` whatever its reduction (7 came back as 2147483647)."""
    def f(x, i, u):
        return getattr(x.at[i], combine)(u, mode="clip")

    info = np.iinfo(dtype) if dtype == np.int32 else np.finfo(dtype)
    x = np.array([[7, -3, 0, 5]], dtype)
    u = np.array([[info.max, info.min, 2, 5]], dtype)
    model = assert_onnx_matches_jax(f, x, np.array([0], np.int8), u)
    assert combine == "set" or "ScatterND" in onnx_op_types(model)


@pytest.mark.parametrize("sizes", [[3, 5], None])
def test_a_split_of_a_constant_is_folded(sizes):
    """onnxscript's folding skips ops with several outputs: the clean-up folds a Split of a constant itself
    (split sizes given, or equal parts), and the parts are the Split's; a Split of an input stays."""
    table = np.arange(2 * 8 * 3, dtype=np.float32).reshape(2, 8, 3) if sizes else \
        np.arange(2 * 8, dtype=np.float32).reshape(2, 8)
    c = ir.Value(name="table", const_value=ir.tensor(table))
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(list(table.shape)))
    inputs = [c] if sizes is None else [c, ir.Value(name="sizes", const_value=ir.tensor(np.array(sizes, np.int64)))]
    attrs = [ir.AttrInt64("axis", 1)] + ([ir.AttrInt64("num_outputs", 2)] if sizes is None else [])
    split = ir.Node("", "Split", inputs, attributes=attrs, num_outputs=2)
    kept = ir.Node("", "Split", [x, *inputs[1:]], attributes=attrs, num_outputs=2)
    adds = [ir.Node("", "Add", [a, b]) for a, b in zip(split.outputs, kept.outputs)]
    for k, node in enumerate(adds):
        node.outputs[0].name = f"y{k}"
    model = _model([split, kept, *adds], [x], [a.outputs[0] for a in adds])
    for v in inputs:
        model.graph.register_initializer(v)
    clean_up(model)
    assert [n.op_type for n in model.graph] == ["Split", "Add", "Add"]
    proto = ir.serde.serialize_model(model)
    xs = np.random.default_rng(0).standard_normal(table.shape).astype(np.float32)
    got = _run(proto, xs)
    parts = np.split(table, np.cumsum(sizes)[:-1] if sizes else 2, axis=1)
    for g, t, p in zip(got, parts, np.split(xs, np.cumsum(sizes)[:-1] if sizes else 2, axis=1)):
        np.testing.assert_array_equal(g, t + p)


@pytest.mark.parametrize("elements", [64, 128 * 128])
def test_equal_initializers_become_one_and_their_readers_too(elements):
    """Per-layer copies of one constant (a causal mask of 128 x 128 in each layer) become one
    initializer, and the layers' Adds of it one Add."""
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([elements]))
    table = np.linspace(-1, 1, elements, dtype=np.float32)
    nodes = []
    for layer in range(3):  # each layer adds its own copy to x, then takes the Exp of the sum
        copy = ir.Value(name=f"mask{layer}", const_value=ir.tensor(table.copy(), name=f"mask{layer}"))
        add = ir.Node("", "Add", [x, copy])
        exp = ir.Node("", "Exp", [add.outputs[0]])
        nodes += [add, exp]
    last = ir.Node("", "Sum", [n.outputs[0] for n in nodes[1::2]])
    last.outputs[0].name = "y"
    model = _model([*nodes, last], [x], [last.outputs[0]])
    for n in nodes[::2]:
        model.graph.register_initializer(n.inputs[1])
    clean_up(model)
    assert len(model.graph.initializers) == 1
    assert [n.op_type for n in model.graph] == ["Add", "Exp", "Sum"]
