"""The rotary rule (rewrites.rotary): rotate_half's Neg folded into the sine table (a constant table, or one
computed at run time), the tables laid out whole; the numbers of the graph without it bit for bit
(±inf, -0.0, NaN places in the input and in the tables), jax.jit's within the converter's tolerance."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import rotary
from lowering_check import assert_same_bits, assert_same_floats, convert_and_run, without_rule

_plain = without_rule(rotary)


def _tables(positions: int = 8, dim: int = 16) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    cos = rng.standard_normal((1, positions, 1, dim)).astype(np.float32)
    sin = rng.standard_normal((1, positions, 1, dim)).astype(np.float32)
    cos[0, 0, 0, :4] = [np.nan, np.inf, -0.0, 0.0]
    sin[0, 1, 0, :4] = [-np.inf, 0.0, -0.0, np.nan]
    sin[0, 2, 0, 9:12] = [np.inf, -0.0, np.finfo(np.float32).max]
    return cos, sin


def _heads(shape=(2, 8, 4, 16)) -> np.ndarray:
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    x[0, 0, 0, 8:13] = [np.nan, np.inf, -np.inf, -0.0, 0.0]
    x[1, 3, 2, :5] = [0.0, -0.0, np.nan, -np.inf, np.inf]
    x[1, 2, 1, 10:12] = [-np.finfo(np.float32).max, np.finfo(np.float32).max]
    return x


def _rotate_half(x):
    half = x.shape[-1] // 2
    return jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def test_llama_rotary_drops_the_neg_and_keeps_the_bits(monkeypatch):
    cos, sin = _tables()

    def fn(q, k):
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin

    q, k = _heads(), _heads()[:, :, :2] * 0.5
    ops, got = convert_and_run(fn, q, k)
    assert ops["Neg"] == 0 and ops["Split"] == 2 and ops["Concat"] == 2, ops
    for g, w in zip(got, jax.jit(fn)(q, k)):
        assert_same_floats(g, w, 1e-5, 1e-6)  # XLA may contract x * cos + r * sin into FMAs
    plain_ops, plain = _plain(monkeypatch, fn, q, k)
    assert plain_ops["Neg"] == 2, plain_ops
    assert_same_bits(got, plain, nan_signs=False)


def test_keras_rotary_by_a_new_axis_and_a_table_computed_at_run_time(monkeypatch):
    """keras-hub stacks the halves on a new axis and computes sin(positions * inverse frequencies)."""
    def fn(x, positions):
        half = x.shape[-1] // 2
        freqs = positions[:, None].astype(jnp.float32) * (1.0 / 10000.0 ** (jnp.arange(half) / half))
        angles = jnp.concatenate([freqs, freqs], axis=-1)[None, :, None, :]
        x1, x2 = x[..., :half], x[..., half:]
        rotated = jnp.stack([-x2, x1], axis=-2).reshape(x.shape)
        return x * jnp.cos(angles) + rotated * jnp.sin(angles)

    x, positions = _heads(), np.arange(8, dtype=np.int32)
    positions[3] = -5
    ops, got = convert_and_run(fn, x, positions)
    assert ops["Neg"] == 0, ops
    plain_ops, plain = _plain(monkeypatch, fn, x, positions)
    assert plain_ops["Neg"] == 1, plain_ops
    assert_same_bits(got, plain, nan_signs=False)
    assert_same_floats(got[0], jax.jit(fn)(x, positions), 2e-6, 2e-6)


def test_a_neg_read_elsewhere_or_shown_or_a_table_as_large_as_the_input_stays(monkeypatch):
    cos, sin = _tables()

    def shared(x):
        r = _rotate_half(x)
        return x * cos + r * sin, r

    def output(x):
        r = jnp.concatenate([-x[..., 8:], x[..., :8]], axis=-1)
        return x * cos + r * sin, r

    def large(x, table):
        return x * table + _rotate_half(x) * table

    x = _heads()
    ops, got = convert_and_run(shared, x)
    assert ops["Neg"] == 1, ops
    for g, w in zip(got, jax.jit(shared)(x)):
        assert_same_floats(g, w, 1e-5, 1e-6)  # XLA may contract x * cos + r * sin into FMAs
    ops, got = convert_and_run(output, x)
    assert ops["Neg"] == 1, ops
    for g, w in zip(got, jax.jit(output)(x)):
        assert_same_floats(g, w, 1e-5, 1e-6)
    table = _heads()[::-1].copy()
    ops, got = convert_and_run(large, x, table)
    assert ops["Neg"] == 1, ops
    assert_same_floats(got[0], jax.jit(large)(x, table), 1e-5, 1e-6)


def test_tables_laid_out_whole():
    cos, sin = _tables()
    import jaxconv

    def fn(q):
        return q * cos + _rotate_half(q) * sin

    q = _heads()
    model = jaxconv.to_onnx(fn, jax.ShapeDtypeStruct(q.shape, q.dtype), check=False)
    shapes = {tuple(i.dims) for i in model.graph.initializer if i.name.startswith("rotary_table")}
    assert shapes == {(1, 8, 4, 16)}, shapes


def test_a_table_gathered_from_constants_is_worked_out():
    """HF Flax gathers its tables by position ids that are constants by the time the rules run:
    ``_constants.evaluate`` works the Gather out as ONNX defines it (negative indices from the end) and
    gives up on an index out of range (undefined in ONNX)."""
    import onnx_ir as ir

    from jaxconv.onnx.rewrites import _constants

    table = np.arange(12, dtype=np.float32).reshape(4, 3)

    def gathered(index: list[int], axis: int) -> np.ndarray | None:
        data = ir.Value(name="t", const_value=ir.tensor(table))
        idx = ir.Value(name="i", const_value=ir.tensor(np.asarray(index, np.int64)))
        node = ir.node("Gather", [data, idx], {"axis": axis})
        return _constants.evaluate(node.outputs[0])

    np.testing.assert_array_equal(gathered([3, -4, 1], 0), table[[3, 0, 1]])
    np.testing.assert_array_equal(gathered([-1, 0], 1), table[:, [2, 0]])
    assert gathered([4], 0) is None and gathered([-5], 0) is None


def _run_at(model, *inputs):
    from jaxconv.runtimes.onnxrt import OnnxRunner

    return OnnxRunner(model.SerializeToString()).run(list(inputs))


def test_rotary_over_a_symbolic_batch_drops_the_neg(monkeypatch):
    """Exported for any batch (``f32[b,8,4,16]``), Llama's form and keras-hub's (a table computed at run
    time): the signs do not change along the batch, so the Neg goes as in the static graph; the numbers are
    the graph's without the rule, bit for bit, at batches 1, 2 and 5."""
    import jaxconv

    cos, sin = _tables()

    def llama(q):
        return q * cos + _rotate_half(q) * sin

    def keras(x, positions):
        half = x.shape[-1] // 2
        freqs = positions[:, None].astype(jnp.float32) * (1.0 / 10000.0 ** (jnp.arange(half) / half))
        angles = jnp.concatenate([freqs, freqs], axis=-1)[None, :, None, :]
        rotated = jnp.stack([-x[..., half:], x[..., :half]], axis=-2).reshape(x.shape)
        return x * jnp.cos(angles) + rotated * jnp.sin(angles)

    heads = jax.ShapeDtypeStruct(jax.export.symbolic_shape("b, 8, 4, 16"), np.float32)
    positions = np.arange(8, dtype=np.int32)
    for fn, specs, extra in ((llama, [heads], []), (keras, [heads, jax.ShapeDtypeStruct((8,), np.int32)], [positions])):
        model = jaxconv.to_onnx(fn, *specs, check=False)
        assert [n.op_type for n in model.graph.node].count("Neg") == 0, fn.__name__
        with monkeypatch.context() as patch:
            patch.setattr(rotary, "rewrite", lambda *args, **kw: 0)
            plain = jaxconv.to_onnx(fn, *specs, check=False)
        assert [n.op_type for n in plain.graph.node].count("Neg") == 1, fn.__name__
        for batch in (1, 2, 5):
            x = np.resize(_heads(), (batch, 8, 4, 16)).astype(np.float32)
            got, want = _run_at(model, x, *extra), _run_at(plain, x, *extra)
            assert_same_bits(got, want, nan_signs=False)
            assert_same_floats(got[0], jax.jit(fn)(x, *extra), 1e-5, 1e-6)


def test_signs_that_change_along_a_symbolic_axis_stay():
    """A Neg of one half of the batch axis itself (``concat([-x[:1], x[1:]])``): which elements are negated
    depends on where the batch splits, so the signs are not a table of the known axes and the Neg stays."""
    import jaxconv

    cos = _tables()[0][0]

    def fn(x):
        return jnp.concatenate([-x[:1], x[1:]], axis=0) * cos

    spec = jax.ShapeDtypeStruct(jax.export.symbolic_shape("b, 8, 1, 16"), np.float32)
    model = jaxconv.to_onnx(fn, spec, check=False)
    assert [n.op_type for n in model.graph.node].count("Neg") == 1
    for batch in (1, 3):
        x = np.resize(_heads(), (batch, 8, 1, 16)).astype(np.float32)
        assert_same_floats(_run_at(model, x)[0], jax.jit(fn)(x), 0, 0)


def test_rotary_over_a_symbolic_length_drops_the_neg(monkeypatch):
    """Exported for any length (``f32[b,s,4,16]``): HF's tables gathered by positions ``arange(s)`` from a
    constant table and keras-hub's computed ``sin(positions * frequencies)`` are run-time tables of
    ``[1, s, 1, 16]``, a quarter of the heads' size whatever ``s``: the Neg goes into them; the numbers are
    the graph's without the rule, bit for bit, at lengths 1, 3 and 8."""
    import jaxconv

    cos, sin = (t[0, :, 0] for t in _tables())  # [8, 16] tables of positions

    def llama(q):
        s = q.shape[1]
        c, n = jnp.take(cos, jnp.arange(s), axis=0)[None, :, None], jnp.take(sin, jnp.arange(s), axis=0)[None, :, None]
        return q * c + _rotate_half(q) * n

    def keras(x):
        half, s = x.shape[-1] // 2, x.shape[1]
        freqs = jnp.arange(s, dtype=jnp.float32)[:, None] * (1.0 / 10000.0 ** (jnp.arange(half) / half))
        angles = jnp.concatenate([freqs, freqs], axis=-1)[None, :, None, :]
        rotated = jnp.stack([-x[..., half:], x[..., :half]], axis=-2).reshape(x.shape)
        return x * jnp.cos(angles) + rotated * jnp.sin(angles)

    heads = jax.ShapeDtypeStruct(jax.export.symbolic_shape("b, s, 4, 16"), np.float32)
    for fn in (llama, keras):
        model = jaxconv.to_onnx(fn, heads, check=False)
        assert [n.op_type for n in model.graph.node].count("Neg") == 0, fn.__name__
        with monkeypatch.context() as patch:
            patch.setattr(rotary, "rewrite", lambda *args, **kw: 0)
            plain = jaxconv.to_onnx(fn, heads, check=False)
        assert [n.op_type for n in plain.graph.node].count("Neg") == 1, fn.__name__
        for batch, length in ((1, 1), (2, 3), (3, 8)):
            x = np.resize(_heads(), (batch, length, 4, 16)).astype(np.float32)
            got, want = _run_at(model, x), _run_at(plain, x)
            assert_same_bits(got, want, nan_signs=False)
            assert_same_floats(got[0], jax.jit(fn)(x), 1e-5, 1e-6)


def _gathered_rotary(q, k):
    """HF Llama's rotary on q and k over any length: tables gathered at ``arange(s)``, ``[1, s, 1, 16]``."""
    cos, sin = (t[0, :, 0] for t in _tables())
    s = q.shape[1]
    c, n = jnp.take(cos, jnp.arange(s), axis=0)[None, :, None], jnp.take(sin, jnp.arange(s), axis=0)[None, :, None]
    return q * c + _rotate_half(q) * n, k * c + _rotate_half(k) * n


@pytest.mark.parametrize("heads, expanded", [(4, True), (512, False)])
def test_run_time_tables_are_expanded_over_the_heads_once(monkeypatch, heads, expanded):
    """A run-time table ``[1, s, 1, d]`` read by q's and k's Muls is expanded over the heads once per table
    (two Expands, shared by q and k), so the Muls broadcast along the batch only; not past ``MAX_EXPANDED``
    elements at a length of ``LENGTH`` (512 heads of 16 at 128: 1M). The same bits as the broadcast
    tables, at lengths 1, 3 and 8."""
    import jaxconv

    spec = jax.ShapeDtypeStruct(jax.export.symbolic_shape(f"b, s, {heads}, 16"), np.float32)
    model = jaxconv.to_onnx(_gathered_rotary, spec, spec, check=False)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Expand") == (2 if expanded else 0) and ops.count("Neg") == 0, ops
    with monkeypatch.context() as patch:
        patch.setattr(rotary, "_over_heads", lambda graph, table, named, mul: table)
        plain = jaxconv.to_onnx(_gathered_rotary, spec, spec, check=False)
    assert [n.op_type for n in plain.graph.node].count("Expand") == 0
    for batch, length in ((1, 1), (2, 3), (3, 8)):
        q = np.resize(_heads(), (batch, length, heads, 16)).astype(np.float32)
        k = np.resize(_heads()[::-1], (batch, length, heads, 16)).astype(np.float32)
        got = _run_at(model, q, k)
        assert_same_bits(got, _run_at(plain, q, k))
        for g, w in zip(got, jax.jit(_gathered_rotary)(q, k)):
            assert_same_floats(g, w, 1e-5, 1e-6)
