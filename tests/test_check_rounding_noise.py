"""The check's rounding reference: the float64 program with every float32 rounding simulated.

A gain that differs per element (Adam's ``1 / sqrt(nu)``) magnifies a long sum's rounding where the sum
cancels. jax.jit's own error is one sample of that rounding and the input move (``float64_moved``) does
not see it, so a correct artifact that summed in another order failed the check ("written but is WRONG").
The artifacts here are computed by numpy in float32, one term at a time, last term first: a valid float32
evaluation, not the code under test; float64 and jax.jit are JAX's own.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from judging_support import judge_one_set

from jaxconv import judging, references
from jaxconv.rounding_noise import rounding_outputs

K = 4096
_rng = np.random.default_rng(0)
X = _rng.standard_normal((32, K)).astype(np.float32)
W = _rng.standard_normal((K, 32)).astype(np.float32)
GAIN = (10.0 ** _rng.uniform(-1, 3, (32, 32))).astype(np.float32)


def gained_dot(x, w, gain):
    return (x @ w) * gain


def summed_last_first(x, w, gain):
    """``gained_dot`` in float32 by numpy: products rounded, then added one by one from the last term."""
    terms = (x[:, :, None] * w[None, :, :]).astype(np.float32)
    acc = np.zeros((x.shape[0], w.shape[1]), np.float32)
    for k in range(x.shape[1] - 1, -1, -1):
        acc = (acc + terms[:, k, :]).astype(np.float32)
    return (acc * gain).astype(np.float32)


def _float64(fn, *xs):
    """The check's float64 reference: ``fn``'s program with every float32 value widened."""
    truth, why = references.float64_outputs(fn, _specs(*xs), list(xs))
    assert truth is not None, why
    return truth


def _specs(*xs):
    return [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in xs]


def test_a_sum_in_another_order_is_licensed_only_by_the_rounding_reference(tmp_path, monkeypatch):
    actual = summed_last_first(X, W, GAIN)
    (row,), _, _ = judge_one_set(gained_dot, [X, W, GAIN], "random", tmp_path, actual=[actual])
    assert row.ok and row.verdict == "float64", row
    monkeypatch.setattr(judging, "rounding_outputs", lambda *a, **k: None)
    (row,), _, _ = judge_one_set(gained_dot, [X, W, GAIN], "random", tmp_path, actual=[actual])
    assert not row.ok and row.verdict == "mismatch"  # what the check said before


def test_a_wrong_element_stays_a_mismatch(tmp_path):
    actual = summed_last_first(X, W, GAIN)
    (truth,) = _float64(gained_dot, X, W, GAIN)
    where = np.unravel_index(np.argmax(np.abs(truth) / GAIN), truth.shape)  # the least cancelling sum
    actual[where] *= 1 + 1e-3
    (row,), _, _ = judge_one_set(gained_dot, [X, W, GAIN], "random", tmp_path, actual=[actual])
    assert not row.ok and row.verdict == "mismatch"
    assert f"first at {[int(i) for i in where]}" in row.note


def test_a_sums_noise_follows_its_terms_not_its_result():
    x, w = X[:4], W[:, :4]
    (truth,) = _float64(lambda a, b: a @ b, x, w)
    (noise,) = rounding_outputs(lambda a, b: a @ b, _specs(x, w), [x, w], [truth])
    terms = np.sqrt(K * ((x.astype(np.float64) ** 2) @ (w.astype(np.float64) ** 2)))
    unit = 2.0 ** -24
    # the sum's error is at most u * sqrt(K * sum(term**2)), plus the last rounding of the product's value
    assert (noise <= unit * terms * (1 + 1e-6)).all()
    assert noise.max() > 0.5 * unit * terms.max()
    assert np.median(noise / (unit * np.abs(truth))) > 10  # far above one rounding of the result


def test_exact_ops_add_no_noise():
    def moves(x):
        return jnp.maximum(x.T, 0.0)[::-1], jnp.where(x > 0, x, -x).reshape(-1), jnp.sort(x, axis=0)

    x = X[:8, :16]
    truth = _float64(moves, x)
    for noise in rounding_outputs(moves, _specs(x), [x], truth):
        assert noise is not None and (noise == 0).all()


def test_rounding_inside_a_loop_body_counts():
    """A scan's sum of cancelling terms gets noise from the adds in its body, as the same sum unrolled."""
    xs = X[:, :256].T.copy()  # 256 steps of 32 terms

    def scanned(xs):
        return lax.scan(lambda c, x: (c + x, None), jnp.zeros(xs.shape[1], xs.dtype), xs)[0]

    def unrolled(xs):
        c = jnp.zeros(xs.shape[1], xs.dtype)
        for i in range(xs.shape[0]):
            c = c + xs[i]
        return c

    (truth,) = _float64(scanned, xs)
    (in_loop,) = rounding_outputs(scanned, _specs(xs), [xs], [truth])
    (straight,) = rounding_outputs(unrolled, _specs(xs), [xs], [truth])
    assert in_loop.max() > 0 and straight.max() > 0
    assert 0.2 < np.median(in_loop) / np.median(straight) < 5


def test_draws_differ_and_a_rerun_gives_the_same_numbers():
    x, w = X[:4], W[:, :4]
    (truth,) = _float64(lambda a, b: a @ b, x, w)
    (one,) = rounding_outputs(lambda a, b: a @ b, _specs(x, w), [x, w], [truth], runs=1)
    (again,) = rounding_outputs(lambda a, b: a @ b, _specs(x, w), [x, w], [truth], runs=1)
    (three,) = rounding_outputs(lambda a, b: a @ b, _specs(x, w), [x, w], [truth], runs=3)
    np.testing.assert_array_equal(one, again)
    assert (three >= one).all() and (three > one).any()


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_narrower_arithmetic_gets_no_rounding_noise(dtype):
    """jax.jit computes bfloat16 and float16 ops in float32 without rounding between them: a step off
    there is a mismatch (tests/test_check_excess_precision.py), not noise."""
    def narrow(x):
        return jnp.exp(x.astype(dtype)).astype(jnp.float32)

    x = X[:4, :8]
    truth = _float64(narrow, x)
    (noise,) = rounding_outputs(narrow, _specs(x), [x], truth)
    assert (noise == 0).all()
