"""jaxconv.onnx.rewrites.attention: scaled dot-product attention between head Transposes as the Attention op
(opset 23) behind a guard; jax.jit's numbers for finite inputs (the op) and for NaN, infinities, huge values
and queries whose keys are all masked (today's nodes)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest

import jaxconv
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_onnx_matches_jax

B, T, H, DH = 2, 6, 2, 4
D = H * DH
LOWEST = float(np.finfo(np.float32).min)
MAX = float(np.finfo(np.float32).max)


def _split(y):
    return y.reshape(y.shape[0], y.shape[1], H, DH).transpose(0, 2, 1, 3)


def _attention(fill, masking, scaling="scores"):
    """The benchmark transformer's attention (``scaling="scores"``) or Flax's (``"query"``: q is divided
    before the product), with a causal mask, a padding mask from ``valid`` (Flax's, both axes) or none,
    by a Where or as an additive bias."""

    def fn(q, k, v, valid):
        q, k, v = _split(q), _split(k), _split(v)
        if scaling == "query":
            q = q / np.sqrt(DH).astype(np.float32)
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k)
        if scaling == "scores":
            s = s / np.sqrt(DH).astype(np.float32)
        causal, padding = jnp.tril(jnp.ones((T, T), bool)), valid[:, None, :, None] & valid[:, None, None, :]
        if masking in ("causal", "padding"):
            s = jnp.where(causal if masking == "causal" else padding, s, fill)
        elif masking in ("causal bias", "padding bias"):  # Hugging Face's: an additive bias of 0 and the fill
            s = s + jnp.where(causal if masking == "causal bias" else padding, 0.0, fill).astype(np.float32)
        elif masking in ("causal keras", "padding keras"):  # keras': the dropped probabilities zeroed again
            keep = causal if masking == "causal keras" else padding
            s = jnp.where(~keep, fill, s)
            o = jnp.einsum("bhqk,bhkd->bhqd", jnp.where(~keep, 0.0, jax.nn.softmax(s, axis=-1)), v)
            return o.transpose(0, 2, 1, 3).reshape(q.shape[0], T, D)
        o = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)
        return o.transpose(0, 2, 1, 3).reshape(q.shape[0], T, D)

    return fn


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((B, T, D)).astype(np.float32) for _ in range(3))
    valid = np.ones((B, T), bool)
    valid[0, -2:] = False  # padding: its query rows keep no key
    return q, k, v, valid


def _op_types(graph: onnx.GraphProto) -> list[str]:
    out = []
    for node in graph.node:
        out.append(node.op_type)
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                out += _op_types(a.g)
    return out


def _edge_sets():
    """(name, q, k, v, valid): each edge value at a kept and at a masked place of q, k and v."""
    q, k, v, valid = _inputs(1)
    sets = []
    for value in (np.nan, np.inf, -np.inf, -0.0, MAX, -MAX, 1e20):
        for which in range(3):
            for place in (0, T - 1):  # key 0 is kept by every query; key T-1 is masked for most (causal)
                arrs = [q.copy(), k.copy(), v.copy()]
                arrs[which][1, place, 3] = value
                sets.append((f"{'qkv'[which]}[{place}]={value}", *arrs, valid))
    sets.append(("all valid", q, k, v, np.ones((B, T), bool)))
    return sets


MASKS = [("causal", -np.inf), ("causal", LOWEST), ("padding", LOWEST), ("padding", -np.inf), ("none", None),
         ("causal bias", LOWEST), ("padding bias", LOWEST), ("padding bias", -np.inf),
         ("causal", -1e9), ("padding", -1e9), ("causal keras", -1e9), ("padding keras", -1e9)]


@pytest.mark.parametrize("scaling", ["scores", "query"])
@pytest.mark.parametrize("masking,fill", MASKS, ids=[f"{m}-{f}" for m, f in MASKS])
def test_attention_op_matches_jax(masking, fill, scaling):
    fn = _attention(fill, masking, scaling)
    q, k, v, valid = _inputs()
    runs = [s[1:] for s in _edge_sets()]
    model = assert_onnx_matches_jax(fn, q, k, v, valid, opset=23, inputs_for_run=runs, rtol=1e-5, atol=1e-6)
    ops = _op_types(model.graph)
    top = [n.op_type for n in model.graph.node]
    # the guard (in its exact branch, the masked Softmax may multiply by its mask behind an If of its own)
    assert ops.count("Attention") == 1 and top.count("If") == 1, ops
    assert "Transpose" not in top  # the head Transposes: exact branch only
    jaxconv.to_onnx(fn, q, k, v, valid, opset=23, check=True)


def _guard(fn, *inputs):
    """The value of the rewrite's If condition (true: today's nodes run) on ``inputs``."""
    model = jaxconv.to_onnx(fn, *inputs, opset=23, check=False)
    (branch,) = [n for n in model.graph.node if n.op_type == "If"]
    model.graph.output.append(onnx.helper.make_tensor_value_info(branch.input[0], onnx.TensorProto.BOOL, []))
    return bool(OnnxRunner(model.SerializeToString()).run(list(inputs))[-1])


def test_guard_takes_the_op_only_where_it_is_exact():
    q, k, v, valid = _inputs()
    causal = _attention(-np.inf, "causal")
    assert not _guard(causal, q, k, v, valid)  # finite scores: the Attention op
    for value in (np.nan, np.inf, 1e30):
        for at in ((0, 0, 0), (1, 3, 5)):  # ONNX Runtime's ReduceMax skips a NaN that is not first
            big = k.copy()
            big[at] = value
            assert _guard(causal, q, big, v, valid), (value, at)  # a score could be non-finite or huge
            big = q.copy()
            big[at] = value
            assert _guard(causal, big, k, v, valid), (value, at)
    large = q * 1e8  # every score below 2**70: still the op, though the tensors' norms are larger
    assert not _guard(causal, large, k * 1e8, v, valid)
    nan_v = v.copy()
    nan_v[0, -1, 0] = np.nan
    assert not _guard(causal, q, k, nan_v, valid)  # v's NaN reaches the output in both
    # a query whose keys are all masked: jax gives NaN for -inf, the mean of v for finfo.min, ORT a zero row
    assert _guard(_attention(-np.inf, "padding"), q, k, v, valid)
    assert not _guard(_attention(-np.inf, "padding"), q, k, v, np.ones((B, T), bool))
    assert not _guard(_attention(LOWEST, "padding"), q, k, v, valid)


def test_below_opset_23_and_other_forms_are_left_alone():
    q, k, v, valid = _inputs()
    ops = _op_types(jaxconv.to_onnx(_attention(-np.inf, "causal"), q, k, v, valid, check=False).graph)
    assert "Attention" not in ops  # the default opset 21 has no Attention op

    def other_fill(q, k, v, valid):  # a fill above -1e6: scores could come near it
        s = jnp.einsum("bhqd,bhkd->bhqk", _split(q), _split(k))
        s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -1e4)
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), _split(v)).transpose(0, 2, 1, 3)

    def head_major(q, k, v, valid):  # heads already leading: no Transposes to drop
        q, k, v = (x.reshape(B, H, T, DH) for x in (q, k, v))
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(jnp.einsum("bhqd,bhkd->bhqk", q, k), axis=-1), v)

    def reading_scores(q, k, v, valid):  # the scores have a second reader
        s = jnp.einsum("bhqd,bhkd->bhqk", _split(q), _split(k))
        o = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), _split(v))
        return o.transpose(0, 2, 1, 3).reshape(B, T, D), s

    for fn in (other_fill, head_major, reading_scores):
        model = assert_onnx_matches_jax(fn, q, k, v, valid, opset=23)
        assert "Attention" not in _op_types(model.graph), fn.__name__


def _cross(x, memory, valid):
    """Cross-attention: keys and values of another length, a key padding mask [b, 1, 1, L]."""
    b, t, _ = x.shape
    length = memory.shape[1]
    heads = lambda y, n: y.reshape(b, n, H, DH).transpose(0, 2, 1, 3)  # noqa: E731
    s = jnp.einsum("bhqd,bhkd->bhqk", heads(x, t), heads(memory, length)) / 2.0
    s = jnp.where(valid[:, None, None, :], s, LOWEST)
    o = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), heads(memory * 2, length))
    return o.transpose(0, 2, 1, 3).reshape(b, t, D)


def test_cross_attention_with_symbolic_sizes():
    model = jaxconv.to_onnx(_cross, "f32[b,t,8]", "f32[b,l,8]", "bool[b,l]", opset=23, check=True)
    assert _op_types(model.graph).count("Attention") == 1
    runner = OnnxRunner(model.SerializeToString())
    rng = np.random.default_rng(3)
    for b, t, length in [(1, 1, 1), (3, 4, 7), (2, 1, 5)]:
        x = rng.standard_normal((b, t, D)).astype(np.float32)
        memory = rng.standard_normal((b, length, D)).astype(np.float32)
        valid = rng.random((b, length)) > 0.3
        valid[0] = False  # a query that keeps no key: finfo.min gives the mean of v
        got = runner.run([x, memory, valid])[0]
        want = np.asarray(jax.jit(_cross)(x, memory, valid))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _round_trip_model() -> onnx.ModelProto:
    """Hugging Face Flax BERT's attention as the lowering writes it: the probabilities pass a Transpose, two
    Reshapes and the inverse Transpose (values unchanged) before ``p @ v``; an additive 0/finfo.min bias."""
    h = onnx.helper
    f32 = onnx.TensorProto.FLOAT
    const = {"shape4": np.array([B, T, H, DH], np.int64), "shape3": np.array([B, T, D], np.int64),
             "flat": np.array([H, 1, B * T * T], np.int64), "back": np.array([H, B, T, T], np.int64),
             "zero": np.array(0.0, np.float32), "lowest": np.array(LOWEST, np.float32),
             "root": np.array(np.sqrt(DH), np.float32)}
    nodes = [h.make_node("Reshape", [n, "shape4"], [n + "4"]) for n in "qkv"] + [
        h.make_node("Div", ["q4", "root"], ["q4s"]),
        h.make_node("Transpose", ["q4s"], ["qt"], perm=[0, 2, 1, 3]),
        h.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
        h.make_node("Transpose", ["v4"], ["vt"], perm=[0, 2, 1, 3]),
        h.make_node("MatMul", ["qt", "kt"], ["s"]),
        h.make_node("Where", ["keep", "zero", "lowest"], ["bias"]),
        h.make_node("Add", ["s", "bias"], ["masked"]),
        h.make_node("Softmax", ["masked"], ["p"], axis=-1),
        h.make_node("Transpose", ["p"], ["p1"], perm=[1, 0, 2, 3]),
        h.make_node("Reshape", ["p1", "flat"], ["p2"]),
        h.make_node("Reshape", ["p2", "back"], ["p3"]),
        h.make_node("Transpose", ["p3"], ["p4"], perm=[1, 0, 2, 3]),
        h.make_node("MatMul", ["p4", "vt"], ["o"]),
        h.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
        h.make_node("Reshape", ["ot", "shape3"], ["out"])]
    inputs = [h.make_tensor_value_info(n, f32, [B, T, D]) for n in "qkv"]
    inputs.append(h.make_tensor_value_info("keep", onnx.TensorProto.BOOL, [B, 1, 1, T]))
    graph = h.make_graph(nodes, "hf", inputs, [h.make_tensor_value_info("out", f32, [B, T, D])],
                         initializer=[onnx.numpy_helper.from_array(a, n) for n, a in const.items()])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 23)])


def test_probabilities_round_trip_is_followed():
    import onnx_ir as ir

    from jaxconv.onnx import rewrites

    plain = _round_trip_model()
    model = ir.serde.deserialize_model(plain)
    assert rewrites.apply(model, 23)["attention"] == 1
    rewritten = ir.serde.serialize_model(model)
    onnx.checker.check_model(rewritten, full_check=True)
    ops = _op_types(rewritten.graph)
    assert ops.count("Attention") == 1 and ops.count("Reshape") >= 5, ops
    runners = [OnnxRunner(m.SerializeToString()) for m in (plain, rewritten)]
    for _, q, k, v, valid in _edge_sets():
        keep = valid[:, None, None, :]
        want, got = (r.run([q, k, v, keep])[0] for r in runners)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
