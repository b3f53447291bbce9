"""_input_guard: the guards whose condition a bound on the graph's float inputs proves (the layer norms' overflow
test, mask_min's magnitude test, masked_softmax's additive test) read one test of the inputs instead of a sum
of squares of their own. The numbers are those of the graph with a test per guard, bit for bit, and jax.jit's,
edge inputs (NaN, infinities, values past the bound) included: those take every exact branch."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxconv
from jaxconv.onnx.rewrites import _input_guard
from jaxconv.runtimes.onnxrt import OnnxRunner

_D, _T, _H = 16, 8, 2
_RNG = np.random.default_rng(0)
_P = [{k: (_RNG.standard_normal(s) * 0.3).astype(np.float32) for k, s in
       (("qkv", (_D, 3 * _D)), ("o", (_D, _D)), ("up", (_D, 4 * _D)), ("down", (4 * _D, _D)), ("g", (_D,)))}
      for _ in range(2)]


def _norm(x, g):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / jnp.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * g


def _transformer(fill):
    def fn(x):
        causal = jnp.tril(jnp.ones((_T, _T), bool))
        for p in _P:
            q, k, v = (y.reshape(x.shape[0], _T, _H, _D // _H).transpose(0, 2, 1, 3)
                       for y in jnp.split(_norm(x, p["g"]) @ p["qkv"], 3, axis=-1))
            s = jnp.where(causal, q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(_D // _H)), fill)
            a = (jax.nn.softmax(s, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(x.shape)
            x = x + a @ p["o"]
            x = x + jax.nn.gelu(_norm(x, p["g"]) @ p["up"]) @ p["down"]
        return x
    return fn


def _edges() -> list[np.ndarray]:
    x = _RNG.standard_normal((2, _T, _D)).astype(np.float32)
    out = [x]
    for value in (np.nan, np.inf, -np.inf, 1e30, np.float32(3e7), -0.0):
        e = x.copy()
        e[1, 5, 3] = value  # a key masked for the first rows, seen by the later ones
        out.append(e)
    return out


def _converted(monkeypatch, fn, shared: bool):
    with monkeypatch.context() as patch:
        if not shared:
            patch.setattr(_input_guard, "shared_test", lambda *args, **kw: None)
        return jaxconv.to_onnx(fn, "f32[2,8,16]", check=False)


def _squares(model) -> int:
    return sum(n.op_type == "ReduceSumSquare" for n in model.graph.node)


@pytest.mark.parametrize("fill", [-np.inf, float(np.finfo(np.float32).min), -1e9])
def test_one_test_of_the_input_for_every_guard(monkeypatch, fill):
    fn = _transformer(fill)
    model, plain = _converted(monkeypatch, fn, True), _converted(monkeypatch, fn, False)
    ifs = [n for n in model.graph.node if n.op_type == "If"]
    read = [n for n in ifs if n.input[0] == "inputs_bounded"]
    assert _squares(model) == 1 and _squares(plain) == 6, (_squares(model), _squares(plain))  # 4 norms, 2 masks
    assert len(read) == 6, [n.input[0] for n in ifs]
    runner, plain_runner = OnnxRunner(model.SerializeToString()), OnnxRunner(plain.SerializeToString())
    for x in _edges():
        (got,), (before,) = runner.run([x]), plain_runner.run([x])
        if np.nanmax(np.abs(x)) != np.float32(3e7):  # past the bound yet below each guard's own limit: only jax.jit's numbers
            np.testing.assert_array_equal(got.view(np.uint32), before.view(np.uint32))
        want = np.asarray(jax.jit(fn)(x))
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        ok = ~np.isnan(want)
        np.testing.assert_allclose(got[ok], want[ok], rtol=2e-5, atol=1e-5)
    jaxconv.to_onnx(fn, "f32[2,8,16]")  # the default check passes


def test_a_bound_past_the_fill_keeps_its_own_test(monkeypatch):
    """Scores taken straight from an input reach the bound, 2**24: a fill of -1e4 is not below them."""
    def fn(s):
        return jax.nn.softmax(jnp.where(jnp.tril(jnp.ones((_T, _T), bool)), s, -1e4), axis=-1)

    model = jaxconv.to_onnx(fn, "f32[2,2,8,8]", check=False)
    tests = [n.input[0] for n in model.graph.node if n.op_type == "If"]
    assert _squares(model) == 1 and "inputs_bounded" not in tests, tests


def test_a_table_with_a_nan_row_keeps_the_masks_own_test():
    """jnp.take's fill row is NaN: scores from looked-up rows may be NaN, which a Min with the mask would keep
    at a masked place where the Where drops it; the float input's bound does not say otherwise."""
    table = _RNG.standard_normal((10, _D)).astype(np.float32)

    def fn(ids, x):
        h = jnp.take(table, ids, axis=0) + x
        s = h @ jnp.swapaxes(h, -1, -2)
        return jax.nn.softmax(jnp.where(jnp.tril(jnp.ones((_T, _T), bool)), s, -jnp.inf), axis=-1)

    ids = np.arange(2 * _T).reshape(2, _T).astype(np.int32) % 12  # 10 and 11 out of range: NaN rows
    x = _RNG.standard_normal((2, _T, _D)).astype(np.float32)
    model = jaxconv.to_onnx(fn, ids, x, check=False)
    tests = [n.input[0] for n in model.graph.node if n.op_type == "If"]
    assert "inputs_bounded" not in tests, tests
    (got,) = OnnxRunner(model.SerializeToString()).run([ids, x])
    want = np.asarray(jax.jit(fn)(ids, x))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[~np.isnan(want)], want[~np.isnan(want)], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_an_input_of_another_float_type_is_tested_as_float32(dtype):
    """Its squares are summed in float32 (a Cast first: float16's would overflow at 256); the model passes the
    checker and gives jax.jit's numbers, a value past the bound (float64) taking the exact branch."""
    def fn(x):
        return _norm(x.astype(np.float32) * 2.0, _P[0]["g"])

    x = _RNG.standard_normal((2, _T, _D)).astype(dtype)
    with jax.enable_x64(dtype == np.float64):
        model = jaxconv.to_onnx(fn, x)  # checked
        tests = [n.input[0] for n in model.graph.node if n.op_type == "If"]
        assert tests == ["inputs_bounded"] and "Cast" in [n.op_type for n in model.graph.node][:2], tests
        edges = [x] if dtype == np.float16 else [x, np.where(np.arange(_D) == 3, 1e300, x)]
        for e in edges:
            (got,) = OnnxRunner(model.SerializeToString()).run([e])
            np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(e)), rtol=1e-5, atol=1e-5)


def test_the_test_reads_only_the_inputs_a_guarded_value_comes_from():
    """Two norms, of x and of y: each reads a test of its own input (a loop body's carries, not the weights its
    other inputs slice, are tested so), not a sum of squares over both."""
    def fn(x, y):
        return _norm(x * 2.0, _P[0]["g"]), _norm(y * 3.0, _P[1]["g"])

    x, y = (_RNG.standard_normal((2, _T, _D)).astype(np.float32) for _ in range(2))
    model = jaxconv.to_onnx(fn, x, y)  # checked
    squares = [n.input[0] for n in model.graph.node if n.op_type == "ReduceSumSquare"]
    assert sorted(squares) == ["x", "y"], squares
    tests = [n.input[0] for n in model.graph.node if n.op_type == "If"]
    assert len(set(tests)) == 2, tests
    y[0, 0, 0] = 1e30  # past the bound: y's norm takes its exact branch, x's keeps the op
    got = OnnxRunner(model.SerializeToString()).run([x, y])
    for g, w in zip(got, jax.jit(fn)(x, y)):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-5, atol=1e-5)
