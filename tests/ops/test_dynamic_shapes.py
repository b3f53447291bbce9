"""Symbolic dimensions: the ONNX model keeps them as dim_params and runs at several sizes, like jax.jit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lowering_check import assert_onnx_matches_jax

B, T = jax.export.symbolic_shape("b, t")
SIZES = (1, 3, 7)


def spec(*shape, dtype=jnp.float32):
    return jax.ShapeDtypeStruct(shape, dtype)


def arr(*shape, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-3, 9, size=shape).astype(dtype)
    return rng.normal(size=shape).astype(dtype)


def check_sizes(fn, make_args, specs, sizes=SIZES, **kw):
    """Run at every size of the symbolic dim: ``make_args(n)`` builds the flat inputs for size n."""
    first, *rest = [make_args(n) for n in sizes]
    model = assert_onnx_matches_jax(fn, *first, specs=specs, inputs_for_run=rest, **kw)
    return model


def input_dims(model, k=0):
    return [d.dim_param or d.dim_value for d in model.graph.input[k].type.tensor_type.shape.dim]


def test_flatten_and_reshape_with_batch():
    def f(x):
        return x.reshape(x.shape[0], -1), x.reshape(-1), x.reshape(x.shape[0] * 2, 6) * x.shape[0]

    model = check_sizes(f, lambda n: [arr(n, 3, 4)], [spec(B, 3, 4)])
    assert input_dims(model) == ["b", 3, 4]


def test_broadcast_against_batch():
    def f(x, w, bias):
        y = x @ w + bias
        return y - y.mean(axis=0, keepdims=True), jnp.broadcast_to(bias, (x.shape[0], 5)), jnp.zeros_like(x) + 1

    check_sizes(f, lambda n: [arr(n, 4), arr(4, 5, seed=1), arr(5, seed=2)], [spec(B, 4), spec(4, 5), spec(5)])


@pytest.mark.parametrize("which", ["head", "tail", "reverse", "stride"])
def test_static_slices_of_a_dynamic_axis(which):
    fns = {"head": lambda x: x[1:], "tail": lambda x: x[:-1] * 2, "reverse": lambda x: x[::-1],
           "stride": lambda x: jax.lax.slice(x, (0, 0), (x.shape[0], 4), (2, 1))}
    check_sizes(fns[which], lambda n: [arr(n + 1, 4)], [spec(B, 4)], sizes=(1, 2, 6))


def test_arange_masks():
    def f(x):
        n = x.shape[0]
        keep = jnp.arange(n)[:, None] < 2
        return jnp.where(keep, x, 0.0), jnp.arange(n, dtype=jnp.float32) * 0.5, (jnp.arange(n) % 2 == 0).sum()

    check_sizes(f, lambda n: [arr(n, 4)], [spec(B, 4)])


def test_causal_mask_over_sequence_length():
    def f(q, k):
        s = q @ k.T
        mask = jnp.tril(jnp.ones((q.shape[0], q.shape[0]), bool))
        return jnp.where(mask, s, -jnp.inf), jnp.triu(s, 1)

    check_sizes(f, lambda n: [arr(n, 4), arr(n, 4, seed=1)], [spec(T, 4), spec(T, 4)])


def test_concatenate_along_batch():
    def f(x, y):
        return jnp.concatenate([x, y, x[:1]], axis=0), jnp.stack([x, x], axis=1), jnp.pad(x, ((1, 2), (0, 0)))

    check_sizes(f, lambda n: [arr(n, 3), arr(n, 3, seed=1)], [spec(B, 3), spec(B, 3)])


def test_two_symbolic_dims_and_output_names():
    def f(x):
        return x.reshape(x.shape[0] * x.shape[1], 2), x.sum(1)

    first = [arr(2, 3, 2)]
    model = assert_onnx_matches_jax(f, *first, specs=[spec(B, T, 2)],
                                    inputs_for_run=[[arr(1, 5, 2)], [arr(4, 1, 2)]])
    assert input_dims(model) == ["b", "t", 2]


def test_attention_block_with_symbolic_sequence():
    d, h = 8, 2

    def block(x, wq, wk, wv, wo):
        t = x.shape[0]
        q = (x @ wq).reshape(t, h, d // h).transpose(1, 0, 2)
        k = (x @ wk).reshape(t, h, d // h).transpose(1, 0, 2)
        v = (x @ wv).reshape(t, h, d // h).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(d // h)
        causal = jnp.arange(t)[:, None] >= jnp.arange(t)[None, :]
        s = jnp.where(causal[None], s, -1e9)
        p = jax.nn.softmax(s, axis=-1)
        o = (p @ v).transpose(1, 0, 2).reshape(t, d)
        y = x + o @ wo
        return y / jnp.sqrt((y * y).mean(-1, keepdims=True) + 1e-6)

    ws = [arr(d, d, seed=s) / 3 for s in range(1, 5)]
    check_sizes(block, lambda n: [arr(n, d)] + ws, [spec(T, d)] + [spec(d, d)] * 4, rtol=1e-4, atol=1e-5)


def test_argmax_over_dynamic_axis():
    def f(x):
        return jnp.argmax(x, axis=0), jnp.argmin(x, axis=1), x.max(0)

    check_sizes(f, lambda n: [arr(n, 4)], [spec(B, 4)])


def test_gather_and_scatter_with_dynamic_batch():
    def f(table, ids, u):
        return table[ids], jnp.take_along_axis(table[: ids.shape[0] * 0 + 1], ids[None, :] % 5, axis=1), \
            table.at[ids].add(u)

    check_sizes(f, lambda n: [arr(5, 3), arr(n, seed=1, dtype=np.int32) , arr(n, 3, seed=2)],
                [spec(5, 3), spec(B, dtype=jnp.int32), spec(B, 3)])


def test_gather_from_dynamic_operand():
    def f(x, i):
        return x[i], x[:, i % 4], jnp.take(x, i, axis=0, mode="clip")

    check_sizes(f, lambda n: [arr(n, 4), np.array([0, -1, 2, 9], np.int32)], [spec(B, 4), spec(4, dtype=jnp.int32)])


def test_dynamic_slice_and_update_on_dynamic_operand():
    def f(x, i):
        window = jax.lax.dynamic_slice(x, (i, 0), (1, 4))
        rest = jax.lax.dynamic_slice(x, (i, 0), (x.shape[0] - 0, 2))
        return window, rest, jax.lax.dynamic_update_slice(x, window * 10, (i + 1, 0))

    check_sizes(f, lambda n: [arr(n, 4), np.int32(n // 2)], [spec(B, 4), spec(dtype=jnp.int32)])


def test_floordiv_shapes():
    def f(x):
        half = x.shape[0] // 2
        return x[: 2 * half].reshape(half, 2, 3).sum(1)

    check_sizes(f, lambda n: [arr(2 * n + 1, 3)], [spec(B, 3)], sizes=(1, 2, 5))


@pytest.mark.parametrize("name,fn,dtype", [
    ("cumsum", lambda x: jnp.cumsum(x, axis=1), np.float32),
    ("cumsum_int_mask", lambda x: jnp.cumsum((x > 0).astype(jnp.int32), axis=1) * (x > 0), np.float32),
    ("reverse_cumsum", lambda x: jnp.flip(jnp.cumsum(jnp.flip(x, 1), axis=1), 1) + lax_cumsum_reverse(x),
     np.float32),
    ("cumsum_int32", lambda x: jnp.cumsum(x, axis=1), np.int32),
    ("roberta_position_ids", lambda ids: roberta_position_ids(ids, padding_idx=1), np.int32),
])
def test_cumulative_window_over_a_symbolic_axis(name, fn, dtype):
    """jnp.cumsum along a symbolic axis is a stablehlo.dynamic_reduce_window whose window and padding
    follow the axis length (HF Flax RoBERTa's position ids from a padding mask)."""
    check_sizes(fn, lambda n: [arr(2, n, dtype=dtype, seed=n)], [spec(2, T, dtype=dtype)])


def roberta_position_ids(input_ids, padding_idx):
    """HF Flax RoBERTa's create_position_ids_from_input_ids."""
    mask = (input_ids != padding_idx).astype("i4")
    incremental_indices = jnp.cumsum(mask, axis=1).astype("i4") * mask
    return incremental_indices.astype("i4") + padding_idx


def lax_cumsum_reverse(x):
    return jax.lax.cumsum(x, axis=1, reverse=True)


def test_cumulative_max_over_a_symbolic_axis_is_refused_by_name():
    from jaxconv.errors import UnsupportedError

    with pytest.raises(UnsupportedError, match="dynamic_reduce_window"):
        check_sizes(lambda x: jax.lax.cummax(x, axis=1), lambda n: [arr(2, n, seed=n)], [spec(2, T)])
