"""The triangle-mask rule (rewrites.tri_masks): a causal mask's Where as Trilu (and a Sub for a fill other
than +0), with jax.jit's numbers bit for bit (NaN, ±inf, -0.0 on both sides of the diagonal)."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import mask_min, masked_softmax, tri_masks
from lowering_check import assert_same_floats
from lowering_check import convert_and_run as _convert

Q = 6


def _scores(shape=(2, 3, Q, Q)) -> np.ndarray:
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    q = shape[-1]
    flat = x.reshape(-1, q, q)  # [..., q, q], or [..., q, 1, q]
    for i, v in enumerate((np.nan, np.inf, -np.inf, -0.0, 0.0)):
        flat[i % flat.shape[0], i, i] = v  # on the diagonal: kept
        flat[(i + 1) % flat.shape[0], i, i + 1] = v  # above it: masked
        flat[(i + 2) % flat.shape[0], i + 1, i] = v  # below it: kept
    return x


def _causal() -> jax.Array:
    return jnp.arange(Q)[:, None] >= jnp.arange(Q)[None, :]  # computed: an iota comparison


def _all_ops(fn, *inputs) -> collections.Counter:
    """Op types of ``fn``'s ONNX graph and of its subgraphs."""
    import jaxconv

    model = jaxconv.to_onnx(fn, *[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in inputs], check=False)
    ops: collections.Counter = collections.Counter()
    stack = [model.graph]
    while stack:
        graph = stack.pop()
        for node in graph.node:
            ops[node.op_type] += 1
            stack.extend(attr.g for attr in node.attribute if attr.HasField("g"))
    return ops


def _without_mask_min(monkeypatch) -> None:
    """mask_min takes a huge negative fill's Where first (a guarded Min, faster on large scores); these tests
    read the triangle rule alone, which still serves the exact branch and the fills mask_min leaves."""
    monkeypatch.setattr(mask_min, "rewrite", lambda graph: 0)


def _fired(monkeypatch) -> list[int]:
    fired: list[int] = []
    real = tri_masks.rewrite
    monkeypatch.setattr(tri_masks, "rewrite", lambda graph: fired.append(real(graph)) or fired[-1])
    return fired


@pytest.mark.parametrize("fill", [-1e9, -np.inf, np.nan, 0.0, np.finfo(np.float32).min])
def test_causal_fill_is_trilu_bit_for_bit(monkeypatch, fill):
    def fn(x):
        return jnp.where(_causal(), x, np.float32(fill))

    x = _scores()
    fired = _fired(monkeypatch)
    _, (got,) = _convert(fn, x)
    assert sum(fired) == 1
    ops = _all_ops(fn, x)  # another rule may put the Where behind an If (mask_min: -inf fills)
    assert ops["Where"] == 0 and ops["Trilu"] == 1, ops
    assert ops["If"] or ops["Sub"] == (0 if fill == 0.0 else 1), ops  # (an If's guard has a Sub of its own)
    want = np.asarray(jax.jit(fn)(x))
    np.testing.assert_array_equal(got.view(np.uint32) if fill == fill else np.isnan(got),
                                  want.view(np.uint32) if fill == fill else np.isnan(want))
    assert_same_floats(got, want, 0, 0)


def test_keras_masked_softmax_loses_both_wheres(monkeypatch):
    mask = np.tril(np.ones((Q, Q), bool))[None, None]  # a constant

    def fn(x):
        p = jax.nn.softmax(jnp.where(mask, x, -1e9), axis=-1)
        return jnp.where(mask, p, 0.0)  # keras' Softmax(mask): the masked probabilities zeroed

    x = _scores()
    fired = _fired(monkeypatch)
    _without_mask_min(monkeypatch)
    monkeypatch.setattr(masked_softmax, "rewrite", lambda graph: 0)  # its guard is a Where of the row maxes
    ops, (got,) = _convert(fn, x)
    assert sum(fired) == 2 and ops["Where"] == 0 and ops["Trilu"] == 2, ops
    assert_same_floats(got, jax.jit(fn)(x), 1e-6, 1e-7)
    monkeypatch.setattr(tri_masks, "rewrite", lambda graph: 0)
    plain_ops, (plain,) = _convert(fn, x)
    assert plain_ops["Where"] == 2, plain_ops
    assert_same_floats(got, plain, 0, 0)  # the same Softmax on the same numbers


def test_fill_where_the_mask_is_true_and_an_extra_unit_axis(monkeypatch):
    """Haiku's form ``where(mask, fill, x)`` (upper triangle, offset 1), and nnx's scores [b, h, q, 1, k]."""
    upper = np.triu(np.ones((Q, Q), bool), 1)

    def fn(x, y):
        return jnp.where(upper, np.float32(-1e30), x), jnp.where(_causal()[:, None, :], y, np.float32(-3e38))

    x, y = _scores(), _scores((2, 3, Q, 1, Q))
    fired = _fired(monkeypatch)
    ops, got = _convert(fn, x, y)
    assert sum(fired) == 2 and ops["Where"] == 0, ops
    for g, w in zip(got, jax.jit(fn)(x, y)):
        assert_same_floats(g, w, 0, 0)


def test_masks_that_are_not_one_triangle_stay(monkeypatch):
    per_batch = np.stack([np.tril(np.ones((Q, Q), bool)), np.triu(np.ones((Q, Q), bool))])[:, None]

    def fn(x):
        return jnp.where(per_batch, x, -1e9), jnp.where(np.eye(Q, dtype=bool), x, 0.0)

    x = _scores()
    _without_mask_min(monkeypatch)
    fired = _fired(monkeypatch)
    ops, got = _convert(fn, x)
    assert sum(fired) == 0 and ops["Where"] == 2, ops
    for g, w in zip(got, jax.jit(fn)(x)):
        assert_same_floats(g, w, 0, 0)


def test_negative_zero_fill_keeps_its_sign():
    def fn(x):
        return jnp.where(_causal(), x, np.float32(-0.0))

    x = _scores()
    _, (got,) = _convert(fn, x)
    want = np.asarray(jax.jit(fn)(x))
    assert np.signbit(want[0, 0, 0, 1])
    assert_same_floats(got, want, 0, 0)


def test_triangle_offsets():
    ones = np.ones((5, 7), bool)
    for k in range(-4, 7):
        for upper in (0, 1):
            keep = np.triu(ones, k) if upper else np.tril(ones, k)
            if keep.all() or not keep.any():
                assert tri_masks._triangle(keep) is None  # all or nothing: not a triangle to keep
                continue
            off, up = tri_masks._triangle(keep)
            np.testing.assert_array_equal(np.triu(ones, off) if up else np.tril(ones, off), keep)
    assert tri_masks._triangle(np.eye(4, dtype=bool)) is None
    assert tri_masks._triangle(np.ones((3, 3), bool)) is None


def test_float64_scores(monkeypatch, x64):
    def fn(x):
        return jnp.where(_causal(), x, -np.inf)

    x = _scores().astype(np.float64)
    fired = _fired(monkeypatch)
    ops, (got,) = _convert(fn, x)
    assert sum(fired) == 1 and ops["Trilu"] == 1, ops
    assert_same_floats(got, jax.jit(fn)(x), 0, 0)


@pytest.mark.parametrize("heads", [3, 1])
def test_a_causal_fill_over_a_symbolic_batch_is_trilu(monkeypatch, heads):
    """Scores ``[b, h, q, q]`` of a symbolic batch: the triangle is the last two axes, the batch is only
    broadcast over. With one head the size-1 axis is reshaped away and back, the batch as the Reshape's -1."""
    def fn(x):
        return jnp.where(_causal(), x, np.float32(-1e9))

    _without_mask_min(monkeypatch)
    for b in (1, 4):
        x = _scores((b, heads, Q, Q))
        fired = _fired(monkeypatch)
        ops, (got,) = _convert(fn, x, specs=[f"f32[b,{heads},{Q},{Q}]"])
        assert sum(fired) == 1 and ops["Where"] == 0 and ops["Trilu"] == 1, ops
        assert_same_floats(got, jax.jit(fn)(x), 0, 0)


def test_a_padding_mask_of_ones_over_a_symbolic_batch_leaves_the_triangle(monkeypatch):
    """keras-hub's merge of a padding mask and the causal mask, ``min(ones((b, q))[:, None, :], tril)``, over
    a symbolic batch: the ones are an Expand to a run-time shape, so the mask was a computation of the
    batch (Min, Equal, Not, Xor and a Where). The Where over the scores broadcasts the mask to the batch
    anyway, so the Expand goes (rewrites.symbolic), the mask folds to the triangle, and the graph is the
    static one's: a Trilu and a Sub. jax.jit's numbers at batches 1 and 4."""
    def fn(x):
        padding = jnp.ones((x.shape[0], Q), jnp.int32)
        mask = jnp.minimum(padding[:, None, :], jnp.tril(jnp.ones((Q, Q), jnp.int32))[None]) != 0
        return jnp.where(mask[:, None], x, jnp.broadcast_to(np.float32(-1e9), x.shape))

    static = _all_ops(fn, _scores())
    assert static["Trilu"] == 1 and static["Where"] == 0, static
    for b in (1, 4):
        x = _scores((b, 3, Q, Q))
        ops, (got,) = _convert(fn, x, specs=[f"f32[b,3,{Q},{Q}]"], bodies=True)
        assert ops == static, ops
        assert_same_floats(got, jax.jit(fn)(x), 0, 0)


def test_a_padding_mask_of_ones_read_twice_over_a_symbolic_batch(monkeypatch):
    """keras-hub's masked softmax reads the merged mask twice (the fill before the softmax, zeros after it):
    each Where broadcasts the mask to the batch anyway, so the Expand of the ones goes as with one reader,
    and the graph is the static one's. jax.jit's numbers at batches 1 and 4."""
    def fn(x):
        padding = jnp.ones((x.shape[0], Q), jnp.int32)
        mask = (jnp.minimum(padding[:, None, :], jnp.tril(jnp.ones((Q, Q), jnp.int32))[None]) != 0)[:, None]
        p = jax.nn.softmax(jnp.where(mask, x, np.float32(-1e9)), axis=-1)
        return jnp.where(mask, p, np.float32(0))

    static = _all_ops(fn, _scores())
    assert static["Trilu"] >= 1 and static["Expand"] == 0, static
    for b in (1, 4):
        x = _scores((b, 3, Q, Q))
        ops, (got,) = _convert(fn, x, specs=[f"f32[b,3,{Q},{Q}]"], bodies=True)
        assert ops == static, (ops, static)
        assert_same_floats(got, jax.jit(fn)(x), 1e-6, 1e-7)


def test_a_mask_of_ones_read_on_two_paths_into_one_op_keeps_its_shape():
    """Two values made from the padding mask of ones meet in one op (an Xor of the mask and its comparison),
    whose output is also the function's: dropping the Expand would shrink both of that op's inputs and the
    output with them, so the Expand stays. jax.jit's numbers and shapes at batches 1 and 4."""
    def fn(x):
        padding = jnp.ones((x.shape[0], Q), jnp.int32)
        merged = jnp.minimum(padding[:, None, :], jnp.tril(jnp.ones((Q, Q), jnp.int32))[None])
        cond = (merged != 0) ^ (merged > 5)
        return jnp.where(cond[:, None], x, np.float32(-1e9)), cond

    for b in (1, 4):
        x = _scores((b, 3, Q, Q))
        _, got = _convert(fn, x, specs=[f"f32[b,3,{Q},{Q}]"])
        want = jax.jit(fn)(x)
        assert got[1].shape == (b, Q, Q)
        assert_same_floats(got[0], want[0], 0, 0)
        np.testing.assert_array_equal(got[1], np.asarray(want[1]))


def _empty_rows_guarded(q):
    """keras-hub Gemma 2's masked softmax over ``q`` keys: a padding mask of ones merged with the triangle,
    rows the mask leaves empty found by a reduction over the keys and zeroed."""
    def fn(x):
        padding = jnp.ones((x.shape[0], q), jnp.int32)
        mask = (jnp.minimum(padding[:, None, :], jnp.tril(jnp.ones((q, q), jnp.int32))[None]) != 0)[:, None]
        empty = jnp.all(~mask, axis=-1, keepdims=True)
        p = jax.nn.softmax(jnp.where(mask, x, np.float32(-1e9)), axis=-1)
        return jnp.where(empty, np.float32(0), p)
    return fn


@pytest.mark.parametrize("q", [Q, 64])
def test_a_padding_mask_of_ones_through_a_reduction_over_the_keys(q):
    """The reduction runs over an axis the ones do not broadcast (the keys), so it commutes with their
    broadcast: the Expand of the ones goes, on a symbolic batch and on a static one (where 64 keys are too
    many for the ones to be folded into a constant), and the mask folds to the triangle. jax.jit's
    numbers at batches 1, 2 and 4."""
    fn = _empty_rows_guarded(q)
    static = _all_ops(fn, _scores((2, 3, q, q)))
    top, _ = _convert(fn, _scores((2, 3, q, q)))  # the merge's Min folded (mask_min's is in its If)
    assert static["Expand"] == 0 and top["Min"] == 0 and static["Trilu"] >= 1, static
    for b in (1, 4):
        x = _scores((b, 3, q, q))
        ops, (got,) = _convert(fn, x, specs=[f"f32[b,3,{q},{q}]"], bodies=True)
        assert ops == static, (ops, static)
        assert_same_floats(got, jax.jit(fn)(x), 1e-6, 1e-7)
    x = _scores((2, 3, q, q))
    _, (got,) = _convert(fn, x)
    assert_same_floats(got, jax.jit(fn)(x), 1e-6, 1e-7)
