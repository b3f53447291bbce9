"""jaxconv.onnx.rewrites.keras_norm: Keras' layer norm (``x * inv + (-mean * inv + beta)``) as ONNX
LayerNormalization; jax.jit's numbers kept within the converter's tolerance (rows with NaN, infinities,
-0.0, a big mean, squares that overflow), and the forms it must not take left as written."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import _norm_guard, keras_norm
from keras_support import jax_keras
from lowering_check import assert_same_floats, convert_and_run, without_rule

D = 16
_RNG = np.random.default_rng(11)
_G = (1 + 0.1 * _RNG.standard_normal(D)).astype(np.float32)
_B = (0.1 * _RNG.standard_normal(D)).astype(np.float32)
# rows where jax.jit's form loses digits to cancellation (a big mean; constant rows, with FMA rounding)
_CANCEL = ((1, 1), (1, 2), (1, 4), (2, 0))


def _rows() -> np.ndarray:
    """Finite rows: signed zeros, squares that overflow, a big mean, constant and tiny rows."""
    x = np.random.default_rng(12).standard_normal((3, 8, D)).astype(np.float32)
    x[0, 1] = -0.0
    x[0, 2] = 0.0
    x[1, 0] *= 1e20  # squares overflow: jax.jit's variance is inf, the row its offset
    x[1, 1] += 1e4
    x[1, 2] = 3e19
    x[1, 3] *= 1e-20
    x[1, 4] = 1e30
    x[2, 0] = -3.0  # a constant row: variance 0, output beta
    return x


def _nonfinite_rows() -> np.ndarray:
    x = _rows()
    x[0, 3, 4] = np.nan
    x[0, 4, 5] = np.inf
    x[0, 5, 6] = -np.inf
    x[0, 6, :2] = np.inf
    x[0, 6, 2:4] = -np.inf
    return x


def _keras_ln(x, g=_G, b=_B, eps=1e-5):
    """keras.ops.layer_normalization's jax arithmetic (Keras 3.15)."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.var(x, axis=-1, keepdims=True)
    inv = jax.lax.rsqrt(var + eps)
    if g is not None:
        inv = inv * g
    res = -mean * inv
    if b is not None:
        res = res + b
    return x * inv + res


def _truth(x: np.ndarray, g, b, eps=1e-5) -> np.ndarray:
    x64 = x.astype(np.float64)
    mu = x64.mean(-1, keepdims=True)
    y = (x64 - mu) / np.sqrt(((x64 - mu) ** 2).mean(-1, keepdims=True) + eps)
    return y * (1.0 if g is None else g) + (0.0 if b is None else b)


def _assert_close(got: np.ndarray, want, x: np.ndarray, g, b) -> None:
    """jax.jit's numbers within float32 tolerance, except the rows where jax.jit's ``x * inv - mean * inv``
    cancels: there the op is at most as far from the float64 result as jax.jit is, or as an ulp of the
    mean makes it."""
    want = np.asarray(want)
    keep = _kept(x)
    assert_same_floats(got[keep], want[keep], 1e-4, 2e-5)
    for row in _CANCEL:
        truth = _truth(x[row], g, b)
        assert np.abs(got[row] - truth).max() <= max(np.abs(want[row] - truth).max(), _mean_rounding(x[row], g))


def _mean_rounding(row: np.ndarray, g) -> float:
    """What a float32 mean costs the normalized row in either form: an ulp of the mean over the spread
    (a row far from zero: jax.jit and the op each round the mean, either may be closer), plus 1e-5."""
    x64 = row.astype(np.float64)
    spread = np.sqrt(((x64 - x64.mean()) ** 2).mean() + 1e-5)
    return float(np.spacing(np.float32(x64.mean())) / spread * np.abs(1.0 if g is None else g).max() + 1e-5)


def _kept(x: np.ndarray) -> np.ndarray:
    keep = np.ones(x.shape[:2], bool)
    for row in _CANCEL:
        keep[row] = False
    return keep


def _convert(fn, *inputs):
    """(op-type counts over the graph and its If branches, ONNX Runtime's outputs)."""
    return convert_and_run(fn, *inputs, bodies=True)


_plain = without_rule(keras_norm)


@pytest.mark.parametrize("affine", ["g,b", "g", "b", "b0", "none"])
def test_keras_layer_norm_becomes_one_op(monkeypatch, affine):
    """The op behind an If that runs the exact nodes where a square or a row's sum could overflow (jax.jit's
    rows of zeros then carry x's signs, or its mean is inf) or an input is not finite; ``b0``: a beta with a
    zero."""
    g = _G if "g" in affine else None
    b = None if "b" not in affine else _B.copy()
    if affine == "b0":
        b[3] = 0.0
    fn = lambda x: _keras_ln(x, g, b)  # noqa: E731
    x = _rows()
    ops, (got,) = _convert(fn, x)
    assert ops["LayerNormalization"] == 1 and ops["If"] == 1 and ops["ReduceSumSquare"] == 1, ops
    assert ops["Sqrt"] == 1 and ops["Neg"] == 1, ops  # in the exact branch
    want = np.asarray(jax.jit(fn)(x))
    _, (plain,) = _plain(monkeypatch, fn, x)
    for big in (x, _near_max(x)):  # overflowing rows take the exact nodes: jax.jit's zeros and NaN rows
        _, (got,) = _convert(fn, big)
        _, (plain,) = _plain(monkeypatch, fn, big)
        np.testing.assert_array_equal(got.view(np.uint32), plain.view(np.uint32))
        want = np.asarray(jax.jit(fn)(big))
        assert_same_floats(got[_kept(big)], want[_kept(big)], 1e-4, 2e-5)
    x[1, 0] /= 1e20
    x[1, 4] = x[2, 1]  # a random row (row 2 stays a cancellation row, compared with float64)
    x[1, 2] = 3.0
    _, (got,) = _convert(fn, x)
    _assert_close(got, np.asarray(jax.jit(fn)(x)), x, g, b)
    xn = _nonfinite_rows()
    _, (got,) = _convert(fn, xn)
    want = np.asarray(jax.jit(fn)(xn))
    assert np.isnan(want[0, 3:7]).all() and np.isnan(got[0, 3:7]).all()
    _, (plain,) = _plain(monkeypatch, fn, xn)
    np.testing.assert_array_equal(got.view(np.uint32), plain.view(np.uint32))
    assert_same_floats(got[_kept(xn)], want[_kept(xn)], 1e-4, 2e-5)
    plain_ops, _ = _plain(monkeypatch, fn, x)
    assert plain_ops["LayerNormalization"] == 0 and plain_ops["Sqrt"] == 1, plain_ops


def _near_max(x: np.ndarray) -> np.ndarray:
    """Rows whose sums overflow: jax.jit's mean is inf, its row NaN (the op would give the row's norm)."""
    x = x.copy()
    x[1, 0] = 3e38
    x[1, 3] = np.float32(3.4e38) * np.sign(x[1, 3])
    x[1, 5] = 1.5e38
    return x


def test_keras_layer_norm_after_a_residual_and_before_a_product():
    w = (np.random.default_rng(13).standard_normal((D, D)) / 4).astype(np.float32)
    fn = lambda x, r: _keras_ln(x + r) @ w  # noqa: E731
    x, r = _rows(), np.random.default_rng(14).standard_normal((3, 8, D)).astype(np.float32)
    r[1:] = 0.0  # the special rows of x stay as they are
    ops, (got,) = _convert(fn, x, r)
    assert ops["LayerNormalization"] == 1 and ops["If"] == 1 and ops["MatMul"] == 1, ops
    want = np.asarray(jax.jit(fn)(x, r))
    keep = _kept(x)
    assert_same_floats(got[keep], want[keep], 1e-4, 1e-4)


def test_keras_layer_norm_layer():
    """keras.layers.LayerNormalization itself, on Keras' JAX backend."""
    keras = jax_keras()
    layer = keras.layers.LayerNormalization(epsilon=1e-5)
    layer.build((None, 8, D))
    layer.gamma.assign(_G)
    layer.beta.assign(_B)
    fn = lambda x: layer(x)  # noqa: E731
    x = _rows()
    ops, (got,) = _convert(fn, x)
    assert ops["LayerNormalization"] == 1 and ops["If"] == 1 and ops["ReduceSumSquare"] == 1, ops
    _assert_close(got, np.asarray(jax.jit(fn)(x)), x, _G, _B)


def _offset_of_another_mean(x):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    inv = jax.lax.rsqrt(jnp.var(x, axis=-1, keepdims=True) + 1e-5)
    return x * inv + (-jnp.mean(x * 2, axis=-1, keepdims=True) * inv) + mean


def _scale_from_an_input(x, g):
    inv = jax.lax.rsqrt(jnp.var(x, axis=-1, keepdims=True) + 1e-5) * g
    return x * inv - jnp.mean(x, axis=-1, keepdims=True) * inv


def _inv_read_again(x):
    inv = jax.lax.rsqrt(jnp.var(x, axis=-1, keepdims=True) + 1e-5)
    return x * inv + (-jnp.mean(x, axis=-1, keepdims=True) * inv), inv


def _not_last_axis(x):
    mean = jnp.mean(x, axis=1, keepdims=True)
    inv = jax.lax.rsqrt(jnp.var(x, axis=1, keepdims=True) + 1e-5)
    return x * inv + (-mean * inv)


@pytest.mark.parametrize("fn, extra", [
    (_offset_of_another_mean, ()),
    (_scale_from_an_input, (_G,)),
    (_inv_read_again, ()),
    (_not_last_axis, ()),
])
def test_other_forms_stay(fn, extra):
    x = _nonfinite_rows()
    x[1:] = np.random.default_rng(15).standard_normal((2, 8, D))  # no cancellation rows: the same nodes both sides
    ops, got = _convert(fn, x, *extra)
    assert ops["LayerNormalization"] == 0 and ops["Sqrt"] >= 1, ops
    want = jax.tree_util.tree_leaves(jax.jit(fn)(x, *extra))
    for a, w in zip(got, want):
        assert_same_floats(a, w, 1e-5, 1e-6)


_TABLE = (np.random.default_rng(15).standard_normal((50, D)) * 0.5).astype(np.float32)
_W = (np.random.default_rng(16).standard_normal((D, D)) / 4).astype(np.float32)


def _token_block(ids):
    """A keras-hub-style block on token ids: a lookup (jnp.take: NaN for an id out of range), a norm, an
    attention-like mix, a residual and a norm of it (post-norm) and of a GELU product (pre-norm)."""
    x = jnp.take(_TABLE, ids, axis=0)
    h = _keras_ln(x)
    scores = jax.nn.softmax(jnp.einsum("btd,bsd->bts", h @ _W, h), axis=-1)
    y = _keras_ln(x + jnp.einsum("bts,bsd->btd", scores, h) @ _W)
    return _keras_ln(y + jax.nn.gelu(y @ _W) @ _W)


def test_norms_of_token_lookups_run_unguarded(monkeypatch):
    """Every value after the lookup of token ids in a constant table is bounded (``_bounds``: at most a few
    hundred here, far below the guard's 4e37), so the norms run as the bare op, no If; the residual Add
    before the post-norm is a Sum (no SkipLayerNormalization). Bit for bit the guarded graph's outputs, ids
    out of range (NaN rows, mixed into every row by the attention) included."""
    ids = np.random.default_rng(17).integers(0, 50, (2, 8)).astype(np.int32)
    ops, (got,) = _convert(_token_block, ids)
    assert ops["LayerNormalization"] == 3 and ops["If"] == 0 and ops["ReduceSumSquare"] == 0, ops
    assert ops["Sum"] >= 1, ops
    monkeypatch.setattr(_norm_guard, "unguarded", lambda *a: False)
    guarded_ops, (guarded,) = _convert(_token_block, ids)
    assert guarded_ops["If"] == 3, guarded_ops
    np.testing.assert_array_equal(got.view(np.uint32), guarded.view(np.uint32))
    assert_same_floats(got, np.asarray(jax.jit(_token_block)(ids)), 1e-4, 1e-5)
    ids[1, 3] = 77
    _, (got,) = _convert(_token_block, ids)
    _, (guarded,) = _convert(_token_block, ids)
    want = np.asarray(jax.jit(_token_block)(ids))
    assert np.isnan(want[1]).all() and np.isnan(got[1]).all() and not np.isnan(got[0]).any()
    np.testing.assert_array_equal(got.view(np.uint32), guarded.view(np.uint32))


@pytest.mark.parametrize("case", ["float input", "huge table", "divided by data"])
def test_norms_of_unbounded_values_keep_their_guard(case):
    """A float input (any value, 1e30 too), a table whose squares can overflow, a value divided by a computed
    one: nothing bounds them, the If stays."""
    big = _TABLE * np.float32(1e19)

    def fn(a):
        if case == "float input":
            return _keras_ln(a)
        if case == "huge table":
            return _keras_ln(jnp.take(big, a, axis=0))
        x = jnp.take(_TABLE, a, axis=0)
        return _keras_ln(x / (x[..., :1] - 0.5))

    ids = np.random.default_rng(18).integers(0, 50, (2, 8)).astype(np.int32)
    arg = _rows() if case == "float input" else ids
    ops, (got,) = _convert(fn, arg)
    assert ops["If"] == 1 and ops["LayerNormalization"] == 1, ops
    want = np.asarray(jax.jit(fn)(arg))
    keep = _kept(arg) if case == "float input" else np.ones(want.shape[:2], bool)
    if case == "huge table":  # squares overflow: jax.jit's rows are beta
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    else:
        assert_same_floats(got[keep], want[keep], 1e-4, 1e-4)


def test_a_wide_keras_layer_norm_summed_in_blocks_becomes_one_op():
    """4100 columns: the lowering sums the mean and jnp.var's mean in blocks (the last padded); both are the
    norm's means, so the norm becomes the op, no farther from the float64 result than jax.jit."""
    rng = np.random.default_rng(31)
    g, b = (1 + 0.1 * rng.standard_normal(4100)).astype(np.float32), (0.1 * rng.standard_normal(4100)).astype(np.float32)
    fn = lambda x: _keras_ln(x, g, b)  # noqa: E731
    x = rng.standard_normal((2, 3, 4100)).astype(np.float32)
    x[0, 1] += 100.0
    ops, (got,) = _convert(fn, x)
    assert ops["LayerNormalization"] == 1 and ops["If"] == 1, ops
    want, truth = np.asarray(jax.jit(fn)(x)), _truth(x, g, b)
    assert np.abs(got - truth).max() <= max(np.abs(want - truth).max(), 2e-5)
    assert_same_floats(got[1], want[1], 1e-4, 2e-5)
