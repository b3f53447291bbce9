"""Op rows: symbolic dimensions; the ONNX model runs at several sizes, like jax.jit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from conformance.case import op_row

B, T = jax.export.symbolic_shape("b, t")
SIZES = (1, 3, 7)


def spec(*shape, dtype=jnp.float32):
    return jax.ShapeDtypeStruct(shape, dtype)


def arr(*shape, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-3, 9, size=shape).astype(dtype)
    return rng.normal(size=shape).astype(dtype)


def sizes_row(name, fn, make_args, specs, sizes=SIZES, **kw):
    """One row run at every size of the symbolic dims: ``make_args(n)`` builds the inputs for size n."""
    first, *rest = [make_args(n) for n in sizes]
    op_row(f"dynamic.{name}", fn, *first, specs=specs, runs=rest, **kw)


def _broadcast(x, w, bias):
    y = x @ w + bias
    return y - y.mean(axis=0, keepdims=True), jnp.broadcast_to(bias, (x.shape[0], 5)), jnp.zeros_like(x) + 1


sizes_row("broadcast_against_batch", _broadcast, lambda n: [arr(n, 4), arr(4, 5, seed=1), arr(5, seed=2)],
          [spec(B, 4), spec(4, 5), spec(5)])
for which, fn in {"head": lambda x: x[1:], "tail": lambda x: x[:-1] * 2, "reverse": lambda x: x[::-1],
                  "stride": lambda x: jax.lax.slice(x, (0, 0), (x.shape[0], 4), (2, 1))}.items():
    sizes_row(f"static_slice.{which}", fn, lambda n: [arr(n + 1, 4)], [spec(B, 4)], sizes=(1, 2, 6))


def _arange_masks(x):
    n = x.shape[0]
    keep = jnp.arange(n)[:, None] < 2
    return jnp.where(keep, x, 0.0), jnp.arange(n, dtype=jnp.float32) * 0.5, (jnp.arange(n) % 2 == 0).sum()


def _causal(q, k):
    s = q @ k.T
    mask = jnp.tril(jnp.ones((q.shape[0], q.shape[0]), bool))
    return jnp.where(mask, s, -jnp.inf), jnp.triu(s, 1)


sizes_row("arange_masks", _arange_masks, lambda n: [arr(n, 4)], [spec(B, 4)])
sizes_row("causal_mask", _causal, lambda n: [arr(n, 4), arr(n, 4, seed=1)], [spec(T, 4), spec(T, 4)])
sizes_row("concatenate_along_batch",
          lambda x, y: (jnp.concatenate([x, y, x[:1]], axis=0), jnp.stack([x, x], axis=1), jnp.pad(x, ((1, 2), (0, 0)))),
          lambda n: [arr(n, 3), arr(n, 3, seed=1)], [spec(B, 3), spec(B, 3)])

D, H = 8, 2


def _attention(x, wq, wk, wv, wo):
    t = x.shape[0]
    q = (x @ wq).reshape(t, H, D // H).transpose(1, 0, 2)
    k = (x @ wk).reshape(t, H, D // H).transpose(1, 0, 2)
    v = (x @ wv).reshape(t, H, D // H).transpose(1, 0, 2)
    s = q @ k.transpose(0, 2, 1) / np.sqrt(D // H)
    causal = jnp.arange(t)[:, None] >= jnp.arange(t)[None, :]
    s = jnp.where(causal[None], s, -1e9)
    p = jax.nn.softmax(s, axis=-1)
    o = (p @ v).transpose(1, 0, 2).reshape(t, D)
    y = x + o @ wo
    return y / jnp.sqrt((y * y).mean(-1, keepdims=True) + 1e-6)


_WS = [arr(D, D, seed=s) / 3 for s in range(1, 5)]
sizes_row("attention_block", _attention, lambda n: [arr(n, D)] + _WS, [spec(T, D)] + [spec(D, D)] * 4, tol=(1e-4, 1e-5))
sizes_row("argmax_over_dynamic_axis", lambda x: (jnp.argmax(x, axis=0), jnp.argmin(x, axis=1), x.max(0)),
          lambda n: [arr(n, 4)], [spec(B, 4)])
sizes_row("gather_scatter_dynamic_batch",
          lambda table, ids, u: (table[ids], jnp.take_along_axis(table[: ids.shape[0] * 0 + 1], ids[None, :] % 5, axis=1),
                                 table.at[ids].add(u)),
          lambda n: [arr(5, 3), arr(n, seed=1, dtype=np.int32), arr(n, 3, seed=2)],
          [spec(5, 3), spec(B, dtype=jnp.int32), spec(B, 3)])
sizes_row("gather_from_dynamic_operand", lambda x, i: (x[i], x[:, i % 4], jnp.take(x, i, axis=0, mode="clip")),
          lambda n: [arr(n, 4), np.array([0, -1, 2, 9], np.int32)], [spec(B, 4), spec(4, dtype=jnp.int32)])


def _dynamic_slice(x, i):
    window = jax.lax.dynamic_slice(x, (i, 0), (1, 4))
    rest = jax.lax.dynamic_slice(x, (i, 0), (x.shape[0] - 0, 2))
    return window, rest, jax.lax.dynamic_update_slice(x, window * 10, (i + 1, 0))


def _floordiv(x):
    half = x.shape[0] // 2
    return x[: 2 * half].reshape(half, 2, 3).sum(1)


sizes_row("dynamic_slice_update", _dynamic_slice, lambda n: [arr(n, 4), np.int32(n // 2)], [spec(B, 4), spec(dtype=jnp.int32)])
sizes_row("floordiv_shapes", _floordiv, lambda n: [arr(2 * n + 1, 3)], [spec(B, 3)], sizes=(1, 2, 5))


def roberta_position_ids(input_ids, padding_idx):
    """HF Flax RoBERTa's create_position_ids_from_input_ids."""
    mask = (input_ids != padding_idx).astype("i4")
    incremental_indices = jnp.cumsum(mask, axis=1).astype("i4") * mask
    return incremental_indices.astype("i4") + padding_idx


# jnp.cumsum along a symbolic axis is a stablehlo.dynamic_reduce_window whose window and padding
# follow the axis length (HF Flax RoBERTa's position ids from a padding mask).
for name, fn, dtype in [
    ("cumsum", lambda x: jnp.cumsum(x, axis=1), np.float32),
    ("cumsum_int_mask", lambda x: jnp.cumsum((x > 0).astype(jnp.int32), axis=1) * (x > 0), np.float32),
    ("reverse_cumsum", lambda x: jnp.flip(jnp.cumsum(jnp.flip(x, 1), axis=1), 1) + jax.lax.cumsum(x, axis=1, reverse=True),
     np.float32),
    ("cumsum_int32", lambda x: jnp.cumsum(x, axis=1), np.int32),
    ("roberta_position_ids", lambda ids: roberta_position_ids(ids, padding_idx=1), np.int32),
]:
    sizes_row(f"cumulative_window.{name}", fn, lambda n, dtype=dtype: [arr(2, n, dtype=dtype, seed=n)], [spec(2, T, dtype=dtype)])


def _repeats(n, seed=0):
    """``n`` values with repeats, NaN and both zeros among them."""
    pool = np.array([3, 1, -0.0, 0.0, np.nan, 7, -2], np.float32)
    return [np.random.default_rng(seed).choice(pool, size=n)]


# jnp.unique(size=) over a symbolic length: a cumulative count over a mask the scatter lowering pads
# past the end and slices back to the operand's length (its length must be known to be the window's).
for name, fn in [
    ("unique", lambda x: jnp.unique(x, size=4, fill_value=0)),
    ("unique_counts_inverse", lambda x: jnp.unique(x, size=3, return_counts=True, return_inverse=True, fill_value=-1)),
]:
    sizes_row(f"cumulative_window.{name}", fn, lambda n: _repeats(n, seed=n), [spec(B)], sizes=(1, 3, 7, 12))
