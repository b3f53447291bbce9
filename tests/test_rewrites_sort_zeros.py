"""jaxconv.onnx.rewrites.sort_zeros: a float top-k's sign-of-zero pass behind an If that runs it
only where the input holds a -0.0; ONNX Runtime's outputs bit for bit the unguarded graph's and jax.jit's,
with -0.0 beside +0.0, NaN and infinities in the input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import sort_zeros
from lowering_check import convert_and_run as _convert
from lowering_check import without_rule


def _row(kind: str) -> np.ndarray:
    x = np.random.default_rng(3).standard_normal((3, 40)).astype(np.float32)
    x[:, ::7] = 0.0  # ties of +0.0 among themselves: the lower index first
    if kind in ("-0.0", "-0.0 nan inf"):
        x[0, 3] = x[1, 10] = x[2, 39] = -0.0
        x[0, 5] = 0.0
    if kind in ("nan inf", "-0.0 nan inf"):
        x[1, 4] = np.nan
        x[1, 6] = np.inf
        x[2, 0] = -np.inf
        x[0, 9] = np.nan
    if kind == "all zeros":
        x[:] = 0.0
        x[1, ::2] = -0.0
    return x


_plain = without_rule(sort_zeros)


def _bits(a) -> np.ndarray:
    a = np.asarray(a)
    return a.view(np.uint32) if a.dtype == np.float32 else a


KINDS = ["finite", "-0.0", "nan inf", "-0.0 nan inf", "all zeros"]
FUNCTIONS = {
    "top_k 5": lambda x: jax.lax.top_k(x, 5),
    "top_k 40": lambda x: jax.lax.top_k(x, 40),
    "-top_k": lambda x: jax.lax.top_k(-x, 7),
    "top_k of rows": lambda x: jax.lax.top_k(x.T, 2),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_guarded_sign_pass_keeps_the_order(monkeypatch, name, kind):
    fn = FUNCTIONS[name]
    x = _row(kind)
    ops, got = _convert(fn, x)
    plain_ops, plain = _plain(monkeypatch, fn, x)
    assert ops["If"] == 1 and ops["TopK"] == 0 and plain_ops["TopK"] == 2, (ops, plain_ops)
    want = jax.tree_util.tree_leaves(jax.jit(fn)(x))
    assert len(got) == len(plain) == len(want)
    negative_nan = name == "-top_k" and "nan" in kind  # the lowering's order, not XLA's: see below
    for g, p, w in zip(got, plain, want):
        np.testing.assert_array_equal(_bits(g), _bits(p))
        if not negative_nan:
            np.testing.assert_array_equal(_bits(g), _bits(np.asarray(w).astype(np.asarray(g).dtype)))


@pytest.mark.xfail(strict=True, reason="the top-k lowering ranks a NaN with the sign bit set first; XLA's "
                   "total order ranks it below -inf (a lowering bug, with or without this rule)")
def test_top_k_ranks_a_negative_nan_last():
    x = np.array([1.0, np.nan, 2.0, np.nan], np.float32)
    x[1] = -x[1]
    _, (values, indices) = _convert(lambda v: jax.lax.top_k(v, 4), x)
    np.testing.assert_array_equal(indices, [3, 2, 0, 1])


def test_signs_of_zero_come_out_in_xla_order():
    """The exact branch runs: -0.0 after +0.0 in a descending top-k, before it in a sort."""
    x = np.array([[0.0, -0.0, 1.0, -0.0, 0.0, -1.0]], np.float32)
    _, (values, indices) = _convert(lambda v: jax.lax.top_k(v, 6), x)
    np.testing.assert_array_equal(indices[0], [2, 0, 4, 1, 3, 5])
    np.testing.assert_array_equal(np.signbit(values[0]), [False, False, False, True, True, True])


def test_sort_has_no_sign_pass():
    """jnp.sort and argsort order -0.0 and +0.0 as equal: one TopK, nothing to guard."""
    x = _row("-0.0 nan inf")
    for fn in (lambda v: jnp.sort(v, axis=-1), lambda v: jnp.argsort(v, axis=-1)):
        ops, (got,) = _convert(fn, x)
        assert ops["If"] == 0 and ops["TopK"] == 1, ops
        np.testing.assert_array_equal(_bits(got), _bits(jax.jit(fn)(x)))


def test_integer_top_k_has_no_sign_pass():
    x = np.random.default_rng(0).integers(-5, 5, (2, 30)).astype(np.int32)
    ops, (values, indices) = _convert(lambda v: jax.lax.top_k(v, 4), x)
    assert ops["If"] == 0 and ops["TopK"] == 1, ops
    want_v, want_i = jax.jit(lambda v: jax.lax.top_k(v, 4))(x)
    np.testing.assert_array_equal(values, want_v)
    np.testing.assert_array_equal(indices, want_i)
