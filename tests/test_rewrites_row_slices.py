"""jaxconv.onnx.rewrites.row_slices: a Slice of rows moved above the row-wise ops before it (a classifier on
the first token of an encoder's last layer); ONNX Runtime's outputs bit for bit those of the whole
computation (NaN, infinities, -0.0 and the float32 extremes in the input), and jax.jit's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest

import jaxconv
from jaxconv.onnx.rewrites import row_slices
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_floats

_B, _T, _D, _H = 2, 8, 16, 2
_RNG = np.random.default_rng(11)
_P = {k: (_RNG.standard_normal(s) / np.sqrt(s[0])).astype(np.float32) for k, s in
      {"wq": (_D, _D), "wk": (_D, _D), "wv": (_D, _D), "wo": (_D, _D), "w1": (_D, 4 * _D), "w2": (4 * _D, _D),
       "head": (_D, 3)}.items()}
_G = (1 + 0.1 * _RNG.standard_normal(_D)).astype(np.float32)
_C1 = (0.1 * _RNG.standard_normal(4 * _D)).astype(np.float32)


def _ln(x):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / jnp.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-6) * _G


def _layer(x):
    b, t, _ = x.shape
    heads = lambda y: y.reshape(b, t, _H, _D // _H).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = heads(x @ _P["wq"]), heads(x @ _P["wk"]), heads(x @ _P["wv"])
    p = jax.nn.softmax(jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(_D // _H), axis=-1)
    att = jnp.einsum("bhqk,bhkd->bhqd", p, v).transpose(0, 2, 1, 3).reshape(b, t, _D)
    x = _ln(x + att @ _P["wo"])
    return _ln(x + jax.nn.gelu(x @ _P["w1"] + _C1) @ _P["w2"])


def _classifier(x):
    """Two post-norm layers, then a head on the first token."""
    return _layer(_layer(x))[:, 0] @ _P["head"]


def _inputs() -> list[np.ndarray]:
    x = _RNG.standard_normal((_B, _T, _D)).astype(np.float32)
    big = np.finfo(np.float32).max
    edge = x.copy()
    edge[0, 0, 3] = np.nan
    edge[0, 1] = -0.0
    edge[1, 0, 5] = np.inf
    edge[1, 2, 1] = -np.inf
    edge[0, 3, 2], edge[1, 4, 7] = big, -big
    edge[1, 5, :4] = 0.0
    return [x, edge]


_NORMS = ("If", "LayerNormalization")  # the first norm, of a float input, behind its overflow guard (the
# If's output is the norm's); the later ones of bounded values (the first norm bounds them) without it


def _convert(monkeypatch, fn, x, rule: bool = True):
    moves: list[int] = []
    real = row_slices.rewrite

    def counted(graph, opset):
        moves.append(real(graph, opset) if rule else 0)
        return moves[-1]

    monkeypatch.setattr(row_slices, "rewrite", counted)
    model = jaxconv.to_onnx(fn, jax.ShapeDtypeStruct(x.shape, x.dtype), check=rule)
    return model, sum(moves)


def _run(model, x) -> np.ndarray:
    return OnnxRunner(model.SerializeToString()).run([x])[0]


def _shapes(model) -> dict[str, list[int]]:
    """Each node's first output shape by op type and position, from ONNX shape inference."""
    inferred = onnx.shape_inference.infer_shapes(model)
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in inferred.graph.value_info}
    return {f"{n.op_type}{k}": dims.get(n.output[0], []) for k, n in enumerate(inferred.graph.node)}


def test_classifier_head_computes_the_last_layer_on_its_row(monkeypatch):
    model, moves = _convert(monkeypatch, _classifier, _inputs()[0])  # check=True: jax.jit's numbers, edges too
    plain, none = _convert(monkeypatch, _classifier, _inputs()[0], rule=False)
    assert moves >= 8 and none == 0, moves
    shapes = _shapes(model)
    gelu = [s for k, s in shapes.items() if k.startswith("Gelu")]
    assert gelu[0] == [_B, _T, 4 * _D] and gelu[-1] == [_B, 1, 4 * _D], gelu  # the last layer's FF on one row
    norms = [s for k, s in shapes.items() if k.startswith(_NORMS)]
    assert len(norms) == 4 and norms[-2:] == [[_B, 1, _D]] * 2, norms  # both norms of the last layer
    out_proj = [k for k, n in enumerate(model.graph.node) if n.op_type == "Transpose"]
    assert shapes[f"Transpose{out_proj[-1]}"] == [_B, 1, _H, _D // _H], shapes  # the heads merged back: one row
    for x in _inputs():
        got = _run(model, x)
        np.testing.assert_array_equal(got.view(np.uint32), _run(plain, x).view(np.uint32))
        assert_same_floats(got, jax.jit(_classifier)(x), 1e-5, 1e-6)


def test_softmax_over_the_cut_axis_stops_it(monkeypatch):
    """Softmax over the tokens mixes the rows the Slice drops: it is computed whole, then cut."""
    def fn(x):
        return jax.nn.softmax(jnp.tanh(x @ _P["w1"]), axis=1)[:, :2]

    x = _inputs()[1]
    model, _ = _convert(monkeypatch, fn, x)
    shapes = _shapes(model)
    assert [s for k, s in shapes.items() if k.startswith("Softmax")] == [[_B, _T, 4 * _D]], shapes
    np.testing.assert_array_equal(_run(model, x), _run(_convert(monkeypatch, fn, x, rule=False)[0], x))


@pytest.mark.parametrize("cut", ["columns", "most_rows", "layer_norm_axis"])
def test_cuts_that_save_nothing_or_mix_stay(monkeypatch, cut):
    """The cut may pass the elementwise Relu, but not the op that mixes its axis or saves nothing."""
    def fn(x):
        y = jax.nn.relu(_ln(x) @ _P["w1"])
        if cut == "columns":
            return y[..., :8]  # a MatMul's columns
        if cut == "most_rows":
            return y[:, 1:]  # keeps 7 of 8 rows: cutting each operand would copy more
        return _ln(x)[..., :4]  # the norm's own axis

    x = _inputs()[1]
    model, moves = _convert(monkeypatch, fn, x)
    shapes = _shapes(model)
    whole = {"columns": ("MatMul", [_B, _T, 4 * _D]), "most_rows": ("Relu", [_B, _T, 4 * _D]),
             "layer_norm_axis": ("If", [_B, _T, _D])}[cut]
    assert [s for k, s in shapes.items() if k.startswith(whole[0])] == [whole[1]], shapes
    assert (moves > 0) == (cut == "columns")  # columns: through the Relu
    assert_same_floats(_run(model, x), jax.jit(fn)(x), 1e-5, 1e-6)


def test_one_row_by_a_computed_matrix_stays(monkeypatch):
    """p @ v per batch with one row left would run ORT's vector kernel (another summation order than its
    matrix kernel): the Slice stays after that product; before it, a product by a constant moves."""
    def fn(x):
        p = jax.nn.softmax(jnp.einsum("btd,bsd->bts", x, x), axis=-1)
        return jnp.tanh(jnp.einsum("bts,bsd->btd", p, x) @ _P["wo"])[:, 0]

    x = _inputs()[1]
    model, moves = _convert(monkeypatch, fn, x)
    plain, _ = _convert(monkeypatch, fn, x, rule=False)
    assert moves == 2, moves  # Tanh, the MatMul by wo
    np.testing.assert_array_equal(_run(model, x).view(np.uint32), _run(plain, x).view(np.uint32))


def test_twin_slices_merge_into_the_first(monkeypatch):
    """Two Slices of one value with the same cut (read by Exp, then by the Mul after it) become the first
    of them, so that every reader still follows the Slice it reads (the later one is moved first)."""
    def fn(x):
        y = jnp.tanh(x)
        e = jnp.exp(y[:, :2])
        return y[:, :2] * e

    x = _inputs()[1]
    model, moves = _convert(monkeypatch, fn, x)  # check=True: onnx.checker, jax.jit's numbers
    plain, _ = _convert(monkeypatch, fn, x, rule=False)
    shapes = _shapes(model)
    assert moves == 1 and [s for k, s in shapes.items() if k.startswith("Tanh")] == [[_B, 2, _D]], shapes
    np.testing.assert_array_equal(_run(model, x).view(np.uint32), _run(plain, x).view(np.uint32))
