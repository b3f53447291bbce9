"""early_transposes: a Transpose after Pads, Slices and Concats of one tensor (a padded image, local
attention's blocks with their neighbours) moves before them, onto that tensor; the same bits as without the
rule, jax.jit's numbers. Not where the chain starts from two tensors (LongT5's blocks and global keys)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import early_transposes
from lowering_check import assert_same_bits, assert_same_floats, convert_and_run, without_rule

_plain = without_rule(early_transposes)
BLOCK = 9


def _windows(k, g=None):
    """LongT5's local keys: ``k`` [b, t, h, d] in blocks of BLOCK, each with its neighbours (and the global
    keys ``g`` [b, G, h, d]); heads before keys, as the product takes them."""
    b, t, h, d = k.shape
    n = -(-t // BLOCK)
    k = jnp.pad(k, ((0, 0), (0, n * BLOCK - t), (0, 0), (0, 0))).reshape(b, n, BLOCK, h, d)
    k = jnp.pad(k, ((0, 0), (1, 1), (0, 0), (0, 0), (0, 0)))
    window = jnp.concatenate([k[:, 0:n], k[:, 1:n + 1], k[:, 2:n + 2]], axis=2)
    if g is not None:
        window = jnp.concatenate([window, jnp.broadcast_to(g[:, None], (b, n, *g.shape[1:]))], axis=2)
    return jnp.transpose(window, (0, 1, 3, 2, 4))


def _attention(q, k):
    """Each block's queries against its window (q [b, n, BLOCK, h, d])."""
    return jnp.einsum("bnqhd,bnhkd->bnhqk", q, _windows(k))


def _inputs(t=64, heads=4, width=32, n_global=8):
    rng = np.random.default_rng(0)
    k = rng.standard_normal((2, t, heads, width)).astype(np.float32)
    g = rng.standard_normal((2, n_global, heads, width)).astype(np.float32)
    k[0, 3, 1, :4] = [np.nan, np.inf, -np.inf, -0.0]
    return k, g


def _transposed_elements(fn, *inputs) -> int:
    import onnx

    import jaxconv

    model = onnx.shape_inference.infer_shapes(jaxconv.to_onnx(fn, *inputs, check=False))
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in [*model.graph.value_info, *model.graph.input, *model.graph.output]}
    return sum(int(np.prod(dims[n.input[0]])) for n in model.graph.node if n.op_type == "Transpose")


def test_local_windows_transpose_the_blocks_not_the_windows(monkeypatch):
    k, _ = _inputs()
    _, got = convert_and_run(_windows, k)
    _, plain = _plain(monkeypatch, _windows, k)
    assert_same_bits(got, plain)
    assert_same_bits(got, [np.asarray(jax.jit(_windows)(k))])  # values only move
    with monkeypatch.context() as patch:
        patch.setattr(early_transposes, "rewrite", lambda graph: 0)
        assert _transposed_elements(_windows, k) == 2 * 8 * 3 * BLOCK * 4 * 32  # [b, n, 3 * BLOCK, h, d]
    assert _transposed_elements(_windows, k) == 2 * 8 * BLOCK * 4 * 32  # the blocks, before their padding


def test_windows_joined_with_the_global_keys_keep_their_transpose():
    """Two sources: ORT's Concat along the inner axis costs what the smaller Transposes save (LongT5: 1.02x)."""
    k, g = _inputs()
    assert _transposed_elements(_windows, k, g) == 2 * 8 * (3 * BLOCK + 8) * 4 * 32


def test_local_attention_keeps_the_numbers(monkeypatch):
    k, _ = _inputs()
    q = np.random.default_rng(1).standard_normal((2, 8, BLOCK, 4, 32)).astype(np.float32)
    _, got = convert_and_run(_attention, q, k)
    _, plain = _plain(monkeypatch, _attention, q, k)
    assert_same_bits(got, plain)
    assert_same_floats(got[0], jax.jit(_attention)(q, k), 1e-5, 1e-5)
    moved = _transposed_elements(_attention, q, k)
    with monkeypatch.context() as patch:
        patch.setattr(early_transposes, "rewrite", lambda graph: 0)
        assert moved < _transposed_elements(_attention, q, k)


def test_a_transpose_of_a_padded_image_moves_before_the_pad(monkeypatch):
    """NHWC padded, then laid out NCHW: the Transpose of the smaller tensor."""
    fn = lambda x: jnp.transpose(jnp.pad(x, ((0, 0), (2, 2), (3, 3), (0, 0)), mode="reflect"), (0, 3, 1, 2))  # noqa: E731
    x = np.random.default_rng(2).standard_normal((2, 10, 12, 8)).astype(np.float32)
    ops, got = convert_and_run(fn, x)
    _, plain = _plain(monkeypatch, fn, x)
    assert_same_bits(got, plain)
    assert_same_bits(got, [np.asarray(jax.jit(fn)(x))])
    assert _transposed_elements(fn, x) == x.size


@pytest.mark.parametrize("case", ["no growth", "read elsewhere"])
def test_moves_that_do_not_pay_or_leave_a_reader_behind_are_not_made(case):
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal((2, 8, 4, 16)).astype(np.float32) for _ in range(2))
    if case == "no growth":  # a Concat of two tensors: the same elements transposed either way
        fn = lambda a, b: jnp.transpose(jnp.concatenate([a, b], axis=1), (0, 2, 1, 3))  # noqa: E731
        want = 2 * a.size
    else:  # the padded tensor is an output too: it stays, and its Transpose with it
        def fn(a, b):
            p = jnp.pad(a, ((0, 0), (4, 4), (0, 0), (0, 0)))
            return jnp.transpose(p, (0, 2, 1, 3)), p
        want = 2 * 16 * 4 * 16
    assert _transposed_elements(fn, a, b) == want
    _, got = convert_and_run(fn, a, b)
    assert_same_bits(got, [np.asarray(y) for y in jax.tree_util.tree_leaves(jax.jit(fn)(a, b))])
