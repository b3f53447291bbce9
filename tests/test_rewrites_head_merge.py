"""The head-merge rule (rewrites.head_merge): a Transpose that reorders the axes a Reshape merges into a
MatMul's contracted axis (keras-hub Llama's output projection, ``[b, h, d, q]`` by ``[0, 3, 2, 1]``) runs
as a one-axis move with the weight's rows reordered, with jax.jit's numbers (NaN, ±inf, -0.0)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxconv.onnx.rewrites import head_merge
from jaxconv.onnx.rewrites.transposes import is_one_axis_move
from lowering_check import assert_same_floats

_W = np.random.default_rng(0).standard_normal((8, 4, 16)).astype(np.float32)  # [d, h, out]


def _project(y):
    return jnp.einsum("bhdq,dho->bqo", y, _W)  # contracted in the weight's (d, h) order


def _heads() -> np.ndarray:
    y = np.random.default_rng(1).standard_normal((2, 4, 8, 6)).astype(np.float32)
    y[0, 1, 2, 3] = np.nan
    y[1, 0, 5, 2] = np.inf
    y[1, 2, :, 4] = -0.0
    y[0, 3, :, 5] = 0.0
    return y


def _model(monkeypatch, on: bool):
    import jaxconv

    if not on:
        monkeypatch.setattr(head_merge, "rewrite", lambda graph: 0)
    return jaxconv.to_onnx(_project, jax.ShapeDtypeStruct((2, 4, 8, 6), np.float32), check=False)


def _run(model, y):
    from jaxconv.runtimes.onnxrt import OnnxRunner

    return OnnxRunner(model.SerializeToString()).run([y])[0]


def test_output_projection_transposes_one_axis_and_keeps_the_numbers(monkeypatch):
    y = _heads()
    model = _model(monkeypatch, True)
    perms = [[int(p) for p in n.attribute[0].ints] for n in model.graph.node if n.op_type == "Transpose"]
    assert perms == [[0, 3, 1, 2]] and is_one_axis_move(perms[0])
    got = _run(model, y)
    want = np.asarray(jax.jit(_project)(y))
    assert np.isnan(want[0, 3]).all() and np.isinf(want[1, 2]).all()  # NaN and inf reach their rows
    assert_same_floats(got, want, 1e-5, 1e-5)
    plain = _model(monkeypatch, False)
    assert [[int(p) for p in n.attribute[0].ints] for n in plain.graph.node if n.op_type == "Transpose"] == [[0, 3, 2, 1]]
    assert_same_floats(got, _run(plain, y), 1e-5, 1e-6)  # the same products, summed in another order


def test_transpose_with_other_readers_stays(monkeypatch):
    def fn(y):
        t = jnp.transpose(y, (0, 3, 2, 1))
        return t.reshape(2, 6, 32) @ _W.reshape(32, 16), t * 2.0

    y = _heads()
    fired: list[int] = []
    real = head_merge.rewrite
    monkeypatch.setattr(head_merge, "rewrite", lambda graph: fired.append(real(graph)) or fired[-1])
    import jaxconv
    from jaxconv.runtimes.onnxrt import OnnxRunner

    model = jaxconv.to_onnx(fn, jax.ShapeDtypeStruct(y.shape, np.float32), check=False)
    assert sum(fired) == 0
    for g, w in zip(OnnxRunner(model.SerializeToString()).run([y]), jax.jit(fn)(y)):
        assert_same_floats(g, w, 1e-5, 1e-5)
