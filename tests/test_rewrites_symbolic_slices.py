"""Symbolic-size rules on StableHLO's dynamic slices (a learned position table cut to the sequence, a
classifier's first token): the symbolic rule's shape of ``Slice(x, starts, starts + sizes)`` with clamped
starts (rewrites.symbolic._Shapes._sized_slice), so the Expands after it go; rewrites.shapes' settled clamp
(``Max(Min(0, n), 0)`` is 0) and a Slice's bounds computed from constants given as constants. The numbers
are those of the graph without the change, bit for bit (NaN, ±inf, -0.0 in the inputs), and jax.jit's."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jaxconv
from jaxconv.onnx.rewrites import shapes, symbolic
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_bits, assert_same_floats

TABLE = np.random.default_rng(3).standard_normal((16, 8)).astype(np.float32)
TABLE[2] = [np.nan, np.inf, -np.inf, -0.0, 0.0, 3.4e38, -3.4e38, 1e-42]


def _inputs(s: int) -> np.ndarray:
    x = np.random.default_rng(s).standard_normal((2, s, 8)).astype(np.float32)
    x[0, 0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    x[1, -1, :] = -0.0
    return x


def _positions(x):
    """Learned positions cut to the sequence (``pos[:s]``, Flax and Haiku encoders), then centred."""
    y = x + jnp.asarray(TABLE)[None, : x.shape[1]]
    return y - jnp.mean(y, axis=-1, keepdims=True)


def _positions_from(x):
    """``lax.dynamic_slice_in_dim`` from row 3: the start is clamped to ``16 - s`` for long sequences."""
    y = x * lax.dynamic_slice_in_dim(TABLE, 3, x.shape[1], axis=0)
    return y - jnp.mean(y, axis=-1, keepdims=True)


def _first_token(x):
    """A classifier's first token (``x[:, 0]``: a dynamic_slice whose start is clamped to ``[0, s - 1]``)."""
    return jnp.tanh(x[:, 0]) * 2.0


def _last_token(x):
    """``x[:, -1]``: the start ``s - 1`` depends on the size, so no clamp settles."""
    return x[:, -1] * 2.0


def _convert(fn):
    return jaxconv.to_onnx(fn, "f32[2,s,8]", constraints=["s <= 16"], check=False)


def _ops(model) -> collections.Counter:
    return collections.Counter(n.op_type for n in model.graph.node)


def _check(fn, model, plain, sizes=(1, 3, 13, 16)):
    runner, plain_runner = OnnxRunner(model.SerializeToString()), OnnxRunner(plain.SerializeToString())
    for s in sizes:
        x = _inputs(s)
        got = runner.run([x])
        assert_same_bits(got, plain_runner.run([x]))
        assert_same_floats(got[0], jax.jit(fn)(x), 1e-6, 1e-6)  # a mean's sums: XLA adds in its own order


@pytest.mark.parametrize("fn", [_positions, _positions_from], ids=["prefix", "from_row_3"])
def test_a_clamped_slice_has_its_sizes(fn, monkeypatch):
    model = _convert(fn)
    with monkeypatch.context() as patch:
        patch.setattr(symbolic._Shapes, "_sized_slice", lambda *args: None)
        plain = _convert(fn)
    assert _ops(plain)["Expand"] >= 1  # the table's rows and the mean broadcast to [2, s, 8] at run time
    assert _ops(model)["Expand"] == 0
    assert _ops(model)["Split"] == 0  # the sizes' entries are not cut and stacked again (rewrites.shapes)
    _check(fn, model, plain)


def test_first_token_slice_has_constant_bounds(monkeypatch):
    model = _convert(_first_token)
    with monkeypatch.context() as patch:
        patch.setattr(shapes, "_settled_clamp", lambda *args: False)
        plain = _convert(_first_token)
    assert _ops(plain)["Max"] + _ops(plain)["Min"] >= 2
    assert _ops(model)["Max"] == _ops(model)["Min"] == 0
    (cut,) = [n for n in model.graph.node if n.op_type == "Slice"]
    inits = {t.name for t in model.graph.initializer}
    assert all(name in inits for name in cut.input[1:])  # starts, ends, axes: what row_slices reads
    _check(_first_token, model, plain)


def test_a_clamp_that_depends_on_the_size_stays():
    model = _convert(_last_token)
    runner = OnnxRunner(model.SerializeToString())
    for s in (1, 2, 16):
        x = _inputs(s)
        assert_same_bits(runner.run([x]), [np.asarray(jax.jit(_last_token)(x))])


I32 = np.iinfo(np.int32)


@pytest.mark.parametrize("lo, hi, settles", [(5, 2, True), (2, 5, False), (0, 0, True)])
def test_min_of_max_settles_only_when_the_bounds_cross(lo, hi, settles):
    def fn(i):
        return jnp.minimum(jnp.maximum(i, lo), hi) + i * 0

    model = jaxconv.to_onnx(fn, jax.ShapeDtypeStruct((), np.int32), check=False)
    assert (_ops(model)["Min"] + _ops(model)["Max"] + _ops(model)["Clip"] == 0) == settles
    runner = OnnxRunner(model.SerializeToString())
    for i in (I32.min, -7, 0, 3, 4, 9, I32.max):
        x = np.array(i, np.int32)
        assert_same_bits(runner.run([x]), [np.asarray(jax.jit(fn)(x))])


def test_a_clamp_of_a_vector_keeps_its_shape():
    def fn(i):  # Max(Min(0, i), 0) is 0 everywhere, but of i's shape [4]
        return jnp.maximum(jnp.minimum(0, i), 0)

    model = jaxconv.to_onnx(fn, jax.ShapeDtypeStruct((4,), np.int32), check=False)
    i = np.array([I32.min, -1, 5, I32.max], np.int32)
    got = OnnxRunner(model.SerializeToString()).run([i])
    assert_same_bits(got, [np.asarray(jax.jit(fn)(i))])
