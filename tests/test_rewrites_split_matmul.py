"""jaxconv.onnx.rewrites.split_matmul: x @ W split by columns as one MatMul per column block; ONNX
Runtime's outputs bit for bit those of the MatMul and Split (NaN, infinities, -0.0 in x), and jax.jit's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import split_matmul
from lowering_check import assert_same_bits, assert_same_floats, without_rule
from lowering_check import convert_and_run as _convert

_W = (np.random.default_rng(5).standard_normal((16, 24)) / 4).astype(np.float32)


def _x() -> np.ndarray:
    x = np.random.default_rng(6).standard_normal((2, 5, 16)).astype(np.float32)
    x[0, 0] = -0.0
    x[0, 1, 3] = np.nan
    x[0, 2, 4] = np.inf
    x[1, 3, 5] = -np.inf
    x[1, 4, :8] = 0.0
    return x


_plain = without_rule(split_matmul)




@pytest.mark.parametrize("parts", [3, [8]], ids=["thirds", "uneven"])
def test_split_projection_becomes_matmuls(monkeypatch, parts):
    """The fused q/k/v projection and attention of a transformer layer."""
    def fn(x):
        if parts != 3:  # columns 0:8 and 8:24
            a, b = jnp.split(x @ _W, parts, axis=-1)
            return jnp.tanh(a), b * 2.0
        q, k, v = jnp.split(x @ _W, parts, axis=-1)
        p = jax.nn.softmax(jnp.einsum("btd,bsd->bts", q, k) / np.sqrt(8.0), axis=-1)
        return jnp.einsum("bts,bsd->btd", p, v)

    x = _x()
    ops, got = _convert(fn, x)
    plain_ops, plain = _plain(monkeypatch, fn, x)
    n = 3 if parts == 3 else 2
    assert ops["Split"] == 0 and plain_ops["Split"] == 1, (ops, plain_ops)
    assert ops["MatMul"] == plain_ops["MatMul"] + n - 1, (ops, plain_ops)
    assert_same_bits(got, plain)
    for g, w in zip(got, jax.tree_util.tree_leaves(jax.jit(fn)(x))):
        assert_same_floats(g, w, 1e-5, 1e-6)


def test_split_on_other_axis_stays(monkeypatch):
    fn = lambda x: tuple(jnp.split(x @ _W, 5, axis=1))  # noqa: E731
    x = _x()
    ops, got = _convert(fn, x)
    plain_ops, plain = _plain(monkeypatch, fn, x)
    assert ops == plain_ops
    assert_same_bits(got, plain)


def test_weight_as_input_stays(monkeypatch):
    fn = lambda x, w: tuple(jnp.split(x @ w, 3, axis=-1))  # noqa: E731
    x = _x()
    ops, got = _convert(fn, x, _W)
    plain_ops, _ = _plain(monkeypatch, fn, x, _W)
    assert ops == plain_ops and ops["MatMul"] == 1, ops
    for g, w in zip(got, jax.jit(fn)(x, _W)):
        assert_same_floats(g, w, 1e-5, 1e-6)


def test_product_also_read_whole_stays(monkeypatch):
    def fn(x):
        y = x @ _W
        return jnp.split(y, 3, axis=-1)[0], y

    x = _x()
    ops, got = _convert(fn, x)
    plain_ops, plain = _plain(monkeypatch, fn, x)
    assert ops == plain_ops
    assert_same_bits(got, plain)


def test_a_weight_used_by_many_split_products_is_stored_once():
    """An unrolled RNN (``hk.static_unroll``) slices its gates' weight for each step: each column block of
    the weight is one initializer however many products read it (the ONNX of a 2-layer Haiku LSTM unrolled
    64 steps held 64 copies: 14.7 MB for 0.23 MB of weights)."""
    from onnx import numpy_helper

    import jaxconv

    w = (np.random.default_rng(0).standard_normal((32, 256)) * 0.1).astype(np.float32)

    def fn(xs):
        out = 0.0
        for t in range(8):
            a, b = jnp.split(xs[t] @ w, 2, axis=-1)
            out = out + jnp.tanh(a) * b
        return out

    xs = np.random.default_rng(1).standard_normal((8, 2, 32)).astype(np.float32)
    model = jaxconv.to_onnx(fn, "f32[8,2,32]")
    stored = sum(numpy_helper.to_array(i).nbytes for i in model.graph.initializer)
    assert stored <= w.nbytes + 1024
    _, (got,) = _convert(fn, xs)
    assert_same_floats(got, np.asarray(jax.jit(fn)(xs)), rtol=1e-6, atol=1e-6)
