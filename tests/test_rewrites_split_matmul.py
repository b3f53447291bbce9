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


_B = (np.random.default_rng(7).standard_normal(24) / 2).astype(np.float32)


def test_biased_projection_splits_with_its_bias(monkeypatch):
    """``jnp.split(x @ w + b, 3, -1)``, as a trained GPT-2's ``c_attn`` (a nonzero bias): one MatMul and one
    Add of the bias's columns per part, no Split; bit for bit the MatMul, Add and Split."""
    fn = lambda x: tuple(jnp.tanh(p) for p in jnp.split(x @ _W + _B, 3, axis=-1))  # noqa: E731
    x = _x()
    ops, got = _convert(fn, x)
    plain_ops, plain = _plain(monkeypatch, fn, x)
    assert ops["Split"] == 0 and plain_ops["Split"] == 1, (ops, plain_ops)
    assert ops["MatMul"] == 3 and ops["Add"] == 3 and plain_ops["Add"] == 1, (ops, plain_ops)
    assert_same_bits(got, plain)
    for g, w in zip(got, jax.jit(fn)(x)):
        assert_same_floats(g, w, 1e-5, 1e-6)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_projection_split_per_head(monkeypatch, bias):
    """GPT-NeoX and BLOOM: ``(x @ w_qkv + b).reshape(b, t, h, 3 * dh)`` split along its last axis. Each
    part multiplies by the columns of every head it reads and is reshaped to ``[b, t, h, dh]``."""
    heads, size = 2, 4  # 24 columns: 2 heads of q, k, v of 4

    def fn(x):
        y = x @ _W + _B if bias else x @ _W
        q, k, v = jnp.split(y.reshape(2, 5, heads, 3 * size), 3, axis=-1)
        p = jax.nn.softmax(jnp.einsum("bthd,bshd->bhts", q, k) / 2.0, axis=-1)
        return jnp.einsum("bhts,bshd->bthd", p, v), jnp.sin(q)

    x = _x()
    ops, got = _convert(fn, x)
    plain_ops, plain = _plain(monkeypatch, fn, x)
    assert ops["Split"] == 0 and plain_ops["Split"] == 1, (ops, plain_ops)
    assert ops["MatMul"] == plain_ops["MatMul"] + 2, (ops, plain_ops)
    assert_same_bits(got, plain)
    for g, w in zip(got, jax.jit(fn)(x)):
        assert_same_floats(g, w, 1e-5, 1e-6)


def test_a_part_split_again_keeps_its_product(monkeypatch):
    """GPT-NeoX's partial rotary splits q's head columns again ([8, 24] of 32): only the first Split goes."""
    w = (np.random.default_rng(8).standard_normal((16, 48)) / 4).astype(np.float32)

    def fn(x):
        q, k, v = jnp.split((x @ w).reshape(2, 5, 2, 24), 3, axis=-1)
        rot, rest = jnp.split(q, [2], axis=-1)
        return jnp.concatenate([jnp.cos(rot), rest], axis=-1) * k, v

    x = _x()
    ops, got = _convert(fn, x)
    plain_ops, plain = _plain(monkeypatch, fn, x)
    assert plain_ops["Split"] == 2 and ops["Split"] == 1 and ops["MatMul"] == 3, (ops, plain_ops)
    assert_same_bits(got, plain)
    for g, w_ in zip(got, jax.jit(fn)(x)):
        assert_same_floats(g, w_, 1e-5, 1e-6)


@pytest.mark.parametrize("case", ["bias per row", "heads of another width"])
def test_other_layouts_stay(monkeypatch, case):
    """A bias that also broadcasts along the rows, or a Reshape that does not split the columns into the
    heads the Split reads: left alone."""
    rows = (np.random.default_rng(9).standard_normal((5, 24)) / 2).astype(np.float32)

    def fn(x):
        if case == "bias per row":
            return tuple(jnp.split(x @ _W + rows, 3, axis=-1))
        return tuple(jnp.split((x @ _W).reshape(2, 5, 4, 2, 3), 3, axis=-1))

    x = _x()
    ops, got = _convert(fn, x)
    plain_ops, plain = _plain(monkeypatch, fn, x)
    assert ops == plain_ops and ops["Split"] == 1, (ops, plain_ops)
    assert_same_bits(got, plain)


def test_projection_split_per_head_on_a_symbolic_batch(monkeypatch):
    """BLOOM exported with ``f32[b, ...]``: the Reshape's target is computed from the batch (``[b, 5, 2, 12]``
    until constant folding), so each part is reshaped by ``[0, 0, h, dh]`` (0: the product's dimension)."""
    def fn(x):
        q, k, v = jnp.split((x @ _W + _B).reshape(x.shape[0], 5, 2, 12), 3, axis=-1)
        return q * k + v

    x = _x()
    specs = [jax.ShapeDtypeStruct(jax.export.symbolic_shape("b, 5, 16"), np.float32)]
    ops, got = _convert(fn, x, specs=specs)
    plain_ops, plain = _plain(monkeypatch, fn, x, specs=specs)
    assert ops["Split"] == 0 and plain_ops["Split"] == 1 and ops["MatMul"] == 3, (ops, plain_ops)
    assert_same_bits(got, plain)
    assert_same_floats(got[0], np.asarray(jax.jit(fn)(x)), 1e-5, 1e-6)
