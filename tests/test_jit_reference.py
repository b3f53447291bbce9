"""The check's jax.jit reference, with big closed-over constants passed as arguments, is bit-identical
to jax.jit(fn) with them embedded."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv import jit_reference, references, verify

_rng = np.random.default_rng(0)
_W = [(_rng.standard_normal((256, 256), dtype=np.float32) / 16) for _ in range(3)]  # 256 KiB each
_B = _rng.standard_normal((256,), dtype=np.float32)  # small: stays embedded
_IDX = _rng.integers(0, 256, size=(64, 256), dtype=np.int32)  # 64 KiB of int32
_MASK = _rng.random((256, 256)) < 0.5  # 64 KiB of bool
_SCALE = jnp.asarray(_rng.standard_normal((256, 256), dtype=np.float32))  # a jax Array constant


def mlp(x):
    for w in _W:
        x = jnp.tanh(x @ w + _B)
    return x


def edges(x):
    x = x[:, None, :]  # [8, 1, 256] against [256, 256] weights
    y = x * _W[0] - _W[1]  # NaN, inf and -0 in x flow through multiply and subtract
    return jnp.maximum(y, _W[2]), jnp.sign(x) * _W[0], jnp.where(x == 0, 1.0 / x, y)


def int_and_bool(x):
    gathered = jnp.take(x, _IDX, axis=1)  # [8, 64, 256]
    masked = jnp.where(_MASK, x[:1], -0.0)  # [256, 256]
    return gathered.sum(axis=1), masked, _IDX + x[0, 0].astype(jnp.int32), _MASK & (x[:1] > 0)


def folded(x):
    return x @ jnp.tanh(_SCALE * 2.0).T + jnp.exp(_W[0][0]) + x @ _W[1].T  # XLA folds tanh and exp


@jax.jit
def rnn(x):
    def step(h, row):
        return jnp.tanh(h @ _W[0] + row @ _W[1]), jnp.tanh(_SCALE[0]) * h  # tanh(_SCALE[0]) folds: stays
    return jax.lax.scan(step, jnp.zeros((256,), x.dtype), x)


def _bits(a):
    a = np.ascontiguousarray(np.asarray(a))
    return a.dtype, a.shape, a.view(np.uint8).tobytes()


def _edge_input():
    x = _rng.standard_normal((8, 256), dtype=np.float32)
    x[0, :6] = [np.nan, np.inf, -np.inf, -0.0, 0.0, np.float32(1e-42)]
    x[1, :4] = [-np.nan, np.finfo(np.float32).max, -np.finfo(np.float32).max, -0.0]
    return x


@pytest.mark.parametrize("fn, hoisted", [(mlp, 3), (edges, 3), (int_and_bool, 2), (folded, 1),
                                        (rnn, 2)])
def test_reference_is_bit_identical_to_jax_jit(fn, hoisted):
    jit_reference.clear()
    for x in (_rng.standard_normal((8, 256), dtype=np.float32), _edge_input()):
        spec = [jax.ShapeDtypeStruct(x.shape, x.dtype)]
        got = references.reference_outputs(fn, spec, [x])
        want = [np.asarray(o) for o in jax.tree_util.tree_leaves(jax.jit(fn)(jnp.asarray(x)))]
        assert [_bits(g) for g in got] == [_bits(w) for w in want]
    # the big constants did travel as arguments (a test of the hoisting, not only of the outputs);
    # in ``folded`` only _W[1]: _SCALE and _W[0] go through tanh and exp alone, which XLA folds
    (_, _, consts, _), = jit_reference._CACHE.values()
    assert len(consts) == hoisted and all(c.nbytes >= 1 << 16 for c in consts)


def test_int_and_bool_constants_are_hoisted():
    jit_reference.clear()
    x = np.ones((8, 256), np.float32)
    references.reference_outputs(int_and_bool, [jax.ShapeDtypeStruct(x.shape, x.dtype)], [x])
    (_, _, consts, _), = jit_reference._CACHE.values()
    assert sorted(str(np.asarray(c).dtype) for c in consts) == ["bool", "int32"]


def folded64(x):  # ``folded`` with its constants widened first: tanh and exp computed in float64 too
    scale, w0, w1 = (np.asarray(c, np.float64) for c in (_SCALE, _W[0], _W[1]))
    return x @ jnp.tanh(scale * 2.0).T + jnp.exp(w0[0]) + x @ w1.T


@pytest.mark.parametrize("fn, wide_fn", [(mlp, mlp), (edges, edges), (folded, folded64)])
def test_float64_reference_is_bit_identical_to_jax_jit_under_x64(fn, wide_fn):
    x = _edge_input()
    spec = [jax.ShapeDtypeStruct(x.shape, x.dtype)]
    got, why = references.float64_outputs(fn, spec, [x])
    assert why == "" and got is not None
    with jax.enable_x64(True):
        wide = jnp.asarray(x.astype(np.float64))
        want = [np.asarray(o) for o in jax.tree_util.tree_leaves(jax.jit(wide_fn)(wide))]
    assert all(g.dtype == np.float64 for g in got)
    if fn is folded:  # XLA folds tanh and exp of the embedded constants: same numbers to float64 rounding
        np.testing.assert_allclose(got[0], want[0], rtol=1e-13, atol=1e-12)
        with jax.enable_x64(True):  # the float32 constants promoted after tanh: float32's error, 1e6 times more
            old = np.asarray(jax.jit(fn)(jnp.asarray(x.astype(np.float64))))
        assert np.nanmax(np.abs(old - want[0])) > 1e-8
    else:
        assert [_bits(g) for g in got] == [_bits(w) for w in want]


def test_eager_reference_still_runs_op_by_op():
    x = _edge_input()
    got = references.eager_outputs(mlp, [jax.ShapeDtypeStruct(x.shape, x.dtype)], [x])
    with jax.disable_jit():
        want = np.asarray(mlp(jnp.asarray(x)))
    assert _bits(got[0]) == _bits(want)


def test_check_keeps_no_copy_of_the_constants_after_it_returns():
    jit_reference.clear()
    x = np.ones((8, 256), np.float32)
    references.reference_outputs(mlp, [jax.ShapeDtypeStruct(x.shape, x.dtype)], [x])
    assert jit_reference._CACHE

    class Runner:
        kind = "onnx"

        def run(self, flat):
            # off by 0.1%: the judging's extra references (spread, float64) run
            return [np.asarray(jax.jit(mlp)(flat[0])) * 1.001]

    from jaxconv.signature import Signature, input_infos, output_infos

    spec = jax.ShapeDtypeStruct(x.shape, x.dtype)
    out = jax.eval_shape(mlp, spec)
    sig = Signature(input_infos([spec], ["x"]), output_infos([out], jax.tree_util.tree_structure(out)))
    report = verify.check_runner(Runner(), "m.onnx", mlp, [spec], sig)
    assert not report.ok
    assert not jit_reference._CACHE
